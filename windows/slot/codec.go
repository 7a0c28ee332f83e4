package slot

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/riskstream/riskstream/internal/corrupt"
	"github.com/riskstream/riskstream/watermark"

	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
)

// slotVersion is the first byte of an encoded slot; a change of layout bumps
// it, so old state is refused instead of misread. Version 1 stored every
// pane's time and every aggregate's fields, whatever the rule used.
const slotVersion = 2

// Parts of an encoded slot that most slots do without (the byte after the
// version).
const (
	partTimer    = 1 << iota // a pending timer
	partFiredEnd             // firedEnd: pane-based heatmaps
	partFired                // fired windows kept for allowed lateness
	partSessions             // the windows are sessions, not panes
	partSampled              // a distinct rule's values are sampled (capDistinct)
	partsKnown   = partTimer | partFiredEnd | partFired | partSessions | partSampled
)

// ErrCorrupt reports stored state that cannot be decoded. The package's
// errors wrap it with what state it was ("windows: state of ...").
var ErrCorrupt = corrupt.Errorf("corrupt state")

// Encode appends the binary form of s (docs/format/state.md "Slot
// value"). It is sized for millions of keys, most of them with one window:
// times are relative to the first window's start, panes are numbered in
// pane widths from it, and an aggregate holds only what its rule uses, so
// that a one-pane count is 13 bytes.
func Encode(dst []byte, s *Slot) []byte {
	var parts byte
	if s.TimerAt != NoTimer {
		parts |= partTimer
	}
	if s.FiredEnd != watermark.Min {
		parts |= partFiredEnd
	}
	if len(s.FiredWins()) > 0 {
		parts |= partFired
	}
	if s.Spec.WindowType == rules.Session {
		parts |= partSessions
	}
	level := s.DistinctLevel()
	if level > 0 {
		parts |= partSampled
	}
	dst = append(dst, slotVersion, parts)
	dst = binary.AppendUvarint(dst, uint64(len(s.Wins)))
	var base int64
	if len(s.Wins) > 0 {
		base = s.Wins[0].Start
	}
	dst = binary.AppendVarint(dst, base)
	if parts&partTimer != 0 {
		dst = binary.AppendVarint(dst, s.TimerAt-base)
	}
	if parts&partFiredEnd != 0 {
		dst = binary.AppendVarint(dst, s.FiredEnd-base)
	}
	if parts&partSampled != 0 {
		dst = append(dst, level)
	}
	sp := s.Spec
	for i := range s.Wins {
		w := &s.Wins[i]
		switch {
		case i == 0:
		case sp.WindowType == rules.Session:
			dst = binary.AppendUvarint(dst, uint64(w.Start-s.Wins[i-1].End-1))
		default:
			dst = binary.AppendUvarint(dst, uint64((w.Start-s.Wins[i-1].Start)/sp.Pane-1))
		}
		if sp.WindowType == rules.Session {
			dst = binary.AppendUvarint(dst, uint64(w.End-w.Start))
			fired, rev := uint64(0), uint64(w.Rev)
			if w.Fired {
				fired = 1
			}
			if sp.Rule != nil {
				rev = 0 // a rule's sessions never fire; a quantile's rev stamps its screen
			}
			dst = binary.AppendUvarint(dst, rev<<1|fired)
		}
		dst = appendAcc(dst, sp, &w.Acc)
	}
	if parts&partFired != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(s.More.fired)))
		for _, f := range s.More.fired {
			dst = binary.AppendVarint(dst, f.Start-base)
			dst = binary.AppendUvarint(dst, uint64(f.rev))
		}
	}
	return dst
}

// accParts says which of an aggregate's fields a spec uses (docs/format/
// state.md "Aggregates"): the count always.
func (sp *Spec) accParts() (sum, distinct, sketch bool) {
	switch {
	case sp.Heatmap != nil || sp.Agg == rules.Quantile:
		return false, false, true
	case sp.Agg == rules.Distinct:
		return false, true, false
	case sp.Agg == rules.Count:
		return false, false, false
	}
	return true, false, false // sum, avg, min, max, ratio
}

func appendAcc(dst []byte, sp *Spec, a *Acc) []byte {
	dst = binary.AppendUvarint(dst, uint64(a.N))
	sum, distinct, sketch := sp.accParts()
	if sum {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(a.Sum))
	}
	if distinct {
		hs := a.Distinct()
		dst = binary.AppendUvarint(dst, uint64(len(hs)))
		for _, h := range hs {
			dst = binary.LittleEndian.AppendUint64(dst, h)
		}
	}
	if sketch {
		hm := a.Heatmap()
		if hm == nil {
			return append(dst, 0)
		}
		dst = append(dst, 1)
		dst = hm.AppendBinary(dst)
	}
	return dst
}

// Decoder reads the encoding, remembering the first error.
type Decoder struct {
	B   []byte
	Err error
}

// Fail marks the input corrupt and stops every read that follows.
func (d *Decoder) Fail() {
	if d.Err == nil {
		d.Err = ErrCorrupt
	}
	d.B = nil
}

// Varint reads a signed varint.
func (d *Decoder) Varint() int64 {
	v, n := binary.Varint(d.B)
	if n <= 0 {
		d.Fail()
		return 0
	}
	d.B = d.B[n:]
	return v
}

// count reads a length and checks it against the bytes left, each element
// taking at least min bytes, so corrupt input cannot allocate wildly.
func (d *Decoder) count(min int) int {
	v, n := binary.Uvarint(d.B)
	if n <= 0 || v > uint64(len(d.B)-n)/uint64(min) {
		d.Fail()
		return 0
	}
	d.B = d.B[n:]
	return int(v)
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if len(d.B) < 1 {
		d.Fail()
		return 0
	}
	c := d.B[0]
	d.B = d.B[1:]
	return c
}

func (d *Decoder) uint64() uint64 {
	if len(d.B) < 8 {
		d.Fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(d.B)
	d.B = d.B[8:]
	return v
}

// uvarint reads an unsigned varint no larger than max.
func (d *Decoder) uvarint(max uint64) uint64 {
	v, n := binary.Uvarint(d.B)
	if n <= 0 || v > max {
		d.Fail()
		return 0
	}
	d.B = d.B[n:]
	return v
}

// acc reads an aggregate of sp into a, or past it when a is nil.
func (d *Decoder) acc(sp *Spec, a *Acc) {
	n := int64(d.uvarint(math.MaxInt64))
	sum, distinct, sketch := sp.accParts()
	var total float64
	if sum {
		total = math.Float64frombits(d.uint64())
	}
	var hs []uint64
	if distinct {
		k := d.count(8)
		if a != nil && k > 0 {
			hs = make([]uint64, k)
		}
		for i := range k {
			if h := d.uint64(); hs != nil {
				hs[i] = h
			}
		}
	}
	var hm *heatmap.Acc
	if sketch && d.Byte() == 1 && d.Err == nil {
		if a == nil {
			d.skipSketch()
			return
		}
		var err error
		if hm, d.B, err = heatmap.Decode(d.B); err != nil {
			d.Err, d.B = err, nil
			return
		}
	}
	if a == nil {
		return
	}
	a.N, a.Sum = n, total
	if hs != nil {
		a.extra().distinct = hs
	}
	if hm != nil {
		a.extra().Heatmap = hm
	}
}

// skipSketch reads past an encoded heatmap.Acc.
func (d *Decoder) skipSketch() {
	if d.Err != nil {
		return
	}
	if rest, err := heatmap.Skip(d.B); err != nil {
		d.Fail()
	} else {
		d.B = rest
	}
}

// slotHead is the start of an encoded slot: what comes before its windows.
type slotHead struct {
	parts             byte
	n                 int   // windows
	base              int64 // the first window's start
	timerAt, firedEnd int64
	level             uint8 // a distinct rule's sampling level
}

// head reads the start of an encoded slot of sp (of any spec when nil).
func (d *Decoder) head(sp *Spec) (h slotHead, err error) {
	if v := d.Byte(); v != slotVersion {
		return h, fmt.Errorf("state has version %d, want %d", v, slotVersion)
	}
	h.parts = d.Byte()
	// A slot holds the windows its spec makes: sessions stored under a
	// sliding rule are corrupt state, not panes.
	if h.parts&^partsKnown != 0 || sp != nil && (h.parts&partSessions != 0) != (sp.WindowType == rules.Session) {
		d.Fail()
	}
	h.n = d.count(1)
	h.base = d.Varint()
	h.timerAt, h.firedEnd = NoTimer, watermark.Min
	if h.parts&partTimer != 0 {
		h.timerAt = h.base + d.Varint()
	}
	if h.parts&partFiredEnd != 0 {
		h.firedEnd = h.base + d.Varint()
	}
	if h.parts&partSampled != 0 {
		// Only a distinct rule samples, and the part is there only when
		// it does.
		if h.level = d.Byte(); h.level == 0 || h.level > maxDistinctLevel || sp != nil && (sp.Heatmap != nil || sp.Agg != rules.Distinct) {
			d.Fail()
		}
	}
	return h, d.Err
}

// window reads window i of a slot of sp into w (or past it when w is nil),
// given the previous window's start and end, and returns its start and
// end.
func (d *Decoder) window(sp *Spec, h *slotHead, i int, prevStart, prevEnd int64, w *Win) (start, end int64) {
	session := sp.WindowType == rules.Session
	switch {
	case i == 0:
		start = h.base
	case session:
		start = prevEnd + 1 + int64(d.uvarint(math.MaxInt64/2))
	default:
		start = prevStart + (1+int64(d.uvarint(math.MaxInt64/2/uint64(sp.Pane))))*sp.Pane
	}
	if i > 0 && start <= prevStart {
		d.Fail() // out of order, or past the end of time
	}
	var fired bool
	var rev int32
	if session {
		end = start + int64(d.uvarint(math.MaxInt64/2))
		if end < start {
			d.Fail()
		}
		v := d.uvarint(math.MaxInt32<<1 | 1)
		fired, rev = v&1 == 1, int32(v>>1)
	}
	if w == nil {
		d.acc(sp, nil)
		return start, end
	}
	w.Start, w.End, w.Fired, w.Rev = start, end, fired, rev
	d.acc(sp, &w.Acc)
	return start, end
}

// DecodeInto decodes b into s, a slot as newSlot makes it.
func DecodeInto(s *Slot, b []byte) error {
	key, sp := s.Key, s.Spec
	d := Decoder{B: b}
	h, err := d.head(sp)
	if err != nil {
		return fmt.Errorf("windows: state of %q: %w", key, err)
	}
	s.FiredEnd, s.TimerAt = h.firedEnd, h.timerAt
	if h.level > 0 {
		s.Extra().distinctLevel = h.level
	}
	s.StoredTimer = s.TimerAt // a stored slot's timer entry is stored with it
	s.Wins = Sized(s.Wins, h.n)
	var start, end int64
	for i := range s.Wins {
		start, end = d.window(sp, &h, i, start, end, &s.Wins[i])
	}
	if sp.Running {
		s.countPanes()
	}
	if h.parts&partFired != 0 {
		n := d.count(2)
		if n == 0 {
			d.Fail() // the part is there only with fired windows
		}
		fired := make([]firedWin, n)
		for i := range fired {
			fired[i].Start = h.base + d.Varint()
			fired[i].rev = int32(d.uvarint(math.MaxInt32))
		}
		s.Extra().fired = fired
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Fail()
	}
	s.purgeAt = watermark.Min // not stored: the first purge computes it
	if d.Err != nil {
		return fmt.Errorf("windows: state of %q: %w", key, d.Err)
	}
	return nil
}

// ruleSlotSpan reads, from a stored slot of rule sp (no heatmap), the time
// of its pending timer and the start of its last pane or end of its last
// session (watermark.Min with none), without decoding the rest: enough to
// know that the timer purges all of it.
func ruleSlotSpan(sp *Spec, b []byte) (timerAt, last int64, err error) {
	d := Decoder{B: b}
	h, err := d.head(sp)
	if err != nil {
		return 0, 0, err
	}
	last = watermark.Min
	var start, end int64
	for i := range h.n {
		start, end = d.window(sp, &h, i, start, end, nil)
		last = start
		if sp.WindowType == rules.Session {
			last = end
		}
	}
	return h.timerAt, last, d.Err
}

// EncodedTimer reads the time of a stored slot's pending timer (NoTimer for
// none) without decoding the rest.
func EncodedTimer(b []byte) (int64, error) {
	d := Decoder{B: b}
	h, err := d.head(nil)
	return h.timerAt, err
}

// Sized returns xs (empty, inline storage) grown to n elements, allocating
// only when its capacity is too small.
func Sized[T any](xs []T, n int) []T {
	if n <= cap(xs) {
		return xs[:n]
	}
	return make([]T, n)
}

// TimerSpec is the state id of timer entries; no rule or heatmap has it.
const TimerSpec = 0xffff

// StateIDs is how many state ids rules and heatmaps may have: 0 to
// StateIDs-1 (the slot key's two bytes, less the timer entries' id).
const StateIDs = TimerSpec

// TimerValue is the value of a timer entry: not empty, which a changelog
// record could not tell from a deletion.
var TimerValue = []byte{1}

// timerKeyHead is the length of a timer entry's key before the slot key:
// the spec and the time.
const timerKeyHead = 2 + 8

// AppendTimerKey appends the Backend key of the timer entry at at of the
// slot with key: big-endian with the sign bit flipped, so that keys sort
// by time.
func AppendTimerKey(dst []byte, at int64, key string) []byte {
	dst = append(dst, TimerSpec>>8, TimerSpec&0xff)
	dst = binary.BigEndian.AppendUint64(dst, uint64(at)^1<<63)
	return append(dst, key...)
}

// SplitTimerKey returns the time and slot key of a timer entry's key; ok
// is false for any other key.
func SplitTimerKey(k []byte) (at int64, key []byte, ok bool) {
	if len(k) < timerKeyHead+2 || SpecOf(k) != TimerSpec {
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(k[2:]) ^ 1<<63), k[timerKeyHead:], true
}

// SpecOf is the index of the rule or heatmap a slot key belongs to.
func SpecOf[K string | []byte](key K) int { return int(key[0])<<8 | int(key[1]) }

// New returns an empty slot of key, a state of sp, outside any cache.
func New(key string, sp *Spec) *Slot {
	s := &Slot{}
	s.Reset(key, sp)
	return s
}

// Decode decodes b, an encoded slot of key, into a new slot.
func Decode(key string, sp *Spec, b []byte) (*Slot, error) {
	s := New(key, sp)
	return s, DecodeInto(s, b)
}
