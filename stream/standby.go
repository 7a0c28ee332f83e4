package stream

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/riskstream/riskstream/state"
	"github.com/segmentio/kafka-go"
)

// standbyInterval is how often a standby copy reads what its changelog
// partition got since.
const standbyInterval = time.Second

// standbysOf returns the partitions of topic whose standby copies member
// me keeps, given every member's partitions of topic: each owner's
// partitions, in order, go to the other members in turn (from the one
// after the owner, members in ID order), replicas of each, so that the
// partitions of an instance that dies are warm on every other one in the
// proportion in which their shares grow.
func standbysOf(assigned map[string][]int, me string, replicas int) []int {
	members := slices.Sorted(maps.Keys(assigned))
	if len(members) < 2 || replicas < 1 {
		return nil
	}
	var mine []int
	for o, owner := range members {
		others := append(slices.Clone(members[o+1:]), members[:o]...)
		for i, p := range slices.Sorted(slices.Values(assigned[owner])) {
			for r := range min(replicas, len(others)) {
				if others[(i+r)%len(others)] == me {
					mine = append(mine, p)
				}
			}
		}
	}
	slices.Sort(mine)
	return mine
}

// standbys keeps standby copies of repartition partitions another
// instance holds (Kafka Streams' standby replicas): each a local store
// that follows the partition's changelog, applying its finished
// checkpoints every standbyInterval, so that taking the partition over
// reads only what the changelog got in the last interval instead of all of
// it. It runs on a goroutine of its own and owns its stores until stop.
type standbys struct {
	stop func()
	done chan struct{}
}

// startStandbys starts following the changelogs of partitions, with the
// stores in dir/N opened with so.
func startStandbys(partitions []int, newLog func(k int) changelog, dir string, so state.Options, log *slog.Logger) *standbys {
	ctx, cancel := context.WithCancel(context.Background())
	s := &standbys{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		dbs := map[int]*state.DB{}
		defer func() {
			for _, db := range dbs {
				db.Close()
			}
		}()
		for {
			for _, k := range partitions {
				if ctx.Err() != nil {
					return
				}
				if err := followStandby(ctx, dbs, k, newLog(k), dir, so); err != nil && ctx.Err() == nil {
					log.Warn("following a changelog for a standby copy", "partition", k, "err", err)
					if db := dbs[k]; db != nil {
						db.Close()
						delete(dbs, k)
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(standbyInterval):
			}
		}
	}()
	return s
}

// followStandby brings the standby copy of partition k up to its
// changelog's last finished checkpoint, opening its store if needed.
func followStandby(ctx context.Context, dbs map[int]*state.DB, k int, log changelog, dir string, so state.Options) error {
	end, err := log.end(ctx)
	if err != nil {
		return err
	}
	db := dbs[k]
	var at changelogPosition
	if db == nil {
		so.Dir = filepath.Join(dir, strconv.Itoa(k))
		if db, at, err = openStore(so, end); err != nil {
			return err
		}
		dbs[k] = db
	} else if at, err = readChangelogPosition(db); err != nil {
		return err
	}
	if at.end == end {
		return nil
	}
	f, err := log.follow(ctx, db, at)
	if err != nil || f.next == at {
		return err
	}
	return writeChangelogPosition(db, f.next)
}

// openStore opens the store of a repartition partition whose changelog
// ends at end, and returns its position in the changelog. A store past
// that end is of another changelog (the topic was made again): it is
// emptied.
func openStore(so state.Options, end int64) (*state.DB, changelogPosition, error) {
	db, err := state.Open(so)
	if err != nil {
		return nil, noPosition, err
	}
	at, err := readChangelogPosition(db)
	if err == nil && at.end <= end {
		return db, at, nil
	}
	db.Close()
	if err != nil {
		return nil, noPosition, err
	}
	if err := os.RemoveAll(so.Dir); err != nil {
		return nil, noPosition, err
	}
	db, err = state.Open(so)
	return db, noPosition, err
}

// close stops following and closes the stores. A copy stopped in the
// middle of reading its changelog keeps its position: the next pass
// applies again what was applied after it, which writes the same values.
func (s *standbys) close() {
	if s == nil {
		return
	}
	s.stop()
	<-s.done
}

// standbyPartitions returns which repartition partitions this instance
// keeps standby copies of in the group's current generation: the group's
// assignment, as the coordinator describes it, gives every member's
// partitions.
func (j *distJob) standbyPartitions(ctx context.Context, gen *kafka.Generation) ([]int, error) {
	resp, err := j.client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{j.opts.Group}})
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
	for _, k := range standbysOf(assigned, gen.MemberID, j.opts.StandbyReplicas) {
		if _, held := j.tasks[k]; !held {
			out = append(out, k)
		}
	}
	return out, nil
}
