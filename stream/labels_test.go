package stream

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/segmentio/kafka-go"
)

// TestMetricLabelsBounded: 3,000 events from 30 sources, each with an api
// of its own (the heatmap's key), add at most the label limit of series
// per metric, plus "other", which still counts every event.
func TestMetricLabelsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	addr := testbroker.Start(t, 1)
	base := time.Now().Add(-time.Hour).UnixMilli()
	const n = 3000
	var msgs []kafka.Message
	for i := range n {
		ts := base + int64(i)
		// 100 records of each source over 3 s: enough to judge its skew.
		msgs = append(msgs, kafka.Message{
			Value: fmt.Appendf(nil, `{"id":"e%d","ts":%d,"source":"gw-%d","user":"u","api":"/api-%d","latency_ms":1}`, i, ts, i%30, i),
			Time:  time.UnixMilli(ts),
		})
	}
	// One more, a minute later, fires every window of the others.
	msgs = append(msgs, kafka.Message{Value: fmt.Appendf(nil, `{"id":"last","ts":%d,"source":"gw-0","user":"u","api":"/api-0","latency_ms":1}`, base+60_000),
		Time: time.UnixMilli(base + 60_000)})
	writeInput(t, addr, msgs...)
	const limit = 10
	reg := prometheus.NewRegistry()
	stop := startJob(t, RunOptions{Brokers: []string{addr}, Registry: reg, MetricLabelLimit: limit,
		CheckpointInterval: 50 * time.Millisecond})
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if metricSum(t, reg, "riskstream_request_latency_seconds") >= n {
			break
		}
	}
	stop()
	if got := metricSum(t, reg, "riskstream_events_total"); got != n+1 {
		t.Fatalf("%v events counted, want %d", got, n+1)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, mf := range mfs {
		series[mf.GetName()] = len(mf.GetMetric())
	}
	for name, max := range map[string]int{
		"riskstream_source_skew_seconds":            limit + 1,
		"riskstream_source_degraded":                limit + 1,
		"riskstream_request_latency_seconds":        limit + 1,
		"riskstream_heatmap_window_latency_seconds": (limit + 1) * 3, // p50, p95, p99
	} {
		if series[name] == 0 || series[name] > max {
			t.Errorf("%s has %d series, want 1 to %d", name, series[name], max)
		}
	}
	if got := metricSum(t, reg, "riskstream_request_latency_seconds"); got != n {
		t.Errorf("the heatmap histograms count %v events, want %d: \"other\" must count the rest", got, n)
	}
}

// metricOf is the value of the counter name whose one label is value.
func metricOf(t testing.TB, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// metricSum adds up every series of a counter or gauge, or the counts of a
// histogram's.
func metricSum(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}
