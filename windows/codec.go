package windows

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/riskstream/riskstream/heatmap"
)

// slotVersion is the first byte of an encoded slot; a change of layout bumps
// it, so old state is refused instead of misread.
const slotVersion = 1

// ErrCorrupt reports stored state that cannot be decoded.
var ErrCorrupt = errors.New("windows: corrupt state")

// encodeSlot appends the binary form of s: version, firedEnd, timerAt, then
// panes, sessions and fired windows, each a count and its elements.
func encodeSlot(dst []byte, s *slot) []byte {
	dst = append(dst, slotVersion)
	dst = binary.AppendVarint(dst, s.firedEnd)
	dst = binary.AppendVarint(dst, s.timerAt)
	dst = binary.AppendUvarint(dst, uint64(len(s.panes)))
	for i := range s.panes {
		dst = binary.AppendVarint(dst, s.panes[i].start)
		dst = appendAcc(dst, &s.panes[i].acc)
	}
	dst = binary.AppendUvarint(dst, uint64(len(s.sessions)))
	for i := range s.sessions {
		se := &s.sessions[i]
		dst = binary.AppendVarint(dst, se.start)
		dst = binary.AppendVarint(dst, se.end)
		fired := byte(0)
		if se.fired {
			fired = 1
		}
		dst = append(dst, fired)
		dst = binary.AppendVarint(dst, int64(se.rev))
		dst = appendAcc(dst, &se.acc)
	}
	dst = binary.AppendUvarint(dst, uint64(len(s.fired)))
	for _, f := range s.fired {
		dst = binary.AppendVarint(dst, f.start)
		dst = binary.AppendVarint(dst, int64(f.rev))
	}
	return dst
}

func appendAcc(dst []byte, a *acc) []byte {
	dst = binary.AppendVarint(dst, a.n)
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(a.sum))
	dst = binary.AppendUvarint(dst, uint64(len(a.distinct)))
	for _, h := range a.distinct {
		dst = binary.LittleEndian.AppendUint64(dst, h)
	}
	if a.hm == nil {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	return a.hm.AppendBinary(dst)
}

// decoder reads the encoding, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = ErrCorrupt
	}
	d.b = nil
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length and checks it against the bytes left, each element
// taking at least min bytes, so corrupt input cannot allocate wildly.
func (d *decoder) count(min int) int {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > uint64(len(d.b)-n)/uint64(min) {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uint64() uint64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) acc(a *acc) {
	a.n = d.varint()
	a.sum = math.Float64frombits(d.uint64())
	if n := d.count(8); n > 0 {
		a.distinct = make([]uint64, n)
		for i := range a.distinct {
			a.distinct[i] = d.uint64()
		}
	}
	if d.byte() == 1 && d.err == nil {
		hm, rest, err := heatmap.Decode(d.b)
		if err != nil {
			d.err = err
			d.b = nil
			return
		}
		a.hm, d.b = hm, rest
	}
}

func decodeSlot(key string, sp *spec, b []byte) (*slot, error) {
	d := decoder{b: b}
	if v := d.byte(); v != slotVersion {
		return nil, fmt.Errorf("windows: state of %q has version %d, want %d", key, v, slotVersion)
	}
	s := newSlot(key, sp)
	s.firedEnd = d.varint()
	s.timerAt = d.varint()
	if n := d.count(2); n > 0 {
		s.panes = sized(s.panes, n)
		for i := range s.panes {
			s.panes[i].start = d.varint()
			d.acc(&s.panes[i].acc)
		}
	}
	if n := d.count(4); n > 0 {
		s.sessions = sized(s.sessions, n)
		for i := range s.sessions {
			se := &s.sessions[i]
			se.start = d.varint()
			se.end = d.varint()
			se.fired = d.byte() == 1
			se.rev = int32(d.varint())
			d.acc(&se.acc)
		}
	}
	if n := d.count(2); n > 0 {
		s.fired = make([]firedWin, n)
		for i := range s.fired {
			s.fired[i].start = d.varint()
			s.fired[i].rev = int32(d.varint())
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	s.purgeAt = MinWatermark // not stored: the first purge computes it
	if d.err != nil {
		return nil, fmt.Errorf("windows: state of %q: %w", key, d.err)
	}
	return s, nil
}

// sized returns xs (empty, inline storage) grown to n elements, allocating
// only when its capacity is too small.
func sized[T any](xs []T, n int) []T {
	if n <= cap(xs) {
		return xs[:n]
	}
	return make([]T, n)
}
