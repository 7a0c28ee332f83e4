package stream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/sink"
	"github.com/segmentio/kafka-go"
)

// sideRecord is a dlq or late record as read back from its topic.
type sideRecord struct {
	Reason       string          `json:"reason"`
	Topic        string          `json:"topic"`
	Event        json.RawMessage `json:"event"`
	Raw          *string         `json:"raw"`
	RawBase64    *string         `json:"raw_base64"`
	RawTruncated bool            `json:"raw_truncated"`
	RawBytes     int             `json:"raw_bytes"`
	RawSHA256    string          `json:"raw_sha256"`
	Partition    *int32          `json:"partition"`
	Offset       *int64          `json:"offset"`
	Watermark    int64           `json:"watermark"`
}

// rawPrefix returns the raw bytes a record kept, decoded from base64 if
// need be.
func (r *sideRecord) rawPrefix(t *testing.T) []byte {
	t.Helper()
	switch {
	case r.Raw != nil:
		return []byte(*r.Raw)
	case r.RawBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*r.RawBase64)
		if err != nil {
			t.Fatalf("raw_base64: %v", err)
		}
		return b
	}
	t.Fatalf("record without raw bytes: %+v", r)
	return nil
}

// checkTruncated checks that a record kept a prefix of raw, said how long
// raw was and hashed it, and stayed within limit yet close to it.
func checkTruncated(t *testing.T, what string, msg []byte, r *sideRecord, raw []byte, limit int) {
	t.Helper()
	sum := sha256.Sum256(raw)
	prefix := r.rawPrefix(t)
	switch {
	case !r.RawTruncated:
		t.Errorf("%s: not marked raw_truncated", what)
	case r.RawBytes != len(raw):
		t.Errorf("%s: raw_bytes %d, want %d", what, r.RawBytes, len(raw))
	case r.RawSHA256 != hex.EncodeToString(sum[:]):
		t.Errorf("%s: raw_sha256 %s, want %x", what, r.RawSHA256, sum)
	case !bytes.HasPrefix(raw, prefix) || len(prefix) == 0:
		t.Errorf("%s: kept %d bytes that are not a prefix of the raw record", what, len(prefix))
	case len(msg) > limit || len(msg) < limit-64:
		t.Errorf("%s: record of %d bytes, want at most %d and not much less", what, len(msg), limit)
	}
}

// TestLiveOversizedRecords: input records too large for their dlq or late
// record, or making a heatmap too large for Kafka, stop neither the job nor
// its restart. A 942 KB line of binary garbage fits the broker's limit, but
// in base64 its dlq record would not: the record is cut to
// --max-message-bytes (keeping a prefix, the length and a hash of the
// input), and so are a text record and a late event; the heatmap goes to
// the dlq in its place; later events still make decisions.
func TestLiveOversizedRecords(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	addr := testbroker.Start(t, 1)
	stateDir := t.TempDir()
	base := int64(1732150000000)
	send := func(values ...[]byte) {
		t.Helper()
		conn, err := kafka.DialLeader(context.Background(), "tcp", addr, "requests", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// One request each: together they are more than a request may hold.
		for _, v := range values {
			if _, err := conn.WriteMessages(kafka.Message{Value: v}); err != nil {
				t.Fatalf("writing a record of %d bytes: %v", len(v), err)
			}
		}
	}
	pay := func(id string, ts int64) []byte {
		return fmt.Appendf(nil, `{"id":%q,"ts":%d,"user":"u1","api":"/pay","latency_ms":3}`, id, ts)
	}

	// The job checkpoints once before the large records arrive, so that
	// the second start meets them after a restart.
	send(pay("a0", base-time.Hour.Milliseconds()))
	reg := prometheus.NewRegistry()
	stop := startJob(t, RunOptions{Brokers: []string{addr}, StateDir: stateDir, CheckpointInterval: 50 * time.Millisecond, Registry: reg})
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) &&
		metricValue(t, reg, `riskstream_events_total{result="ok"}`) < 1; time.Sleep(20 * time.Millisecond) {
	}
	stop()

	garbage := make([]byte, 942<<10)
	rand.NewChaCha8([32]byte{7}).Read(garbage)
	if utf8.Valid(garbage) {
		t.Fatal("the garbage is UTF-8")
	}
	// Text whose JSON escaping doubles it: the dlq record keeps it as text.
	quotes := bytes.Repeat([]byte(`"\`), 300_000)
	wide := fmt.Appendf(nil, `{"id":"wide","ts":%d,"api":%q,"latency_ms":3}`, base, strings.Repeat("k", 600_000))
	late := fmt.Appendf(nil, `{"id":"late","ts":%d,"api":"/x","latency_ms":3,"pad":%q}`,
		base-2*time.Hour.Milliseconds(), strings.Repeat("p", 1_010_000))
	send(pay("b0", base), garbage, quotes, wide, late)
	var after [][]byte
	for i := 1; i <= 6; i++ {
		after = append(after, pay(fmt.Sprintf("b%d", i), base+20_000+int64(i)*1000))
	}
	send(after...)
	offsets := map[string]int64{"garbage": 2, "quotes": 3, "late": 5}

	reg = prometheus.NewRegistry()
	stop = startJob(t, RunOptions{Brokers: []string{addr}, StateDir: stateDir, CheckpointInterval: 50 * time.Millisecond, Registry: reg})
	var decisions []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && len(decisions) < 2; time.Sleep(50 * time.Millisecond) {
		decisions = liveDecisions(t, addr)
	}
	stop()
	if len(decisions) != 2 || !strings.Contains(decisions[0], `"id":"b5/pay-burst"`) {
		t.Fatalf("decisions after the large records: %q", decisions)
	}

	limit := sink.DefaultMaxMessageBytes
	dlq := readPartition(t, addr, "dlq", 0)
	records := map[string]sideRecord{}
	for _, m := range dlq {
		var r sideRecord
		if err := json.Unmarshal(m.Value, &r); err != nil {
			t.Fatalf("dlq record of %d bytes is not JSON: %v", len(m.Value), err)
		}
		switch {
		case r.Topic == "heatmaps":
			records["heatmap"] = r
			if len(m.Value) > limit || !strings.HasPrefix(string(r.rawPrefix(t)), `{"heatmap":"api-latency","key":{"api":"kkkk`) ||
				r.RawBytes < 600_000 || len(r.RawSHA256) != 64 || !strings.Contains(r.Reason, "larger than") {
				t.Errorf("dlq record for the heatmap: %.300s", m.Value)
			}
		case r.Offset != nil && *r.Offset == offsets["garbage"]:
			records["garbage"] = r
			checkTruncated(t, "garbage", m.Value, &r, garbage, limit)
			if r.RawBase64 == nil {
				t.Error("binary garbage kept as text")
			}
		case r.Offset != nil && *r.Offset == offsets["quotes"]:
			records["quotes"] = r
			checkTruncated(t, "quotes", m.Value, &r, quotes, limit)
			if r.Raw == nil {
				t.Error("UTF-8 text kept as base64")
			}
		}
	}
	if len(records) != 3 {
		t.Fatalf("dlq holds %d records, of which %v, want the garbage, the quotes and the heatmap", len(dlq), records)
	}

	lates := readPartition(t, addr, "late", 0)
	if len(lates) != 1 {
		t.Fatalf("late holds %d records, want the large one", len(lates))
	}
	var r sideRecord
	if err := json.Unmarshal(lates[0].Value, &r); err != nil {
		t.Fatal(err)
	}
	checkTruncated(t, "late", lates[0].Value, &r, late, limit)
	if r.Reason != "late" || r.Watermark == 0 || r.Event != nil || r.Offset == nil || *r.Offset != offsets["late"] {
		t.Errorf("late record of the large event: %.200s...", lates[0].Value)
	}

	for name, want := range map[string]float64{
		`riskstream_output_truncated_total{topic="dlq"}`:    2,
		`riskstream_output_truncated_total{topic="late"}`:   1,
		`riskstream_output_refused_total{topic="heatmaps"}`: 1,
		`riskstream_output_dropped_total{topic="dlq"}`:      0,
	} {
		if got := metricValue(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}

	// A later start resumes past them.
	startJob(t, RunOptions{Brokers: []string{addr}, StateDir: stateDir})()
	if n := len(readPartition(t, addr, "dlq", 0)); n != len(dlq) {
		t.Errorf("the dlq grew from %d to %d records on a restart", len(dlq), n)
	}
}

// metricValue returns the value of a counter or gauge written as
// name{label="value",...}, or -1 when the registry has none.
func metricValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			full := mf.GetName()
			if len(labels) > 0 {
				full += "{" + strings.Join(labels, ",") + "}"
			}
			if full == name {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return -1
}
