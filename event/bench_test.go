package event

import (
	"encoding/json"
	"testing"
)

// typicalRecord is the SPEC's example event with a capture timestamp and a
// user agent, about 250 bytes.
var typicalRecord = []byte(`{"id":"r-000001","ts":1732150000123,"ingest_ts":1732150000131,"source":"gw-3","user":"u42","device":"d9","api":"/pay","channel":"alipay","merchant":"m7","region":"cn-east","latency_ms":12.5,"status":200,"amount":99.0,"ua":"okhttp/4.12.0 (Android 14; Pixel 8)"}`)

// typicalFields is what a rules file like the SPEC's uses.
var typicalFields = []Field{
	{Name: "api"}, {Name: "user"}, {Name: "device"}, {Name: "channel"}, {Name: "merchant"},
	{Name: "amount", Use: UseNumber}, {Name: "latency_ms", Use: UseNumber},
}

func typicalDecoder(tb testing.TB) *Decoder {
	tb.Helper()
	s, err := NewSchema(typicalFields)
	if err != nil {
		tb.Fatal(err)
	}
	return NewDecoder(s)
}

func TestDecodeTypicalDoesNotAllocate(t *testing.T) {
	d := typicalDecoder(t)
	var ev Event
	if err := d.Decode(typicalRecord, &ev); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if err := d.Decode(typicalRecord, &ev); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Decode allocates %v times per typical event, want 0", allocs)
	}
}

func BenchmarkDecode(b *testing.B) {
	d := typicalDecoder(b)
	var ev Event
	b.ReportAllocs()
	b.SetBytes(int64(len(typicalRecord)))
	for b.Loop() {
		if err := d.Decode(typicalRecord, &ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodingJSON is the baseline: encoding/json into a struct of the
// fields Decode extracts.
func BenchmarkEncodingJSON(b *testing.B) {
	type event struct {
		ID        string   `json:"id"`
		TS        int64    `json:"ts"`
		IngestTS  *int64   `json:"ingest_ts"`
		Source    string   `json:"source"`
		API       *string  `json:"api"`
		User      *string  `json:"user"`
		Device    *string  `json:"device"`
		Channel   *string  `json:"channel"`
		Merchant  *string  `json:"merchant"`
		Amount    *float64 `json:"amount"`
		LatencyMS *float64 `json:"latency_ms"`
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(typicalRecord)))
	for b.Loop() {
		var ev event
		if err := json.Unmarshal(typicalRecord, &ev); err != nil {
			b.Fatal(err)
		}
	}
}
