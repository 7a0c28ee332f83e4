package observe

import (
	"fmt"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/internal/promtest"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows"
)

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

	hist, quantiles := promtest.HeatmapSeries(t, reg, "lat", "/pay,cn")
	if hist == nil {
		t.Fatal("no histogram for key /pay,cn")
	}
	promtest.CheckCumulative(t, hist)
	want := map[float64]uint64{0.01: 2, 0.02: 4, 0.05: 5}
	if got := promtest.BucketCounts(hist); fmt.Sprint(got) != fmt.Sprint(want) || hist.GetSampleCount() != 6 {
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
	m := NewMetrics(reg, before, 10)
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
	m.Reload(after, m.last, diff.KeptHeatmaps())
	for i := range after.Heatmaps {
		observe(after, i, 1)
	}
	for _, c := range []struct {
		name  string
		count uint64
	}{{"a", 1}, {"b", 3}, {"c", 1}, {"d", 1}} {
		hist, _ := promtest.HeatmapSeries(t, reg, c.name, "/pay")
		if hist == nil || hist.GetSampleCount() != c.count {
			t.Errorf("heatmap %s: %v, want %d values", c.name, hist, c.count)
		}
	}
}
