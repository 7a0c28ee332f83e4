package stream

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testbroker"
)

// TestLiveReadyz: a running job's /readyz turns 200 once it consumes and
// never goes back while it runs; /metrics has the build and the Go
// runtime's and the process's metrics besides the job's.
func TestLiveReadyz(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	addr := testbroker.Start(t, 2)
	metricsAddr := kafkatest.FreeAddr(t)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + metricsAddr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Polled from before the job starts: refused, then 503, then 200.
	codes := make(chan []int, 1)
	stopPolling := make(chan struct{})
	go func() {
		var seen []int
		for {
			select {
			case <-stopPolling:
				codes <- seen
				return
			default:
			}
			if code, _ := get("/readyz"); code != 0 && (len(seen) == 0 || seen[len(seen)-1] != code) {
				seen = append(seen, code)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	reg := prometheus.NewRegistry()
	stop := startJob(t, RunOptions{Brokers: []string{addr}, MetricsAddr: metricsAddr, Registry: reg})
	ready := false
	for deadline := time.Now().Add(10 * time.Second); !ready && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		code, _ := get("/readyz")
		ready = code == 200
	}
	if !ready {
		code, body := get("/readyz")
		t.Fatalf("/readyz never turned 200: %d %s", code, body)
	}
	time.Sleep(100 * time.Millisecond)
	close(stopPolling)
	seen := <-codes
	t.Logf("/readyz answered %v", seen)
	if seen[len(seen)-1] != 200 || len(seen) > 2 || len(seen) == 2 && seen[0] != 503 {
		t.Errorf("/readyz answered %v, want 503 then 200", seen)
	}
	if code, body := get("/healthz"); code != 200 {
		t.Errorf("/healthz: %d %s", code, body)
	}
	_, text := get("/metrics")
	stop()
	for _, want := range []string{"riskstream_build_info{goversion=\"go", "go_goroutines ", "go_gc_duration_seconds", "process_cpu_seconds_total ",
		"process_resident_memory_bytes ", "riskstream_event_decision_latency_seconds_count ", "riskstream_state_verified 1"} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, _ := get("/readyz"); code == 200 {
		t.Error("/readyz is 200 after the job stopped")
	}
}
