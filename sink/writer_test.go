package sink

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/kafkatest"
)

func newTestWriter(addr string) (*Writer, *Kafka) {
	out := NewKafka([]string{addr}, DefaultTopics)
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "latency"})
	return NewWriter(out, WriterOptions{Latency: latency, Log: slog.New(slog.DiscardHandler)}), out
}

// TestWriterRidesOutAnOutage: outputs made while no broker is
// reachable are written once it is, by retrying, and the writer reports no
// error.
func TestWriterRidesOutAnOutage(t *testing.T) {
	addr := kafkatest.FreeAddr(t)
	w, out := newTestWriter(addr)
	defer out.Close()
	defer w.Close()
	out.DLQ([]byte(`{"bad"`), "not JSON", &event.Provenance{Offset: 1})
	w.Start()
	// Longer than the writer's own attempts at a metadata request, which
	// fail at once while nothing listens.
	time.Sleep(time.Second)
	b, err := broker.Start(broker.Options{Addr: addr, Topics: map[string]int32{"dlq": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	out.DLQ([]byte(`{"worse"`), "not JSON", &event.Provenance{Offset: 2})
	if err := w.Drain(); err != nil {
		t.Fatal(err)
	}
	got := kafkatest.Values(kafkatest.ReadPartition(t, addr, "dlq", 0, time.Minute))
	if len(got) != 2 || !strings.Contains(got[0], `"offset":1`) || !strings.Contains(got[1], `"offset":2`) {
		t.Fatalf("dlq after the outage: %q", got)
	}
}

// TestWriterGivesUp: once told to stop retrying, a write that cannot
// reach a broker returns its error, so that a stop ends.
func TestWriterGivesUp(t *testing.T) {
	w, out := newTestWriter(kafkatest.FreeAddr(t))
	defer out.Close()
	defer w.Close()
	out.DLQ([]byte(`{"bad"`), "not JSON", &event.Provenance{Offset: 1})
	w.Start()
	time.AfterFunc(300*time.Millisecond, w.StopRetrying)
	err := w.Drain()
	if err == nil || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("drain without a broker: %v", err)
	}
}

// TestWriterLock: a writer given a Lock takes the sink's outputs only
// while it holds it, so that other goroutines may write to the sink
// meanwhile.
func TestWriterLock(t *testing.T) {
	out := NewKafka([]string{kafkatest.FreeAddr(t)}, DefaultTopics)
	defer out.Close()
	var mu sync.Mutex
	w := NewWriter(out, WriterOptions{Lock: &mu, Log: slog.New(slog.DiscardHandler)})
	defer w.Close()
	mu.Lock() // another goroutine writing to the sink
	out.DLQ([]byte(`{"bad"`), "not JSON", &event.Provenance{Offset: 1})
	started := make(chan struct{})
	go func() {
		w.Start()
		close(started)
	}()
	select {
	case <-started:
		t.Fatal("Start took the outputs while the lock was held")
	case <-time.After(50 * time.Millisecond):
	}
	mu.Unlock()
	<-started
	mu.Lock()
	pending := out.Pending()
	mu.Unlock()
	if pending != 0 {
		t.Fatalf("%d outputs pending after Start, want them taken", pending)
	}
}
