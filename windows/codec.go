package windows

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

// errCorrupt reports stored state that cannot be decoded. The package's
// errors wrap it with what state it was ("windows: state of ...").
var errCorrupt = corrupt.Errorf("corrupt state")

// encodeSlot appends the binary form of s (docs/format/state.md "Slot
// value"). It is sized for millions of keys, most of them with one window:
// times are relative to the first window's start, panes are numbered in
// pane widths from it, and an aggregate holds only what its rule uses, so
// that a one-pane count is 13 bytes.
func encodeSlot(dst []byte, s *slot) []byte {
	var parts byte
	if s.timerAt != noTimer {
		parts |= partTimer
	}
	if s.firedEnd != watermark.Min {
		parts |= partFiredEnd
	}
	if len(s.firedWins()) > 0 {
		parts |= partFired
	}
	if s.sp.wtype == rules.Session {
		parts |= partSessions
	}
	level := s.distinctLevel()
	if level > 0 {
		parts |= partSampled
	}
	dst = append(dst, slotVersion, parts)
	dst = binary.AppendUvarint(dst, uint64(len(s.wins)))
	var base int64
	if len(s.wins) > 0 {
		base = s.wins[0].start
	}
	dst = binary.AppendVarint(dst, base)
	if parts&partTimer != 0 {
		dst = binary.AppendVarint(dst, s.timerAt-base)
	}
	if parts&partFiredEnd != 0 {
		dst = binary.AppendVarint(dst, s.firedEnd-base)
	}
	if parts&partSampled != 0 {
		dst = append(dst, level)
	}
	sp := s.sp
	for i := range s.wins {
		w := &s.wins[i]
		switch {
		case i == 0:
		case sp.wtype == rules.Session:
			dst = binary.AppendUvarint(dst, uint64(w.start-s.wins[i-1].end-1))
		default:
			dst = binary.AppendUvarint(dst, uint64((w.start-s.wins[i-1].start)/sp.pane-1))
		}
		if sp.wtype == rules.Session {
			dst = binary.AppendUvarint(dst, uint64(w.end-w.start))
			fired, rev := uint64(0), uint64(w.rev)
			if w.fired {
				fired = 1
			}
			if sp.rule != nil {
				rev = 0 // a rule's sessions never fire; a quantile's rev stamps its screen
			}
			dst = binary.AppendUvarint(dst, rev<<1|fired)
		}
		dst = appendAcc(dst, sp, &w.acc)
	}
	if parts&partFired != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(s.more.fired)))
		for _, f := range s.more.fired {
			dst = binary.AppendVarint(dst, f.start-base)
			dst = binary.AppendUvarint(dst, uint64(f.rev))
		}
	}
	return dst
}

// accParts says which of an aggregate's fields a spec uses (docs/format/
// state.md "Aggregates"): the count always.
func (sp *spec) accParts() (sum, distinct, sketch bool) {
	switch {
	case sp.hm != nil || sp.agg == rules.Quantile:
		return false, false, true
	case sp.agg == rules.Distinct:
		return false, true, false
	case sp.agg == rules.Count:
		return false, false, false
	}
	return true, false, false // sum, avg, min, max, ratio
}

func appendAcc(dst []byte, sp *spec, a *acc) []byte {
	dst = binary.AppendUvarint(dst, uint64(a.n))
	sum, distinct, sketch := sp.accParts()
	if sum {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(a.sum))
	}
	if distinct {
		hs := a.distinct()
		dst = binary.AppendUvarint(dst, uint64(len(hs)))
		for _, h := range hs {
			dst = binary.LittleEndian.AppendUint64(dst, h)
		}
	}
	if sketch {
		hm := a.heatmap()
		if hm == nil {
			return append(dst, 0)
		}
		dst = append(dst, 1)
		dst = hm.AppendBinary(dst)
	}
	return dst
}

// decoder reads the encoding, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errCorrupt
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

// uvarint reads an unsigned varint no larger than max.
func (d *decoder) uvarint(max uint64) uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > max {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// acc reads an aggregate of sp into a, or past it when a is nil.
func (d *decoder) acc(sp *spec, a *acc) {
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
	if sketch && d.byte() == 1 && d.err == nil {
		if a == nil {
			d.skipSketch()
			return
		}
		var err error
		if hm, d.b, err = heatmap.Decode(d.b); err != nil {
			d.err, d.b = err, nil
			return
		}
	}
	if a == nil {
		return
	}
	a.n, a.sum = n, total
	if hs != nil {
		a.extra().distinct = hs
	}
	if hm != nil {
		a.extra().hm = hm
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

// slotHead is the start of an encoded slot: what comes before its windows.
type slotHead struct {
	parts             byte
	n                 int   // windows
	base              int64 // the first window's start
	timerAt, firedEnd int64
	level             uint8 // a distinct rule's sampling level
}

// head reads the start of an encoded slot of sp (of any spec when nil).
func (d *decoder) head(sp *spec) (h slotHead, err error) {
	if v := d.byte(); v != slotVersion {
		return h, fmt.Errorf("state has version %d, want %d", v, slotVersion)
	}
	h.parts = d.byte()
	// A slot holds the windows its spec makes: sessions stored under a
	// sliding rule are corrupt state, not panes.
	if h.parts&^partsKnown != 0 || sp != nil && (h.parts&partSessions != 0) != (sp.wtype == rules.Session) {
		d.fail()
	}
	h.n = d.count(1)
	h.base = d.varint()
	h.timerAt, h.firedEnd = noTimer, watermark.Min
	if h.parts&partTimer != 0 {
		h.timerAt = h.base + d.varint()
	}
	if h.parts&partFiredEnd != 0 {
		h.firedEnd = h.base + d.varint()
	}
	if h.parts&partSampled != 0 {
		// Only a distinct rule samples, and the part is there only when
		// it does.
		if h.level = d.byte(); h.level == 0 || h.level > maxDistinctLevel || sp != nil && (sp.hm != nil || sp.agg != rules.Distinct) {
			d.fail()
		}
	}
	return h, d.err
}

// window reads window i of a slot of sp into w (or past it when w is nil),
// given the previous window's start and end, and returns its start and
// end.
func (d *decoder) window(sp *spec, h *slotHead, i int, prevStart, prevEnd int64, w *win) (start, end int64) {
	session := sp.wtype == rules.Session
	switch {
	case i == 0:
		start = h.base
	case session:
		start = prevEnd + 1 + int64(d.uvarint(math.MaxInt64/2))
	default:
		start = prevStart + (1+int64(d.uvarint(math.MaxInt64/2/uint64(sp.pane))))*sp.pane
	}
	if i > 0 && start <= prevStart {
		d.fail() // out of order, or past the end of time
	}
	var fired bool
	var rev int32
	if session {
		end = start + int64(d.uvarint(math.MaxInt64/2))
		if end < start {
			d.fail()
		}
		v := d.uvarint(math.MaxInt32<<1 | 1)
		fired, rev = v&1 == 1, int32(v>>1)
	}
	if w == nil {
		d.acc(sp, nil)
		return start, end
	}
	w.start, w.end, w.fired, w.rev = start, end, fired, rev
	d.acc(sp, &w.acc)
	return start, end
}

// decodeSlotInto decodes b into s, a slot as newSlot makes it.
func decodeSlotInto(s *slot, b []byte) error {
	key, sp := s.key, s.sp
	d := decoder{b: b}
	h, err := d.head(sp)
	if err != nil {
		return fmt.Errorf("windows: state of %q: %w", key, err)
	}
	s.firedEnd, s.timerAt = h.firedEnd, h.timerAt
	if h.level > 0 {
		s.extra().distinctLevel = h.level
	}
	s.storedTimer = s.timerAt // a stored slot's timer entry is stored with it
	s.wins = sized(s.wins, h.n)
	var start, end int64
	for i := range s.wins {
		start, end = d.window(sp, &h, i, start, end, &s.wins[i])
	}
	if sp.running {
		s.countPanes()
	}
	if h.parts&partFired != 0 {
		n := d.count(2)
		if n == 0 {
			d.fail() // the part is there only with fired windows
		}
		fired := make([]firedWin, n)
		for i := range fired {
			fired[i].start = h.base + d.varint()
			fired[i].rev = int32(d.uvarint(math.MaxInt32))
		}
		s.extra().fired = fired
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	s.purgeAt = watermark.Min // not stored: the first purge computes it
	if d.err != nil {
		return fmt.Errorf("windows: state of %q: %w", key, d.err)
	}
	return nil
}

// ruleSlotSpan reads, from a stored slot of rule sp (no heatmap), the time
// of its pending timer and the start of its last pane or end of its last
// session (watermark.Min with none), without decoding the rest: enough to
// know that the timer purges all of it.
func ruleSlotSpan(sp *spec, b []byte) (timerAt, last int64, err error) {
	d := decoder{b: b}
	h, err := d.head(sp)
	if err != nil {
		return 0, 0, err
	}
	last = watermark.Min
	var start, end int64
	for i := range h.n {
		start, end = d.window(sp, &h, i, start, end, nil)
		last = start
		if sp.wtype == rules.Session {
			last = end
		}
	}
	return h.timerAt, last, d.err
}

// slotTimer reads the time of a stored slot's pending timer (noTimer for
// none) without decoding the rest.
func slotTimer(b []byte) (int64, error) {
	d := decoder{b: b}
	h, err := d.head(nil)
	return h.timerAt, err
}

// sized returns xs (empty, inline storage) grown to n elements, allocating
// only when its capacity is too small.
func sized[T any](xs []T, n int) []T {
	if n <= cap(xs) {
		return xs[:n]
	}
	return make([]T, n)
}

// timerSpec is the state id of timer entries; no rule or heatmap has it.
const timerSpec = 0xffff

// StateIDs is how many state ids rules and heatmaps may have: 0 to
// StateIDs-1 (the slot key's two bytes, less the timer entries' id).
const StateIDs = timerSpec

// timerValue is the value of a timer entry: not empty, which a changelog
// record could not tell from a deletion.
var timerValue = []byte{1}

// timerKeyHead is the length of a timer entry's key before the slot key:
// the spec and the time.
const timerKeyHead = 2 + 8

// appendTimerKey appends the Backend key of the timer entry at at of the
// slot with key: big-endian with the sign bit flipped, so that keys sort
// by time.
func appendTimerKey(dst []byte, at int64, key string) []byte {
	dst = append(dst, timerSpec>>8, timerSpec&0xff)
	dst = binary.BigEndian.AppendUint64(dst, uint64(at)^1<<63)
	return append(dst, key...)
}

// splitTimerKey returns the time and slot key of a timer entry's key; ok
// is false for any other key.
func splitTimerKey(k []byte) (at int64, key []byte, ok bool) {
	if len(k) < timerKeyHead+2 || specOf(k) != timerSpec {
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(k[2:]) ^ 1<<63), k[timerKeyHead:], true
}

// specOf is the index of the rule or heatmap a slot key belongs to.
func specOf[K string | []byte](key K) int { return int(key[0])<<8 | int(key[1]) }
