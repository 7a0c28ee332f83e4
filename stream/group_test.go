package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riskstream/riskstream/broker"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestGroupGuardSurvivesBrokerRestart: a broker restart ends the job's
// group generation; the job joins again and keeps the one-instance guard. A
// second instance started right after the restart, when the group may be
// empty, is refused or gives up once the first is back, and the first goes
// on.
func TestGroupGuardSurvivesBrokerRestart(t *testing.T) {
	if testing.Short() || !faults() {
		t.Skipf("fault injection: set %s=1", faultsEnv)
	}
	opts := restartableBroker(t)
	addr := opts.Addr
	b, err := broker.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunOptions{Config: loadRules(t), Brokers: []string{addr}, StateDir: t.TempDir(),
			CheckpointInterval: 50 * time.Millisecond})
	}()
	waitMembers(t, addr, 1)
	b.Close()
	time.Sleep(500 * time.Millisecond)
	if b, err = broker.Start(opts); err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	// The second instance, at once: before or after the first rejoins.
	second := make(chan error, 1)
	go func() {
		second <- Run(context.Background(), RunOptions{Config: loadRules(t), Brokers: []string{addr}, StateDir: t.TempDir()})
	}()
	var busy *ErrGroupBusy
	select {
	case err := <-second:
		if !errors.As(err, &busy) {
			t.Fatalf("second instance: %v, want ErrGroupBusy", err)
		}
		t.Log(err)
	case err := <-done:
		t.Fatalf("the first instance stopped: %v", err)
	case <-time.After(45 * time.Second):
		t.Fatal("the second instance still runs beside the first")
	}
	// The first holds the group, and a third is refused as at any time.
	waitMembers(t, addr, 1)
	if err := Run(context.Background(), RunOptions{Config: loadRules(t), Brokers: []string{addr}, StateDir: t.TempDir()}); !errors.As(err, &busy) {
		t.Fatalf("third instance: %v, want ErrGroupBusy", err)
	}
	// And the first still decides.
	produceBundled(t, addr)
	want := replayDecisions(t)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if coversAll(decisionSet(t, addr), want) {
			break
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !coversAll(decisionSet(t, addr), want) {
		t.Fatal("the first instance did not decide the input produced after the restart")
	}
}

// waitMembers waits until the group "riskstream" has n members.
func waitMembers(t *testing.T, addr string, n int) {
	t.Helper()
	client := testClient(t, addr, 5*time.Second)
	var got int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		members, _, err := groupMembers(context.Background(), client, "riskstream")
		if got = len(members); err == nil && got == n {
			return
		}
	}
	t.Fatalf("the group has %d members, want %d", got, n)
}

// TestGroupTieBreak: two instances in one generation of the group (one
// joined while the other was away) agree that the one started earlier goes
// on and the other stops.
func TestGroupTieBreak(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	addr := startLiveBroker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	join := func(startedAt int64) *groupMember {
		var tag memberTag
		binary.BigEndian.PutUint64(tag[:], uint64(startedAt))
		tag[8] = byte(startedAt) // another state directory each
		g, err := newGroupMember(ctx, []string{addr}, nil, "riskstream", "requests", tag, slog.Default())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.close)
		go g.keep(ctx)
		return g
	}
	later := join(2)
	earlier := join(1)
	var busy *ErrGroupBusy
	select {
	case err := <-later.lost:
		if !errors.As(err, &busy) {
			t.Fatalf("the later instance gave up with %v, want ErrGroupBusy", err)
		}
	case err := <-earlier.lost:
		t.Fatalf("the earlier instance gave up: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("both instances still hold the group")
	}
	later.close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if held, _ := earlier.held(); held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the earlier instance does not hold the group")
		}
	}
	select {
	case err := <-earlier.lost:
		t.Fatalf("the earlier instance gave up: %v", err)
	default:
	}
}

// TestRestartAfterKillWhileJoining: a run killed while its join waited for
// a rebalance leaves a member the broker keeps until the rebalance times
// out, and describes without the metadata that would show it is the job's
// own. The next run waits it out and joins, instead of refusing to start.
func TestRestartAfterKillWhileJoining(t *testing.T) {
	if testing.Short() || !faults() {
		t.Skipf("fault injection: set %s=1", faultsEnv)
	}
	addr := startLiveBroker(t)
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
	client := testClient(t, addr, 5*time.Second)
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
	member, err := joinGroup(ctx, []string{addr}, nil, "riskstream", "requests", [8]byte{1}, slog.Default())
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	member.close()
	t.Logf("joined after %v", time.Since(start))
}

// rawJoin joins the group "riskstream" as a consumer would, without
// syncing, asking the broker for rebalance to rejoin in a rebalance.
func rawJoin(ctx context.Context, cl *kgo.Client, rebalance time.Duration) (*kmsg.JoinGroupResponse, error) {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.ProtocolType = "riskstream", "consumer"
	req.SessionTimeoutMillis = int32(sessionTimeout / time.Millisecond)
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

// TestCopiedStateDir: an instance started on a copy of a running job's
// state folder (a backup restored beside it, a cloned machine) carries the
// same state id; it does not take the running job's membership for one a
// killed run left behind: it waits for the broker to expire it, and stops
// with an error saying the state is shared, while the running job goes on.
// A run killed with SIGKILL is still removed at once by its restart, its
// process being gone.
func TestCopiedStateDir(t *testing.T) {
	if testing.Short() || !faults() {
		t.Skipf("fault injection: set %s=1", faultsEnv)
	}
	bin := buildBinary(t)
	addr := startLiveBroker(t)
	stateDir := t.TempDir()
	run := func(dir string) (*exec.Cmd, *lockedBuffer) {
		return startProcess(t, bin, "run", "--rules", bundledRules, "--brokers", addr, "--state-dir", dir, "--metrics-addr", "")
	}
	first, logs := run(stateDir)
	waitFor(t, logs, "consuming")
	first.Process.Signal(syscall.SIGTERM)
	if err := first.Wait(); err != nil {
		t.Fatalf("first run: %v\n%s", err, logs)
	}
	copied := filepath.Join(t.TempDir(), "copy")
	if err := os.CopyFS(copied, os.DirFS(stateDir)); err != nil {
		t.Fatal(err)
	}
	running, logs := run(stateDir)
	defer func() { running.Process.Kill(); running.Wait() }()
	waitFor(t, logs, "consuming")

	started := time.Now()
	copy, copyLogs := run(copied)
	err := copy.Wait()
	if err == nil || !strings.Contains(copyLogs.String(), "started on this state folder or a copy of it") {
		t.Fatalf("the instance on the copy: %v\n%s", err, copyLogs)
	}
	if took := time.Since(started); took < sessionTimeout {
		t.Errorf("the copy gave up after %s, before the broker could have expired a killed run's membership", took)
	}
	if strings.Contains(logs.String(), "lost the consumer group") || strings.Contains(copyLogs.String(), "removed the group membership") {
		t.Fatalf("the running job's membership was touched:\n%s\n%s", logs, copyLogs)
	}

	// A killed run's restart removes its membership at once.
	running.Process.Kill()
	running.Wait()
	started = time.Now()
	restarted, logs := run(stateDir)
	defer func() { restarted.Process.Kill(); restarted.Wait() }()
	waitFor(t, logs, "consuming")
	if !strings.Contains(logs.String(), "removed the group membership a killed run of this job left behind") || time.Since(started) > sessionTimeout {
		t.Fatalf("a killed run's restart took %s to consume:\n%s", time.Since(started), logs)
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
