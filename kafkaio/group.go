package kafkaio

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/segmentio/kafka-go"
)

// GroupMember holds the job's membership of its consumer group. The job
// reads every partition itself, from its own checkpoint; the group is how
// standard lag tools see its progress (offsets committed after each
// checkpoint) and how a second instance learns that one is already running.
//
// The membership must outlive broker restarts and coordinator moves: each
// ends the generation, and kafka-go's group rejoins on its own only while
// someone takes its next generation and its errors. keep does, for the
// job's life. Between two generations the job does not hold the group, and
// it processes nothing (see held); a second instance may have joined in
// that gap, so each new generation is checked for other members, and of
// two instances the one started later gives up (ErrGroupBusy).
type GroupMember struct {
	cg    *kafka.ConsumerGroup
	group string
	topic string
	// tag is carried in the member's group metadata, so that instances
	// that find each other in one generation agree on which goes on.
	tag     memberTag
	brokers []string
	sec     *kafkaconn.Security
	log     *slog.Logger

	mu  sync.Mutex
	gen *kafka.Generation // nil while the group is not held
	// changed is closed, and replaced, whenever the group is taken or
	// lost.
	changed chan struct{}
	// Lost receives why the job must stop: another instance holds the
	// group.
	Lost chan error
	// commitFailures counts offset commits failed in a row.
	commitFailures int
}

// metaInstance is the state directory's id in the consumer group
// (memberTag), a key of the state store's metadata (docs/format/state.md).
const metaInstance = "instance"

// ErrGroupBusy is returned when another member of the consumer group is
// alive: one instance owns the whole input in this version.
type ErrGroupBusy struct {
	Group   string
	Members []string
	// Copy says that a member has the state id of the instance's own
	// state directory: it runs on a copy of it, or this instance does.
	Copy bool
}

func (e *ErrGroupBusy) Error() string {
	if e.Copy {
		return fmt.Sprintf("consumer group %q has a running member (%v) started on this state folder or a copy of it "+
			"(a backup restored beside it, a cloned machine): two instances on one state would each write every decision; "+
			"stop the other, or give this one a state folder of its own and another --group", e.Group, e.Members)
	}
	return fmt.Sprintf("consumer group %q already has a running member (%v): one riskstream instance owns the whole input; stop it first or use another --group", e.Group, e.Members)
}

// SessionTimeout is how long the broker keeps a member that stopped
// heartbeating: a job killed without a goodbye leaves its membership behind
// that long.
const SessionTimeout = 6 * time.Second

// rebalanceTimeout is how long the broker waits in a rebalance for the
// members to join: a job killed while joining leaves a member that the
// broker may keep that long (see joinGroup). The job's one member joins
// again at once, so it asks for less than kafka-go's 30 s.
const rebalanceTimeout = 10 * time.Second

// RejoinBackoff is how long kafka-go waits before joining again after a
// failed attempt (a broker down).
const RejoinBackoff = time.Second

// memberTag identifies an instance in its group metadata: when it started,
// the id of its state directory (instanceID), and the process it runs in:
// the machine (its boot and its PID namespace, hashed) and the PID. The
// instance with the smaller start keeps the group.
//
// A member with the job's own state id is either a former run of the job
// on this directory, killed before it could leave (Pebble's lock on the
// directory proves that no other process uses it), or an instance started
// on a copy of the directory (a backup restored beside it, a cloned
// machine), which is alive and must never be removed. A former run on this
// machine is told apart by its process being gone (notRunning); any other
// is waited for until the broker expires it, and a member still there is
// a live copy.
type memberTag [28]byte

// legacyTagLen is the length of the tags of older versions: a start and a
// state id, without the process.
const legacyTagLen = 16

func newMemberTag(now time.Time, instance [8]byte) memberTag {
	var t memberTag
	binary.BigEndian.PutUint64(t[:8], uint64(now.UnixNano()))
	copy(t[8:16], instance[:])
	binary.BigEndian.PutUint64(t[16:24], thisMachine)
	binary.BigEndian.PutUint32(t[24:28], uint32(os.Getpid()))
	return t
}

// isTag reports whether group metadata holds a riskstream member tag, of
// this version or an older one.
func isTag(data []byte) bool { return len(data) == len(memberTag{}) || len(data) == legacyTagLen }

// sameState reports whether a member's tag has the job's state id.
func (t memberTag) sameState(other []byte) bool {
	return isTag(other) && bytes.Equal(other[8:16], t[8:16])
}

// former reports whether other, the tag of a member with the job's state
// id, is that of a run of the job that is not running any more: one on this
// machine whose process is gone, and not this process (a run in this
// process may still be running, on a copy of the directory).
func (t memberTag) former(other []byte) bool {
	if len(other) != len(t) || !bytes.Equal(other[16:24], t[16:24]) || bytes.Equal(other[24:28], t[24:28]) {
		return false
	}
	return notRunning(int(binary.BigEndian.Uint32(other[24:28])))
}

// notRunning reports whether no process has the PID pid.
func notRunning(pid int) bool {
	return pid > 0 && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// thisMachine identifies the machine and PID namespace the process runs
// in, where its PIDs mean something: a hash of the kernel's boot id (a
// cloned machine boots with another) and of the PID namespace (each
// container has its own), or of the host name where those cannot be read.
var thisMachine = func() uint64 {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	ns, nerr := os.Readlink("/proc/self/ns/pid")
	if err != nil || nerr != nil {
		host, _ := os.Hostname()
		return xxhash.Sum64String("host " + host)
	}
	return xxhash.Sum64String(string(bytes.TrimSpace(boot)) + " " + ns)
}()

// InstanceID returns the id of the state directory: a random number made
// and stored with the state on its first use.
func InstanceID(db MetaStore) ([8]byte, error) {
	var id [8]byte
	b, ok, err := db.Meta(metaInstance)
	if err != nil {
		return id, err
	}
	if ok && len(b) == len(id) {
		copy(id[:], b)
		return id, nil
	}
	rand.Read(id[:])
	if err := db.SetMeta(metaInstance, id[:]); err != nil {
		return id, err
	}
	return id, db.Commit(true)
}

// MetaStore is the part of the state store instanceID uses.
type MetaStore interface {
	Meta(name string) ([]byte, bool, error)
	SetMeta(name string, value []byte) error
	Commit(sync bool) error
}

// tagBalancer is kafka-go's range balancer with the instance's tag as its
// user data.
type tagBalancer struct {
	kafka.RangeGroupBalancer
	tag memberTag
}

func (b tagBalancer) UserData() ([]byte, error) { return b.tag[:], nil }

// JoinGroup refuses to start while the group has a live member, then joins
// it. A member left behind by a crashed job expires after sessionTimeout,
// so a busy group is asked again until then before giving up. While the
// group rebalances, the broker describes its members without their
// metadata, so a killed run of the job cannot be told from another
// instance; and a run killed while joining may be kept until the rebalance
// times out. The wait is then rebalanceTimeout. now is the job's clock:
// the member's tag carries when it joined, and the waits are counted on it.
func JoinGroup(ctx context.Context, brokers []string, sec *kafkaconn.Security, group, topic string, instance [8]byte, log *slog.Logger, now func() time.Time) (*GroupMember, error) {
	tag := newMemberTag(now(), instance)
	conns := sec.Transport()
	defer conns.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: conns, Timeout: 10 * time.Second}
	start := now()
	deadline := start.Add(SessionTimeout + time.Second)
	for {
		// A broker that is starting may fail the request: ask again until
		// the deadline.
		members, rebalancing, err := GroupMembers(ctx, client, group)
		if rebalancing {
			deadline = start.Add(max(SessionTimeout, rebalanceTimeout) + time.Second)
		}
		var stale []kafka.LeaveGroupRequestMember
		members = slices.DeleteFunc(members, func(m kafka.DescribeGroupsResponseMember) bool {
			if !tag.sameState(m.MemberMetadata.UserData) || !tag.former(m.MemberMetadata.UserData) {
				return false
			}
			stale = append(stale, kafka.LeaveGroupRequestMember{ID: m.MemberID})
			return true
		})
		if len(stale) > 0 {
			// A killed run of this job (the state's lock is ours, and its
			// process is gone): a join would wait for it to time out, so
			// it leaves now.
			_, err := client.LeaveGroup(ctx, &kafka.LeaveGroupRequest{GroupID: group, Members: stale})
			log.Info("removed the group membership a killed run of this job left behind", "group", group, "err", err)
		}
		if err == nil && len(members) == 0 {
			break
		}
		if now().After(deadline) {
			if err != nil {
				return nil, err
			}
			return nil, tag.busyError(group, members)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return newGroupMember(ctx, brokers, sec, group, topic, tag, log)
}

// newGroupMember joins group, tagged tag, and takes its first generation.
func newGroupMember(ctx context.Context, brokers []string, sec *kafkaconn.Security, group, topic string, tag memberTag, log *slog.Logger) (*GroupMember, error) {
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID: group, Brokers: brokers, Topics: []string{topic}, Dialer: sec.Dialer(),
		HeartbeatInterval: time.Second, SessionTimeout: SessionTimeout, RebalanceTimeout: rebalanceTimeout,
		JoinGroupBackoff: RejoinBackoff,
		GroupBalancers:   []kafka.GroupBalancer{tagBalancer{tag: tag}},
	})
	if err != nil {
		return nil, fmt.Errorf("join group %s: %w", group, err)
	}
	gen, err := cg.Next(ctx)
	if err != nil {
		cg.Close()
		return nil, fmt.Errorf("join group %s: %w", group, err)
	}
	g := &GroupMember{cg: cg, group: group, topic: topic, tag: tag, brokers: brokers, sec: sec, log: log,
		gen: gen, changed: make(chan struct{}), Lost: make(chan error, 1)}
	return g, nil
}

// GroupMembers describes the members of group, and reports whether it is
// rebalancing (then without their metadata).
func GroupMembers(ctx context.Context, client *kafka.Client, group string) (members []kafka.DescribeGroupsResponseMember, rebalancing bool, err error) {
	resp, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return nil, false, fmt.Errorf("describe group %s: %w", group, err)
	}
	for _, g := range resp.Groups {
		members = append(members, g.Members...)
		rebalancing = rebalancing || g.GroupState == "PreparingRebalance" || g.GroupState == "CompletingRebalance"
	}
	return members, rebalancing, nil
}

// BusyError is the ErrGroupBusy of group with members.
func BusyError(group string, members []kafka.DescribeGroupsResponseMember) *ErrGroupBusy {
	busy := &ErrGroupBusy{Group: group}
	for _, m := range members {
		busy.Members = append(busy.Members, m.ClientHost+"/"+m.MemberID)
	}
	return busy
}

// busyError is the ErrGroupBusy of group with members for the instance
// tagged t: a copy when one of them has its state id.
func (t memberTag) busyError(group string, members []kafka.DescribeGroupsResponseMember) *ErrGroupBusy {
	busy := BusyError(group, members)
	for _, m := range members {
		busy.Copy = busy.Copy || t.sameState(m.MemberMetadata.UserData)
	}
	return busy
}

// Keep takes every generation of the group until ctx ends: after a broker
// restart or a rebalance kafka-go joins again and hands over the next one
// here. A generation shared with an instance started earlier makes the job
// give up the group (lost).
func (g *GroupMember) Keep(ctx context.Context) {
	conns := g.sec.Transport()
	defer conns.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(g.brokers...), Transport: conns, Timeout: 10 * time.Second}
	gen := g.current()
	for {
		if gen != nil {
			if err := g.exclusive(ctx, client, gen); err != nil {
				g.setGen(nil)
				g.Lost <- err
				return
			}
			g.setGen(gen)
			ended := make(chan struct{})
			gen.Start(func(genCtx context.Context) {
				select {
				case <-genCtx.Done():
				case <-ctx.Done():
				}
				close(ended)
			})
			<-ended
			if ctx.Err() != nil {
				return
			}
			g.setGen(nil)
			g.log.Warn("lost the consumer group's generation (a broker restart or a rebalance); processing waits until the group is joined again",
				"group", g.group, "generation", gen.ID)
		}
		next, err := g.cg.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// kafka-go retries by itself after rejoinBackoff.
			g.log.Warn("rejoining the consumer group", "group", g.group, "err", err)
			gen = nil
			continue
		}
		g.log.Info("rejoined the consumer group", "group", g.group, "generation", next.ID)
		gen = next
	}
}

// exclusive returns ErrGroupBusy when gen has a member of another riskstream
// instance with a smaller tag (that instance goes on, this one stops). A
// member without a tag (another kind of consumer in the group) is reported
// and left alone.
func (g *GroupMember) exclusive(ctx context.Context, client *kafka.Client, gen *kafka.Generation) error {
	var members []kafka.DescribeGroupsResponseMember
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		if members, _, err = GroupMembers(ctx, client, g.group); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(RejoinBackoff):
		}
	}
	if err != nil {
		return fmt.Errorf("consumer group %q: cannot tell whether another instance holds it: %w", g.group, err)
	}
	for _, m := range members {
		if m.MemberID == gen.MemberID {
			continue
		}
		other := m.MemberMetadata.UserData
		if !isTag(other) {
			g.log.Info("the consumer group has a member without a riskstream tag (joining, or another kind of consumer)", "group", g.group, "member", m.ClientHost+"/"+m.MemberID)
			continue
		}
		if bytes.Equal(other, g.tag[:]) || g.tag.sameState(other) && g.tag.former(other) {
			// A membership of this instance's own, from an earlier
			// generation, or of a killed run of the job, which the broker
			// has not expired yet. One on a copy of the state is another
			// instance.
			continue
		}
		if bytes.Compare(other[:8], g.tag[:8]) < 0 {
			return g.tag.busyError(g.group, members)
		}
		g.log.Warn("another riskstream instance joined the consumer group; it started later and stops", "group", g.group,
			"member", m.ClientHost+"/"+m.MemberID)
	}
	return nil
}

func (g *GroupMember) current() *kafka.Generation {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gen
}

func (g *GroupMember) setGen(gen *kafka.Generation) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen = gen
	close(g.changed)
	g.changed = make(chan struct{})
}

// Held reports whether the job holds the group now, and returns a channel
// closed when that changes.
func (g *GroupMember) Held() (bool, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gen != nil, g.changed
}

// commit records the checkpointed offsets in the group, for lag tools. A
// failure is not fatal: the job resumes from its own checkpoint.
func (g *GroupMember) commit(offsets map[int32]int64) error {
	gen := g.current()
	if gen == nil {
		return fmt.Errorf("the group is not held")
	}
	per := make(map[int]int64, len(offsets))
	for p, o := range offsets {
		per[int(p)] = o
	}
	return gen.CommitOffsets(map[string]map[int]int64{g.topic: per})
}

// CommitOrWarn commits and logs a failure, once until a commit succeeds
// again: commits fail at every checkpoint while a broker is away.
func (g *GroupMember) CommitOrWarn(offsets map[int32]int64, group string, log *slog.Logger) {
	err := g.commit(offsets)
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err != nil && g.commitFailures == 0:
		log.Warn("committing offsets to the consumer group; retried at every checkpoint", "group", group, "err", err)
	case err == nil && g.commitFailures > 0:
		log.Info("committing offsets to the consumer group again", "group", group, "failed", g.commitFailures)
	}
	if err != nil {
		g.commitFailures++
	} else {
		g.commitFailures = 0
	}
}

// Close leaves the group.
func (g *GroupMember) Close() { g.cg.Close() }
