package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/riskstream/riskstream/broker"
	"github.com/segmentio/kafka-go"
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
	client := &kafka.Client{Addr: kafka.TCP(addr), Timeout: 5 * time.Second}
	var got int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		members, err := groupMembers(context.Background(), client, "riskstream")
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
