package stream

import (
	"context"
	"testing"
	"time"

	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/rules"
)

// TestBrokerRestart: the broker stops for two seconds in the
// middle of a run over 4 partitions, with input arriving all along: the job
// rides it out, and its decisions are exactly those of a replay of the
// topic, none twice.
func TestBrokerRestart(t *testing.T) {
	if testing.Short() || !faults() {
		t.Skipf("fault injection: set %s=1", faultsEnv)
	}
	cfg, err := rules.Load(threeKeysRules)
	if err != nil {
		t.Fatal(err)
	}
	input := generated(t, 60_000)
	opts := restartableBroker(t)
	opts.Topics["requests"] = 4
	addr := opts.Addr
	b, err := broker.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	produced := make(chan error, 1)
	go func() {
		_, err := Produce(context.Background(), ProduceOptions{File: input, Brokers: []string{addr}, Rate: 10_000})
		produced <- err
	}()
	// The producer reconnects each partition on its own after the restart:
	// the job waits for the late ones (see TestCrashSafetyPartitioned).
	stop := startJob(t, RunOptions{Config: cfg, Brokers: []string{addr}, CheckpointInterval: 50 * time.Millisecond,
		PartitionWait: 5 * time.Second})
	time.Sleep(2 * time.Second)
	if n := committed(t, addr, 4); n <= 0 || n >= 60_000 {
		t.Fatalf("%d records committed when the broker stopped: not the middle of the run", n)
	}
	b.Close()
	time.Sleep(2 * time.Second)
	if b, err = broker.Start(opts); err != nil {
		t.Fatal(err)
	}
	defer func() { b.Close() }()
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	waitCheckpointed(t, addr, 4, 60_000, nil)
	stop()
	compareDecisions(t, readTopic(t, addr, "decisions"), topicReplayDecisions(t, addr, cfg))
}

// restartableBroker returns the options of a broker that can be stopped
// and started again where the job expects it: a fixed free port, and its
// data on disk.
func restartableBroker(t *testing.T) broker.Options {
	t.Helper()
	return broker.Options{Addr: freeAddr(t), DataDir: t.TempDir(),
		Topics: map[string]int32{"requests": 1, "decisions": 1, "heatmaps": 1, "late": 1, "dlq": 1}}
}
