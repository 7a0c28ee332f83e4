package stream

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/sink"
)

func newTestOutputWriter(addr string) (*outputWriter, *sink.Kafka) {
	out := sink.NewKafka([]string{addr}, sink.DefaultTopics)
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "latency"})
	return newOutputWriter(out, latency, nil, slog.New(slog.DiscardHandler), nil), out
}

// TestOutputWriterRidesOutAnOutage: outputs made while no broker is
// reachable are written once it is, by retrying, and the writer reports no
// error.
func TestOutputWriterRidesOutAnOutage(t *testing.T) {
	addr := kafkatest.FreeAddr(t)
	w, out := newTestOutputWriter(addr)
	defer out.Close()
	defer w.close()
	out.DLQ([]byte(`{"bad"`), "not JSON", &event.Provenance{Offset: 1})
	w.start()
	// Longer than the writer's own attempts at a metadata request, which
	// fail at once while nothing listens.
	time.Sleep(time.Second)
	b, err := broker.Start(broker.Options{Addr: addr, Topics: map[string]int32{"dlq": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	out.DLQ([]byte(`{"worse"`), "not JSON", &event.Provenance{Offset: 2})
	if err := w.drain(); err != nil {
		t.Fatal(err)
	}
	got := readTopic(t, addr, "dlq")
	if len(got) != 2 || !strings.Contains(got[0], `"offset":1`) || !strings.Contains(got[1], `"offset":2`) {
		t.Fatalf("dlq after the outage: %q", got)
	}
}

// TestOutputWriterGivesUp: once told to stop retrying, a write that cannot
// reach a broker returns its error, so that a stop ends.
func TestOutputWriterGivesUp(t *testing.T) {
	w, out := newTestOutputWriter(kafkatest.FreeAddr(t))
	defer out.Close()
	defer w.close()
	out.DLQ([]byte(`{"bad"`), "not JSON", &event.Provenance{Offset: 1})
	w.start()
	time.AfterFunc(300*time.Millisecond, w.stopRetrying)
	err := w.drain()
	if err == nil || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("drain without a broker: %v", err)
	}
}
