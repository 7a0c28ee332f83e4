package observe

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/state"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows"
)

// Metrics are the job's Prometheus metrics (docs/metrics.md), registered on
// an injected registry, never the global one.
type Metrics struct {
	reg       *prometheus.Registry
	Events    *prometheus.CounterVec
	decisions *prometheus.CounterVec
	// labelLimit bounds the label values of each label taken from the
	// input (RunOptions.MetricLabelLimit).
	labelLimit int
	// shadowDecisions counts the decisions of rules in mode shadow.
	shadowDecisions *prometheus.CounterVec
	// Reloads counts the rules file's reloads by result.
	Reloads     *prometheus.CounterVec
	Watermark   prometheus.Gauge
	skew        *prometheus.GaugeVec
	degraded    *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	forgotten   prometheus.Counter
	Checkpoint  prometheus.Histogram
	// LastCheckpoint is when the last checkpoint became durable, for its
	// age (time() - it).
	LastCheckpoint prometheus.Gauge
	stateBytes     prometheus.Gauge
	Latency        prometheus.Histogram
	// JobLatency is the job's own share of latency: from the fetch that
	// carried the event.
	JobLatency prometheus.Histogram
	// DecisionStages splits JobLatency by stage (merge, engine, queue,
	// write), and CheckpointPause is how long each checkpoint held the
	// loop: the parts a tail comes from.
	DecisionStages  *prometheus.HistogramVec
	CheckpointPause prometheus.Histogram
	heatmaps        *heatmapCollector
	wmLag           *prometheus.GaugeVec
	consumerLag     *prometheus.GaugeVec
	// WaitTimeouts counts merge waits for a partition that ran out.
	WaitTimeouts prometheus.Counter
	last         engine.Stats
	cfg          *rules.Config
	// sources and heatmapKeys (one per heatmap) bound the label values
	// taken from the input.
	sources     *boundedLabels
	heatmapKeys []*boundedLabels
	// Ready answers /readyz.
	Ready Readiness
	// URL is where serve serves, for the start's log ("" when it does
	// not).
	URL string
}

func NewMetrics(reg *prometheus.Registry, cfg *rules.Config, labelLimit int) *Metrics {
	m := &Metrics{
		reg: reg, cfg: cfg, sources: newBoundedLabels(labelLimit), labelLimit: labelLimit,
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "riskstream_events_total",
			Help: "Input records by result: ok, late, invalid, unmatched, duplicate."}, []string{"result"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "riskstream_decisions_total",
			Help: "Decisions by rule and action, of the rules that enforce (not in mode shadow)."}, []string{"rule", "action"}),
		shadowDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "riskstream_shadow_decisions_total",
			Help: "Decisions of the rules in mode shadow, by rule and action: what they would have done."}, []string{"rule", "action"}),
		Watermark: prometheus.NewGauge(prometheus.GaugeOpts{Name: "riskstream_watermark_seconds",
			Help: "The job's event-time watermark, Unix seconds."}),
		skew: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "riskstream_source_skew_seconds",
			Help: "Estimated clock skew (ts - reference) per source, as last judged: a source warming up (at start, after a silence) keeps its last judged estimate."}, []string{"source"}),
		degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "riskstream_source_degraded",
			Help: "1 while a source is windowed by reference time."}, []string{"source"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "riskstream_source_transitions_total",
			Help: "Degrade and recover transitions per source."}, []string{"source"}),
		forgotten: prometheus.NewCounter(prometheus.CounterOpts{Name: "riskstream_skew_sources_forgotten_total",
			Help: "Sources the skew tracker forgot, the least recently seen, to stay within skew.max_sources."}),
		LastCheckpoint: prometheus.NewGauge(prometheus.GaugeOpts{Name: "riskstream_last_checkpoint_timestamp_seconds",
			Help: "When the last checkpoint became durable (Unix seconds): time() minus it is the checkpoint's age, which grows while the job is stuck."}),
		Checkpoint: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "riskstream_checkpoint_duration_seconds",
			Help: "Time to flush outputs and write a checkpoint, until it is durable.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		stateBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "riskstream_state_bytes",
			Help: "Size of the state store on disk."}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "riskstream_event_decision_latency_seconds",
			Help:    "From an event's Kafka record timestamp to the acknowledgement of its decision; a record replayed with an old timestamp counts its age.",
			Buckets: latencyBuckets}),
		JobLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "riskstream_decision_job_latency_seconds",
			Help:    "From the arrival of the fetch that carried an event to the acknowledgement of its decision: the job's own share of riskstream_event_decision_latency_seconds.",
			Buckets: latencyBuckets}),
	}
	m.DecisionStages = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "riskstream_decision_stage_seconds",
		Help:    "riskstream_decision_job_latency_seconds by stage: merge (fetched to taken from the merge of the partitions), engine (to decided), queue (to written), write (to acknowledged).",
		Buckets: stageBuckets}, []string{"stage"})
	m.CheckpointPause = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "riskstream_checkpoint_pause_seconds",
		Help:    "How long each checkpoint held the job's loop: waiting for the outputs' acknowledgements and writing the state's last changes, not the commit to disk that follows.",
		Buckets: stageBuckets})
	m.heatmaps = newHeatmapCollector(cfg)
	m.wmLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "riskstream_watermark_lag_seconds",
		Help: "Wall clock minus the partition's watermark; it grows while the partition is silent."}, []string{"partition"})
	m.WaitTimeouts = prometheus.NewCounter(prometheus.CounterOpts{Name: "riskstream_partition_wait_timeouts_total",
		Help: "Times the job went on without an input partition that had nothing to read, after waiting for it: only then can the order of records across partitions depend on timing."})
	m.consumerLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "riskstream_consumer_lag",
		Help: "Records of the partition not yet consumed."}, []string{"partition"})
	m.Reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "riskstream_rules_reloads_total",
		Help: "Reloads of the rules file, by result: applied, or refused (a file with problems, or a change that needs a restart)."}, []string{"result"})
	for _, r := range []string{"applied", "refused"} {
		m.Reloads.WithLabelValues(r)
	}
	for range cfg.Heatmaps {
		m.heatmapKeys = append(m.heatmapKeys, newBoundedLabels(labelLimit))
	}
	reg.MustRegister(m.heatmaps, m.wmLag, m.consumerLag, m.WaitTimeouts, m.Reloads)
	reg.MustRegister(m.Events, m.decisions, m.shadowDecisions, m.Watermark, m.skew, m.degraded, m.transitions, m.forgotten, m.Checkpoint, m.LastCheckpoint, m.stateBytes, m.Latency, m.JobLatency, m.DecisionStages, m.CheckpointPause)
	registerBuildMetrics(reg)
	return m
}

// AddDecisions counts n more decisions of r: a shadow rule's apart, so
// that what is counted by action is what was enforced.
func (m *Metrics) AddDecisions(r *rules.Rule, n int64) {
	if r.Mode == rules.Shadow {
		m.shadowDecisions.WithLabelValues(r.Name, r.Action).Add(float64(n))
		return
	}
	m.decisions.WithLabelValues(r.Name, r.Action).Add(float64(n))
}

// Update refreshes the metrics derived from the engine's counters; it runs
// at each checkpoint, not per event.
func (m *Metrics) Update(e *engine.Sharded, db *state.DB) {
	s := e.Stats()
	m.Events.WithLabelValues("ok").Add(float64(s.Accepted - m.last.Accepted))
	m.Events.WithLabelValues("late").Add(float64(s.Late - m.last.Late))
	m.Events.WithLabelValues("invalid").Add(float64(s.Invalid - m.last.Invalid))
	m.Events.WithLabelValues("unmatched").Add(float64(s.Unmatched - m.last.Unmatched))
	m.Events.WithLabelValues("duplicate").Add(float64(s.Duplicates - m.last.Duplicates))
	m.forgotten.Add(float64(s.SourcesForgotten - m.last.SourcesForgotten))
	for i, r := range m.cfg.Rules {
		prev := int64(0)
		if i < len(m.last.Decisions) {
			prev = m.last.Decisions[i]
		}
		m.AddDecisions(&r, s.Decisions[i]-prev)
	}
	m.last = s
	if wm := e.Watermark(); wm > watermark.Min && wm < watermark.Max {
		m.Watermark.Set(float64(wm) / 1000)
	}
	m.Skews(e.Sources())
	m.SetStateBytes(db.DiskBytes())
}

// SetStateBytes sets the size of the job's state on disk: a distributed
// instance's is that of the stores of the partitions it holds.
func (m *Metrics) SetStateBytes(n uint64) { m.stateBytes.Set(float64(n)) }

// Skews sets the skew and degraded gauges of sources.
func (m *Metrics) Skews(sources []watermark.SourceSkew) {
	// Sources past the label limit share "other": the skew furthest from
	// zero among them, and degraded while any of them is. A skew is
	// exported once judged: during a warm-up the estimate stands on a few
	// records (the late stragglers after a silence, say) and the gauge
	// keeps its last judged value.
	var otherSkew time.Duration
	otherDegraded, others, otherKnown := false, false, false
	for _, src := range sources {
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
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Lags refreshes, at now (Unix ms), the watermark lag and the consumer
// lag of each input partition fetched (those of topic), its watermark
// given by watermarkOf.
func (m *Metrics) Lags(topic string, fetchers []*kafkaio.Fetcher, watermarkOf func(partition int32) int64, now int64) {
	for _, f := range fetchers {
		if f.Topic() != topic {
			continue
		}
		label := strconv.Itoa(f.Partition())
		if wm := watermarkOf(int32(f.Partition())); wm > watermark.Min {
			m.wmLag.WithLabelValues(label).Set(float64(now-wm) / 1000)
		}
		m.consumerLag.WithLabelValues(label).Set(float64(f.Lag()))
	}
}

// SourceTransition counts a skew transition of source (degraded or
// recovered).
func (m *Metrics) SourceTransition(source string) {
	m.transitions.WithLabelValues(m.sources.value(source)).Inc()
}

// ObserveHeatmap exports a fired heatmap window (heatmapCollector).
func (m *Metrics) ObserveHeatmap(w *windows.HeatmapWindow) {
	m.heatmaps.observe(w, m.heatmapKeys[w.HeatmapIndex].value(heatmapKeyLabel(w.Key)))
}

// Serve serves /metrics, /healthz, which reports health, /readyz and,
// when there is one, the console at / (docs/console.md), to clients on
// loopback only unless consolePublic: it shows keys, such as user ids.
func (m *Metrics) Serve(addr string, health func() error, console http.Handler, consolePublic bool) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/readyz", &m.Ready)
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", Healthz(health))
	if console != nil {
		if !consolePublic {
			console = loopbackOnly(console)
		}
		mux.Handle("/", console)
	}
	srv := &http.Server{Handler: readOnly(mux), ReadHeaderTimeout: 5 * time.Second}
	m.URL = baseURL(ln.Addr())
	go srv.Serve(ln)
	return srv, nil
}

// baseURL is the URL a browser on this machine reaches addr at: a
// listener on every interface as localhost.
func baseURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// readOnly answers 405 to requests other than GET and HEAD: nothing served
// changes the job.
func readOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, r.Method+" is not allowed: every endpoint is read-only", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// loopbackOnly answers 403 to clients not on loopback (a reverse proxy on
// the same machine is one, and may add authentication).
func loopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			http.Error(w, "the console answers clients on this machine only (run --console-public serves it to others)", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// latencyBuckets are the decision latencies' buckets: fine around the
// tens of milliseconds the job is meant for, so that a p99 read from them
// says whether it is under 20 ms.
// stageBuckets are those of a decision's stages and of the checkpoints'
// pauses: from 50 µs, finer than latencyBuckets where a millisecond tail
// is told apart.
var stageBuckets = []float64{.00005, .0001, .00025, .0005, .00075, .001, .0015, .002, .003, .004, .005, .0075, .01, .015, .02, .03, .05, .1, .25, .5, 1, 2.5}

var latencyBuckets = []float64{.001, .002, .003, .005, .0075, .01, .0125, .015, .0175, .02, .025, .03, .04, .05,
	.075, .1, .15, .2, .3, .5, .75, 1, 2, 5, 10, 30}

// Reload makes the metrics follow a reload to cfg, with
// everything before it counted (Update): the engine's stats after the
// reload, which carry each rule's decisions by name, are the counts the
// next update goes on from, and the heatmaps that keep their state (kept,
// rules.Diff.KeptHeatmaps) keep their label sets and series.
func (m *Metrics) Reload(cfg *rules.Config, stats engine.Stats, kept map[string]bool) {
	m.last = stats
	keys := map[string]*boundedLabels{}
	for i, h := range m.cfg.Heatmaps {
		if kept[h.Name] {
			keys[h.Name] = m.heatmapKeys[i]
		}
	}
	m.heatmapKeys = m.heatmapKeys[:0]
	for _, h := range cfg.Heatmaps {
		k := keys[h.Name]
		if k == nil {
			k = newBoundedLabels(m.labelLimit)
		}
		m.heatmapKeys = append(m.heatmapKeys, k)
	}
	m.cfg = cfg
	m.heatmaps.reload(cfg, kept)
}
