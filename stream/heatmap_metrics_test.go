package stream

import (
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows"
	"github.com/segmentio/kafka-go"
)

// heatmapSeriesOf gathers reg and returns, for the heatmap and key, the
// histogram riskstream_request_latency_seconds and the quantile gauges of
// riskstream_heatmap_window_latency_seconds by quantile label.
func heatmapSeriesOf(t *testing.T, reg *prometheus.Registry, name, key string) (*dto.Histogram, map[string]float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var hist *dto.Histogram
	quantiles := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["heatmap"] != name || labels["key"] != key {
				continue
			}
			switch mf.GetName() {
			case "riskstream_request_latency_seconds":
				if mf.GetType() != dto.MetricType_HISTOGRAM {
					t.Fatalf("%s is a %v, want a histogram", mf.GetName(), mf.GetType())
				}
				hist = m.GetHistogram()
			case "riskstream_heatmap_window_latency_seconds":
				if mf.GetType() != dto.MetricType_GAUGE {
					t.Fatalf("%s is a %v, want a gauge", mf.GetName(), mf.GetType())
				}
				quantiles[labels["quantile"]] = m.GetGauge().GetValue()
			}
		}
	}
	return hist, quantiles
}

// checkCumulative fails unless hist's buckets are cumulative: upper bounds
// and counts increasing, none above the count (the +Inf bucket).
func checkCumulative(t *testing.T, hist *dto.Histogram) {
	t.Helper()
	prevLE, prevN := math.Inf(-1), uint64(0)
	for _, b := range hist.GetBucket() {
		if b.GetUpperBound() <= prevLE || b.GetCumulativeCount() < prevN || b.GetCumulativeCount() > hist.GetSampleCount() {
			t.Fatalf("buckets are not cumulative: %v, count %d", hist.GetBucket(), hist.GetSampleCount())
		}
		prevLE, prevN = b.GetUpperBound(), b.GetCumulativeCount()
	}
}

// bucketCounts maps each finite upper bound to its cumulative count.
func bucketCounts(hist *dto.Histogram) map[float64]uint64 {
	out := map[float64]uint64{}
	for _, b := range hist.GetBucket() {
		out[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	return out
}

// TestHeatmapCollector: fired windows add up as a Prometheus histogram in
// seconds, with cumulative buckets, each window at its first revision
// only; the quantile gauges follow the window that ends last, later
// revisions of it included.
func TestHeatmapCollector(t *testing.T) {
	cfg := &rules.Config{Heatmaps: []rules.Heatmap{{Name: "lat", Key: []string{"api", "region"}, Buckets: []float64{10, 20, 50}}}}
	c := newHeatmapCollector(cfg)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	fire := func(start, end int64, revision int32, values ...float64) *heatmap.Acc {
		acc := heatmap.New(3)
		for _, v := range values {
			acc.Add(v, false, cfg.Heatmaps[0].Buckets, nil)
		}
		key := `"/pay"` + "\x00" + `"cn"` + "\x00"
		c.observe(&windows.HeatmapWindow{Heatmap: &cfg.Heatmaps[0], Key: key, Start: start, End: end, Revision: revision, Acc: acc},
			heatmapKeyLabel(key))
		return acc
	}
	fire(10_000, 20_000, 0, 5, 15, 15, 30, 100)
	late := fire(10_000, 20_000, 1, 5, 15, 15, 30, 100, 40) // the same window with a late value
	fire(0, 10_000, 0, 1)                                   // an older window, fired after

	hist, quantiles := heatmapSeriesOf(t, reg, "lat", "/pay,cn")
	if hist == nil {
		t.Fatal("no histogram for key /pay,cn")
	}
	checkCumulative(t, hist)
	want := map[float64]uint64{0.01: 2, 0.02: 4, 0.05: 5}
	if got := bucketCounts(hist); fmt.Sprint(got) != fmt.Sprint(want) || hist.GetSampleCount() != 6 {
		t.Errorf("buckets %v, count %d; want %v, count 6 (revision 1 not counted again)", got, hist.GetSampleCount(), want)
	}
	if sum, exact := hist.GetSampleSum(), (5+15+15+30+100+1)/1000.0; math.Abs(sum-exact) > heatmap.RelativeAccuracy*exact {
		t.Errorf("sum %v s, want %v s within 1%%", sum, exact)
	}
	for _, q := range heatmapQuantiles {
		if got, want := quantiles[q.label], late.Quantile(q.q)/1000; got != want {
			t.Errorf("quantile %s = %v, want %v: the latest revision of the window that ends last", q.label, got, want)
		}
	}
	if len(quantiles) != len(heatmapQuantiles) {
		t.Errorf("quantile gauges %v", quantiles)
	}
}

// TestLiveHeatmapMetrics: once a window fires live, /metrics has its
// values as a histogram with cumulative buckets in seconds, and the
// window's quantiles as gauges.
func TestLiveHeatmapMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	addr := testbroker.Start(t, 1)
	conn, err := kafka.DialLeader(context.Background(), "tcp", addr, "requests", 0)
	if err != nil {
		t.Fatal(err)
	}
	base := int64(1732150000000) // a window start of the 10 s heatmap
	var msgs []kafka.Message
	// Latencies 1 to 100 ms in one window of /search; a record a minute
	// later fires it.
	for i := 1; i <= 100; i++ {
		msgs = append(msgs, kafka.Message{Value: fmt.Appendf(nil, `{"id":"h%d","ts":%d,"user":"u%d","api":"/search","latency_ms":%d}`, i, base+int64(i), i, i)})
	}
	msgs = append(msgs, kafka.Message{Value: fmt.Appendf(nil, `{"id":"last","ts":%d,"user":"u","api":"/other","latency_ms":1}`, base+60_000)})
	if _, err := conn.WriteMessages(msgs...); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	reg := prometheus.NewRegistry()
	stop := startJob(t, RunOptions{Brokers: []string{addr}, Registry: reg, CheckpointInterval: 50 * time.Millisecond})
	var hist *dto.Histogram
	var quantiles map[string]float64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if hist, quantiles = heatmapSeriesOf(t, reg, "api-latency", "/search"); hist != nil {
			break
		}
	}
	stop()
	if hist == nil {
		t.Fatal("the window never reached the metrics")
	}
	checkCumulative(t, hist)
	// Bounds 1, 2, 5, 10, 20, 50, 100, ... ms: the values up to each.
	want := map[float64]uint64{.001: 1, .002: 2, .005: 5, .01: 10, .02: 20, .05: 50, .1: 100, .2: 100, .5: 100, 1: 100, 2: 100, 5: 100}
	if got := bucketCounts(hist); fmt.Sprint(got) != fmt.Sprint(want) || hist.GetSampleCount() != 100 {
		t.Errorf("buckets %v, count %d; want %v, count 100", got, hist.GetSampleCount(), want)
	}
	if sum := hist.GetSampleSum(); math.Abs(sum-5.050) > heatmap.RelativeAccuracy*5.050 {
		t.Errorf("sum %v s, want 5.05 s within 1%%", sum)
	}
	// Ranks floor(q·99) of 1..100 ms: 50, 95 and 99 ms.
	for label, exact := range map[string]float64{"0.5": .050, "0.95": .095, "0.99": .099} {
		if got := quantiles[label]; math.Abs(got-exact) > heatmap.RelativeAccuracy*exact {
			t.Errorf("quantile %s = %v s, want %v s within 1%%", label, got, exact)
		}
	}
	if text := exposition(t, reg); !strings.Contains(text, `riskstream_request_latency_seconds_bucket{heatmap="api-latency",key="/search",le="+Inf"} 100`) ||
		!strings.Contains(text, "# TYPE riskstream_request_latency_seconds histogram") {
		t.Errorf("/metrics lacks the +Inf bucket or the histogram type:\n%s", text)
	}
}

// exposition is what /metrics serves from reg, in the text format.
func exposition(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// TestMetricsReloadHeatmaps: across a reload that reorders, keeps, changes
// and adds heatmaps, each heatmap's series and key labels follow its name,
// a heatmap whose buckets or key changed starts its series afresh, as its
// state does, and windows of every heatmap of the new rules are observed
// where they belong.
func TestMetricsReloadHeatmaps(t *testing.T) {
	hm := func(name string, buckets ...float64) rules.Heatmap {
		return rules.Heatmap{Name: name, Key: []string{"api"}, Buckets: buckets}
	}
	rekeyed := hm("d", 10)
	rekeyed.Key = []string{"api", "user"}
	before := &rules.Config{Heatmaps: []rules.Heatmap{hm("a", 10), hm("b", 10, 20), hm("d", 10)}}
	after := &rules.Config{Heatmaps: []rules.Heatmap{hm("c", 5), hm("b", 10, 20), hm("a", 10, 50), rekeyed}}
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, before, 10)
	key := `"/pay"` + "\x00"
	observe := func(cfg *rules.Config, i int, values ...float64) {
		acc := heatmap.New(len(cfg.Heatmaps[i].Buckets))
		for _, v := range values {
			acc.Add(v, false, cfg.Heatmaps[i].Buckets, nil)
		}
		w := &windows.HeatmapWindow{Heatmap: &cfg.Heatmaps[i], HeatmapIndex: i, Key: key, Start: 0, End: 10_000, Acc: acc}
		m.heatmaps.observe(w, m.heatmapKeys[w.HeatmapIndex].value(heatmapKeyLabel(w.Key)))
	}
	observe(before, 0, 1)
	observe(before, 1, 1, 15)
	observe(before, 2, 1, 2)
	diff := rules.DiffIdentities(before.Identities(), after.Identities())
	m.reload(after, m.last, diff.KeptHeatmaps())
	for i := range after.Heatmaps {
		observe(after, i, 1)
	}
	for _, c := range []struct {
		name  string
		count uint64
	}{{"a", 1}, {"b", 3}, {"c", 1}, {"d", 1}} {
		hist, _ := heatmapSeriesOf(t, reg, c.name, "/pay")
		if hist == nil || hist.GetSampleCount() != c.count {
			t.Errorf("heatmap %s: %v, want %d values", c.name, hist, c.count)
		}
	}
}
