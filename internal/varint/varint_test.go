package varint

import (
	"encoding/binary"
	"testing"
)

// TestReader: fields read back as written; a length past the bytes left,
// a value out of range or a read past the end fails the reader for good.
func TestReader(t *testing.T) {
	b := binary.AppendVarint(nil, -5)
	b = binary.AppendUvarint(b, 3)
	b = append(b, "abc"...)
	b = binary.AppendVarint(b, -1)
	r := Reader{B: b}
	if v, s, p := r.Varint(), string(r.Bytes()), r.Int32(-1); r.Failed || v != -5 || s != "abc" || p != -1 || len(r.B) != 0 {
		t.Fatalf("read %d %q %d, failed %v, %d left", v, s, p, r.Failed, len(r.B))
	}
	for name, c := range map[string]struct {
		b    []byte
		read func(*Reader)
	}{
		"length past the end": {binary.AppendUvarint(nil, 4), func(r *Reader) { r.Bytes() }},
		"below the range":     {binary.AppendVarint(nil, -2), func(r *Reader) { r.Int32(-1) }},
		"empty":               {nil, func(r *Reader) { r.Varint() }},
	} {
		r := Reader{B: c.b}
		c.read(&r)
		if !r.Failed || r.Varint() != 0 || r.Uvarint(10) != 0 {
			t.Errorf("%s: not failed, or reads on", name)
		}
	}
}
