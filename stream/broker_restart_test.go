package stream

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/produce"
	"github.com/riskstream/riskstream/rules"
)

// TestBrokerRestart: the broker stops for two seconds in the
// middle of a run over 4 partitions, with input arriving all along: the job
// rides it out at the default --partition-wait, and its decisions are
// exactly those of a replay of the topic, none twice.
func TestBrokerRestart(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	// The producer reconnects each partition on its own after the restart,
	// and sends what it held, older than what the others have by then: at
	// the default --partition-wait the job waits for them as long as the
	// partitions have nothing since the outage (recoveryGrace).
	var stop func()
	addr, cfg := restartBrokerMidRun(t, 2*time.Second, func(o RunOptions) { stop = startJob(t, o) })
	waitCheckpointed(t, addr, 4, 60_000, nil)
	stop()
	compareDecisions(t, readTopic(t, addr, "decisions"), topicReplayDecisions(t, addr, cfg))
}

// restartBrokerMidRun starts a broker of 4 input partitions, the sending
// of 60,000 generated events to it at 10,000 a second, and the job, with
// start given its options; after wait it stops the broker for two
// seconds, then waits until every event is sent, and returns the broker's
// address and the job's rules.
func restartBrokerMidRun(t *testing.T, wait time.Duration, start func(RunOptions)) (string, *rules.Config) {
	t.Helper()
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
		_, err := produce.Run(context.Background(), produce.Options{File: input, Brokers: []string{addr}, Rate: 10_000})
		produced <- err
	}()
	start(RunOptions{Config: cfg, Brokers: []string{addr}, CheckpointInterval: 50 * time.Millisecond})
	time.Sleep(wait)
	if n := committed(t, addr, 4); n <= 0 || n >= 60_000 {
		t.Fatalf("%d records committed when the broker stopped: not the middle of the run", n)
	}
	b.Close()
	time.Sleep(2 * time.Second)
	if b, err = broker.Start(opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	return addr, cfg
}

// restartableBroker returns the options of a broker that can be stopped
// and started again where the job expects it: a fixed free port, and its
// data on disk.
func restartableBroker(t *testing.T) broker.Options {
	t.Helper()
	return broker.Options{Addr: kafkatest.FreeAddr(t), DataDir: t.TempDir(),
		Topics: map[string]int32{"requests": 1, "decisions": 1, "heatmaps": 1, "late": 1, "dlq": 1}}
}

// TestFetcherRecoveryGrace: after a broker outage a partition that has
// read everything its leader has still says it is behind, until it has a
// record again (its producer sent what it held) or recoveryGrace has
// passed, so that the merge waits for the records a producer sends only
// once the brokers are back, as it would before it: not the usual
// --partition-wait.
func TestFetcherRecoveryGrace(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("restarts a broker: set %s=1", kafkatest.FaultsEnv)
	}
	opts := restartableBroker(t)
	b, err := broker.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { b.Close() }()
	out := make(chan kafkaio.Fetch, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := kafkaio.NewFetcher(kafkaio.FetcherOptions{Brokers: []string{opts.Addr}, Dialer: &kafka.Dialer{Timeout: time.Second},
		Topic: "requests", From: kafka.FirstOffset, Out: out})
	go f.Run(ctx)
	next := func(within time.Duration) (kafkaio.Fetch, bool) {
		t.Helper()
		select {
		case got := <-out:
			return got, true
		case <-time.After(within):
			return kafkaio.Fetch{}, false
		}
	}
	if got, ok := next(10 * time.Second); !ok || got.Behind {
		t.Fatalf("a fetcher of an empty partition: %+v, %v; want caught up", got, ok)
	}
	b.Close()
	if got, ok := next(20 * time.Second); !ok || !got.Behind {
		t.Fatalf("with the broker gone: %+v, %v; want behind", got, ok)
	}
	if b, err = broker.Start(opts); err != nil {
		t.Fatal(err)
	}
	// Reconnected, nothing to read: still behind, for the producers.
	if got, ok := next(3 * time.Second); ok {
		t.Fatalf("3 s after the broker came back, with nothing to read: %+v, want no change (behind)", got)
	}
	conn, err := kafka.DialLeader(context.Background(), "tcp", opts.Addr, "requests", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.WriteMessages(kafka.Message{Value: []byte(`{"id":"r","ts":1}`)}); err != nil {
		t.Fatal(err)
	}
	got, ok := next(10 * time.Second)
	if !ok || len(got.Msgs) != 1 || got.Behind {
		t.Fatalf("the producer's record: %+v, %v; want it, caught up", got, ok)
	}
}

// TestDistributedBrokerRestart is TestBrokerRestart with two instances of
// a distributed job: the broker, which holds the input, the repartition
// and internal topics and the group, stops for two seconds in the middle
// of the run. The decisions are a replay's of the topic, none twice.
func TestDistributedBrokerRestart(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	var stops []func()
	addr, cfg := restartBrokerMidRun(t, 3*time.Second, func(o RunOptions) {
		o.Distributed, o.RepartitionPartitions = true, 4
		for range 2 {
			o.Registry = prometheus.NewRegistry()
			stops = append(stops, startJob(t, o))
		}
	})
	// The routed records reach the other instance's states through the
	// repartition topic after the input's offsets are committed: wait for
	// the decisions themselves.
	want := withoutSource(topicReplayDecisions(t, addr, cfg))
	waitRecords(t, addr, "decisions", len(want))
	for _, stop := range stops {
		stop()
	}
	compareDecisions(t, withoutSource(readTopic(t, addr, "decisions")), want)
}
