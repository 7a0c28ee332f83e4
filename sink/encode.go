// Package sink writes the job's four outputs (decisions, heatmaps, late,
// dlq) as one JSON object per record, to files in replay and to Kafka topics
// live. Encoding is hand-written with strconv.Append* into reused buffers:
// an output record costs no allocation.
package sink

import (
	"math"
	"strconv"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows"
)

// appendProvenance appends where the record came from: file and line, or
// partition and offset.
func appendProvenance(dst []byte, p *event.Provenance) []byte {
	if p.File != "" {
		dst = append(dst, `,"file":`...)
		dst = event.AppendString(dst, []byte(p.File))
		dst = append(dst, `,"line":`...)
		return strconv.AppendInt(dst, p.Line, 10)
	}
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(p.Partition), 10)
	dst = append(dst, `,"offset":`...)
	return strconv.AppendInt(dst, p.Offset, 10)
}

// Encoder turns outputs into JSON. It caches the encoded names of rules and
// heatmaps, and each rule's constant parts of a decision record, by the
// rule's or heatmap's pointer: a parsed rule is never changed (a reload
// brings new ones). It is not safe for concurrent use.
type Encoder struct {
	names map[string][]byte
	rules map[*rules.Rule]*ruleText
	// heatmapKeys holds each heatmap's key names, encoded as keyNames
	// does.
	heatmapKeys map[*rules.Heatmap][][]byte
}

// ruleText is what every decision of one rule has in common, encoded once:
// during an attack most events are decided, and the record's rule, action,
// key names and threshold would otherwise be looked up and formatted for
// each of them.
type ruleText struct {
	idSuffix  []byte   // the id after the event id's text: /NAME"
	head      []byte   // ,"rule":"NAME","action":"ACTION","key":
	keyNames  [][]byte // see Encoder.keyNames
	threshold []byte   // ,"threshold":N
	// tail is the rest after the threshold, for the event and the
	// processing time domain: ,"time_domain":"...", and ,"mode":"shadow".
	tail [2][]byte
}

// maxRuleTexts bounds the Encoder's caches: reloads bring new rules and
// heatmaps, and the texts of those gone are dropped with the rest when one
// is full.
const maxRuleTexts = 4096

// NewEncoder returns an Encoder.
func NewEncoder() *Encoder {
	return &Encoder{names: make(map[string][]byte), rules: make(map[*rules.Rule]*ruleText),
		heatmapKeys: make(map[*rules.Heatmap][][]byte)}
}

// keyNames encodes the names of a key's attributes as they open its
// fields in a record: "ATTR":.
func keyNames(names []string) [][]byte {
	out := make([][]byte, len(names))
	for i, k := range names {
		out[i] = append(event.AppendString(nil, []byte(k)), ':')
	}
	return out
}

// quoted returns s as a JSON string, encoded once.
func (e *Encoder) quoted(s string) []byte {
	q, ok := e.names[s]
	if !ok {
		if len(e.names) >= maxRuleTexts {
			clear(e.names)
		}
		q = event.AppendString(nil, []byte(s))
		e.names[s] = q
	}
	return q
}

// ruleText returns r's constant decision parts.
func (e *Encoder) ruleText(r *rules.Rule) *ruleText {
	if t, ok := e.rules[r]; ok {
		return t
	}
	if len(e.rules) >= maxRuleTexts {
		clear(e.rules)
	}
	name := e.quoted(r.Name)
	t := &ruleText{idSuffix: append([]byte{'/'}, name[1:]...)}
	t.head = append(t.head, `,"rule":`...)
	t.head = append(t.head, name...)
	t.head = append(t.head, `,"action":`...)
	t.head = append(t.head, e.quoted(r.Action)...)
	t.head = append(t.head, `,"key":`...)
	t.keyNames = keyNames(r.Key)
	t.threshold = AppendNumber([]byte(`,"threshold":`), r.Threshold)
	for i, domain := range [2]string{`,"time_domain":"event"`, `,"time_domain":"processing"`} {
		t.tail[i] = append(t.tail[i], domain...)
		if r.Mode == rules.Shadow {
			t.tail[i] = append(t.tail[i], `,"mode":"shadow"`...)
		}
	}
	e.rules[r] = t
	return t
}

// AppendDecision appends a decision record (docs/outputs.md "decision").
func (e *Encoder) AppendDecision(dst []byte, d *windows.Decision) []byte {
	t := e.ruleText(d.Rule)
	dst = append(dst, `{"id":`...)
	dst = append(dst, d.EventID[:len(d.EventID)-1]...)
	dst = append(dst, t.idSuffix...)
	dst = append(dst, `,"event_id":`...)
	dst = append(dst, d.EventID...)
	dst = append(dst, `,"event_ts":`...)
	dst = appendMillis(dst, d.EventTS)
	dst = append(dst, t.head...)
	dst = appendKey(dst, t.keyNames, d.Key)
	dst = appendWindow(dst, d.Start, d.End)
	dst = append(dst, `,"value":`...)
	dst = AppendNumber(dst, d.Value)
	dst = append(dst, t.threshold...)
	if d.Processing {
		dst = append(dst, t.tail[1]...)
	} else {
		dst = append(dst, t.tail[0]...)
	}
	// An event read from a topic can be found again by where it is.
	if p := d.Source; p != nil && p.Topic != "" {
		dst = appendProvenance(dst, p)
	}
	return append(dst, '}', '\n')
}

// AppendHeatmap appends a heatmap record (docs/outputs.md "heatmap").
func (e *Encoder) AppendHeatmap(dst []byte, h *windows.HeatmapWindow) []byte {
	a := h.Acc
	dst = append(dst, `{"heatmap":`...)
	dst = append(dst, e.quoted(h.Heatmap.Name)...)
	dst = append(dst, `,"key":`...)
	dst = e.appendHeatmapKey(dst, h)
	dst = appendWindow(dst, h.Start, h.End)
	dst = append(dst, `,"revision":`...)
	dst = strconv.AppendInt(dst, int64(h.Revision), 10)
	dst = append(dst, `,"count":`...)
	dst = strconv.AppendInt(dst, a.Count, 10)
	dst = append(dst, `,"min":`...)
	dst = AppendNumber(dst, a.Min)
	for _, q := range quantiles {
		dst = append(dst, q.field...)
		dst = appendQuantile(dst, a.Quantile(q.q))
	}
	dst = append(dst, `,"max":`...)
	dst = AppendNumber(dst, a.Max)
	dst = append(dst, `,"buckets":[`...)
	for i, n := range a.Buckets {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"le":`...)
		if i < len(h.Heatmap.Buckets) {
			dst = AppendNumber(dst, h.Heatmap.Buckets[i])
		} else {
			dst = append(dst, `"+Inf"`...)
		}
		dst = append(dst, `,"count":`...)
		dst = strconv.AppendInt(dst, n, 10)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"degraded_events":`...)
	dst = strconv.AppendInt(dst, a.Degraded, 10)
	return append(dst, "}\n"...)
}

var quantiles = []struct {
	field string
	q     float64
}{{`,"p50":`, 0.50}, {`,"p95":`, 0.95}, {`,"p99":`, 0.99}}

// appendQuantile writes a sketch estimate with 6 significant digits: the
// sketch is only 1% accurate, so more digits would be noise.
func appendQuantile(dst []byte, v float64) []byte {
	return AppendNumber(dst, roundSignificant(v, 6))
}

func roundSignificant(v float64, digits int) float64 {
	if v == 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return v
	}
	var buf [32]byte
	s := strconv.AppendFloat(buf[:0], v, 'g', digits, 64)
	r, err := strconv.ParseFloat(string(s), 64)
	if err != nil {
		return v
	}
	return r
}

// AppendLate appends a late record: the original event, the watermark that
// made it late, and where it came from.
func AppendLate(dst, raw []byte, wm int64, p *event.Provenance) []byte {
	dst, _ = appendLate(dst, raw, wm, p, 0)
	return dst
}

// AppendDLQ appends a dead-letter record: why the input was refused and its
// bytes, as text when they are UTF-8 and as base64 otherwise.
func AppendDLQ(dst, raw []byte, reason string, p *event.Provenance) []byte {
	dst, _ = appendDLQ(dst, raw, reason, p, 0)
	return dst
}

// appendHeatmapKey appends h's key as a JSON object.
func (e *Encoder) appendHeatmapKey(dst []byte, h *windows.HeatmapWindow) []byte {
	names, ok := e.heatmapKeys[h.Heatmap]
	if !ok {
		if len(e.heatmapKeys) >= maxRuleTexts {
			clear(e.heatmapKeys)
		}
		names = keyNames(h.Heatmap.Key)
		e.heatmapKeys[h.Heatmap] = names
	}
	return appendKey(dst, names, h.Key)
}

// appendKey appends an operator's key as a JSON object, names holding its
// attributes' names encoded by keyNames.
func appendKey(dst []byte, names [][]byte, key string) []byte {
	dst = append(dst, '{')
	windows.KeyParts(key, func(i int, text string) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, names[i]...)
		dst = append(dst, text...)
	})
	return append(dst, '}')
}

func appendWindow(dst []byte, start, end int64) []byte {
	dst = append(dst, `,"window":{"start":`...)
	dst = appendMillis(dst, start)
	dst = append(dst, `,"end":`...)
	dst = appendMillis(dst, end)
	return append(dst, '}')
}

// appendMillis appends t, a time in ms, as strconv.AppendInt does. Times
// of this era have 13 digits: knowing the width, it writes them in place,
// two at a time, where strconv formats into a buffer of its own and then
// copies. Every decision has three.
func appendMillis(dst []byte, t int64) []byte {
	if t < 1e12 || t >= 1e13 {
		return strconv.AppendInt(dst, t, 10)
	}
	n := len(dst)
	dst = append(dst, "0000000000000"...)
	b := dst[n : n+13]
	u := uint64(t)
	for i := 11; i > 0; i -= 2 {
		q := u / 100
		r := u - q*100
		b[i], b[i+1] = twoDigits[2*r], twoDigits[2*r+1]
		u = q
	}
	b[0] = byte('0' + u)
	return dst
}

const twoDigits = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// AppendNumber appends f as a JSON number in its shortest form, as
// encoding/json does: plain decimals, exponents only for very large or small
// magnitudes. Infinities and NaN, which JSON lacks, become null.
func AppendNumber(dst []byte, f float64) []byte {
	// Counts and most sums are whole: their digits are those of the integer
	// (-0 is left to AppendFloat, which keeps its sign).
	if f >= -1e15 && f <= 1e15 {
		if i := int64(f); float64(i) == f && (i != 0 || !math.Signbit(f)) {
			return strconv.AppendInt(dst, i, 10)
		}
	}
	// Sums of amounts mostly have cents: below 2^33 a double's neighbours
	// are at most 2^-20 away, so when f is the double nearest to c/100 no
	// other number with at most two decimals lies among those that round
	// to f, and c/100 is the shortest text that reads back as f, the text
	// AppendFloat would find at several times the cost.
	if f != 0 && f > -1<<33 && f < 1<<33 {
		if c := math.Round(f * 100); c/100 == f {
			return appendCents(dst, int64(c))
		}
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return append(dst, "null"...)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9, as encoding/json writes it.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// appendCents appends c/100, for c not a multiple of 100, as AppendFloat's
// shortest 'f' formatting writes it: the whole part, a point and one or two
// decimals.
func appendCents(dst []byte, c int64) []byte {
	if c < 0 {
		dst = append(dst, '-')
		c = -c
	}
	dst = strconv.AppendInt(dst, c/100, 10)
	cents := c % 100
	dst = append(dst, '.', byte('0'+cents/10))
	if cents%10 != 0 {
		dst = append(dst, byte('0'+cents%10))
	}
	return dst
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
