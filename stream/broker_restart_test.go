package stream

import (
	"context"
	"testing"
	"time"

	"github.com/riskstream/riskstream/broker"
)

// TestBrokerRestart stops the embedded broker in the middle of a run and
// starts it again on the same data directory: the job rides it out and no
// decision is lost.
func TestBrokerRestart(t *testing.T) {
	if testing.Short() || !faults() {
		t.Skipf("fault injection: set %s=1", faultsEnv)
	}
	want := replayDecisions(t)
	opts := restartableBroker(t)
	addr := opts.Addr
	b, err := broker.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	// Input keeps arriving through the outage (the producer retries too).
	produced := make(chan error, 1)
	go func() {
		_, err := Produce(context.Background(), ProduceOptions{File: bundledInput, Brokers: []string{addr}, Rate: 10_000})
		produced <- err
	}()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunOptions{Config: loadRules(t), Brokers: []string{addr}, StateDir: t.TempDir(),
			CheckpointInterval: 50 * time.Millisecond})
	}()
	time.Sleep(800 * time.Millisecond)
	if n := len(decisionSet(t, addr)); n >= len(want) {
		t.Fatalf("the run was over (%d decisions) before the broker stopped", n)
	}
	b.Close()
	// Seconds without a broker: writes and fetches fail meanwhile.
	time.Sleep(2 * time.Second)
	if b, err = broker.Start(opts); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := <-produced; err != nil {
		t.Fatal(err)
	}

	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if coversAll(decisionSet(t, addr), want) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the job stopped: %v", err)
		default:
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	set := decisionSet(t, addr)
	if !coversAll(set, want) {
		t.Fatalf("decisions lost across the broker restart: %d distinct of %d", len(set), len(want))
	}
}

// restartableBroker returns the options of a broker that can be stopped
// and started again where the job expects it: a fixed free port, and its
// data on disk.
func restartableBroker(t *testing.T) broker.Options {
	t.Helper()
	return broker.Options{Addr: freeAddr(t), DataDir: t.TempDir(),
		Topics: map[string]int32{"requests": 1, "decisions": 1, "heatmaps": 1, "late": 1, "dlq": 1}}
}
