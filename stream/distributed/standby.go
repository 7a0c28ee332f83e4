package distributed

import (
	"context"

	"github.com/riskstream/riskstream/changelog"
	"github.com/segmentio/kafka-go"
)

// standbyPartitions returns which repartition partitions this instance
// keeps standby copies of in the group's current generation: the group's
// assignment, as the coordinator describes it, gives every member's
// partitions.
func (j *instance) standbyPartitions(ctx context.Context, gen *kafka.Generation) ([]int, error) {
	resp, err := j.client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{j.Opts.Group}})
	if err != nil {
		return nil, err
	}
	assigned := map[string][]int{}
	for _, g := range resp.Groups {
		for _, m := range g.Members {
			assigned[m.MemberID] = nil
			for _, t := range m.MemberAssignments.Topics {
				if t.Topic == j.topics.Repartition {
					assigned[m.MemberID] = append(assigned[m.MemberID], t.Partitions...)
				}
			}
		}
	}
	if _, ok := assigned[gen.MemberID]; !ok {
		return nil, nil // the group moved on
	}
	var out []int
	for _, k := range changelog.StandbysOf(assigned, gen.MemberID, j.Opts.StandbyReplicas) {
		if _, held := j.tasks[k]; !held {
			out = append(out, k)
		}
	}
	return out, nil
}
