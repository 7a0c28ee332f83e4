package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/memory"
	"github.com/riskstream/riskstream/order"
	"github.com/riskstream/riskstream/produce"
	"github.com/riskstream/riskstream/replay"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/stream/internal/jobbase"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// startAutoCreatingBroker starts an in-process broker that creates a topic,
// with one partition, on its first write, as Kafka does with
// auto.create.topics.enable, and holds only a one-partition input topic.
const (
	bundledRules = "../testdata/rules.yaml"
	bundledInput = "../testdata/requests.jsonl.gz"
)

// runReplay replays opts, failing the test on an error.
func runReplay(t *testing.T, opts replay.Options) *replay.Summary {
	t.Helper()
	sum, err := replay.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func startAutoCreatingBroker(t testing.TB) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "requests"),
		kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// recordsIn returns how many records topic holds over its partitions, 0
// if it does not exist, without creating it (kafka-go's DialLeader asks
// for its metadata the way that does).
func recordsIn(t testing.TB, addr, topic string) int64 {
	t.Helper()
	conns := &kafka.Transport{}
	defer conns.CloseIdleConnections()
	ends, err := kafkaio.OutputEnds(context.Background(), &kafka.Client{Addr: kafka.TCP(addr), Transport: conns}, []string{topic})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ends {
		n += e.Offset
	}
	return n
}

func produceBundled(t *testing.T, addr string) {
	t.Helper()
	st, err := produce.Run(context.Background(), produce.Options{File: bundledInput, Brokers: []string{addr}})
	if err != nil || st.Failed != 0 {
		t.Fatalf("produce: %+v, %v", st, err)
	}
}

// replayDecisions is what replay decides on the bundled workload.
func replayDecisions(t *testing.T) []string {
	t.Helper()
	return replayDecisionsOf(t, bundledInput)
}

// replayDecisionsOf is what replay decides on input with the bundled rules.
func replayDecisionsOf(t *testing.T, input string) []string {
	t.Helper()
	out := t.TempDir()
	runReplay(t, replay.Options{Config: testinput.Rules(t), Inputs: []string{input}, OutDir: out})
	b, err := os.ReadFile(filepath.Join(out, "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// sourceSuffix is where a decision's event came from, which decisions
// made from files do not have.
var sourceSuffix = regexp.MustCompile(`,"partition":\d+,"offset":\d+}$`)

// liveDecisions reads the decisions topic (one partition) without the
// partition and offset of their events, for a comparison with a replay of
// files.
func liveDecisions(t *testing.T, addr string) []string {
	t.Helper()
	got := readTopic(t, addr, "decisions")
	for i, d := range got {
		if !sourceSuffix.MatchString(d) {
			t.Fatalf("live decision %d does not say where its event came from: %s", i, d)
		}
		got[i] = sourceSuffix.ReplaceAllString(d, "}")
	}
	return got
}

// readTopic reads every message of a one-partition topic.
func readTopic(t *testing.T, addr, topic string) []string {
	t.Helper()
	return kafkatest.Values(readPartition(t, addr, topic, 0))
}

// readPartition reads every message of one partition of a topic, up to its
// last offset when called.
func readPartition(t testing.TB, addr, topic string, partition int) []kafka.Message {
	t.Helper()
	return kafkatest.ReadPartition(t, addr, topic, partition, time.Minute)
}

// readMessages reads the first n messages of one partition of a topic,
// waiting up to a minute for them to arrive.
func readMessages(t testing.TB, addr, topic string, partition, n int) []kafka.Message {
	t.Helper()
	return kafkatest.ReadMessages(t, nil, addr, topic, partition, n, time.Minute)
}

// runUntil runs the job until the decisions topic holds n records, then
// stops it as SIGTERM would.
// startJob runs the job in the background and returns once it consumes.
// The function it returns stops the job as SIGTERM would and checks that
// it exited cleanly.
func startJob(t testing.TB, opts RunOptions) (stop func()) {
	t.Helper()
	if opts.Config == nil {
		opts.Config = testinput.Rules(t)
	}
	if opts.StateDir == "" {
		opts.StateDir = t.TempDir()
	}
	ready := make(chan struct{})
	opts.Ready = func([]string) { close(ready) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("the job did not start: %v", err)
	}
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// runUntil runs the job until the decisions topic holds n records (or,
// with stopEarly, any), then stops it.
func runUntil(t *testing.T, addr, stateDir string, n int, stopEarly bool, reg *prometheus.Registry) {
	t.Helper()
	runUntilWith(t, RunOptions{Registry: reg}, addr, stateDir, n, stopEarly)
}

// runUntilWith is runUntil with options of the job's own (o's Brokers,
// StateDir and CheckpointInterval are set here).
func runUntilWith(t *testing.T, o RunOptions, addr, stateDir string, n int, stopEarly bool) {
	t.Helper()
	o.Brokers, o.StateDir, o.CheckpointInterval = []string{addr}, stateDir, 100*time.Millisecond
	stop := startJob(t, o)
	defer stop()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if last := int(recordsIn(t, addr, "decisions")); (stopEarly && last > 0) || last >= n {
			return
		}
	}
	t.Errorf("the decisions topic never held %d records", n)
}

// TestLiveEqualsReplay: the same records in the same order give the same
// decisions live, through a real Kafka-protocol broker over TCP, as in
// replay.
func TestLiveEqualsReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	want := replayDecisions(t)
	addr := testbroker.Start(t, 1)
	produceBundled(t, addr)
	reg := prometheus.NewRegistry()
	runUntil(t, addr, t.TempDir(), len(want), false, reg)
	got := liveDecisions(t, addr)
	if !slices.Equal(got, want) {
		t.Fatalf("live made %d decisions, replay %d; first live %q", len(got), len(want), first(got))
	}
	// The metrics saw the same run (counted at the final checkpoint).
	metrics, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, mf := range metrics {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				values[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				values[name] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				values[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for name, want := range map[string]float64{
		"riskstream_events_total,result=ok":                     19938,
		"riskstream_events_total,result=invalid":                39,
		"riskstream_decisions_total,action=deny,rule=pay-burst": 295,
		"riskstream_event_decision_latency_seconds":             float64(len(want)),
		"riskstream_decision_job_latency_seconds":               float64(len(want)),
		"riskstream_decision_stage_seconds,stage=merge":         float64(len(want)),
		"riskstream_decision_stage_seconds,stage=engine":        float64(len(want)),
		"riskstream_decision_stage_seconds,stage=queue":         float64(len(want)),
		"riskstream_decision_stage_seconds,stage=write":         float64(len(want)),
		"riskstream_consumer_lag,partition=0":                   0,
	} {
		if got, ok := values[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	if values["riskstream_checkpoint_pause_seconds"] == 0 {
		t.Errorf("no checkpoint pause observed")
	}
	// A backlog: the records' timestamps (their captured ingest_ts) are two
	// years behind the wall clock, yet close to ts: no source is degraded,
	// because the job's own clock is never the reference.
	sources := 0
	for name, v := range values {
		if strings.HasPrefix(name, "riskstream_source_degraded,") {
			sources++
			if v != 0 {
				t.Errorf("%s = %v: a backlog must not look like skew", name, v)
			}
		}
	}
	if sources != 4 {
		t.Errorf("skew reported for %d sources, want the 4 gateways", sources)
	}
	// The file ends with stragglers delivered 35-90 s late after the
	// traffic stopped: too few to judge a clock by, so the skew exported
	// stays the last judged, within the threshold.
	for name, v := range values {
		if strings.HasPrefix(name, "riskstream_source_skew_seconds,") && math.Abs(v) >= 0.015 {
			t.Errorf("%s = %v s: an estimate still warming up was exported", name, v)
		}
	}
	if values["riskstream_checkpoint_duration_seconds"] == 0 {
		t.Errorf("no checkpoint counted: %v", values)
	}
	// The heatmap histogram counts what the heatmaps topic holds of /pay
	// at the first revision of each window.
	var payCount float64
	for _, h := range readTopic(t, addr, "heatmaps") {
		var rec struct {
			Key      map[string]string `json:"key"`
			Revision int               `json:"revision"`
			Count    float64           `json:"count"`
		}
		if err := json.Unmarshal([]byte(h), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Key["api"] == "/pay" && rec.Revision == 0 {
			payCount += rec.Count
		}
	}
	if got := values["riskstream_request_latency_seconds,heatmap=api-latency,key=/pay"]; got == 0 || got != payCount {
		t.Errorf("the /pay latency histogram counts %v values, the heatmaps topic %v", got, payCount)
	}
}

// TestLiveRestartResumes stops the job early and starts it again on the same
// state: it resumes from its checkpoint, and the decisions together cover
// replay's, with nothing replay does not have (duplicates allowed).
//
// It runs with the default memory budget, and with one decoded state and
// the smallest budget, which sends every state through the cold store and
// the restart's reads through Pebble.
func TestLiveRestartResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	want := replayDecisions(t)
	for name, o := range map[string]RunOptions{
		"default":                   {},
		"one decoded state, 64 MiB": {CacheSlots: 1, MemoryBytes: memory.Min},
	} {
		t.Run(name, func(t *testing.T) {
			addr := testbroker.Start(t, 1)
			// The first run sees half the input, so that the second has to
			// resume in the middle of it.
			produce := produceHalves(t, addr)
			produce(0)
			stateDir := t.TempDir()
			runUntilWith(t, o, addr, stateDir, len(want), true)
			mid := len(liveDecisions(t, addr))
			if mid == 0 || mid >= len(want) {
				t.Fatalf("the first run stopped at %d of %d decisions, not in the middle", mid, len(want))
			}
			produce(1)
			runUntilWith(t, o, addr, stateDir, len(want), false)
			checkDecisions(t, addr, want)
			t.Logf("%d decisions before the restart", mid)
		})
	}
}

func first(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return xs[0]
}

// TestSecondInstanceRefused: a second job with the same consumer group is
// refused while the first runs, and the first's output is unchanged; after
// it stops, the group holds the checkpointed offsets for lag tools.
func TestSecondInstanceRefused(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("seconds of consumer group rebalances: set %s=1", kafkatest.FaultsEnv)
	}
	want := replayDecisions(t)
	addr := testbroker.Start(t, 1)
	stop := startJob(t, RunOptions{Brokers: []string{addr}, CheckpointInterval: 50 * time.Millisecond})
	err := Run(context.Background(), RunOptions{Config: testinput.Rules(t), Brokers: []string{addr}, StateDir: t.TempDir()})
	var busy *kafkaio.ErrGroupBusy
	if !errors.As(err, &busy) {
		t.Fatalf("second instance: %v, want ErrGroupBusy", err)
	}
	t.Log(err)
	produceBundled(t, addr)
	// Until the job has read the whole input, not only written every
	// decision: the last records decide nothing, and a job stopped before
	// them commits an earlier offset.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if len(liveDecisions(t, addr)) >= len(want) && committed(t, addr, 1) == 20000 {
			break
		}
	}
	stop()
	if got := liveDecisions(t, addr); !slices.Equal(got, want) {
		t.Fatalf("the first instance's decisions changed: %d vs %d", len(got), len(want))
	}
	client := kafkatest.Client(t, addr, 0)
	resp, err := client.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{GroupID: "riskstream",
		Topics: map[string][]int{"requests": {0}}})
	if err != nil {
		t.Fatal(err)
	}
	if ps := resp.Topics["requests"]; len(ps) != 1 || ps[0].CommittedOffset != 20000 {
		t.Fatalf("group offsets %+v, want 20000 committed", resp.Topics)
	}
}

// TestNewPartitionsPickedUp: partitions added to the input topic while the
// job runs are read too.
func TestNewPartitionsPickedUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	addr := testbroker.Start(t, 1)
	stop := startJob(t, RunOptions{Brokers: []string{addr}, CheckpointInterval: 50 * time.Millisecond,
		PartitionDiscovery: 50 * time.Millisecond})
	client := kafkatest.Client(t, addr, 0)
	if _, err := client.CreatePartitions(context.Background(), &kafka.CreatePartitionsRequest{
		Topics: []kafka.TopicPartitionsConfig{{Name: "requests", Count: 2}}}); err != nil {
		t.Fatal(err)
	}
	var conn *kafka.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if conn, err = kafka.DialLeader(context.Background(), "tcp", addr, "requests", 1); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	var msgs []kafka.Message
	for i := range 7 {
		msgs = append(msgs, kafka.Message{Value: fmt.Appendf(nil, `{"id":"n%d","ts":%d,"user":"u1","api":"/pay","latency_ms":3}`, i, 1732150000000+int64(i)*1000)})
	}
	if _, err := conn.WriteMessages(msgs...); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	var got []string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && len(got) < 2; time.Sleep(50 * time.Millisecond) {
		got = liveDecisions(t, addr)
	}
	stop()
	if len(got) != 2 || !strings.Contains(got[0], `"id":"n5/pay-burst"`) {
		t.Fatalf("decisions from the new partition: %q", got)
	}
}

// TestLiveSkewMetrics: live, the record timestamp is the reference; a source
// stamping 200 ms ahead of it is degraded, and the metrics say so.
func TestLiveSkewMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	addr := testbroker.Start(t, 1)
	var msgs []kafka.Message
	base := int64(1732150000000)
	for i := range 60 {
		ref := base + int64(i)*50
		msgs = append(msgs, kafka.Message{
			Value: fmt.Appendf(nil, `{"id":"s%d","ts":%d,"source":"gw-1","user":"u%d","api":"/x","latency_ms":1}`, i, ref+200, i),
			Time:  time.UnixMilli(ref),
		})
	}
	writeInput(t, addr, msgs...)
	reg := prometheus.NewRegistry()
	stop := startJob(t, RunOptions{Brokers: []string{addr}, Registry: reg, CheckpointInterval: 50 * time.Millisecond})
	// The metrics are published at checkpoints: once all 60 records are.
	for deadline := time.Now().Add(30 * time.Second); metricValue(t, reg, `riskstream_events_total{result="ok"}`) < 60; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the 60 records were not processed in 30 s")
		}
	}
	stop()
	want := map[string]float64{
		`riskstream_source_degraded{source="gw-1"}`:          1,
		`riskstream_source_transitions_total{source="gw-1"}`: 1,
		`riskstream_source_skew_seconds{source="gw-1"}`:      0.2,
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != "gw-1" {
				continue
			}
			name := mf.GetName() + `{source="gw-1"}`
			w, ok := want[name]
			if !ok {
				continue
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			if v != w {
				t.Errorf("%s = %v, want %v", name, v, w)
			}
			delete(want, name)
		}
	}
	if len(want) > 0 {
		t.Errorf("metrics missing: %v", want)
	}
}

// writeInput writes msgs to partition 0 of the input topic.
func writeInput(t testing.TB, addr string, msgs ...kafka.Message) {
	t.Helper()
	conn, err := kafka.DialLeader(context.Background(), "tcp", addr, "requests", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.WriteMessages(msgs...); err != nil {
		t.Fatal(err)
	}
}

// TestMergeClockAway: the merge's clock leaves out the loop's work and the
// time the group is not held, when the loop takes in nothing: a record
// held for a caught-up partition is still held after a rebalance that took
// longer than the wait, so that a record of that partition fetched before
// the group went, and taken in once it is back, still goes first.
func TestMergeClockAway(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	j := &liveJob{Base: jobbase.Base{Opts: RunOptions{Now: func() time.Time { return now }}}, started: now}
	merge, err := order.New(order.Options[int64]{Timestamp: func(ts *int64) int64 { return *ts }, Wait: 100})
	if err != nil {
		t.Fatal(err)
	}
	merge.AddPartition(0)
	merge.AddPartition(1)
	j.noteHeld(true)
	now = now.Add(40 * time.Millisecond) // waiting for something to do
	merge.Push(0, []int64{20}, false, j.mergeNow())
	now = now.Add(time.Second) // a step of the loop
	j.worked(time.Second)
	j.noteHeld(false) // a rebalance
	now = now.Add(2 * time.Second)
	j.noteHeld(false)
	now = now.Add(time.Second)
	j.noteHeld(true)
	now = now.Add(30 * time.Millisecond)
	if got := j.mergeNow(); got != 70 {
		t.Fatalf("merge clock %d ms after 70 ms of waiting, 1 s of work and 3 s without the group", got)
	}
	if _, _, ok := merge.Pop(j.mergeNow()); ok {
		t.Fatal("the wait for partition 1 ran out during the rebalance")
	}
	merge.Push(1, []int64{10}, false, j.mergeNow())
	if ts, p, ok := merge.Pop(j.mergeNow()); !ok || ts != 10 {
		t.Fatalf("popped %d of partition %d (%v), want partition 1's 10 first", ts, p, ok)
	}
}

// TestMissingOutputTopic: on brokers that do not create topics on first
// use, a job whose output topic does not exist stops at start naming the
// topic and its flag, single or distributed, instead of retrying its
// writes forever while its probes say healthy; on brokers that do, the
// start creates it.
func TestMissingOutputTopic(t *testing.T) {
	if testing.Short() {
		t.Skip("starts brokers and a job")
	}
	b, err := broker.Start(broker.Options{Addr: "127.0.0.1:0", Topics: map[string]int32{"requests": 1, "decisions": 1, "heatmaps": 1, "late": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, distributed := range []bool{false, true} {
		opts := RunOptions{Brokers: []string{b.Addr()}, Config: testinput.Rules(t), StateDir: t.TempDir(), Registry: prometheus.NewRegistry(),
			Distributed: distributed, Group: fmt.Sprintf("missing-%v", distributed)}
		opts.Outputs = sink.DefaultTopics
		opts.Outputs.DLQ = "dlq-missing"
		err := Run(context.Background(), opts)
		if want := `output topic "dlq-missing" does not exist, and the brokers do not create topics on first use: create it, or name another with --dlq-topic`; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("distributed %v: %v, want an error with %q", distributed, err, want)
		}
	}
	addr := startAutoCreatingBroker(t)
	startJob(t, RunOptions{Brokers: []string{addr}, MetricsAddr: "", Registry: prometheus.NewRegistry()})()
	for _, topic := range sink.DefaultTopics.Names() {
		if ps, err := kafkaio.OutputPartitions(context.Background(), &kafka.Client{Addr: kafka.TCP(addr), Transport: &kafka.Transport{}}, []string{topic}); err != nil || len(ps[topic]) == 0 {
			t.Errorf("topic %s after a start on auto-creating brokers: %v, %v", topic, ps, err)
		}
	}
}
