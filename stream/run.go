package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/state"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows"
	"github.com/segmentio/kafka-go"
)

// writeBackPerTick is how many changed window states the live loop writes
// to Pebble every 10 ms tick ahead of the checkpoint (25,600 states a
// second), so that the checkpoint, which pauses the loop, finds little left
// to write (BenchmarkCheckpoint; BENCHMARKS.md, "Checkpoint pause").
const writeBackPerTick = 256

// stopOutputGrace is how long a stop waits for outputs the brokers do not
// acknowledge (an outage) before the job ends without its final
// checkpoint.
const stopOutputGrace = 10 * time.Second

// RunOptions configure the live job.
type RunOptions struct {
	// Config is the validated rules file. Required.
	Config *rules.Config
	// Brokers are Kafka bootstrap addresses. Empty starts the embedded
	// development broker on EmbeddedAddr.
	Brokers []string
	// Security is the TLS and SASL every connection to Brokers uses. The
	// default value is plaintext without authentication. The embedded
	// broker is plaintext: with it, Security must stay the zero value.
	Security kafkaconn.Options
	// EmbeddedAddr is where the embedded broker listens. The default value
	// is 127.0.0.1:9092.
	EmbeddedAddr string
	// Topic is the input topic. The default value is "requests".
	Topic string
	// Group is the consumer group the job joins and commits its
	// checkpointed offsets to. The default value is "riskstream".
	Group string
	// Outputs name the output topics. The default value is
	// sink.DefaultTopics.
	Outputs sink.Topics
	// StateDir holds the Pebble state (and the embedded broker's data).
	// Required.
	StateDir string
	// CheckpointInterval is how often state and offsets are checkpointed.
	// The default value is 1s.
	CheckpointInterval time.Duration
	// PartitionDiscovery is how often the input topic is checked for new
	// partitions. The default value is 10s.
	PartitionDiscovery time.Duration
	// MetricsAddr serves /metrics, /healthz and /readyz (see readiness);
	// empty serves nothing.
	MetricsAddr string
	// MemoryBytes is the memory budget: see PlanMemory. The default value
	// is DefaultMemory.
	MemoryBytes int64
	// CacheSlots overrides the number of decoded states kept: see
	// windows.Options.
	CacheSlots int
	// MetricLabelLimit bounds the label values taken from the input that
	// the metrics keep per label (sources; each heatmap's keys): the first
	// ones seen get their own, the rest are counted under "other". The
	// default value is 100.
	MetricLabelLimit int
	// MaxMessageBytes is the largest output message the job writes: see
	// sink.MaxMessageBytes. At least sink.MinMaxMessageBytes. The default
	// value is sink.DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Logger receives operational messages. The default value is
	// slog.Default().
	Logger *slog.Logger
	// Registry receives the job's metrics. The default value is a new
	// registry (never the global one).
	Registry *prometheus.Registry
	// Ready, if set, is called once the job consumes, with the brokers it
	// uses (tests use it to know the embedded broker's address).
	Ready func(brokers []string)
	// state holds the state store's filesystem and fault timings, for
	// tests; Run sets the rest.
	state state.Options
}

func (o *RunOptions) ensureDefaults() {
	if o.EmbeddedAddr == "" {
		o.EmbeddedAddr = broker.DefaultAddr
	}
	if o.Topic == "" {
		o.Topic = "requests"
	}
	if o.Group == "" {
		o.Group = "riskstream"
	}
	if o.Outputs == (sink.Topics{}) {
		o.Outputs = sink.DefaultTopics
	}
	if o.PartitionDiscovery <= 0 {
		o.PartitionDiscovery = 10 * time.Second
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = time.Second
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = sink.DefaultMaxMessageBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = DefaultMemory
	}
	if o.MetricLabelLimit <= 0 {
		o.MetricLabelLimit = 100
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
}

// ErrEmbeddedSecurity is returned by Run when RunOptions ask for TLS or
// SASL without Brokers: the embedded development broker is plaintext, and
// a job that silently ignored the security it was given would be a
// surprise. Start `riskstream broker` or a real cluster and give its
// address.
var ErrEmbeddedSecurity = errors.New("stream: TLS and SASL need --brokers: the embedded development broker (started without --brokers) is plaintext only")

// Meta keys of the checkpoint in the state store (docs/format/state.md).
const (
	metaCheckpoint = "checkpoint"
	metaOffsets    = "offsets"
	// metaInstance is the state directory's id in the consumer group
	// (memberTag).
	metaInstance = "instance"
)

// Run is the live job: it consumes every partition of the input topic from
// the checkpointed offsets, runs the engine, writes the outputs to Kafka and
// checkpoints state and offsets together. It returns nil when ctx is
// cancelled after a final flush and checkpoint (SIGINT/SIGTERM). A failure
// of the state store (a full or stalled disk, a corrupt file) ends it at
// once with one error saying what to do.
func Run(ctx context.Context, opts RunOptions) (err error) {
	defer func() { err = explainState(err, true) }()
	opts.ensureDefaults()
	if opts.Config == nil || opts.StateDir == "" {
		return errors.New("stream: run needs rules and a state directory")
	}
	if opts.MaxMessageBytes < sink.MinMaxMessageBytes {
		return fmt.Errorf("stream: a maximum message size of %d bytes is less than the least, %d", opts.MaxMessageBytes, sink.MinMaxMessageBytes)
	}
	sec, err := kafkaconn.New(opts.Security)
	if err != nil {
		return err
	}
	if len(opts.Brokers) == 0 && (opts.Security.TLS.On() || opts.Security.SASL.Mechanism != "") {
		return ErrEmbeddedSecurity
	}
	mem, err := PlanMemory(opts.MemoryBytes, 1)
	if err != nil {
		return err
	}
	log := opts.Logger
	// Pebble locks its directory: a second job on the same state refuses
	// to start instead of corrupting it.
	so := opts.state
	so.Dir, so.AtomicCheckpoints, so.Logger = filepath.Join(opts.StateDir, "state"), true, log
	if so.CacheBytes == 0 {
		so.CacheBytes = mem.PebbleCache
	}
	db, err := state.Open(so)
	if errors.Is(err, state.ErrFailed) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w (is another riskstream running on this --state-dir?)", err)
	}
	defer db.Close()

	brokers := opts.Brokers
	if len(brokers) == 0 {
		b, err := broker.Start(broker.Options{
			Addr:    opts.EmbeddedAddr,
			DataDir: filepath.Join(opts.StateDir, "broker"),
			Topics: map[string]int32{opts.Topic: 4, opts.Outputs.Decisions: 1,
				opts.Outputs.Heatmaps: 1, opts.Outputs.Late: 1, opts.Outputs.DLQ: 1},
			Logger: log,
		})
		if err != nil {
			return fmt.Errorf("embedded broker: %w", err)
		}
		defer b.Close()
		brokers = []string{b.Addr()}
		log.Warn("no --brokers: started an embedded Kafka-compatible broker for development, not for production",
			"addr", b.Addr(), "data", filepath.Join(opts.StateDir, "broker"))
	}

	m := newMetrics(opts.Registry, opts.Config, opts.MetricLabelLimit)
	registerStateMetrics(opts.Registry, db)
	if opts.MetricsAddr != "" {
		srv, err := m.serve(opts.MetricsAddr, db.Health)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	out := sink.NewKafka(brokers, opts.Outputs, sink.Transport(sec.Transport()),
		sink.MaxMessageBytes(opts.MaxMessageBytes), sink.Metrics(opts.Registry), sink.Logger(log))
	defer out.Close()
	e, err := engine.New(engine.Options{
		Config: opts.Config, Backend: db, Output: heatmapMetrics{out, m}, MemoryBytes: mem.State, CacheSlots: opts.CacheSlots,
		OnSkewTransition: func(tr watermark.Transition) {
			logTransition(log, tr)
			m.transitions.WithLabelValues(m.sources.value(tr.Source)).Inc()
		},
	})
	if err != nil {
		return err
	}
	offsets := map[int32]int64{}
	if cp, ok, err := db.Meta(metaCheckpoint); err != nil {
		return err
	} else if ok {
		if err := e.Restore(cp); err != nil {
			return fmt.Errorf("state in %s: %w", opts.StateDir, err)
		}
		raw, _, err := db.Meta(metaOffsets)
		if err != nil {
			return err
		}
		if offsets, err = decodeOffsets(raw); err != nil {
			return err
		}
		log.Info("resuming from checkpoint", "offsets", offsets, "watermark", e.Watermark())
		if raw, ok, err := db.Meta(metaOutputs); err != nil {
			return err
		} else if ok {
			ends, err := decodeOutputEnds(raw)
			if err != nil {
				return err
			}
			written, err := writtenSince(ctx, brokers, sec, ends)
			if err != nil {
				return err
			}
			out.SkipWritten(written)
			if n := written.Len(); n > 0 {
				log.Info("outputs written after the checkpoint are not written again", "messages", n)
			}
		}
	}

	// A wrong password or a TLS mismatch fails here, saying so, rather
	// than as an EOF from whichever client connects first; the state,
	// local, is checked first.
	if err := sec.Check(ctx, brokers); err != nil {
		return fmt.Errorf("stream: brokers %v (%v): %w", brokers, sec, err)
	}
	instance, err := instanceID(db)
	if err != nil {
		return err
	}
	member, err := joinGroup(ctx, brokers, sec, opts.Group, opts.Topic, instance, log)
	if err != nil {
		return err
	}
	defer member.close()
	keepCtx, stopKeeping := context.WithCancel(context.Background())
	var keeping sync.WaitGroup
	keeping.Go(func() { member.keep(keepCtx) })
	defer keeping.Wait()
	defer stopKeeping()

	partitions, err := readPartitions(ctx, sec.Dialer(), brokers[0], opts.Topic)
	if err != nil {
		return err
	}
	now := func() int64 { return time.Now().UnixMilli() }
	fetched := make(chan []kafka.Message, 16)
	readCtx, stopReading := context.WithCancel(ctx)
	var reading sync.WaitGroup
	defer reading.Wait()
	defer stopReading()
	var fetchers []*fetcher
	known := map[int]bool{}
	// addFetchers starts fetching each partition not read yet, from its
	// checkpointed offset or the beginning. It runs at start and then
	// periodically, so partitions added to the topic are picked up.
	addFetchers := func(partitions []int) {
		for _, p := range partitions {
			if known[p] {
				continue
			}
			known[p] = true
			e.AddPartition(int32(p), now())
			start, ok := offsets[int32(p)]
			if !ok {
				start = kafka.FirstOffset
			}
			f := &fetcher{brokers: brokers, dialer: sec.Dialer(), topic: opts.Topic, partition: p, next: start, out: fetched, log: log}
			fetchers = append(fetchers, f)
			reading.Go(func() { f.run(readCtx) })
		}
	}
	addFetchers(partitions)
	m.ready.consuming(fetchers)

	if opts.Ready != nil {
		opts.Ready(brokers)
	}
	log.Info("consuming", "topic", opts.Topic, "partitions", len(partitions), "brokers", brokers)

	// Outputs are written by their own goroutine, in order, while the loop
	// goes on: a decision leaves as soon as it exists, and what is made
	// while a write is in flight goes out together in the next one.
	writer := newOutputWriter(out, m.latency, log)
	defer writer.close()
	// A stop waits for the outputs a while, then gives up on them: the job
	// ends with an error and no checkpoint covers them, so the next run
	// makes them again.
	stopWaiting := context.AfterFunc(ctx, func() { time.AfterFunc(stopOutputGrace, writer.stopRetrying) })
	defer stopWaiting()
	// A checkpoint is committed and synced on another goroutine (the loop
	// goes on meanwhile), and only then are its offsets given to the group.
	// Wait for the commit in flight before leaving, while the group member
	// is still open.
	commitFailed := make(chan error, 1)
	defer db.Wait()

	// checkpoint makes sure every output is acknowledged, then commits
	// state and offsets in one batch: an output is never behind the
	// checkpoint that covers its input. The final one is durable, and its
	// offsets are the group's, when it returns.
	outputClient := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: sec.Transport(), Timeout: 10 * time.Second}
	outputTopics := []string{opts.Outputs.Decisions, opts.Outputs.Heatmaps, opts.Outputs.Late, opts.Outputs.DLQ}
	endsUnknown := false // warned that outputEnds fails, until it works again
	checkpoint := func(final bool) error {
		start := time.Now()
		if err := writer.drain(); err != nil {
			return err
		}
		// Where the outputs end, now that all are acknowledged: a restart
		// does not write again what lies past it. Unknown (an error) is
		// an empty list: the restart then writes them again.
		endsCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ends, err := outputEnds(endsCtx, outputClient, outputTopics)
		cancel()
		switch {
		case err != nil && !endsUnknown:
			log.Warn("reading where the outputs end; a restart from a checkpoint without it may write some outputs twice", "err", err)
			endsUnknown = true
		case err == nil && endsUnknown:
			log.Info("reading where the outputs end again")
			endsUnknown = false
		}
		if err != nil {
			ends = nil
		}
		if err := db.SetMeta(metaOutputs, encodeOutputEnds(ends)); err != nil {
			return err
		}
		cp, err := e.Checkpoint()
		if err != nil {
			return err
		}
		if err := db.SetMeta(metaCheckpoint, cp); err != nil {
			return err
		}
		if err := db.SetMeta(metaOffsets, encodeOffsets(offsets)); err != nil {
			return err
		}
		if final {
			if err := db.Commit(true); err != nil {
				return err
			}
			member.commitOrWarn(offsets, opts.Group, log)
			m.checkpoint.Observe(time.Since(start).Seconds())
		} else {
			committed := maps.Clone(offsets)
			db.CommitAsync(func(err error) {
				if err != nil {
					// The first failure is enough to stop the job.
					select {
					case commitFailed <- err:
					default:
					}
					return
				}
				// Only now that the checkpoint is durable may the group
				// see the offsets (never ahead of it).
				member.commitOrWarn(committed, opts.Group, log)
				m.checkpoint.Observe(time.Since(start).Seconds())
			})
		}
		m.update(e, db)
		m.lags(e, fetchers, time.Now().UnixMilli())
		return nil
	}

	ticker := time.NewTicker(opts.CheckpointInterval)
	defer ticker.Stop()
	// Processing time moves idle partitions' watermarks and fires windows
	// even when no record arrives.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	discover := time.NewTicker(opts.PartitionDiscovery)
	defer discover.Stop()
	var recs []engine.Record
	for {
		// While the group is not held (between two of its generations),
		// nothing is processed: another instance may hold it by now.
		input, tick10ms := fetched, tick.C
		held, groupChanged := member.held()
		if !held {
			input, tick10ms = nil, nil
		}
		select {
		case <-groupChanged:
		case err := <-member.lost:
			return err
		case <-ctx.Done():
			// Stop fetching, then what was fetched is processed, flushed and
			// checkpointed: a clean stop loses and repeats nothing.
			m.ready.stop()
			stopReading()
			for {
				if held, _ := member.held(); !held {
					break
				}
				select {
				case msgs := <-fetched:
					if err := processAll(e, out, writer, &recs, msgs, offsets); err != nil {
						return err
					}
					continue
				default:
				}
				break
			}
			if err := checkpoint(true); err != nil {
				return err
			}
			log.Info("stopped after a final checkpoint", "offsets", offsets)
			return nil
		case msgs := <-input:
			if err := processAll(e, out, writer, &recs, msgs, offsets); err != nil {
				return err
			}
		case err := <-writer.done:
			if err := writer.finished(err); err != nil {
				return err
			}
		case err := <-commitFailed:
			return err
		case <-db.Failed():
			// A write Pebble could not complete, a stalled disk, a corrupt
			// file: the store takes no more writes.
			return db.Err()
		case <-tick10ms:
			if err := e.Tick(now()); err != nil {
				return err
			}
			// Spread the next checkpoint's writes over the interval: it
			// pauses the loop for what is left.
			if err := e.WriteBack(writeBackPerTick); err != nil {
				return err
			}
		case <-ticker.C:
			if err := checkpoint(false); err != nil {
				return err
			}
		case <-discover.C:
			ps, err := readPartitions(ctx, sec.Dialer(), brokers[0], opts.Topic)
			if err != nil {
				log.Warn("listing partitions", "topic", opts.Topic, "err", err)
				continue
			}
			n := len(fetchers)
			if addFetchers(ps); len(fetchers) > n {
				log.Info("reading new partitions", "topic", opts.Topic, "partitions", len(fetchers))
			}
		}
		writer.start()
	}
}

// processAll runs the engine over one fetch's records, handing the outputs
// to the writer as they come, and gives the fetch's slice back to the
// fetchers. recs is scratch space for the records.
func processAll(e *engine.Engine, out *sink.Kafka, w *outputWriter, recs *[]engine.Record, msgs []kafka.Message, offsets map[int32]int64) error {
	rs := (*recs)[:0]
	for i := range msgs {
		m := &msgs[i]
		rs = append(rs, engine.Record{
			Value:     m.Value,
			Partition: int32(m.Partition),
			Reference: m.Time.UnixMilli(), HasReference: !m.Time.IsZero(),
			Prov: event.Provenance{Partition: int32(m.Partition), Offset: m.Offset},
		})
		offsets[int32(m.Partition)] = m.Offset + 1
	}
	*recs = rs
	at := 0
	err := e.ProcessAll(rs, func() int64 { return time.Now().UnixMilli() }, func(i int) {
		at = i
		// A decision's latency is measured from its record's timestamp;
		// what the records before made goes out at once.
		out.Ref = rs[i].Reference
		w.start()
	})
	if err != nil {
		err = fmt.Errorf("input %s partition %d offset %d: %w", msgs[at].Topic, msgs[at].Partition, msgs[at].Offset, err)
	}
	clear(rs) // drop the records' bytes
	recycleFetched(msgs)
	return err
}

func readPartitions(ctx context.Context, d *kafka.Dialer, addr, topic string) ([]int, error) {
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", addr, err)
	}
	defer conn.Close()
	ps, err := conn.ReadPartitions(topic)
	if err != nil {
		return nil, fmt.Errorf("topic %s: %w", topic, err)
	}
	ids := make([]int, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids, nil
}

func encodeOffsets(offsets map[int32]int64) []byte {
	var b []byte
	for p, o := range offsets {
		b = binary.AppendVarint(b, int64(p))
		b = binary.AppendVarint(b, o)
	}
	return b
}

func decodeOffsets(b []byte) (map[int32]int64, error) {
	m := map[int32]int64{}
	for len(b) > 0 {
		p, n := binary.Varint(b)
		if n <= 0 {
			return nil, errors.New("stream: corrupt offsets in checkpoint")
		}
		o, k := binary.Varint(b[n:])
		if k <= 0 {
			return nil, errors.New("stream: corrupt offsets in checkpoint")
		}
		m[int32(p)], b = o, b[n+k:]
	}
	return m, nil
}

// metrics are the job's Prometheus metrics (docs/metrics.md), registered on
// an injected registry, never the global one.
type metrics struct {
	reg         *prometheus.Registry
	events      *prometheus.CounterVec
	decisions   *prometheus.CounterVec
	watermark   prometheus.Gauge
	skew        *prometheus.GaugeVec
	degraded    *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	forgotten   prometheus.Counter
	checkpoint  prometheus.Histogram
	stateBytes  prometheus.Gauge
	latency     prometheus.Histogram
	heatmaps    *heatmapCollector
	wmLag       *prometheus.GaugeVec
	consumerLag *prometheus.GaugeVec
	last        engine.Stats
	cfg         *rules.Config
	// sources and heatmapKeys (one per heatmap) bound the label values
	// taken from the input.
	sources     *boundedLabels
	heatmapKeys []*boundedLabels
	// ready answers /readyz.
	ready readiness
}

func newMetrics(reg *prometheus.Registry, cfg *rules.Config, labelLimit int) *metrics {
	m := &metrics{
		reg: reg, cfg: cfg, sources: newBoundedLabels(labelLimit),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "riskstream_events_total",
			Help: "Input records by result: ok, late, invalid, unmatched."}, []string{"result"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "riskstream_decisions_total",
			Help: "Decisions by rule and action."}, []string{"rule", "action"}),
		watermark: prometheus.NewGauge(prometheus.GaugeOpts{Name: "riskstream_watermark_seconds",
			Help: "The job's event-time watermark, Unix seconds."}),
		skew: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "riskstream_source_skew_seconds",
			Help: "Estimated clock skew (ts - reference) per source, as last judged: a source warming up (at start, after a silence) keeps its last judged estimate."}, []string{"source"}),
		degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "riskstream_source_degraded",
			Help: "1 while a source is windowed by reference time."}, []string{"source"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "riskstream_source_transitions_total",
			Help: "Degrade and recover transitions per source."}, []string{"source"}),
		forgotten: prometheus.NewCounter(prometheus.CounterOpts{Name: "riskstream_skew_sources_forgotten_total",
			Help: "Sources the skew tracker forgot, the least recently seen, to stay within skew.max_sources."}),
		checkpoint: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "riskstream_checkpoint_duration_seconds",
			Help: "Time to flush outputs and write a checkpoint, until it is durable.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		stateBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "riskstream_state_bytes",
			Help: "Size of the state store on disk."}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "riskstream_event_decision_latency_seconds",
			Help: "From an event's Kafka record timestamp to the acknowledgement of its decision; a record replayed with an old timestamp counts its age.",
			// Fine around the tens of milliseconds the job is meant for,
			// so a p99 read from the buckets says whether it is under 20 ms.
			Buckets: []float64{.001, .002, .003, .005, .0075, .01, .0125, .015, .0175, .02, .025, .03, .04, .05,
				.075, .1, .15, .2, .3, .5, .75, 1, 2, 5, 10, 30}}),
	}
	m.heatmaps = newHeatmapCollector(cfg)
	m.wmLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "riskstream_watermark_lag_seconds",
		Help: "Wall clock minus the partition's watermark; it grows while the partition is silent."}, []string{"partition"})
	m.consumerLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "riskstream_consumer_lag",
		Help: "Records of the partition not yet consumed."}, []string{"partition"})
	for range cfg.Heatmaps {
		m.heatmapKeys = append(m.heatmapKeys, newBoundedLabels(labelLimit))
	}
	reg.MustRegister(m.heatmaps, m.wmLag, m.consumerLag)
	reg.MustRegister(m.events, m.decisions, m.watermark, m.skew, m.degraded, m.transitions, m.forgotten, m.checkpoint, m.stateBytes, m.latency)
	registerBuildMetrics(reg)
	return m
}

// update refreshes the metrics derived from the engine's counters; it runs
// at each checkpoint, not per event.
func (m *metrics) update(e *engine.Engine, db *state.DB) {
	s := e.Stats()
	m.events.WithLabelValues("ok").Add(float64(s.Accepted - m.last.Accepted))
	m.events.WithLabelValues("late").Add(float64(s.Late - m.last.Late))
	m.events.WithLabelValues("invalid").Add(float64(s.Invalid - m.last.Invalid))
	m.events.WithLabelValues("unmatched").Add(float64(s.Unmatched - m.last.Unmatched))
	m.forgotten.Add(float64(s.SourcesForgotten - m.last.SourcesForgotten))
	for i, r := range m.cfg.Rules {
		prev := int64(0)
		if i < len(m.last.Decisions) {
			prev = m.last.Decisions[i]
		}
		m.decisions.WithLabelValues(r.Name, r.Action).Add(float64(s.Decisions[i] - prev))
	}
	m.last = s
	if wm := e.Watermark(); wm > watermark.Min && wm < watermark.Max {
		m.watermark.Set(float64(wm) / 1000)
	}
	// Sources past the label limit share "other": the skew furthest from
	// zero among them, and degraded while any of them is. A skew is
	// exported once judged: during a warm-up the estimate stands on a few
	// records (the late stragglers after a silence, say) and the gauge
	// keeps its last judged value.
	var otherSkew time.Duration
	otherDegraded, others, otherKnown := false, false, false
	for _, src := range e.Sources() {
		label := m.sources.value(src.Source)
		if label == otherLabel {
			if src.Known && (!otherKnown || src.Skew.Abs() > otherSkew.Abs()) {
				otherSkew, otherKnown = src.Skew, true
			}
			otherDegraded, others = otherDegraded || src.Degraded, true
			continue
		}
		if src.Known {
			m.skew.WithLabelValues(label).Set(src.Skew.Seconds())
		}
		m.degraded.WithLabelValues(label).Set(boolGauge(src.Degraded))
	}
	if others {
		if otherKnown {
			m.skew.WithLabelValues(otherLabel).Set(otherSkew.Seconds())
		}
		m.degraded.WithLabelValues(otherLabel).Set(boolGauge(otherDegraded))
	}
	m.stateBytes.Set(float64(db.DiskBytes()))
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// lags refreshes the per-partition watermark and consumer lags.
func (m *metrics) lags(e *engine.Engine, fetchers []*fetcher, now int64) {
	for _, f := range fetchers {
		label := strconv.Itoa(f.partition)
		if wm := e.PartitionWatermark(int32(f.partition)); wm > watermark.Min {
			m.wmLag.WithLabelValues(label).Set(float64(now-wm) / 1000)
		}
		m.consumerLag.WithLabelValues(label).Set(float64(f.lag.Load()))
	}
}

// heatmapMetrics exports fired heatmap windows (heatmapCollector) on
// their way to the sink.
type heatmapMetrics struct {
	*sink.Kafka
	m *metrics
}

func (h heatmapMetrics) Heatmap(w *windows.HeatmapWindow) {
	h.m.heatmaps.observe(w, h.m.heatmapKeys[w.HeatmapIndex].value(heatmapKeyLabel(w.Key)))
	h.Kafka.Heatmap(w)
}

// serve serves /metrics and /healthz, which reports health.
func (m *metrics) serve(addr string, health func() error) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/readyz", &m.ready)
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", healthz(health))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return srv, nil
}
