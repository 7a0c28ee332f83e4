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
	"github.com/riskstream/riskstream/internal/promtest"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/segmentio/kafka-go"
)

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
		if hist, quantiles = promtest.HeatmapSeries(t, reg, "api-latency", "/search"); hist != nil {
			break
		}
	}
	stop()
	if hist == nil {
		t.Fatal("the window never reached the metrics")
	}
	promtest.CheckCumulative(t, hist)
	// Bounds 1, 2, 5, 10, 20, 50, 100, ... ms: the values up to each.
	want := map[float64]uint64{.001: 1, .002: 2, .005: 5, .01: 10, .02: 20, .05: 50, .1: 100, .2: 100, .5: 100, 1: 100, 2: 100, 5: 100}
	if got := promtest.BucketCounts(hist); fmt.Sprint(got) != fmt.Sprint(want) || hist.GetSampleCount() != 100 {
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
