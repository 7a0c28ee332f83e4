package event

// Decoder decodes records against one Schema. It owns the scratch space that
// unescaped strings are written to, which is reused from record to record so
// that decoding does not allocate once it has warmed up. A Decoder is not safe
// for concurrent use; give each goroutine its own.
type Decoder struct {
	schema *Schema
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

// rawValue is a scanned value: b[start:end] with its kind and flags.
type rawValue struct {
	start, end int
	kind       byte
	flags      uint8
}

// NewDecoder returns a decoder for records of schema s, with its own scratch
// space. It is not safe for concurrent use.
func NewDecoder(s *Schema) *Decoder {
	return &Decoder{schema: s, raws: make([]rawValue, len(s.fields))}
}

// Decode scans record (one JSON object), validates it, and fills ev; ev.Attrs
// is resized to the schema's Len. On an invalid record it returns an *Error
// whose reason is meant for the dlq output, and ev is unspecified. The slices
// in ev point into record or into the Decoder's scratch space: they stay valid
// until the next call to Decode, and only as long as record is not modified.
func (d *Decoder) Decode(record []byte, ev *Event) error {
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
func (d *Decoder) scan(b []byte) error {
	i := skipWS(b, 0)
	if i == len(b) {
		return &Error{Reason: "empty record"}
	}
	if b[i] != '{' {
		return d.notObject(b, i)
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return trailing(b, i+1)
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
		if n, head, ok := shortString(b, i+1); ok {
			e = d.schema.findShort(head, n)
			i += n + 2
		} else {
			keyStart := i
			if i, keyFlags, err = scanStringSlow(b, i); err != nil {
				return err
			}
			e = d.lookupKey(b[keyStart+1:i-1], keyFlags)
		}

		i = skipWS(b, i)
		if i >= len(b) || b[i] != ':' {
			return unexpected(b, i)
		}
		i = skipWS(b, i+1)
		start := i
		// Strings and numbers, the commonest values, are scanned without
		// the call to scanValue, and short strings inline.
		switch {
		case i < len(b) && b[i] == '"':
			if n, _, ok := shortString(b, i+1); ok {
				i, flags = i+n+2, 0
			} else if i, flags, err = scanStringSlow(b, i); err != nil {
				return err
			}
			kind = kString
		case i < len(b) && (isDigit(b[i]) || b[i] == '-'):
			if i, flags, err = scanNumber(b, i); err != nil {
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

		i = skipWS(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			return trailing(b, i+1)
		}
		return unexpected(b, i)
	}
}

// lookupKey finds the schema slot of a key given as its scanned body.
func (d *Decoder) lookupKey(body []byte, flags uint8) *slot {
	if !isCanonical(body, flags) {
		// Names compare by their unescaped value, as encoding/json does.
		d.keyBuf = appendUnescaped(d.keyBuf[:0], body)
		body = d.keyBuf
	}
	return find(d.schema, keyHead(body), body)
}

// trailing checks that only whitespace follows the object that ends at b[i].
func trailing(b []byte, i int) error {
	i = skipWS(b, i)
	if i < len(b) {
		return syntaxError("unexpected %s after the object at byte %d", quoteBytes(b[i:i+1]), i)
	}
	return nil
}

// notObject explains why a record that does not start with '{' is invalid:
// as bad syntax if it is, else as not being an object.
func (d *Decoder) notObject(b []byte, i int) error {
	i, _, _, err := d.scanValue(b, i, 0)
	if err != nil {
		return err
	}
	if i = skipWS(b, i); i < len(b) {
		return unexpected(b, i)
	}
	return &Error{Reason: "not a JSON object"}
}

// fill interprets the scanned fields into ev.
func (d *Decoder) fill(b []byte, ev *Event) error {
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
		return tsTypeError(b, r)
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
			return attrTypeError(f, r.kind)
		}
	}
	return nil
}

// timestamp interprets a ts that is a number or a string.
func (d *Decoder) timestamp(b []byte, r rawValue) (int64, error) {
	if r.kind == kNumber {
		if r.flags&fInt == 0 {
			return 0, tsTypeError(b, r)
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
	ms, ok := parseTimeMillis(s)
	if !ok {
		return 0, tsTypeError(b, r)
	}
	if ms < MinTS || ms > MaxTS {
		return 0, fieldError("ts", "%s is out of range", describe(b, r))
	}
	return ms, nil
}

func tsTypeError(b []byte, r rawValue) error {
	return fieldError("ts", "want integer epoch milliseconds or an RFC 3339 string, got %s", describe(b, r))
}

// attrTypeError explains why a value of kind is not valid for attribute f.
func attrTypeError(f Field, kind byte) error {
	if f.Use == UseNumber {
		return fieldError(f.Name, "want a number, got %s", kindName(kind))
	}
	return fieldError(f.Name, "want a string, number or boolean, got %s", kindName(kind))
}

// text returns the canonical text of a scanned string: the record's bytes
// when they already are, else a copy in scratch.
func (d *Decoder) text(b []byte, r rawValue) []byte {
	if r.flags == 0 { // inlined: the usual plain ASCII string
		return b[r.start:r.end:r.end]
	}
	return d.slowText(b, r)
}

func (d *Decoder) slowText(b []byte, r rawValue) []byte {
	if isCanonical(b[r.start+1:r.end-1], r.flags) {
		return b[r.start:r.end:r.end]
	}
	start := len(d.scratch)
	d.scratch = appendCanonical(d.scratch, b[r.start+1:r.end-1])
	return d.scratch[start:len(d.scratch):len(d.scratch)]
}

// unescaped returns the value of a scanned string (for source): the record's
// bytes when they need no decoding, else a copy in scratch.
func (d *Decoder) unescaped(b []byte, r rawValue) []byte {
	body := b[r.start+1 : r.end-1 : r.end-1]
	if isCanonical(body, r.flags) {
		return body
	}
	start := len(d.scratch)
	d.scratch = appendUnescaped(d.scratch, body)
	return d.scratch[start:len(d.scratch):len(d.scratch)]
}

// Retain lets the slices of the last decoded event outlive the next Decode,
// for a pipeline that decodes a batch ahead of processing it: the scratch
// space they may point into is left to them and the decoder starts a new
// one. It allocates only after records that needed scratch space (strings
// with escapes), so the common path stays allocation-free.
func (d *Decoder) Retain() {
	if len(d.scratch) > 0 {
		d.scratch = nil
	}
}
