package event

// This file keeps the decoder as it was before it was tuned for speed
// (commit e9703a0), renamed with a ref prefix, so that FuzzDecodeMatchesRef
// can check that the tuned one behaves exactly the same: same errors, word
// for word, and same events. Only the key lookup differs: it goes through a
// map built from the schema, which is obviously right, instead of the
// schema's table.

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"strings"
	"testing"
)

// FuzzDecodeMatchesRef checks that Decode and the reference decoder agree
// on every record: the same reason for an invalid one, word for word, and
// the same event for a valid one. Each record is decoded twice, and the
// decoders live across records, so that whatever a Decoder remembers from
// one record cannot change what it makes of another.
func FuzzDecodeMatchesRef(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Add(typicalRecord)
	for _, r := range manyRecords(4) {
		f.Add(r)
	}
	f.Add([]byte(`{"id":"a","ts":1,"user":"\u0075","amount":1.5,"latency_ms":-2e3,"long_field_name":7}`))
	f.Add([]byte(`{"id":"r-1","ts":2 ,"source" :"s","user": "x","n":1 }`))
	f.Add([]byte(`{"id":"abcdefghijklmnopqrstuvwxyz","ts":"2024-11-21T01:26:40.123Z","a":"é","k\"\\":true}`))
	schema, err := NewSchema(fuzzFields)
	if err != nil {
		f.Fatal(err)
	}
	d, ref := NewDecoder(schema), newRefDecoder(schema)
	var ev, refEv Event
	f.Fuzz(func(t *testing.T, record []byte) {
		want := reason(ref.Decode(record, &refEv))
		for range 2 {
			if got := reason(d.Decode(record, &ev)); got != want {
				t.Fatalf("Decode(%q) = %q, reference says %q", record, got, want)
			}
			if want == "" && dump(&ev) != dump(&refEv) {
				t.Fatalf("Decode(%q)\n got %s\nwant %s", record, dump(&ev), dump(&refEv))
			}
		}
	})
}

// TestDecodeMatchesRefAcrossShapes decodes every ordered pair of records of
// many shapes with one Decoder, the second right after the first, and
// compares both with the reference.
func TestDecodeMatchesRefAcrossShapes(t *testing.T) {
	schema, err := NewSchema(fuzzFields)
	if err != nil {
		t.Fatal(err)
	}
	records := []string{string(typicalRecord)}
	records = append(records, fuzzSeeds...)
	for _, r := range manyRecords(32) {
		records = append(records, string(r))
	}
	d, ref := NewDecoder(schema), newRefDecoder(schema)
	var ev, refEv Event
	for _, first := range records {
		for _, second := range records {
			for _, record := range []string{first, second} {
				want := reason(ref.Decode([]byte(record), &refEv))
				if got := reason(d.Decode([]byte(record), &ev)); got != want {
					t.Fatalf("after %q, Decode(%q) = %q, reference says %q", first, record, got, want)
				}
				if want == "" && dump(&ev) != dump(&refEv) {
					t.Fatalf("after %q, Decode(%q)\n got %s\nwant %s", first, record, dump(&ev), dump(&refEv))
				}
			}
		}
	}
}

// reason is the reason of a Decode error, "" for none; an error that is not
// an *Error shows as itself, prefixed so that it cannot match a reason.
func reason(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if !errors.As(err, &e) {
		return "not an *Error: " + err.Error()
	}
	if e.Reason == "" || strings.HasPrefix(e.Reason, "not an *Error") {
		return "bad reason: " + e.Reason
	}
	return e.Reason
}

// refDecoder decodes records against one Schema. It owns the scratch space that
// unescaped strings are written to, which is reused from record to record so
// that decoding does not allocate once it has warmed up. A refDecoder is not safe
// for concurrent use; give each goroutine its own.
type refDecoder struct {
	schema *Schema
	names  map[string]*slot
	// raws and specials hold where the last occurrence of each attribute and
	// special field is in the current record: a record is scanned to the end
	// before any value is interpreted, so that a duplicate key's last value
	// wins and a syntax error anywhere is reported as such.
	raws     []rawValue
	specials [numSpecial]rawValue
	// scratch holds the strings of the current record that were not
	// canonical (or, for source, not plain) as written. When appending
	// moves it to a bigger array, the strings already handed out keep
	// pointing into the old one, which nothing writes to any more: they
	// stay valid without being fixed up.
	scratch []byte
	// keyBuf and tsBuf hold an unescaped key or ts string while it is looked
	// at; they are not handed out.
	keyBuf []byte
	tsBuf  []byte
	// stack has a bit per nesting level: set for an array, clear for an object.
	stack [(maxDepth + 63) / 64]uint64
}

// newRefDecoder returns a decoder for records of schema s, with its own scratch
// space. It is not safe for concurrent use.
func newRefDecoder(s *Schema) *refDecoder {
	names := map[string]*slot{}
	for sp := specID; sp < numSpecial; sp++ {
		names[specialNames[sp]] = &slot{attr: -1, special: sp}
	}
	for i, f := range s.fields {
		if e := names[f.Name]; e != nil {
			e.attr = i
		} else {
			names[f.Name] = &slot{attr: i}
		}
	}
	return &refDecoder{schema: s, names: names, raws: make([]rawValue, len(s.fields))}
}

// Decode scans record (one JSON object), validates it, and fills ev; ev.Attrs
// is resized to the schema's Len. On an invalid record it returns an *Error
// whose reason is meant for the dlq output, and ev is unspecified. The slices
// in ev point into record or into the refDecoder's scratch space: they stay valid
// until the next call to Decode, and only as long as record is not modified.
func (d *refDecoder) Decode(record []byte, ev *Event) error {
	n := len(d.raws)
	if cap(ev.Attrs) < n {
		ev.Attrs = make([]Value, n)
	}
	ev.Attrs = ev.Attrs[:n]
	clear(d.raws)
	d.specials = [numSpecial]rawValue{}
	d.scratch = d.scratch[:0]

	if err := d.scan(record); err != nil {
		return err
	}
	return d.fill(record, ev)
}

// scan checks that b is one JSON object and records where the fields the
// schema knows are.
func (d *refDecoder) scan(b []byte) error {
	i := refSkipWS(b, 0)
	if i == len(b) {
		return &Error{Reason: "empty record"}
	}
	if b[i] != '{' {
		return d.notObject(b, i)
	}
	i = refSkipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return refTrailing(b, i+1)
	}
	var (
		keyFlags, flags uint8
		kind            byte
		err             error
	)
	for {
		if i >= len(b) || b[i] != '"' {
			return unexpected(b, i)
		}
		var e *slot
		if n, _, ok := refShortString(b, i+1); ok {
			e = d.names[string(b[i+1:i+1+n])]
			i += n + 2
		} else {
			keyStart := i
			if i, keyFlags, err = refScanStringSlow(b, i); err != nil {
				return err
			}
			e = d.lookupKey(b[keyStart+1:i-1], keyFlags)
		}

		i = refSkipWS(b, i)
		if i >= len(b) || b[i] != ':' {
			return unexpected(b, i)
		}
		i = refSkipWS(b, i+1)
		start := i
		// Strings and numbers, the commonest values, are scanned without
		// the call to scanValue, and short strings inline.
		switch {
		case i < len(b) && b[i] == '"':
			if n, _, ok := refShortString(b, i+1); ok {
				i, flags = i+n+2, 0
			} else if i, flags, err = refScanStringSlow(b, i); err != nil {
				return err
			}
			kind = kString
		case i < len(b) && (isDigit(b[i]) || b[i] == '-'):
			if i, flags, err = refScanNumber(b, i); err != nil {
				return err
			}
			kind = kNumber
		default:
			if i, kind, flags, err = d.scanValue(b, i, 1); err != nil {
				return err
			}
		}
		if e != nil {
			r := rawValue{start: start, end: i, kind: kind, flags: flags}
			if e.special != specNone {
				d.specials[e.special] = r
			}
			if e.attr >= 0 {
				d.raws[e.attr] = r
			}
		}

		i = refSkipWS(b, i)
		if i < len(b) && b[i] == ',' {
			i = refSkipWS(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			return refTrailing(b, i+1)
		}
		return unexpected(b, i)
	}
}

// lookupKey finds the schema slot of a key given as its scanned body.
func (d *refDecoder) lookupKey(body []byte, flags uint8) *slot {
	if !isCanonical(body, flags) {
		// Names compare by their unescaped value, as encoding/json does.
		d.keyBuf = appendUnescaped(d.keyBuf[:0], body)
		body = d.keyBuf
	}
	return d.names[string(body)]
}

// trailing checks that only whitespace follows the object that ends at b[i].
func refTrailing(b []byte, i int) error {
	i = refSkipWS(b, i)
	if i < len(b) {
		return syntaxError("unexpected %s after the object at byte %d", quoteBytes(b[i:i+1]), i)
	}
	return nil
}

// notObject explains why a record that does not start with '{' is invalid:
// as bad syntax if it is, else as not being an object.
func (d *refDecoder) notObject(b []byte, i int) error {
	i, _, _, err := d.scanValue(b, i, 0)
	if err != nil {
		return err
	}
	if i = refSkipWS(b, i); i < len(b) {
		return unexpected(b, i)
	}
	return &Error{Reason: "not a JSON object"}
}

// fill interprets the scanned fields into ev.
func (d *refDecoder) fill(b []byte, ev *Event) error {
	r := d.specials[specID]
	switch {
	case r.kind == kAbsent:
		return missingField("id")
	case r.kind != kString || r.end-r.start == 2:
		return fieldError("id", "want a non-empty string, got %s", describe(b, r))
	}
	ev.ID = d.text(b, r)

	r = d.specials[specTS]
	switch r.kind {
	case kAbsent:
		return missingField("ts")
	case kNumber, kString:
		var err error
		if ev.TS, err = d.timestamp(b, r); err != nil {
			return err
		}
	default:
		return refTsTypeError(b, r)
	}

	ev.IngestTS, ev.HasIngestTS = 0, false
	switch r = d.specials[specIngestTS]; {
	case r.kind == kAbsent || r.kind == kNull:
	case r.kind == kNumber && r.flags&fInt != 0:
		ms, ok := parseMillis(b[r.start:r.end])
		if !ok {
			return fieldError("ingest_ts", "%s is out of range", describe(b, r))
		}
		ev.IngestTS, ev.HasIngestTS = ms, true
	default:
		return fieldError("ingest_ts", "want integer epoch milliseconds, got %s", describe(b, r))
	}

	ev.Source = nil
	switch r = d.specials[specSource]; r.kind {
	case kAbsent, kNull:
	case kString:
		ev.Source = d.unescaped(b, r)
	default:
		return fieldError("source", "want a string, got %s", describe(b, r))
	}

	fields := d.schema.fields
	raws := d.raws[:len(fields)]
	attrs := ev.Attrs[:len(fields)]
	for i, f := range fields {
		r, v := raws[i], &attrs[i]
		switch {
		case r.kind == kNumber:
			text := b[r.start:r.end:r.end]
			num, ok := parseNumber(text)
			if !ok {
				return fieldError(f.Name, "%s is out of range", describe(b, r))
			}
			*v = Value{Kind: Number, Text: text, Num: num}
		case r.kind == kString && f.Use == UseScalar:
			*v = Value{Kind: String, Text: d.text(b, r)}
		case r.kind == kAbsent || r.kind == kNull:
			*v = Value{}
		case (r.kind == kTrue || r.kind == kFalse) && f.Use == UseScalar:
			*v = Value{Kind: Bool, Text: b[r.start:r.end:r.end]}
		default:
			return refAttrTypeError(f, r.kind)
		}
	}
	return nil
}

// timestamp interprets a ts that is a number or a string.
func (d *refDecoder) timestamp(b []byte, r rawValue) (int64, error) {
	if r.kind == kNumber {
		if r.flags&fInt == 0 {
			return 0, refTsTypeError(b, r)
		}
		ms, ok := parseMillis(b[r.start:r.end])
		if !ok {
			return 0, fieldError("ts", "%s is out of range", describe(b, r))
		}
		return ms, nil
	}
	s := b[r.start+1 : r.end-1]
	if r.flags&fEscaped != 0 {
		d.tsBuf = appendUnescaped(d.tsBuf[:0], s)
		s = d.tsBuf
	}
	ms, ok := ParseTimeMillis(s)
	if !ok {
		return 0, refTsTypeError(b, r)
	}
	if ms < MinTS || ms > MaxTS {
		return 0, fieldError("ts", "%s is out of range", describe(b, r))
	}
	return ms, nil
}

func refTsTypeError(b []byte, r rawValue) error {
	return fieldError("ts", "want integer epoch milliseconds or an RFC 3339 string, got %s", describe(b, r))
}

// attrTypeError explains why a value of kind is not valid for attribute f.
func refAttrTypeError(f Field, kind byte) error {
	if f.Use == UseNumber {
		return fieldError(f.Name, "want a number, got %s", kindName(kind))
	}
	return fieldError(f.Name, "want a string, number or boolean, got %s", kindName(kind))
}

// text returns the canonical text of a scanned string: the record's bytes
// when they already are, else a copy in scratch.
func (d *refDecoder) text(b []byte, r rawValue) []byte {
	if r.flags == 0 { // inlined: the usual plain ASCII string
		return b[r.start:r.end:r.end]
	}
	return d.slowText(b, r)
}

func (d *refDecoder) slowText(b []byte, r rawValue) []byte {
	if isCanonical(b[r.start+1:r.end-1], r.flags) {
		return b[r.start:r.end:r.end]
	}
	start := len(d.scratch)
	d.scratch = appendCanonical(d.scratch, b[r.start+1:r.end-1])
	return d.scratch[start:len(d.scratch):len(d.scratch)]
}

// unescaped returns the value of a scanned string (for source): the record's
// bytes when they need no decoding, else a copy in scratch.
func (d *refDecoder) unescaped(b []byte, r rawValue) []byte {
	body := b[r.start+1 : r.end-1 : r.end-1]
	if isCanonical(body, r.flags) {
		return body
	}
	start := len(d.scratch)
	d.scratch = appendUnescaped(d.scratch, body)
	return d.scratch[start:len(d.scratch):len(d.scratch)]
}

// skipWS returns the index of the first byte at or after i that is not JSON
// whitespace.
func refSkipWS(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// scanString scans the string whose opening quote is at b[i] and returns the
// index after its closing quote.
func refScanString(b []byte, i int) (int, uint8, error) {
	if n, _, ok := refShortString(b, i+1); ok {
		return i + n + 2, 0, nil
	}
	return refScanStringSlow(b, i)
}

// shortString is the fast path for the many keys and values that are plain
// strings of fewer than eight bytes: when the body that starts at b[i] is
// one, it returns its length and its bytes as a little-endian word.
func refShortString(b []byte, i int) (int, uint64, bool) {
	if i+8 > len(b) {
		return 0, 0, false
	}
	x := binary.LittleEndian.Uint64(b[i:])
	n := bits.TrailingZeros64(specialBytes(x)) >> 3
	// With no special byte n is 8, and the shift yields 0.
	if byte(x>>(8*n)) != '"' {
		return 0, 0, false
	}
	return n, x & (1<<(8*n) - 1), true
}

// scanStringSlow is scanString for strings that are long or not plain.
func refScanStringSlow(b []byte, i int) (int, uint8, error) {
	start := i
	i++
	var flags uint8
	for {
		// Skip eight plain bytes at a time: most strings are short and
		// plain, so this usually finds the closing quote in one step.
		for i+8 <= len(b) {
			m := specialBytes(binary.LittleEndian.Uint64(b[i:]))
			if m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(b) {
			return 0, 0, unterminated(start)
		}
		switch strClass[b[i]] {
		case cPlain:
			i++
		case cQuote:
			return i + 1, flags, nil
		case cHigh:
			flags |= fHigh
			i++
		case cBackslash:
			flags |= fEscaped
			if i+1 >= len(b) {
				return 0, 0, unterminated(start)
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k >= len(b) {
						return 0, 0, unterminated(start)
					}
					if hexValue(b[k]) < 0 {
						return 0, 0, syntaxError("invalid \\u escape at byte %d", i)
					}
				}
				i += 6
			default:
				return 0, 0, syntaxError("invalid escape %s at byte %d", quoteBytes(b[i:i+2]), i)
			}
		default:
			return 0, 0, syntaxError("control character 0x%02x in string at byte %d", b[i], i)
		}
	}
}

// scanNumber scans the number that starts at b[i] (with '-' or a digit) and
// returns the index after it, and fInt if it is an integer literal.
func refScanNumber(b []byte, i int) (int, uint8, error) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = refSkipDigits(b, i+1)
	default:
		return 0, 0, unexpectedIn(b, i, " in number")
	}
	flags := fInt
	if i < len(b) && b[i] == '.' {
		flags = 0
		j := refSkipDigits(b, i+1)
		if j == i+1 {
			return 0, 0, unexpectedIn(b, j, " in number")
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		flags = 0
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := refSkipDigits(b, i)
		if j == i {
			return 0, 0, unexpectedIn(b, j, " in number")
		}
		i = j
	}
	return i, flags, nil
}

// skipDigits returns the index of the first byte at or after i that is not a
// digit, eight bytes at a time: timestamps have thirteen.
func refSkipDigits(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		if m := nonDigits(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

// scanLiteral scans lit (true, false or null), whose first byte is at b[i].
func refScanLiteral(b []byte, i int, lit string) (int, error) {
	for k := 1; k < len(lit); k++ {
		if i+k >= len(b) || b[i+k] != lit[k] {
			return 0, unexpected(b, i+k)
		}
	}
	return i + len(lit), nil
}

// scanValue scans the value at b[i], which is nested in depth objects and
// arrays, and returns the index after it, its kind and its flags.
func (d *refDecoder) scanValue(b []byte, i, depth int) (int, byte, uint8, error) {
	if i >= len(b) {
		return 0, 0, 0, unexpected(b, i)
	}
	switch c := b[i]; c {
	case '"':
		end, flags, err := refScanString(b, i)
		return end, kString, flags, err
	case '{', '[':
		end, err := d.skipNested(b, i, depth)
		return end, c, 0, err
	case 't':
		end, err := refScanLiteral(b, i, "true")
		return end, kTrue, 0, err
	case 'f':
		end, err := refScanLiteral(b, i, "false")
		return end, kFalse, 0, err
	case 'n':
		end, err := refScanLiteral(b, i, "null")
		return end, kNull, 0, err
	default:
		if c == '-' || isDigit(c) {
			end, flags, err := refScanNumber(b, i)
			return end, kNumber, flags, err
		}
		return 0, 0, 0, unexpected(b, i)
	}
}

// skipNested scans the object or array that opens at b[i], nested in outer
// objects and arrays, and returns the index after it. It keeps one bit per
// open level (array or object) in d.stack instead of recursing, so that
// hostile nesting costs neither stack nor time beyond the linear scan.
func (d *refDecoder) skipNested(b []byte, i, outer int) (int, error) {
	depth := outer
	var err error

open: // b[i] opens a container at level depth.
	if depth >= maxDepth {
		return 0, syntaxError("nesting deeper than %d levels at byte %d", maxDepth, i)
	}
	if b[i] == '[' {
		d.stack[depth>>6] |= 1 << (depth & 63)
	} else {
		d.stack[depth>>6] &^= 1 << (depth & 63)
	}
	depth++
	i = refSkipWS(b, i+1)
	if i < len(b) && b[i] == d.closer(depth) {
		i++
		goto closed
	}

element: // b[i] should start an element of the innermost container.
	if d.closer(depth) == '}' {
		if i >= len(b) || b[i] != '"' {
			return 0, unexpected(b, i)
		}
		if i, _, err = refScanString(b, i); err != nil {
			return 0, err
		}
		i = refSkipWS(b, i)
		if i >= len(b) || b[i] != ':' {
			return 0, unexpected(b, i)
		}
		i = refSkipWS(b, i+1)
	}
	if i < len(b) && (b[i] == '{' || b[i] == '[') {
		goto open
	}
	if i, _, _, err = d.scanValue(b, i, depth); err != nil {
		return 0, err
	}

next: // A value ended before b[i]: what follows must continue or close it.
	i = refSkipWS(b, i)
	if i < len(b) && b[i] == ',' {
		i = refSkipWS(b, i+1)
		goto element
	}
	if i >= len(b) || b[i] != d.closer(depth) {
		return 0, unexpected(b, i)
	}
	i++

closed: // The container at level depth just closed.
	depth--
	if depth > outer {
		goto next
	}
	return i, nil
}

// closer is the byte that closes the container open at level depth-1.
func (d *refDecoder) closer(depth int) byte {
	level := depth - 1
	if d.stack[level>>6]&(1<<(level&63)) != 0 {
		return ']'
	}
	return '}'
}
