package event

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
)

// typicalRecord is docs/events.md's example event with a capture timestamp and a
// user agent, about 250 bytes.
var typicalRecord = []byte(`{"id":"r-000001","ts":1732150000123,"ingest_ts":1732150000131,"source":"gw-3","user":"u42","device":"d9","api":"/pay","channel":"alipay","merchant":"m7","region":"cn-east","latency_ms":12.5,"status":200,"amount":99.0,"ua":"okhttp/4.12.0 (Android 14; Pixel 8)"}`)

// typicalFields is what a rules file like docs/rules.md's example uses.
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

// manyRecords returns n distinct records shaped like typicalRecord, as a
// producer would write them: ids, users, devices, amounts and latencies vary,
// and so do the lengths of their values. They are laid out one after another
// in one buffer, as lines of a file are.
func manyRecords(n int) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	apis := []string{"/pay", "/login", "/refund", "/balance", "/transfer/v2"}
	channels := []string{"alipay", "wechat", "card", "bank_transfer"}
	regions := []string{"cn-east", "cn-north", "cn-south", "ap-southeast-1"}
	uas := []string{"okhttp/4.12.0 (Android 14; Pixel 8)", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X)", "curl/8.5.0"}
	statuses := []int{200, 200, 200, 201, 404, 500}
	var buf []byte
	ends := make([]int, n)
	ts := int64(1732150000123)
	for i := range n {
		ts += rng.Int64N(50)
		buf = fmt.Appendf(buf, `{"id":"r-%06d","ts":%d,"ingest_ts":%d,"source":"gw-%d","user":"u%d","device":"d%d","api":%q,"channel":%q,"merchant":"m%d","region":%q,"latency_ms":%.1f,"status":%d,"amount":%.2f,"ua":%q}`,
			i, ts, ts+rng.Int64N(20), rng.IntN(16), rng.IntN(100000), rng.IntN(5000), apis[rng.IntN(len(apis))],
			channels[rng.IntN(len(channels))], rng.IntN(1000), regions[rng.IntN(len(regions))],
			rng.Float64()*500, statuses[rng.IntN(len(statuses))], rng.Float64()*10000, uas[rng.IntN(len(uas))])
		ends[i] = len(buf)
	}
	records := make([][]byte, n)
	start := 0
	for i, end := range ends {
		records[i] = buf[start:end:end]
		start = end
	}
	return records
}

// BenchmarkDecodeMany decodes 4096 distinct records in turn, about 1 MB, so
// that like in a replay each record is read from memory rather than from
// the L1 cache, and values differ from one record to the next.
func BenchmarkDecodeMany(b *testing.B) {
	records := manyRecords(4096)
	total := 0
	for _, r := range records {
		total += len(r)
	}
	d := typicalDecoder(b)
	var ev Event
	b.ReportAllocs()
	b.SetBytes(int64(total / len(records)))
	i := 0
	for b.Loop() {
		if err := d.Decode(records[i], &ev); err != nil {
			b.Fatal(err)
		}
		i = (i + 1) % len(records)
	}
}
