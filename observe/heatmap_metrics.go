package observe

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows"
)

// heatmapQuantiles are the quantiles of the last fired window that
// riskstream_heatmap_window_latency_seconds exports, with their label
// values.
var heatmapQuantiles = [...]struct {
	q     float64
	label string
}{{0.5, "0.5"}, {0.95, "0.95"}, {0.99, "0.99"}}

// heatmapCollector exports fired heatmap windows, per heatmap and key, as
//
//   - riskstream_request_latency_seconds, a histogram of the heatmap's
//     field over every fired window: cumulative buckets at the heatmap's
//     bounds (milliseconds in the rules file, seconds here) and +Inf, with
//     _count and _sum. Each window counts once, at its first firing
//     (revision 0): a later revision (events within allowed_lateness)
//     holds the values already counted and, without the previous
//     revision's counts to subtract, would count them twice, so the late
//     values are left out. A sliding heatmap's windows overlap, so each
//     value counts once per window it belongs to (size/slide times). _sum
//     is the sketch's estimate (heatmap.Acc.Sum), within its relative
//     accuracy: the accumulator keeps no exact sum.
//   - riskstream_heatmap_window_latency_seconds{quantile="0.5|0.95|0.99"},
//     gauges of the quantiles of the last window fired (the one ending
//     last; a later revision of it updates them), as in the heatmaps
//     topic.
//
// The field is taken to be milliseconds, as latency_ms is. It is a
// collector, not a HistogramVec, because the job never sees the values
// one by one, only each window's per-bucket counts. Keys past the label
// limit share the key "other": their histogram adds up all of them, their
// quantiles are those of the last window fired among them.
type heatmapCollector struct {
	hist, quantiles *prometheus.Desc
	cfg             *rules.Config
	mu              sync.Mutex
	// series holds, per heatmap (by index in the rules file), each key
	// label's state.
	series []map[string]*heatmapSeries
}

// heatmapSeries is the exported state of one heatmap and key label.
type heatmapSeries struct {
	// buckets counts the values of each bucket (not cumulative), +Inf
	// last, as heatmap.Acc does.
	buckets []uint64
	count   uint64
	sum     float64 // seconds
	// end is the end of the window the quantiles are from; quantiles
	// are in seconds.
	end       int64
	quantiles [len(heatmapQuantiles)]float64
	hasWindow bool
}

func newHeatmapCollector(cfg *rules.Config) *heatmapCollector {
	c := &heatmapCollector{
		cfg: cfg,
		hist: prometheus.NewDesc("riskstream_request_latency_seconds",
			"Values of each heatmap's field (latency_ms, in seconds) in its fired windows, per heatmap and key; "+
				"buckets at the heatmap's bounds. Each window counts at its first firing; a sliding heatmap counts "+
				"a value in each of its windows. _sum is estimated within 1%.",
			[]string{"heatmap", "key"}, nil),
		quantiles: prometheus.NewDesc("riskstream_heatmap_window_latency_seconds",
			"Quantile of each heatmap's field (latency_ms, in seconds) in its last fired window, per heatmap and key.",
			[]string{"heatmap", "key", "quantile"}, nil),
	}
	for range cfg.Heatmaps {
		c.series = append(c.series, map[string]*heatmapSeries{})
	}
	return c
}

// heatmapKeyLabel is the label value of a heatmap window's key: its
// attributes' values joined by commas, strings unquoted.
func heatmapKeyLabel(key string) string { return windows.KeyText(nil, key, ",") }

// observe takes one fired window, whose key has the label value key.
func (c *heatmapCollector) observe(w *windows.HeatmapWindow, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.series[w.HeatmapIndex][key]
	if s == nil {
		s = &heatmapSeries{buckets: make([]uint64, len(w.Acc.Buckets))}
		c.series[w.HeatmapIndex][key] = s
	}
	if w.Revision == 0 {
		for i, n := range w.Acc.Buckets {
			s.buckets[i] += uint64(n)
		}
		s.count += uint64(w.Acc.Count)
		s.sum += w.Acc.Sum() / 1000
	}
	if w.Acc.Count > 0 && (!s.hasWindow || w.End >= s.end) {
		s.hasWindow, s.end = true, w.End
		for i, q := range heatmapQuantiles {
			s.quantiles[i] = w.Acc.Quantile(q.q) / 1000
		}
	}
}

// Describe implements prometheus.Collector.
func (c *heatmapCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.hist
	ch <- c.quantiles
}

// Collect implements prometheus.Collector.
func (c *heatmapCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, series := range c.series {
		h := c.cfg.Heatmaps[i]
		for key, s := range series {
			cumulative := make(map[float64]uint64, len(h.Buckets))
			var n uint64
			for j, le := range h.Buckets {
				n += s.buckets[j]
				cumulative[le/1000] = n
			}
			// The +Inf bucket is count, which the registry adds.
			ch <- prometheus.MustNewConstHistogram(c.hist, s.count, s.sum, cumulative, h.Name, key)
			if !s.hasWindow {
				continue
			}
			for j, q := range heatmapQuantiles {
				ch <- prometheus.MustNewConstMetric(c.quantiles, prometheus.GaugeValue, s.quantiles[j], h.Name, key, q.label)
			}
		}
	}
}

// reload makes the collector follow a reload to cfg: the heatmaps named in
// kept keep their series, the others start theirs afresh (a heatmap whose
// key, filters, field, window or buckets changed restarts its state).
func (c *heatmapCollector) reload(cfg *rules.Config, kept map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := map[string]int{}
	for i, h := range c.cfg.Heatmaps {
		old[h.Name] = i
	}
	series := make([]map[string]*heatmapSeries, len(cfg.Heatmaps))
	for j, h := range cfg.Heatmaps {
		if i, ok := old[h.Name]; ok && kept[h.Name] {
			series[j] = c.series[i]
		} else {
			series[j] = map[string]*heatmapSeries{}
		}
	}
	c.cfg, c.series = cfg, series
}
