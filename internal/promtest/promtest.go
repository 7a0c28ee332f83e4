// Package promtest reads the job's Prometheus metrics back for tests.
package promtest

import (
	"math"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/prometheus/client_golang/prometheus"
)

// HeatmapSeries gathers reg and returns, for the heatmap and key, the
// histogram riskstream_request_latency_seconds and the quantile gauges of
// riskstream_heatmap_window_latency_seconds by quantile label.
func HeatmapSeries(t testing.TB, reg *prometheus.Registry, name, key string) (*dto.Histogram, map[string]float64) {
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

// CheckCumulative fails unless hist's buckets are cumulative: upper bounds
// and counts increasing, none above the count (the +Inf bucket).
func CheckCumulative(t testing.TB, hist *dto.Histogram) {
	t.Helper()
	prevLE, prevN := math.Inf(-1), uint64(0)
	for _, b := range hist.GetBucket() {
		if b.GetUpperBound() <= prevLE || b.GetCumulativeCount() < prevN || b.GetCumulativeCount() > hist.GetSampleCount() {
			t.Fatalf("buckets are not cumulative: %v, count %d", hist.GetBucket(), hist.GetSampleCount())
		}
		prevLE, prevN = b.GetUpperBound(), b.GetCumulativeCount()
	}
}

// BucketCounts maps each finite upper bound to its cumulative count.
func BucketCounts(hist *dto.Histogram) map[float64]uint64 {
	out := map[float64]uint64{}
	for _, b := range hist.GetBucket() {
		out[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	return out
}
