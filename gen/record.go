package gen

import (
	"strconv"
	"time"
)

// record is one generated request, drawn in full when its true time comes and
// rendered only when it is delivered. Keeping it compact (and free of
// strings) keeps the delivery queue cheap.
type record struct {
	seq      int64 // generation order; the id, and the tie-break in delivery
	ingestMs int64 // broker append time, epoch ms
	tsMs     int64 // the source's reading of the true time, epoch ms
	amount   int64 // cents, /pay and flagAmount only
	user     int32
	device   int32 // the user's device number, or the scraper's number if bot
	source   int32
	latency  int32 // tenths of ms
	merchant int16 // /pay and /cart only
	status   int16
	api      uint8
	channel  uint8 // /pay only
	region   uint8
	flags    uint8
	invalid  invalidKind
	cut      uint32 // random bits that shape an invalid record
}

// Record flags.
const (
	flagBot     = 1 << iota // device is a scraper's own device
	flagRFC3339             // ts is written as an RFC 3339 string
	flagAmount              // a request other than /pay has an amount
)

// invalidKind says how a record is broken; each kind is something a consumer
// must reject with the example rules (hence user-as-object only on /pay,
// where the pay-burst rule keys on user).
type invalidKind uint8

const (
	valid invalidKind = iota
	truncated
	missingID
	missingTS
	tsBool
	userObject
	latencyString
	garbage
	numInvalidKinds = iota - 1
)

// garbageLines are non-JSON lines of the kinds that end up in real topics.
var garbageLines = [...]string{
	"garbage",
	"<html><body><h1>502 Bad Gateway</h1></body></html>",
	"GET /healthz HTTP/1.1",
}

// rfc3339Milli is RFC 3339 with exactly three fractional digits.
const rfc3339Milli = "2006-01-02T15:04:05.000Z07:00"

// renderer writes records as JSON lines.
type renderer struct {
	// ts and ingest remember the text of the last value written: at
	// thousands of records per ms, formatting 13-digit times is otherwise a
	// large share of the work.
	ts, ingest intText
}

// intText is the decimal text of an integer, kept for reuse.
type intText struct {
	v    int64
	text []byte
}

func (c *intText) append(b []byte, v int64) []byte {
	if v != c.v || c.text == nil {
		c.v, c.text = v, strconv.AppendInt(c.text[:0], v, 10)
	}
	return append(b, c.text...)
}

// append appends r as one JSON line (newline included) to b.
func (rd *renderer) append(b []byte, r *record) []byte {
	if r.invalid == garbage {
		b = append(b, garbageLines[r.cut%uint32(len(garbageLines))]...)
		return append(b, '\n')
	}
	start := len(b)
	b = append(b, '{')
	if r.invalid != missingID {
		b = append(b, `"id":"r-`...)
		b = appendPadded(b, r.seq, 9)
		b = append(b, `",`...)
	}
	switch {
	case r.invalid == missingTS:
	case r.invalid == tsBool:
		b = append(b, `"ts":true,`...)
	case r.flags&flagRFC3339 != 0:
		b = append(b, `"ts":"`...)
		b = time.UnixMilli(r.tsMs).UTC().AppendFormat(b, rfc3339Milli)
		b = append(b, `",`...)
	default:
		b = append(b, `"ts":`...)
		b = rd.ts.append(b, r.tsMs)
		b = append(b, ',')
	}
	b = append(b, `"source":"gw-`...)
	b = strconv.AppendInt(b, int64(r.source), 10)
	if r.invalid == userObject {
		b = append(b, `","user":{"id":"u`...)
		b = strconv.AppendInt(b, int64(r.user), 10)
		b = append(b, `"},"device":"`...)
	} else {
		b = append(b, `","user":"u`...)
		b = strconv.AppendInt(b, int64(r.user), 10)
		b = append(b, `","device":"`...)
	}
	if r.flags&flagBot != 0 {
		b = append(b, "dbot-"...)
		b = strconv.AppendInt(b, int64(r.device), 10)
	} else {
		b = append(b, 'd')
		b = strconv.AppendInt(b, int64(r.user), 10)
		b = append(b, '-')
		b = strconv.AppendInt(b, int64(r.device), 10)
	}
	b = append(b, `","api":"`...)
	b = append(b, apis[r.api].path...)
	b = append(b, '"')
	if r.api == apiPay {
		b = append(b, `,"channel":"`...)
		b = append(b, channels[r.channel].name...)
		b = append(b, '"')
	}
	if r.api == apiPay || r.api == apiCart {
		b = append(b, `,"merchant":"m`...)
		b = strconv.AppendInt(b, int64(r.merchant), 10)
		b = append(b, '"')
	}
	b = append(b, `,"region":"`...)
	b = append(b, regions[r.region]...)
	if r.invalid == latencyString {
		b = append(b, `","latency_ms":"`...)
		b = appendFixed(b, int64(r.latency), 10)
		b = append(b, '"')
	} else {
		b = append(b, `","latency_ms":`...)
		b = appendFixed(b, int64(r.latency), 10)
	}
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(r.status), 10)
	if r.api == apiPay || r.flags&flagAmount != 0 {
		b = append(b, `,"amount":`...)
		b = appendFixed(b, r.amount, 100)
	}
	b = append(b, `,"ingest_ts":`...)
	b = rd.ingest.append(b, r.ingestMs)
	b = append(b, '}')
	if r.invalid == truncated {
		// Any strict prefix of an object lacks its closing brace, so every
		// cut in [1, len-1] is invalid JSON.
		n := len(b) - start
		b = b[:start+1+int(r.cut%uint32(n-1))]
	}
	return append(b, '\n')
}

// appendPadded appends v in decimal, zero-padded to width digits.
func appendPadded(b []byte, v int64, width int) []byte {
	var digits [20]byte
	d := strconv.AppendInt(digits[:0], v, 10)
	for i := len(d); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, d...)
}

// appendFixed appends v/scale as a decimal with exactly as many fractional
// digits as scale has zeros (scale is 10 or 100), without float formatting,
// so 12.5 ms is "12.5" and $99 is "99.00". v must be >= 0.
func appendFixed(b []byte, v, scale int64) []byte {
	b = strconv.AppendInt(b, v/scale, 10)
	b = append(b, '.')
	frac := v % scale
	for s := scale / 10; s > 1 && frac < s; s /= 10 {
		b = append(b, '0')
	}
	return strconv.AppendInt(b, frac, 10)
}
