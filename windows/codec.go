package windows

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
)

// slotVersion is the first byte of an encoded slot; a change of layout bumps
// it, so old state is refused instead of misread.
const slotVersion = 1

// ErrCorrupt reports stored state that cannot be decoded.
var ErrCorrupt = errors.New("windows: corrupt state")

// encodeSlot appends the binary form of s: version, firedEnd, timerAt, then
// panes, sessions and fired windows, each a count and its elements. A slot
// has panes or sessions, by its spec, and the other count is 0.
func encodeSlot(dst []byte, s *slot) []byte {
	dst = append(dst, slotVersion)
	dst = binary.AppendVarint(dst, s.firedEnd)
	dst = binary.AppendVarint(dst, s.timerAt)
	if s.sp.wtype == rules.Session {
		dst = binary.AppendUvarint(dst, 0) // no panes
	}
	dst = binary.AppendUvarint(dst, uint64(len(s.wins)))
	for i := range s.wins {
		w := &s.wins[i]
		dst = binary.AppendVarint(dst, w.start)
		if s.sp.wtype == rules.Session {
			dst = binary.AppendVarint(dst, w.end)
			fired := byte(0)
			if w.fired {
				fired = 1
			}
			dst = append(dst, fired)
			dst = binary.AppendVarint(dst, int64(w.rev))
		}
		dst = appendAcc(dst, &w.acc)
	}
	if s.sp.wtype != rules.Session {
		dst = binary.AppendUvarint(dst, 0) // no sessions
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
	distinct := a.distinct()
	dst = binary.AppendUvarint(dst, uint64(len(distinct)))
	for _, h := range distinct {
		dst = binary.LittleEndian.AppendUint64(dst, h)
	}
	hm := a.heatmap()
	if hm == nil {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	return hm.AppendBinary(dst)
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
		distinct := make([]uint64, n)
		for i := range distinct {
			distinct[i] = d.uint64()
		}
		a.extra().distinct = distinct
	}
	if d.byte() == 1 && d.err == nil {
		hm, rest, err := heatmap.Decode(d.b)
		if err != nil {
			d.err = err
			d.b = nil
			return
		}
		a.extra().hm, d.b = hm, rest
	}
}

// skipSketch reads past an encoded heatmap.Acc.
func (d *decoder) skipSketch() {
	if d.err != nil {
		return
	}
	if rest, err := heatmap.Skip(d.b); err != nil {
		d.fail()
	} else {
		d.b = rest
	}
}

func decodeSlot(key string, sp *spec, b []byte) (*slot, error) {
	s := newSlot(key, sp)
	return s, decodeSlotInto(s, b)
}

// decodeSlotInto decodes b into s, a slot as newSlot makes it.
func decodeSlotInto(s *slot, b []byte) error {
	key, sp := s.key, s.sp
	d := decoder{b: b}
	if v := d.byte(); v != slotVersion {
		return fmt.Errorf("windows: state of %q has version %d, want %d", key, v, slotVersion)
	}
	s.firedEnd = d.varint()
	s.timerAt = d.varint()
	s.storedTimer = s.timerAt // a stored slot's timer entry is stored with it
	// Panes, then sessions: a slot has the kind its spec windows by.
	session := sp.wtype == rules.Session
	for _, kind := range [2]bool{false, true} {
		n := d.count(2)
		if n == 0 {
			continue
		}
		if kind != session {
			d.fail()
			break
		}
		s.wins = sized(s.wins, n)
		for i := range s.wins {
			w := &s.wins[i]
			w.start = d.varint()
			if session {
				w.end = d.varint()
				w.fired = d.byte() == 1
				w.rev = int32(d.varint())
			}
			d.acc(&w.acc)
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
		return fmt.Errorf("windows: state of %q: %w", key, d.err)
	}
	return nil
}

// ruleSlotSpan reads, from a stored rule slot (no heatmap), the time of its
// pending timer and the start of its last pane or end of its last session
// (MinWatermark with none), without decoding the rest: enough to know that
// the timer purges all of it.
func ruleSlotSpan(b []byte) (timerAt, last int64, err error) {
	d := decoder{b: b}
	if v := d.byte(); v != slotVersion {
		return 0, 0, fmt.Errorf("windows: state has version %d, want %d", v, slotVersion)
	}
	d.varint() // firedEnd
	timerAt = d.varint()
	last = MinWatermark
	for session := range 2 {
		n := d.count(2)
		for range n {
			last = d.varint()
			if session == 1 {
				last = d.varint() // the end
				d.byte()
				d.varint()
			}
			d.varint() // count
			d.uint64() // sum
			for range d.count(8) {
				d.uint64()
			}
			if d.byte() != 0 {
				d.skipSketch() // a quantile rule's
			}
		}
	}
	return timerAt, last, d.err
}

// slotTimer reads the time of a stored slot's pending timer (noTimer for
// none) without decoding the rest.
func slotTimer(b []byte) (int64, error) {
	d := decoder{b: b}
	if v := d.byte(); v != slotVersion {
		return 0, fmt.Errorf("windows: state has version %d, want %d", v, slotVersion)
	}
	d.varint() // firedEnd
	at := d.varint()
	return at, d.err
}

// sized returns xs (empty, inline storage) grown to n elements, allocating
// only when its capacity is too small.
func sized[T any](xs []T, n int) []T {
	if n <= cap(xs) {
		return xs[:n]
	}
	return make([]T, n)
}
