package produce

import (
	"bytes"
	"math"
	"strconv"
	"time"

	"github.com/riskstream/riskstream/event"
)

// retimer shifts the times of a recorded capture by one offset, so that
// the first record's reference time is the moment it is sent: produce
// --retime. A capture's times relative to each other (what the job's
// windows, watermarks and skew estimates depend on) are kept; only their
// distance from the wall clock changes, which is what the live job's
// latency and lag metrics measure.
type retimer struct {
	// offset is added to every time, in ms, once set by the first record
	// that has a reference time.
	offset int64
	set    bool
	// spans are the current line's time values; reused.
	spans []timeSpan
	// members scans the lines (event.Decoder.Members); made on first use.
	members *event.Decoder
}

// timeSpan is one top-level ts or ingest_ts value of a line.
type timeSpan struct {
	start, end int
	ingest     bool
}

// retime shifts the top-level ts (integer epoch ms or an RFC 3339 string)
// and ingest_ts (integer epoch ms) of line by the offset, which the first
// line with a reference time fixes so that its reference is now. It
// returns the line, rewritten in place when the new values are as long
// as the old (the usual case), else a new slice; and the line's retimed
// reference time (ingest_ts, else ts), ok false when it has none. A
// value that is not a valid time, a line that is not a JSON object, and
// nested members are left as they are: the job's dlq judges them.
func (r *retimer) retime(line []byte, now time.Time) (out []byte, ref int64, ok bool) {
	r.spans = r.spans[:0]
	var ts, ingest int64
	var hasTS, hasIngest bool
	if r.members == nil {
		r.members = newMemberScanner()
	}
	if r.members.Members(line, func(name []byte, start, end int) {
		raw := line[start:end]
		switch {
		case nameIs(name, "ingest_ts"):
			if v, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
				ingest, hasIngest = v, true
				r.spans = append(r.spans, timeSpan{start, end, true})
			}
		case nameIs(name, "ts"):
			if v, ok := parseTS(raw); ok {
				ts, hasTS = v, true
				r.spans = append(r.spans, timeSpan{start, end, false})
			}
		}
	}) != nil {
		return line, 0, false
	}
	switch {
	case hasIngest:
		ref, ok = ingest, true
	case hasTS:
		ref, ok = ts, true
	default:
		return line, 0, false
	}
	if !r.set {
		r.offset, r.set = now.UnixMilli()-ref, true
	}
	var num [64]byte
	grown := false
	for _, sp := range r.spans {
		if v := retimedValue(num[:0], line[sp.start:sp.end], r.offset); len(v) != sp.end-sp.start {
			grown = true
			break
		}
	}
	if !grown {
		for _, sp := range r.spans {
			copy(line[sp.start:sp.end], retimedValue(num[:0], line[sp.start:sp.end], r.offset))
		}
	} else {
		out = make([]byte, 0, len(line)+16*len(r.spans))
		prev := 0
		for _, sp := range r.spans {
			out = append(out, line[prev:sp.start]...)
			out = retimedValue(out, line[sp.start:sp.end], r.offset)
			prev = sp.end
		}
		line = append(out, line[prev:]...)
	}
	shifted, inRange := addMillis(ref, r.offset)
	return line, shifted, inRange
}

// retimedValue appends raw, an integer epoch ms or a quoted RFC 3339 time,
// shifted by offset ms to dst; raw itself when it cannot be shifted.
func retimedValue(dst, raw []byte, offset int64) []byte {
	if raw[0] == '"' {
		t, err := time.Parse(time.RFC3339Nano, string(raw[1:len(raw)-1]))
		if err != nil {
			return append(dst, raw...)
		}
		dst = append(dst, '"')
		dst = t.Add(time.Duration(offset)*time.Millisecond).AppendFormat(dst, time.RFC3339Nano)
		return append(dst, '"')
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return append(dst, raw...)
	}
	shifted, ok := addMillis(v, offset)
	if !ok {
		return append(dst, raw...)
	}
	return strconv.AppendInt(dst, shifted, 10)
}

// addMillis is a + b, ok false when it overflows.
func addMillis(a, b int64) (int64, bool) {
	if b > 0 && a > math.MaxInt64-b || b < 0 && a < math.MinInt64-b {
		return a, false
	}
	return a + b, true
}

// parseTS reads a raw ts value as the job does: an integer epoch ms, or a
// string in RFC 3339 (without escapes, which a recorded capture has no
// reason to use).
func parseTS(raw []byte) (int64, bool) {
	if len(raw) >= 2 && raw[0] == '"' {
		s := raw[1 : len(raw)-1]
		if bytes.IndexByte(s, '\\') >= 0 {
			return 0, false
		}
		return event.ParseTimeMillis(s)
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	return v, err == nil
}
