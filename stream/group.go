package stream

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/segmentio/kafka-go"
)

// groupMember holds the job's membership of its consumer group. The job
// reads every partition itself, from its own checkpoint; the group is how
// standard lag tools see its progress (offsets committed after each
// checkpoint) and how a second instance learns that one is already running.
type groupMember struct {
	cg    *kafka.ConsumerGroup
	gen   *kafka.Generation
	topic string
}

// ErrGroupBusy is returned when another member of the consumer group is
// alive: one instance owns the whole input in this version.
type ErrGroupBusy struct {
	Group   string
	Members []string
}

func (e *ErrGroupBusy) Error() string {
	return fmt.Sprintf("consumer group %q already has a running member (%v): one riskstream instance owns the whole input; stop it first or use another --group", e.Group, e.Members)
}

// sessionTimeout is how long the broker keeps a member that stopped
// heartbeating: a job killed without a goodbye leaves its membership behind
// that long.
const sessionTimeout = 6 * time.Second

// joinGroup refuses to start while the group has a live member, then joins
// it. A member left behind by a crashed job expires after sessionTimeout,
// so a busy group is asked again until then before giving up.
func joinGroup(ctx context.Context, brokers []string, sec *kafkaconn.Security, group, topic string) (*groupMember, error) {
	conns := sec.Transport()
	defer conns.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: conns, Timeout: 10 * time.Second}
	deadline := time.Now().Add(sessionTimeout + time.Second)
	for {
		busy, err := groupMembers(ctx, client, group)
		if err != nil {
			return nil, err
		}
		if busy == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, busy
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID: group, Brokers: brokers, Topics: []string{topic}, Dialer: sec.Dialer(),
		HeartbeatInterval: time.Second, SessionTimeout: sessionTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("join group %s: %w", group, err)
	}
	gen, err := cg.Next(ctx)
	if err != nil {
		cg.Close()
		return nil, fmt.Errorf("join group %s: %w", group, err)
	}
	return &groupMember{cg: cg, gen: gen, topic: topic}, nil
}

// groupMembers returns ErrGroupBusy when group has members, else nil.
func groupMembers(ctx context.Context, client *kafka.Client, group string) (*ErrGroupBusy, error) {
	resp, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return nil, fmt.Errorf("describe group %s: %w", group, err)
	}
	for _, g := range resp.Groups {
		if len(g.Members) > 0 {
			busy := &ErrGroupBusy{Group: group}
			for _, m := range g.Members {
				busy.Members = append(busy.Members, m.ClientHost+"/"+m.MemberID)
			}
			return busy, nil
		}
	}
	return nil, nil
}

// commit records the checkpointed offsets in the group, for lag tools. A
// failure is not fatal: the job resumes from its own checkpoint.
func (g *groupMember) commit(offsets map[int32]int64) error {
	per := make(map[int]int64, len(offsets))
	for p, o := range offsets {
		per[int(p)] = o
	}
	return g.gen.CommitOffsets(map[string]map[int]int64{g.topic: per})
}

// commitOrWarn commits and logs a failure.
func (g *groupMember) commitOrWarn(offsets map[int32]int64, group string, log *slog.Logger) {
	if err := g.commit(offsets); err != nil {
		log.Warn("committing offsets to the consumer group", "group", group, "err", err)
	}
}

func (g *groupMember) close() { g.cg.Close() }
