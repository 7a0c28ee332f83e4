package kafkaio

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestGroupTieBreak: two instances in one generation of the group (one
// joined while the other was away) agree that the one started earlier goes
// on and the other stops.
func TestGroupTieBreak(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	addr := testbroker.Start(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	join := func(startedAt int64) *GroupMember {
		var tag memberTag
		binary.BigEndian.PutUint64(tag[:], uint64(startedAt))
		tag[8] = byte(startedAt) // another state directory each
		g, err := newGroupMember(ctx, []string{addr}, nil, "riskstream", "requests", tag, slog.Default())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		go g.Keep(ctx)
		return g
	}
	later := join(2)
	earlier := join(1)
	var busy *ErrGroupBusy
	select {
	case err := <-later.Lost:
		if !errors.As(err, &busy) {
			t.Fatalf("the later instance gave up with %v, want ErrGroupBusy", err)
		}
	case err := <-earlier.Lost:
		t.Fatalf("the earlier instance gave up: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("both instances still hold the group")
	}
	later.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if held, _ := earlier.Held(); held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the earlier instance does not hold the group")
		}
	}
	select {
	case err := <-earlier.Lost:
		t.Fatalf("the earlier instance gave up: %v", err)
	default:
	}
}

// TestRestartAfterKillWhileJoining: a run killed while its join waited for
// a rebalance leaves a member the broker keeps until the rebalance times
// out, and describes without the metadata that would show it is the job's
// own. The next run waits it out and joins, instead of refusing to start.
func TestRestartAfterKillWhileJoining(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	addr := testbroker.Start(t, 1)
	ctx := context.Background()
	newClient := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	// Another member holds the group, so that the killed run's join waits
	// for it to join again.
	holder := newClient()
	defer holder.Close()
	held, err := rawJoin(ctx, holder, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.Generation, sync.MemberID = "riskstream", held.Generation, held.MemberID
	if resp, err := sync.RequestWith(ctx, holder); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("sync: %v %v", resp, err)
	}
	killed := newClient()
	joined := make(chan error, 1)
	go func() {
		_, err := rawJoin(ctx, killed, rebalanceTimeout)
		joined <- err
	}()
	client := kafkatest.Client(t, addr, 5*time.Second)
	waitGroup := func(state string, members int) {
		t.Helper()
		var got kafka.DescribeGroupsResponseGroup
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			resp, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{"riskstream"}})
			if err == nil && len(resp.Groups) == 1 {
				if got = resp.Groups[0]; got.GroupState == state && len(got.Members) == members {
					return
				}
			}
		}
		t.Fatalf("group %s with %d members, want %s with %d", got.GroupState, len(got.Members), state, members)
	}
	waitGroup("PreparingRebalance", 2)
	killed.Close()
	<-joined
	time.Sleep(200 * time.Millisecond) // for the broker to see the connection closed
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group = "riskstream"
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = held.MemberID
	leave.Members = append(leave.Members, m)
	if resp, err := leave.RequestWith(ctx, holder); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("leave: %v %v", resp, err)
	}
	// The killed run's join is answered into its closed connection: the
	// member stays, waiting to sync, without a session.
	waitGroup("CompletingRebalance", 1)

	start := time.Now()
	member, err := JoinGroup(ctx, []string{addr}, nil, "riskstream", "requests", [8]byte{1}, slog.Default(), time.Now)
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	member.Close()
	t.Logf("joined after %v", time.Since(start))
}

// rawJoin joins the group "riskstream" as a consumer would, without
// syncing, asking the broker for rebalance to rejoin in a rebalance.
func rawJoin(ctx context.Context, cl *kgo.Client, rebalance time.Duration) (*kmsg.JoinGroupResponse, error) {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.ProtocolType = "riskstream", "consumer"
	req.SessionTimeoutMillis = int32(SessionTimeout / time.Millisecond)
	req.RebalanceTimeoutMillis = int32(rebalance / time.Millisecond)
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{"requests"}
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", meta.AppendTo(nil)
	req.Protocols = append(req.Protocols, p)
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return nil, err
		}
		if resp.ErrorCode == kerr.MemberIDRequired.Code {
			req.MemberID = resp.MemberID
			continue
		}
		return resp, kerr.ErrorForCode(resp.ErrorCode)
	}
}

// TestMemberTagFormer: a member with the job's state id is taken for a
// killed run only when its process, on this machine, is gone; not for one
// whose process runs, this process, another machine or an older tag.
func TestMemberTagFormer(t *testing.T) {
	var state [8]byte
	state[0] = 7
	tag := newMemberTag(time.Now(), state)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	other := func(pid int, machine uint64) []byte {
		o := newMemberTag(time.Now().Add(-time.Hour), state)
		binary.BigEndian.PutUint64(o[16:24], machine)
		binary.BigEndian.PutUint32(o[24:28], uint32(pid))
		return o[:]
	}
	for _, c := range []struct {
		name  string
		other []byte
		want  bool
	}{
		{"a process that is gone", other(gone.Process.Pid, thisMachine), true},
		{"a running process", other(os.Getppid(), thisMachine), false},
		{"this process", other(os.Getpid(), thisMachine), false},
		{"another machine", other(gone.Process.Pid, thisMachine+1), false},
		{"an older version's tag", other(gone.Process.Pid, thisMachine)[:legacyTagLen], false},
	} {
		if !tag.sameState(c.other) {
			t.Fatalf("%s: not the same state", c.name)
		}
		if got := tag.former(c.other); got != c.want {
			t.Errorf("%s: former %v, want %v", c.name, got, c.want)
		}
	}
}
