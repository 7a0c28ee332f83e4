package sink

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/race"
)

// cutRecord is a dlq, late or refused-output record as JSON.
type cutRecord struct {
	Reason       string          `json:"reason"`
	Topic        string          `json:"topic"`
	Event        json.RawMessage `json:"event"`
	Raw          *string         `json:"raw"`
	RawBase64    *string         `json:"raw_base64"`
	RawTruncated bool            `json:"raw_truncated"`
	RawBytes     *int            `json:"raw_bytes"`
	RawSHA256    string          `json:"raw_sha256"`
	Watermark    int64           `json:"watermark"`
	Partition    int32           `json:"partition"`
	Offset       int64           `json:"offset"`
}

// checkCut checks a record made with a size limit against the record made
// without one: a record that fits is the same; one that does not keeps the
// longest prefix of raw that fits, as text when raw is UTF-8 and as base64
// otherwise, with raw's length and hash, and fits.
func checkCut(t *testing.T, got, whole, raw []byte, limit int) cutRecord {
	t.Helper()
	if got[len(got)-1] != '\n' {
		t.Fatalf("record without its newline: %q", got)
	}
	got = got[:len(got)-1]
	var r cutRecord
	if err := json.Unmarshal(got, &r); err != nil {
		t.Fatalf("not JSON (%v): %q", err, got)
	}
	if len(whole)-1 <= limit {
		if !bytes.Equal(got, whole[:len(whole)-1]) {
			t.Fatalf("a record within the limit changed:\n got %q\nwant %q", got, whole)
		}
		return r
	}
	if len(got) > limit {
		t.Fatalf("record of %d bytes, over the limit of %d", len(got), limit)
	}
	var kept []byte
	text := utf8.Valid(raw)
	switch {
	case text && r.Raw != nil:
		kept = []byte(*r.Raw)
		if !utf8.Valid(kept) {
			t.Fatal("kept text is not UTF-8: a rune was cut")
		}
	case !text && r.RawBase64 != nil:
		var err error
		if kept, err = base64.StdEncoding.DecodeString(*r.RawBase64); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("raw (UTF-8 %v) kept as the wrong member: %q", text, got)
	}
	sum := sha256.Sum256(raw)
	if !r.RawTruncated || r.RawBytes == nil || *r.RawBytes != len(raw) || r.RawSHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("cut record does not say so: truncated %v, bytes %v, sha %q", r.RawTruncated, r.RawBytes, r.RawSHA256)
	}
	if !bytes.HasPrefix(raw, kept) || len(kept) == len(raw) {
		t.Fatalf("kept %d bytes that are not a proper prefix of raw", len(kept))
	}
	// The longest prefix: one more rune (at most 6 bytes escaped) or
	// base64 group (4 bytes) would not have fit.
	if len(got) < limit-6 {
		t.Fatalf("record of %d bytes kept less than fits in %d", len(got), limit)
	}
	return r
}

var cutRaws = map[string][]byte{
	"ascii":    []byte(strings.Repeat(`{"id":"x","pad":"abcdefghij"}`, 300)),
	"escapes":  []byte(strings.Repeat("a\"\\\n\x01\x1f", 1000)),
	"runes":    []byte(strings.Repeat("é漢🙂a", 600)),
	"binary":   bytes.Repeat([]byte{0xff, 0x00, 'x', 0xfe, 0x80}, 1500),
	"late-bad": append([]byte(strings.Repeat("ok ", 1500)), 0xc3), // text but for its last byte
}

// TestAppendDLQLimit: at every limit around a record's size, from one that
// fits exactly to some bytes less, the record is whole or cut as it should.
func TestAppendDLQLimit(t *testing.T) {
	p := &event.Provenance{Partition: 3, Offset: 123456}
	for name, raw := range cutRaws {
		t.Run(name, func(t *testing.T) {
			whole := AppendDLQ(nil, raw, "invalid JSON: unexpected 'x' at byte 0", p)
			exact := len(whole) - 1
			for limit := exact + 1; limit > exact-300; limit-- {
				got, cut := appendDLQ(nil, raw, "invalid JSON: unexpected 'x' at byte 0", p, limit)
				if cut != (limit < exact) {
					t.Fatalf("limit %d, record of %d: cut %v", limit, exact, cut)
				}
				r := checkCut(t, got, whole, raw, limit)
				if r.Reason != "invalid JSON: unexpected 'x' at byte 0" || r.Partition != 3 || r.Offset != 123456 {
					t.Fatalf("limit %d: reason or provenance lost: %q", limit, got)
				}
			}
			// A limit far below the record.
			got, _ := appendDLQ(nil, raw, "bad", p, MinMaxMessageBytes)
			checkCut(t, got, whole, raw, MinMaxMessageBytes)
		})
	}
}

// TestAppendDLQLimitBoundary: the record exactly at the limit is whole and
// the same as without a limit; one byte over, it is cut to fit.
func TestAppendDLQLimitBoundary(t *testing.T) {
	p := &event.Provenance{Partition: 0, Offset: 9}
	for name, raw := range map[string][]byte{"utf8": []byte(strings.Repeat("x", 5000)), "binary": bytes.Repeat([]byte{0xff}, 5000)} {
		whole := AppendDLQ(nil, raw, "bad", p)
		at, cut := appendDLQ(nil, raw, "bad", p, len(whole)-1)
		if cut || !bytes.Equal(at, whole) {
			t.Errorf("%s: the record exactly at the limit was changed (cut %v)", name, cut)
		}
		over, cut := appendDLQ(nil, raw, "bad", p, len(whole)-2)
		if !cut || len(over)-1 > len(whole)-2 {
			t.Errorf("%s: one byte over the limit: cut %v, %d bytes", name, cut, len(over)-1)
		}
		checkCut(t, over, whole, raw, len(whole)-2)
	}
}

// TestAppendLateLimit: a late record keeps its event while it fits; an
// event that does not is kept as cut raw bytes, with the same watermark,
// reason and provenance.
func TestAppendLateLimit(t *testing.T) {
	p := &event.Provenance{Partition: 1, Offset: 77}
	raw := []byte(` {"id":"a","ts":1,"pad":"` + strings.Repeat("é", 3000) + `"}` + "\n")
	whole := AppendLate(nil, raw, 1732150000000, p)
	exact := len(whole) - 1
	for _, limit := range []int{exact + 1, exact, exact - 1, exact - 100, MinMaxMessageBytes} {
		got, cut := appendLate(nil, raw, 1732150000000, p, limit)
		if cut != (limit < exact) {
			t.Fatalf("limit %d, record of %d: cut %v", limit, exact, cut)
		}
		r := checkCut(t, got, whole, raw, limit)
		if r.Watermark != 1732150000000 || r.Partition != 1 || r.Offset != 77 {
			t.Fatalf("limit %d: watermark, reason or provenance lost: %.100q", limit, got)
		}
		if (r.Event != nil) == cut || (r.Raw != nil) != cut || !strings.Contains(string(got), `"reason":"late"`) {
			t.Fatalf("limit %d: event %v, raw %v", limit, r.Event != nil, r.Raw != nil)
		}
	}
}

// TestAppendRefused: the record replacing a refused output message names
// the topic and why, and keeps the message as raw bytes, cut to the limit.
func TestAppendRefused(t *testing.T) {
	value := []byte(`{"heatmap":"h","key":{"api":"` + strings.Repeat("k", 10000) + `"}}`)
	got := appendRefused(nil, "heatmaps", value, "refused by the broker: [10] Message Size Too Large", MinMaxMessageBytes)
	var r cutRecord
	if err := json.Unmarshal(got, &r); err != nil {
		t.Fatal(err)
	}
	if len(got)-1 > MinMaxMessageBytes || r.Topic != "heatmaps" || !strings.Contains(r.Reason, "Message Size Too Large") ||
		r.Raw == nil || !strings.HasPrefix(string(value), *r.Raw) || *r.RawBytes != len(value) {
		t.Fatalf("refused record: %s", got)
	}
	small := appendRefused(nil, "decisions", []byte(`{"id":"e/r"}`), "why", MinMaxMessageBytes)
	if string(small) != `{"reason":"why","topic":"decisions","raw":"{\"id\":\"e/r\"}","raw_bytes":12,`+
		`"raw_sha256":"`+fmt.Sprintf("%x", sha256.Sum256([]byte(`{"id":"e/r"}`)))+`"}`+"\n" {
		t.Fatalf("a small refused message: %s", small)
	}
}

// TestReasonCut: with a limit, a long reason is cut at a rune and says so,
// so that the limit holds whatever the reason.
func TestReasonCut(t *testing.T) {
	reason := strings.Repeat("\x01é", 1000)
	raw := []byte("x")
	got, _ := appendDLQ(nil, raw, reason, &event.Provenance{}, MinMaxMessageBytes)
	var r cutRecord
	if err := json.Unmarshal(got, &r); err != nil {
		t.Fatal(err)
	}
	if len(got)-1 > MinMaxMessageBytes || !strings.HasSuffix(r.Reason, "...") || !utf8.ValidString(r.Reason) ||
		!strings.HasPrefix(reason, strings.TrimSuffix(r.Reason, "...")) || *r.Raw != "x" {
		t.Fatalf("long reason: %d bytes: %.200q", len(got), got)
	}
	if whole := AppendDLQ(nil, raw, reason, &event.Provenance{}); !bytes.Contains(whole, []byte(event.AppendString(nil, []byte(reason)))) {
		t.Fatal("without a limit the reason was cut")
	}
}

// FuzzAppendDLQLimit: whatever the raw bytes and the limit, a dlq record is
// JSON, the same as without a limit when it fits, else cut to fit.
func FuzzAppendDLQLimit(f *testing.F) {
	for _, raw := range cutRaws {
		f.Add(raw[:400], uint16(300))
	}
	f.Add([]byte("\xff\xfe"), uint16(100))
	f.Fuzz(func(t *testing.T, raw []byte, limit uint16) {
		// Below the room the other members take, no limit can hold.
		l := 250 + int(limit)
		p := &event.Provenance{Partition: 1, Offset: 2}
		got, _ := appendDLQ(nil, raw, "reason", p, l)
		checkCut(t, got, AppendDLQ(nil, raw, "reason", p), raw, l)
	})
}

// TestCutRecordsDoNotAllocate: dlq and late records, whole or cut, are
// appended without allocating (the live job appends them to shared
// chunks).
func TestCutRecordsDoNotAllocate(t *testing.T) {
	if race.Enabled {
		t.Skip("the race detector allocates")
	}
	p := &event.Provenance{Partition: 1, Offset: 2}
	buf := make([]byte, 0, 64<<10)
	for name, raw := range cutRaws {
		for _, limit := range []int{0, len(raw) * 8, MinMaxMessageBytes} {
			if n := testing.AllocsPerRun(100, func() {
				buf, _ = appendDLQ(buf[:0], raw, "invalid JSON", p, limit)
				buf, _ = appendLate(buf[:0], raw, 7, p, limit)
			}); n != 0 {
				t.Errorf("%s, limit %d: %v allocations", name, limit, n)
			}
		}
	}
}
