package event

import "encoding/binary"

// Decoder decodes records against one Schema. It owns the scratch space that
// unescaped strings are written to, which is reused from record to record so
// that decoding does not allocate once it has warmed up. A Decoder is not safe
// for concurrent use; give each goroutine its own.
type Decoder struct {
	schema *Schema
	// raws holds where the last occurrence of each special field and
	// attribute is in the current record: a record is scanned to the end
	// before any value is interpreted, so that a duplicate key's last value
	// wins and a syntax error anywhere is reported as such. The special
	// fields come first, at their spec index, then the attributes; raws[0]
	// (specNone) takes the values of the keys the schema does not use, so
	// that every value is stored without a branch.
	raws []rawValue
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
	// guesses holds the keys seen so far (up to its size), each with the
	// two different keys that last followed it: the guesses for the key
	// after it in the next record. Records of a stream come in a few
	// shapes (a payment has fields a search lacks), so the keys that
	// follow another are better guesses than the key at the same place
	// in the last record, which misses for every field after the first
	// difference. guesses[guessStart] guesses the first key;
	// guesses[guessNone] stands for a key without a guess of its own.
	guesses  [32]keyGuess
	nGuesses int
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
	return &Decoder{schema: s, raws: make([]rawValue, int(numSpecial)+len(s.fields)), nGuesses: guessFirst}
}

// Schema returns the schema d decodes by.
func (d *Decoder) Schema() *Schema { return d.schema }

// Places in Decoder.guesses.
const (
	guessStart = 0 // follow is the guess for a record's first key
	guessNone  = 1 // a key with no guess: never guessed, never followed
	guessFirst = 2 // the first key's own guess
)

// Decode scans record (one JSON object), validates it, and fills ev; ev.Attrs
// is resized to the schema's Len. On an invalid record it returns an *Error
// whose reason is meant for the dlq output, and ev is unspecified. The slices
// in ev point into record or into the Decoder's scratch space: they stay valid
// until the next call to Decode, and only as long as record is not modified.
func (d *Decoder) Decode(record []byte, ev *Event) error {
	n := len(d.schema.fields)
	if cap(ev.Attrs) < n {
		ev.Attrs = make([]Value, n)
	}
	ev.Attrs = ev.Attrs[:n]
	clear(d.raws)
	d.scratch = d.scratch[:0]

	if err := d.scan(record); err != nil {
		return err
	}
	return d.fill(record, ev)
}

// scan checks that b is one JSON object and records where the fields the
// schema knows are.
func (d *Decoder) scan(b []byte) error {
	i, empty, err := d.openObject(b)
	if empty || err != nil {
		return err
	}
	// prev is the guess of the last key, whose follow guesses the next.
	for prev := guessStart; ; {
		var end bool
		if i, prev, end = d.scanFast(b, i, prev); end {
			return trailing(b, i+1)
		}
		// The field at b[i] is not in the common form: scan it in full.
		var (
			raw, guess int
			kind       byte
			flags      uint8
			err        error
		)
		if raw, guess, i, err = d.key(b, i); err != nil {
			return err
		}
		if prev != guessNone {
			d.guesses[prev].followedBy(guess)
		}
		prev = guess
		start := skipWS(b, i)
		if i, kind, flags, err = d.scanValue(b, start, 1); err != nil {
			return err
		}
		d.raws[raw] = rawValue{start: start, end: i, kind: kind, flags: flags}
		i = skipWS(b, i)
		if i < len(b) && b[i] == '}' {
			return trailing(b, i+1)
		}
		if i >= len(b) || b[i] != ',' {
			return unexpected(b, i)
		}
		i = skipWS(b, i+1)
	}
}

// openObject checks that b starts a JSON object and returns the index of
// its first member; empty when the object has none, err then being what
// follows its closing brace (trailing).
func (d *Decoder) openObject(b []byte) (i int, empty bool, err error) {
	i = skipWS(b, 0)
	if i == len(b) {
		return 0, false, &Error{Reason: "empty record"}
	}
	if b[i] != '{' {
		return 0, false, d.notObject(b, i)
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i, true, trailing(b, i+1)
	}
	return i, false, nil
}

// scanFast scans the fields from the one whose key should start at b[i],
// after the key whose guess is prev, for as long as they are in the common
// form: a guessed key (one of the two that last followed prev's key, see
// keyGuess), then with no whitespace a plain string or a number without
// exponent, and a comma or the closing brace. It returns the index of the
// first field that is not and the guess of the key before it, or end true
// and the index of the closing brace. It makes no calls, so that the
// compiler keeps its variables in registers.
func (d *Decoder) scanFast(b []byte, i, prev int) (int, int, bool) {
	raws := d.raws
	for {
		// Bytes equal to a key already checked, quotes and colon
		// included, need no checking.
		p := &d.guesses[prev&(len(d.guesses)-1)]
		next := int(p.follow)
		g := &d.guesses[next&(len(d.guesses)-1)]
		if g.n == 0 || !g.matches(b, i) {
			next = int(p.alt)
			if g = &d.guesses[next&(len(d.guesses)-1)]; g.n == 0 || !g.matches(b, i) {
				return i, prev, false
			}
		}
		start := i + g.n
		if uint(start) >= uint(len(b)) {
			return i, prev, false
		}
		var (
			end   int
			kind  byte
			flags uint8
		)
		switch c := b[start]; {
		case c == '"':
			end = skipPlain(b, start+1)
			if uint(end) >= uint(len(b)) || b[end] != '"' {
				// skipPlain stops short in the last bytes of the
				// record, where the last value often ends.
				for end < len(b) && strClass[b[end]] == cPlain {
					end++
				}
				if uint(end) >= uint(len(b)) || b[end] != '"' {
					return i, prev, false
				}
			}
			end, kind = end+1, kString
			if uint(end) >= uint(len(b)) {
				return i, prev, false
			}
		case c == '-' || isDigit(c):
			end = start
			if c == '-' {
				if end++; uint(end) >= uint(len(b)) {
					return i, prev, false
				}
				c = b[end]
			}
			switch {
			case c == '0':
				end++
			case '1' <= c && c <= '9':
				end = skipDigits(b, end+1)
			default:
				return i, prev, false
			}
			if uint(end) >= uint(len(b)) {
				return i, prev, false
			}
			kind, flags = kNumber, fInt
			if b[end] == '.' {
				frac := skipDigits(b, end+1)
				if frac == end+1 || uint(frac) >= uint(len(b)) {
					return i, prev, false
				}
				end, flags = frac, 0
			}
			if b[end]|0x20 == 'e' {
				return i, prev, false
			}
		default:
			return i, prev, false
		}
		// Both cases leave end < len(b). (The comparisons as uint tell
		// the compiler that indexes are not negative either, so that it
		// need not check them again.) Storing before looking at what
		// follows is harmless: if it is not a comma or brace, the field
		// is scanned again in full.
		raws[g.raw] = rawValue{start: start, end: end, kind: kind, flags: flags}
		switch b[end] {
		case ',':
			i, prev = end+1, next
		case '}':
			return end, next, true
		default:
			return i, prev, false
		}
	}
}

// key scans the key that should start at or after b[i] after whitespace,
// and the colon after it. It returns where its value goes in d.raws, its
// guess (guessNone if it has none) and the index after the colon.
func (d *Decoder) key(b []byte, i int) (int, int, int, error) {
	i = skipWS(b, i)
	if i >= len(b) || b[i] != '"' {
		return 0, 0, 0, unexpected(b, i)
	}
	start := i
	var (
		e     *slot
		flags uint8
		err   error
	)
	if n, head, ok := shortString(b, i+1); ok {
		e = d.schema.findShort(head, n)
		i += n + 2
	} else {
		if i, flags, err = scanString(b, i); err != nil {
			return 0, 0, 0, err
		}
		e = d.lookupKey(b[start+1:i-1], flags)
	}
	raw := int(specNone)
	if e != nil {
		raw = e.raw
	}
	guess := guessNone
	if flags == 0 && i < len(b) && b[i] == ':' {
		guess = d.guessOf(b[start:i+1], raw)
	}
	i = skipWS(b, i)
	if i >= len(b) || b[i] != ':' {
		return 0, 0, 0, unexpected(b, i)
	}
	return raw, guess, i + 1, nil
}

// guessOf returns the guess of a key given as its text (quotes and colon
// included), making one if there is room; guessNone if there is not or the
// key is too long to have one.
func (d *Decoder) guessOf(text []byte, raw int) int {
	var g keyGuess
	if !g.set(text, raw) {
		return guessNone
	}
	for k := guessFirst; k < d.nGuesses; k++ {
		if d.guesses[k].sameKey(&g) {
			return k
		}
	}
	if d.nGuesses == len(d.guesses) {
		return guessNone
	}
	d.guesses[d.nGuesses] = g
	d.nGuesses++
	return d.nGuesses - 1
}

// keyGuess is a key as it was written in a record, quotes and colon
// included, so that the same key in the next record is recognized by
// comparing two words.
type keyGuess struct {
	// words holds the bytes, zero-padded, little-endian like the scanner's
	// loads; masks has ones where they are.
	words, masks [2]uint64
	// n is the number of bytes, 0 when there is no guess.
	n int
	// raw is where the key's value goes in Decoder.raws.
	raw int
	// follow and alt are the places in Decoder.guesses of the guesses
	// for the key after this one: the one that followed it last time, and
	// the different one that did before.
	follow, alt uint8
}

// followedBy notes that the key of guess next followed g's.
func (g *keyGuess) followedBy(next int) {
	if int(g.follow) != next {
		g.follow, g.alt = uint8(next), g.follow
	}
}

// set makes the guess text, a key with its quotes and colon, and reports
// whether it is short enough to be one; raw is where its value goes.
func (g *keyGuess) set(text []byte, raw int) bool {
	if len(text) > 16 {
		return false
	}
	var buf [16]byte
	copy(buf[:], text)
	for w := range g.words {
		g.words[w] = binary.LittleEndian.Uint64(buf[8*w:])
		n := min(max(len(text)-8*w, 0), 8)
		g.masks[w] = 1<<(8*n) - 1 // all ones when n is 8
	}
	g.n, g.raw = len(text), raw
	return true
}

// sameKey reports whether g and o guess the same key.
func (g *keyGuess) sameKey(o *keyGuess) bool {
	return g.n == o.n && g.words == o.words
}

// matches reports whether the guessed key is at b[i].
func (g *keyGuess) matches(b []byte, i int) bool {
	if i+16 > len(b) {
		return false
	}
	x0, x1 := load64(b, i), load64(b, i+8)
	return (x0^g.words[0])&g.masks[0]|(x1^g.words[1])&g.masks[1] == 0
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
	r := d.raws[specID]
	switch {
	case r.kind == kAbsent:
		return missingField("id")
	case r.kind != kString || r.end-r.start == 2:
		return fieldError("id", "want a non-empty string, got %s", describe(b, r))
	}
	ev.ID = d.text(b, r)

	r = d.raws[specTS]
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
	switch r = d.raws[specIngestTS]; {
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
	switch r = d.raws[specSource]; r.kind {
	case kAbsent, kNull:
	case kString:
		ev.Source = d.unescaped(b, r)
	default:
		return fieldError("source", "want a string, got %s", describe(b, r))
	}

	fields := d.schema.fields
	raws := d.raws[numSpecial:][:len(fields)]
	if a := d.schema.sourceAttr; a >= 0 {
		raws[a] = d.raws[specSource]
	}
	attrs := ev.Attrs[:len(fields)]
	for i := range raws {
		// Plain strings and absent values, the commonest, are set here;
		// the rest in attr, so that the loop keeps its registers.
		// Fields are set one by one: assigning a Value literal clears
		// the whole Value first.
		switch r, v := &raws[i], &attrs[i]; {
		case r.kind == kString && r.flags == 0 && fields[i].Use == UseScalar:
			v.Kind, v.Text, v.Num = String, b[r.start:r.end:r.end], 0
		case r.kind == kAbsent:
			v.Kind, v.Text, v.Num = Missing, nil, 0
		case r.kind == kNumber && v.setShortNumber(b, r):
		default:
			if err := d.attr(b, fields[i], *r, &attrs[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// setShortNumber sets v to the number r when shortNumber takes it, and
// reports whether it did.
func (v *Value) setShortNumber(b []byte, r *rawValue) bool {
	num, ok := shortNumber(b, r.start, r.end)
	if ok {
		v.Kind, v.Text, v.Num = Number, b[r.start:r.end:r.end], num
	}
	return ok
}

// attr interprets r, the value of attribute f, into v.
func (d *Decoder) attr(b []byte, f Field, r rawValue, v *Value) error {
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
	ms, ok := ParseTimeMillis(s)
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
