package sink

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"unicode/utf8"

	"github.com/riskstream/riskstream/event"
)

// Sizes of output messages.
const (
	// DefaultMaxMessageBytes is the largest output message (key and value)
	// the live job writes unless told otherwise: 1,000,000 bytes, as
	// librdkafka's producer default. Kafka's default message.max.bytes,
	// 1,048,588, bounds a whole record batch; the 48,588 bytes between
	// them are more than a batch's and a record's headers take.
	DefaultMaxMessageBytes = 1_000_000
	// MinMaxMessageBytes is the smallest maximum message size accepted:
	// room for a cut record's other fields (a reason is cut to
	// maxReasonBytes) and a useful prefix of its raw bytes.
	MinMaxMessageBytes = 4096
	// maxReasonBytes bounds the reason of a record that has a size limit.
	// Reasons are short by construction; the bound makes the limit hold
	// whatever an error says.
	maxReasonBytes = 512
	// maxRefusedCopyBytes bounds the dlq record that replaces an output
	// message too large for its topic: smaller than most topics' limit,
	// even when the dlq topic's limit is below --max-message-bytes.
	maxRefusedCopyBytes = 64 << 10
)

// escLen is how many bytes event.AppendString writes for an ASCII byte.
var escLen = func() (t [utf8.RuneSelf]uint8) {
	for c := range t {
		switch {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
			t[c] = 2
		case c < 0x20:
			t[c] = 6 // \u00XX
		default:
			t[c] = 1
		}
	}
	return t
}()

// runeEscLen returns how many bytes of s event.AppendString reads at i
// and how many it writes for them (an invalid byte becomes U+FFFD).
func runeEscLen(s []byte, i int) (in, out int) {
	if c := s[i]; c < utf8.RuneSelf {
		return 1, int(escLen[c])
	}
	r, n := utf8.DecodeRune(s[i:])
	if r == utf8.RuneError && n == 1 {
		return 1, 3
	}
	return n, n
}

// escapedLen returns the length of s as a JSON string, quotes excluded,
// and whether s is valid UTF-8.
func escapedLen(s []byte) (n int, valid bool) {
	valid = true
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			n += int(escLen[c])
			i++
			continue
		}
		in, out := runeEscLen(s, i)
		if in == 1 {
			valid = false
		}
		n, i = n+out, i+in
	}
	return n, valid
}

// escapedPrefix returns the length of the longest prefix of s, whole
// runes, whose JSON string text (quotes excluded) takes at most budget
// bytes.
func escapedPrefix(s []byte, budget int) int {
	n := 0
	for i := 0; i < len(s); {
		in, out := runeEscLen(s, i)
		if n+out > budget {
			return i
		}
		n, i = n+out, i+in
	}
	return len(s)
}

// appendReason appends reason as a JSON string; with a size limit, a
// reason over maxReasonBytes is cut, and says so with "...".
func appendReason(dst []byte, reason string, limit int) []byte {
	if limit <= 0 || len(reason) <= maxReasonBytes {
		return event.AppendString(dst, []byte(reason))
	}
	cut := maxReasonBytes
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	dst = event.AppendString(dst, []byte(reason[:cut]))
	return append(dst[:len(dst)-1], `..."`...)
}

// Members that say a record's raw bytes were cut, and what they were.
const (
	truncatedMember = `,"raw_truncated":true`
	bytesMember     = `,"raw_bytes":`
	sha256Member    = `,"raw_sha256":"`
)

// appendRaw appends raw as the member "raw", a JSON string, when it is
// UTF-8, else as "raw_base64". other is the length of the rest of the
// record. If the whole of raw would make the record longer than limit
// (0: no limit), only the longest prefix that fits is kept (whole runes
// of text, whole 3-byte groups of base64) and three members follow it:
// "raw_truncated":true, "raw_bytes" (the length of raw) and "raw_sha256"
// (its SHA-256, in hex), by which the original can be found. With
// describe, raw_bytes and raw_sha256 follow even a whole raw. Whether raw
// is text is decided on the whole of it. It reports whether raw was cut.
func appendRaw(dst, raw []byte, other, limit int, describe bool) ([]byte, bool) {
	n, text := escapedLen(raw)
	member := `"raw":"`
	if !text {
		member = `"raw_base64":"`
		n = base64.StdEncoding.EncodedLen(len(raw))
	}
	var digits [20]byte
	rawBytes := strconv.AppendInt(digits[:0], int64(len(raw)), 10)
	described := len(bytesMember) + len(rawBytes) + len(sha256Member) + sha256.Size*2 + len(`"`)
	fixed := other + len(member) + len(`"`)
	if describe {
		fixed += described
	}
	if limit <= 0 || fixed+n <= limit {
		dst = appendRawBytes(dst, member, raw, text)
		if describe {
			dst = appendDescription(dst, raw, rawBytes)
		}
		return dst, false
	}
	budget := limit - other - len(member) - len(`"`) - len(truncatedMember) - described
	var cut int
	if budget = max(budget, 0); text {
		cut = escapedPrefix(raw, budget)
	} else {
		cut = min(budget/4*3, len(raw))
	}
	dst = appendRawBytes(dst, member, raw[:cut], text)
	dst = append(dst, truncatedMember...)
	return appendDescription(dst, raw, rawBytes), true
}

// appendDescription appends raw's length (already formatted) and hash.
func appendDescription(dst, raw, rawBytes []byte) []byte {
	dst = append(dst, bytesMember...)
	dst = append(dst, rawBytes...)
	dst = append(dst, sha256Member...)
	sum := sha256.Sum256(raw)
	dst = hex.AppendEncode(dst, sum[:])
	return append(dst, '"')
}

// appendRawBytes appends member (a name, colon and opening quote) and raw
// as its JSON string text or base64, and the closing quote.
func appendRawBytes(dst []byte, member string, raw []byte, text bool) []byte {
	if text {
		// AppendString opens the string itself.
		dst = append(dst, member[:len(member)-1]...)
		return event.AppendString(dst, raw)
	}
	dst = append(dst, member...)
	dst = base64.StdEncoding.AppendEncode(dst, raw)
	return append(dst, '"')
}

// appendLate appends a late record (see AppendLate) of at most limit bytes
// (0: no limit), its newline excluded. An event that makes the record too
// large is not embedded: the record has, instead of "event", the raw
// record cut as appendRaw does, and is otherwise the same. It reports
// whether the event was cut.
func appendLate(dst, raw []byte, wm int64, p *event.Provenance, limit int) ([]byte, bool) {
	ev := trimSpace(raw)
	if limit > 0 {
		// The members after the event, written to learn their length.
		start := len(dst)
		dst = appendLateTail(dst, wm, p)
		tail := len(dst) - start
		dst = dst[:start]
		if len(`{"event":`)+len(ev)+tail > limit {
			dst = append(dst, '{')
			dst, _ = appendRaw(dst, raw, len(`{`)+tail, limit, false)
			return append(appendLateTail(dst, wm, p), '\n'), true
		}
	}
	dst = append(dst, `{"event":`...)
	dst = append(dst, ev...)
	return append(appendLateTail(dst, wm, p), '\n'), false
}

// appendLateTail appends the members of a late record after its event,
// and the closing brace.
func appendLateTail(dst []byte, wm int64, p *event.Provenance) []byte {
	dst = append(dst, `,"watermark":`...)
	dst = strconv.AppendInt(dst, wm, 10)
	dst = append(dst, `,"reason":"late"`...)
	dst = appendProvenance(dst, p)
	return append(dst, '}')
}

// appendDLQ appends a dead-letter record (see AppendDLQ) of at most limit
// bytes (0: no limit), its newline excluded, cutting raw as appendRaw
// does. It reports whether raw was cut.
func appendDLQ(dst, raw []byte, reason string, p *event.Provenance, limit int) ([]byte, bool) {
	start := len(dst)
	dst = append(dst, `{"reason":`...)
	dst = appendReason(dst, reason, limit)
	dst = append(dst, ',')
	head := len(dst) - start
	// The provenance, written to learn its length.
	mark := len(dst)
	dst = append(appendProvenance(dst, p), '}')
	tail := len(dst) - mark
	dst = dst[:mark]
	dst, cut := appendRaw(dst, raw, head+tail, limit, false)
	dst = appendProvenance(dst, p)
	return append(dst, "}\n"...), cut
}

// appendRefused appends the dead-letter record that replaces an output
// message refused for its topic: why, the topic, and the message's value
// as a dlq record's raw bytes, with its length and hash even when it is
// whole, within limit (its newline excluded).
//
//	{"reason":"...","topic":"heatmaps","raw":"{\"heatmap\":...","raw_truncated":true,"raw_bytes":1200345,"raw_sha256":"..."}
func appendRefused(dst []byte, topic string, value []byte, why string, limit int) []byte {
	start := len(dst)
	dst = append(dst, `{"reason":`...)
	dst = appendReason(dst, why, limit)
	dst = append(dst, `,"topic":`...)
	dst = event.AppendString(dst, []byte(topic))
	dst = append(dst, ',')
	dst, _ = appendRaw(dst, value, len(dst)-start+len(`}`), limit, true)
	return append(dst, "}\n"...)
}
