package stream

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"regexp"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/riskstream/riskstream/gen"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/produce"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/stream/internal/jobbase"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	liveRate       = flag.Float64("live.rate", 20_000, "BenchmarkLive: events sent per second (0: as fast as the producer can)")
	liveEvents     = flag.Int("live.events", 100_000, "BenchmarkLive: events sent")
	livePartitions = flag.Int("live.partitions", 4, "BenchmarkLive: partitions of the input topic (riskstream run's embedded broker makes 4)")
	liveWait       = flag.Duration("live.partition-wait", DefaultPartitionWait, "BenchmarkLive: the job's --partition-wait")
	liveCheckpoint = flag.Duration("live.checkpoint-interval", time.Second, "BenchmarkLive: the job's --checkpoint-interval")
	liveShards     = flag.Int("live.shards", 0, "BenchmarkLive: the job's --shards (0: the number of CPUs)")
	liveProducer   = flag.String("live.producer", "riskstream", "BenchmarkLive: the producer: request (one produce request for every partition's records, "+
		"as the Java client and librdkafka send, franz-go's kgo here) or riskstream (riskstream produce: kafka-go, a request per partition)")
	liveLinger = flag.Duration("live.linger", 0, "BenchmarkLive: how long the request producer lingers for more records (the Java client's linger.ms)")
)

var ingestField = regexp.MustCompile(`,"ingest_ts":\d+`)

// BenchmarkLive measures the live path on this machine: producer, embedded
// broker and job in one process, -live.events events at a steady
// -live.rate per second, record timestamps set at send time.
//
// The event-to-decision latency is measured exactly, as a consumer of the
// job sees it: a reader of the decisions topic notes when each decision
// arrives, and the record timestamp of its event is read back from the
// input topic after the run. drain-ms is how long after the producer's last
// acknowledgement the last decision arrived: it stays at about one latency
// while the job keeps up and grows with the backlog when it does not.
// consumed/s is the events over the time from the first send to the last
// decision.
//
// The producer, broker, job and decision reader run under the pprof label
// part=producer|broker|job|reader (making the input and reading it back
// after the run: setup), so a CPU profile splits the machine's time
// between them (go tool pprof -tags; scripts/bench-live does it). Time
// without a label is mostly the garbage collector's.
//
//	go test ./stream/ -run '^$' -bench BenchmarkLive -benchtime 1x [-live.rate 20000] [-live.events 100000]
func BenchmarkLive(b *testing.B) {
	o := gen.DefaultOptions()
	// One user per 20 events, as in the 100,000-event default: the share of
	// events that make a decision (about 3%) stays the same at any size.
	o.Events, o.Users = *liveEvents, max(*liveEvents/20, 1)
	var (
		input []byte
		err   error
	)
	labelled("setup", func() {
		var buf bytes.Buffer
		_, err = gen.Generate(&buf, o)
		// Without ingest_ts the producer stamps the send time, the
		// reference a live latency is measured from.
		input = ingestField.ReplaceAll(buf.Bytes(), nil)
	})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		var addr string
		appended := &appendLog{}
		labelled("broker", func() { addr = testbroker.StartAppending(b, int32(*livePartitions), appended.note) })
		var stop func()
		reg := prometheus.NewRegistry()
		wait := *liveWait
		if wait == 0 {
			wait = -1 // no wait, not the default
		}
		var (
			jobMu     sync.Mutex
			timed     []timedDecision
			ckptPause []interval
		)
		schedBefore := schedLatencies()
		gcCtx, stopGC := context.WithCancel(context.Background())
		gcPauses := make(chan []interval, 1)
		go func() { gcPauses <- watchGCPauses(gcCtx) }()
		labelled("job", func() {
			stop = startJob(b, RunOptions{Brokers: []string{addr}, Registry: reg,
				PartitionWait: wait, CheckpointInterval: *liveCheckpoint, Shards: *liveShards,
				Testing: jobbase.Testing{
					DecisionTimed: func(t sink.DecisionTimes, written, acked int64) {
						jobMu.Lock()
						timed = append(timed, timedDecision{t, written, acked})
						jobMu.Unlock()
					},
					CheckpointPaused: func(from, to int64) {
						jobMu.Lock()
						ckptPause = append(ckptPause, interval{from, to})
						jobMu.Unlock()
					}}})
		})
		arrivalsSoFar.Store(0)
		seen := make(chan []arrival, 1)
		readerCtx, stopReader := context.WithCancel(context.Background())
		labelled("reader", func() { go func() { seen <- readArrivals(readerCtx, addr, "decisions") }() })

		start := time.Now()
		var st produce.Stats
		labelled("producer", func() {
			switch *liveProducer {
			case "riskstream":
				st, err = produce.Run(context.Background(), produce.Options{File: "-", Stdin: bytes.NewReader(input),
					Brokers: []string{addr}, Rate: *liveRate})
			case "request":
				st, err = produceByRequest(addr, "requests", input, *liveRate, *liveLinger)
			default:
				err = fmt.Errorf("-live.producer %q: want request or riskstream", *liveProducer)
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		produced := time.Now()
		// The job is done when no decision has arrived for a while.
		for last := -1; ; {
			time.Sleep(2 * time.Second)
			n := arrivalsSoFar.Load()
			if int(n) == last {
				break
			}
			last = int(n)
		}
		stopReader()
		arrivals := <-seen
		stop()
		stopGC()
		gcs := <-gcPauses
		reportSchedLatency(b, schedBefore, schedLatencies())
		if len(arrivals) == 0 {
			b.Fatal("no decision arrived")
		}
		var inputs [][]kafka.Message
		labelled("setup", func() {
			for p := range *livePartitions {
				inputs = append(inputs, readPartition(b, addr, "requests", p))
			}
		})
		sent := map[string]recordAt{}
		for p, msgs := range inputs {
			for i, m := range msgs {
				sent[string(m.Key)] = recordAt{p, i}
			}
		}
		lat := make([]time.Duration, 0, len(arrivals))
		for _, a := range arrivals {
			at, ok := sent[a.key]
			if !ok {
				b.Fatalf("decision for an event never sent: %s", a.key)
			}
			lat = append(lat, a.at.Sub(inputs[at.partition][at.offset].Time))
		}
		slices.Sort(lat)
		q := func(p float64) float64 { return quantileMs(lat, p) }
		jobMu.Lock()
		// The first run's checkpoint, before its first record, held no
		// record back.
		ckptPause = slices.DeleteFunc(ckptPause, func(p interval) bool { return p.from < start.UnixNano() })
		reportJobLatency(b, timed, ckptPause, gcs, upstreamWaits(b, timed, arrivals, sent, inputs, appended.byOffset()))
		jobMu.Unlock()
		lastAt := arrivals[len(arrivals)-1].at
		b.ReportMetric(float64(len(lat)), "decisions")
		b.ReportMetric(q(0.5), "p50-ms")
		b.ReportMetric(q(0.99), "p99-ms")
		b.ReportMetric(q(0.999), "p999-ms")
		b.ReportMetric(q(1), "max-ms")
		b.ReportMetric(float64(st.Records)/st.Elapsed.Seconds(), "sent/s")
		b.ReportMetric(float64(st.Records)/lastAt.Sub(start).Seconds(), "consumed/s")
		b.ReportMetric(float64(lastAt.Sub(produced))/float64(time.Millisecond), "drain-ms")
		b.ReportMetric(metricSum(b, reg, "riskstream_partition_wait_timeouts_total"), "wait-timeouts")
		ckpt := histogramOf(b, reg, "riskstream_checkpoint_duration_seconds")
		b.ReportMetric(float64(ckpt.GetSampleCount()), "checkpoints")
		b.ReportMetric(1000*ckpt.GetSampleSum()/float64(max(ckpt.GetSampleCount(), 1)), "checkpoint-mean-ms")
	}
}

// eventID finds an event's id, the key the job's decisions are found by.
var eventID = regexp.MustCompile(`"id":"([^"]*)"`)

// produceByRequest sends the lines of input to topic at rate a second (0:
// at once), keyed by event id, with kgo: as the Java client and
// librdkafka do, it sends the records of every partition waiting for the
// broker in one produce request, lingering up to linger for more, where
// riskstream produce (kafka-go) sends each partition's batch in a request
// of its own. Their timestamps are the send time.
func produceByRequest(addr, topic string, input []byte, rate float64, linger time.Duration) (produce.Stats, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(linger),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), kgo.MaxBufferedRecords(1<<20))
	if err != nil {
		return produce.Stats{}, err
	}
	defer cl.Close()
	var (
		sent   atomic.Int64
		failed atomic.Pointer[error]
	)
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
			return
		}
		sent.Add(1)
	}
	start := time.Now()
	n := 0
	for line := range bytes.Lines(input) {
		line = bytes.TrimSuffix(line, []byte("\n"))
		if len(line) == 0 {
			continue
		}
		if rate > 0 {
			// Sleeps of at least 200 µs, as riskstream produce's: the
			// records due meanwhile go out together.
			if ahead := time.Until(start.Add(time.Duration(float64(n) / rate * float64(time.Second)))); ahead > 200*time.Microsecond {
				time.Sleep(ahead)
			}
		}
		var key []byte
		if m := eventID.FindSubmatch(line); m != nil {
			key = m[1]
		}
		cl.Produce(context.Background(), &kgo.Record{Key: key, Value: line}, done)
		n++
	}
	if err := cl.Flush(context.Background()); err != nil {
		return produce.Stats{}, err
	}
	if err := failed.Load(); err != nil {
		return produce.Stats{}, *err
	}
	return produce.Stats{Records: sent.Load(), Elapsed: time.Since(start)}, nil
}

// timedDecision is a decision's times in the job (RunOptions.Testing.DecisionTimed).
type timedDecision struct {
	sink.DecisionTimes
	written, acked int64
}

// interval is a span of time, in Unix ns.
type interval struct{ from, to int64 }

// reportJobLatency reports the job's own share of the decisions' latency,
// from the arrival of the fetch that carried the event to the
// acknowledgement of its decision, by quantile and by stage, and where its
// tail comes from: for the slowest 1% of decisions, the mean of each
// stage, and the share that overlapped a checkpoint's pause of the loop or
// a pause of the garbage collector.
//
// upstream, when known (one per decision), is the part of each decision's
// merge wait spent on records not yet at the broker (upstreamWaits):
// job-own-* is the job's latency without it.
func reportJobLatency(b *testing.B, timed []timedDecision, ckpt, gc []interval, upstream []time.Duration) {
	if len(timed) == 0 {
		return
	}
	total := make([]time.Duration, len(timed))
	var stages [len(sink.DecisionStages)][]time.Duration
	for i := range timed {
		t := &timed[i]
		total[i] = time.Duration(t.acked - t.Arrived)
		for k, d := range sink.StageDurations(&t.DecisionTimes, t.written, t.acked) {
			stages[k] = append(stages[k], d)
		}
	}
	sorted := slices.Clone(total)
	slices.Sort(sorted)
	b.ReportMetric(quantileMs(sorted, 0.5), "job-p50-ms")
	b.ReportMetric(quantileMs(sorted, 0.99), "job-p99-ms")
	b.ReportMetric(quantileMs(sorted, 0.999), "job-p999-ms")
	if upstream != nil {
		own := make([]time.Duration, len(total))
		for i := range total {
			own[i] = total[i] - upstream[i]
		}
		slices.Sort(own)
		b.ReportMetric(quantileMs(own, 0.5), "job-own-p50-ms")
		b.ReportMetric(quantileMs(own, 0.99), "job-own-p99-ms")
		b.ReportMetric(quantileMs(own, 0.999), "job-own-p999-ms")
		up := slices.Sorted(slices.Values(upstream))
		b.ReportMetric(quantileMs(up, 0.99), "merge-upstream-p99-ms")
	}
	for k, name := range sink.DecisionStages {
		slices.Sort(stages[k])
		b.ReportMetric(quantileMs(stages[k], 0.99), name+"-p99-ms")
	}
	p99 := sorted[int(0.99*float64(len(sorted)-1))]
	var (
		tail         int
		tailStages   [len(sink.DecisionStages)]time.Duration
		inCkpt, inGC int
	)
	overlaps := func(spans []interval, from, to int64) bool {
		return slices.ContainsFunc(spans, func(s interval) bool { return s.from < to && s.to > from })
	}
	for i := range timed {
		if total[i] < p99 {
			continue
		}
		t := &timed[i]
		tail++
		for k, d := range sink.StageDurations(&t.DecisionTimes, t.written, t.acked) {
			tailStages[k] += d
		}
		if overlaps(ckpt, t.Arrived, t.acked) {
			inCkpt++
		}
		if overlaps(gc, t.Arrived, t.acked) {
			inGC++
		}
	}
	for k, name := range sink.DecisionStages {
		b.ReportMetric(float64(tailStages[k])/float64(tail)/float64(time.Millisecond), "tail-"+name+"-ms")
	}
	b.ReportMetric(100*float64(inCkpt)/float64(tail), "tail-in-checkpoint-%")
	b.ReportMetric(100*float64(inGC)/float64(tail), "tail-in-gc-%")
	var pauses []time.Duration
	for _, p := range ckpt {
		pauses = append(pauses, time.Duration(p.to-p.from))
	}
	if len(pauses) > 0 {
		slices.Sort(pauses)
		b.ReportMetric(quantileMs(pauses, 0.5), "checkpoint-pause-p50-ms")
		b.ReportMetric(quantileMs(pauses, 1), "checkpoint-pause-max-ms")
	}
	var gcMax time.Duration
	for _, p := range gc {
		gcMax = max(gcMax, time.Duration(p.to-p.from))
	}
	b.ReportMetric(float64(len(gc)), "gc-pauses")
	b.ReportMetric(float64(gcMax)/float64(time.Millisecond), "gc-pause-max-ms")
}

// schedLatencies reads the runtime's histogram of how long goroutines
// waited, runnable, for a CPU.
func schedLatencies() *metrics.Float64Histogram {
	m := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(m)
	return m[0].Value.Float64Histogram()
}

// reportSchedLatency reports the 99th percentile and the greatest of the
// waits for a CPU between two readings of schedLatencies: the producer,
// the broker and the job share the machine's cores, and a goroutine of the
// job that is ready to run waits while theirs run.
func reportSchedLatency(b *testing.B, before, after *metrics.Float64Histogram) {
	counts := slices.Clone(after.Counts)
	var total uint64
	for i := range counts {
		counts[i] -= before.Counts[i]
		total += counts[i]
	}
	if total == 0 {
		return
	}
	// Bucket i holds waits from Buckets[i] to Buckets[i+1]; the upper
	// bound is reported.
	at := func(q float64) float64 {
		var n uint64
		for i, c := range counts {
			if n += c; float64(n) >= q*float64(total) {
				return after.Buckets[i+1] * 1000
			}
		}
		return math.Inf(1)
	}
	b.ReportMetric(at(0.99), "sched-wait-p99-ms")
	b.ReportMetric(at(1), "sched-wait-max-ms")
}

// watchGCPauses collects the garbage collector's stop-the-world pauses
// until ctx ends, reading the runtime's record of recent ones often enough
// that none is missed.
func watchGCPauses(ctx context.Context) []interval {
	var (
		st     debug.GCStats
		pauses []interval
		seen   = map[int64]bool{}
	)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for first := true; ; first = false {
		debug.ReadGCStats(&st)
		for i, end := range st.PauseEnd {
			if e := end.UnixNano(); !seen[e] && i < len(st.Pause) {
				seen[e] = true
				if !first { // those before the run are not its
					pauses = append(pauses, interval{e - int64(st.Pause[i]), e})
				}
			}
		}
		select {
		case <-ctx.Done():
			return pauses
		case <-tick.C:
		}
	}
}

// quantileMs returns the value at quantile p of sorted durations, in ms.
func quantileMs(sorted []time.Duration, p float64) float64 {
	return float64(sorted[int(p*float64(len(sorted)-1))]) / float64(time.Millisecond)
}

// histogramOf returns the histogram named name.
func histogramOf(t testing.TB, reg *prometheus.Registry, name string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("no histogram %s", name)
	return nil
}

// labelled runs f under the pprof label part=name; goroutines f starts
// inherit it.
func labelled(name string, f func()) {
	pprof.Do(context.Background(), pprof.Labels("part", name), func(context.Context) { f() })
}

// arrival is when a consumer received the message with key.
type arrival struct {
	key string
	at  time.Time
}

// arrivalsSoFar counts the arrivals of the running readArrivals.
var arrivalsSoFar atomic.Int64

// readArrivals reads partition 0 of topic from its start until ctx ends,
// noting when each message arrives.
func readArrivals(ctx context.Context, addr, topic string) []arrival {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: topic, Partition: 0,
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 500 * time.Millisecond})
	defer r.Close()
	var out []arrival
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			return out
		}
		out = append(out, arrival{key: string(m.Key), at: time.Now()})
		arrivalsSoFar.Store(int64(len(out)))
	}
}

// recordAt is where an input record is: its partition and offset.
type recordAt struct{ partition, offset int }

// appendLog notes when each produce request's input records reached the
// broker (broker.Options.Appending).
type appendLog struct {
	mu sync.Mutex
	// runs are, by partition, the produce requests' record counts and
	// when the broker appended them (Unix ns), in offset order.
	runs [][]appendRun
}

type appendRun struct {
	records int
	at      int64
}

func (l *appendLog) note(topic string, partition int32, records int) {
	if topic != "requests" {
		return
	}
	at := time.Now().UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	for int(partition) >= len(l.runs) {
		l.runs = append(l.runs, nil)
	}
	l.runs[partition] = append(l.runs[partition], appendRun{records, at})
}

// byOffset returns, by partition, when the broker appended each offset.
func (l *appendLog) byOffset() [][]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([][]int64, len(l.runs))
	for p, runs := range l.runs {
		for _, r := range runs {
			for range r.records {
				out[p] = append(out[p], r.at)
			}
		}
	}
	return out
}

// upstreamWaits returns, for each timed decision, how much of its merge
// wait was spent on records that had not reached the broker: the merge
// releases a record once every other partition has one after it in the
// merge's order (order's TestOrderByPrefixMaximum: by the greatest
// timestamp of its partition so far, then the partition), and until the
// first such record was appended, no job could have released it. What
// follows the append (the fetch, the loop) stays the job's. A record no
// later record released (the end of the traffic) waited on the producers
// for all of its merge wait. It returns nil, and says why, when the
// decisions cannot be matched with their records.
func upstreamWaits(b *testing.B, timed []timedDecision, arrivals []arrival, where map[string]recordAt,
	inputs [][]kafka.Message, appendedAt [][]int64) []time.Duration {
	if len(timed) != len(arrivals) || len(appendedAt) != len(inputs) {
		b.Logf("upstream waits unknown: %d timed decisions, %d arrived; %d partitions appended, %d read",
			len(timed), len(arrivals), len(appendedAt), len(inputs))
		return nil
	}
	prefixMax := make([][]int64, len(inputs))
	for p, msgs := range inputs {
		if len(appendedAt[p]) != len(msgs) {
			b.Logf("upstream waits unknown: partition %d: %d records appended, %d read", p, len(appendedAt[p]), len(msgs))
			return nil
		}
		m := int64(math.MinInt64)
		for _, msg := range msgs {
			m = max(m, msg.Time.UnixMilli())
			prefixMax[p] = append(prefixMax[p], m)
		}
	}
	out := make([]time.Duration, len(timed))
	for i, t := range timed {
		at := where[arrivals[i].key]
		if inputs[at.partition][at.offset].Time.UnixMilli() != t.Ref {
			b.Logf("upstream waits unknown: decision %d is not for the record of its key", i)
			return nil
		}
		pm := prefixMax[at.partition][at.offset]
		released := int64(math.MinInt64)
		for q := range inputs {
			if q == at.partition {
				continue
			}
			// The first record of q after the decision's in the merge.
			j := sort.Search(len(prefixMax[q]), func(j int) bool {
				return prefixMax[q][j] > pm || prefixMax[q][j] == pm && q > at.partition
			})
			if j == len(prefixMax[q]) {
				released = math.MaxInt64
				break
			}
			released = max(released, appendedAt[q][j])
		}
		out[i] = time.Duration(min(max(released-t.Arrived, 0), t.Popped-t.Arrived))
	}
	return out
}
