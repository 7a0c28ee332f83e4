package event

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// Special fields the decoder interprets itself. "source" is also an ordinary
// attribute when the schema lists it.
const (
	specNone uint8 = iota
	specID
	specTS
	specIngestTS
	specSource
	numSpecial
)

var specialNames = [numSpecial]string{
	specID:       "id",
	specTS:       "ts",
	specIngestTS: "ingest_ts",
	specSource:   "source",
}

// Schema is the set of attributes a Decoder extracts, fixed when the rules
// are loaded. Its lookup table is built once so that matching a record's key
// costs a multiplication and usually one comparison of a machine word.
type Schema struct {
	fields []Field
	// table is open-addressed with linear probing, a power of two long and
	// at most a quarter full; a slot with an empty name is free (field names
	// cannot be empty).
	table []slot
	// sourceAttr is the index of "source" in fields, or -1.
	sourceAttr int
}

// slot is what one field name means to the decoder.
type slot struct {
	// head is the name's first eight bytes (zero-padded), as nameHead
	// computes it, so that most names compare as one word.
	head    uint64
	name    string
	attr    int // index in fields, or -1
	special uint8
	// raw is where the decoder keeps the name's value: see Decoder.raws.
	raw int
}

// NewSchema builds the table of attributes to extract, in the order given.
// A name listed twice is one attribute (the rules may use it twice); it is a
// number if any listing says so, because a number is also a valid scalar but
// not the other way round. The reserved names id, ts and ingest_ts are
// refused: they are not attributes. "source" may be listed: it is both the
// skew-tracking source and an ordinary attribute.
func NewSchema(fields []Field) (*Schema, error) {
	s := &Schema{}
	at := make(map[string]int, len(fields))
	for _, f := range fields {
		switch {
		case f.Name == "":
			return nil, errors.New("event: empty field name")
		case !utf8.ValidString(f.Name):
			return nil, fmt.Errorf("event: field name %q is not valid UTF-8", f.Name)
		case f.Name == "id" || f.Name == "ts" || f.Name == "ingest_ts":
			return nil, fmt.Errorf("event: field %q is reserved", f.Name)
		case f.Use != UseScalar && f.Use != UseNumber:
			return nil, fmt.Errorf("event: field %q has unknown use %d", f.Name, f.Use)
		}
		if i, ok := at[f.Name]; ok {
			if f.Use == UseNumber {
				s.fields[i].Use = UseNumber
			}
			continue
		}
		at[f.Name] = len(s.fields)
		s.fields = append(s.fields, f)
	}

	size := 16
	for size < 4*(len(s.fields)+len(specialNames)) {
		size *= 2
	}
	s.table = make([]slot, size)
	for sp := specID; sp < numSpecial; sp++ {
		s.insert(specialNames[sp]).special = sp
	}
	for i, f := range s.fields {
		s.insert(f.Name).attr = i
	}
	s.sourceAttr = -1
	for i := range s.table {
		switch e := &s.table[i]; {
		case e.special != specNone:
			// source, when it is also an attribute, is kept once, as
			// the special field, and copied to the attribute.
			e.raw = int(e.special)
			if e.attr >= 0 {
				s.sourceAttr = e.attr
			}
		case e.attr >= 0:
			e.raw = int(numSpecial) + e.attr
		}
	}
	return s, nil
}

// insert returns the slot for name, claiming a free one if needed.
func (s *Schema) insert(name string) *slot {
	head := nameHead(name)
	if e := find(s, head, name); e != nil {
		return e
	}
	mask := uint32(len(s.table) - 1)
	for h := hashName(head, len(name)); ; h++ {
		if e := &s.table[h&mask]; e.name == "" {
			*e = slot{head: head, name: name, attr: -1}
			return e
		}
	}
}

// find returns the slot for name, whose nameHead is head, or nil when the
// schema does not use it.
func find[T string | []byte](s *Schema, head uint64, name T) *slot {
	mask := uint32(len(s.table) - 1)
	for h := hashName(head, len(name)); ; h++ {
		e := &s.table[h&mask]
		if e.name == "" {
			return nil
		}
		if e.head == head && len(e.name) == len(name) && (len(name) <= 8 || e.name[8:] == string(name[8:])) {
			return e
		}
	}
}

// findShort is find for a name of n < 8 bytes, which head holds entirely;
// the scanner's fast path for short keys finds them so.
func (s *Schema) findShort(head uint64, n int) *slot {
	mask := uint32(len(s.table) - 1)
	for h := hashName(head, n); ; h++ {
		e := &s.table[h&mask]
		if e.name == "" {
			return nil
		}
		if e.head == head && len(e.name) == n {
			return e
		}
	}
}

// nameHead packs the first eight bytes of name (fewer if shorter) into a
// word, little-endian like the scanner's loads.
func nameHead(name string) uint64 {
	var head uint64
	for i := min(len(name), 8) - 1; i >= 0; i-- {
		head = head<<8 | uint64(name[i])
	}
	return head
}

// keyHead is nameHead for a key in a record.
func keyHead(key []byte) uint64 {
	if len(key) >= 8 {
		return binary.LittleEndian.Uint64(key)
	}
	var head uint64
	for i := len(key) - 1; i >= 0; i-- {
		head = head<<8 | uint64(key[i])
	}
	return head
}

// hashName mixes a name's head and length (Fibonacci hashing: the high bits
// of the product are well mixed).
func hashName(head uint64, n int) uint32 {
	return uint32((head + uint64(n)) * 0x9e3779b97f4a7c15 >> 32)
}

// Len is the number of attributes, the length of Event.Attrs.
func (s *Schema) Len() int { return len(s.fields) }

// Index returns the position of attribute name in Event.Attrs, so that other
// packages resolve names once, when the rules are loaded.
func (s *Schema) Index(name string) (int, bool) {
	if e := find(s, nameHead(name), name); e != nil && e.attr >= 0 {
		return e.attr, true
	}
	return -1, false
}

// Equal reports whether s and o extract the same attributes, so that an
// event decoded by either is what the other would decode.
func (s *Schema) Equal(o *Schema) bool { return s == o || slices.Equal(s.fields, o.fields) }

// Fields returns the attributes in Event.Attrs order, duplicates merged. The
// slice is a copy.
func (s *Schema) Fields() []Field {
	return append([]Field(nil), s.fields...)
}
