// Package varint reads the varint-encoded records the project's small
// codecs write (the merge journal's runs, the checkpoint manifest): a
// Reader keeps the first error, so a decoder reads every field and checks
// once, and bounds lengths by the bytes left, so corrupt input cannot make
// it allocate wildly.
package varint

import (
	"encoding/binary"
	"math"
)

// Reader reads varints from B. After the first read past B's end or out
// of range, Failed is set and every read returns 0.
type Reader struct {
	B      []byte
	Failed bool
}

// Varint reads a signed varint.
func (r *Reader) Varint() int64 {
	v, n := binary.Varint(r.B)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Uvarint reads an unsigned varint of at most most.
func (r *Reader) Uvarint(most uint64) uint64 {
	v, n := binary.Uvarint(r.B)
	if n <= 0 || v > most {
		r.fail()
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Len reads the length of a list whose elements take a byte or more each:
// at most the bytes left.
func (r *Reader) Len() int {
	v, n := binary.Uvarint(r.B)
	if n <= 0 || v > uint64(len(r.B)-n) {
		r.fail()
		return 0
	}
	r.B = r.B[n:]
	return int(v)
}

// Int32 reads a signed varint in [lo, MaxInt32].
func (r *Reader) Int32(lo int32) int32 {
	v := r.Varint()
	if v < int64(lo) || v > math.MaxInt32 {
		r.fail()
		return 0
	}
	return int32(v)
}

// Bytes reads a length-prefixed byte string (a slice of B).
func (r *Reader) Bytes() []byte {
	n := r.Len()
	b := r.B[:n:n]
	r.B = r.B[n:]
	return b
}

func (r *Reader) fail() {
	r.Failed = true
	r.B = nil
}
