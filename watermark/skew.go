package watermark

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/riskstream/riskstream/rules"
)

// Clock-skew detection.
//
// A record carries an event time ts, stamped by its source's clock, and a
// reference time ref (the broker's append time, or ingest_ts in replay).
// Transport and producer batching only ever make ref later, so
// d = ts - ref = offset - delay with delay >= 0. As in NTP's minimum-delay
// filter, the largest d over a recent span of reference time comes from the
// least-delayed record and tracks the clock offset: a clock that is ahead
// shows at once (delay cannot make d larger), and a clock that is behind shows
// once every record of the span is late by more than the threshold.
//
// The span is kept as a ring of sub-window maxima, so the state per source is
// a fixed few words however many records it sends, and each record costs
// O(skewSlots).

// skewSlots is the number of sub-windows the envelope's span is cut into:
// the envelope covers between (skewSlots-1)/skewSlots of the window and the
// whole window, so a stale sample leaves it within one window.
const skewSlots = 10

// emptySlot marks a sub-window without samples. Samples are clamped to
// ±maxSkewMs, so no sample can take this value.
const emptySlot int64 = math.MinInt64

// maxSkewMs bounds |ts - ref| so that odd inputs can neither overflow the
// arithmetic nor collide with emptySlot.
const maxSkewMs int64 = 1 << 50

// skewEncodingVersion is the first byte of AppendBinary's output.
const skewEncodingVersion byte = 1

// SkewOptions configures a SkewTracker. A zero (or negative) field takes its
// default value.
type SkewOptions struct {
	// Threshold is the |skew| above which a source is degraded. To recover,
	// the skew must fall to Threshold - Threshold/3 (a hysteresis band, so
	// that a clock hovering at the threshold does not flap between the time
	// domains). The default value is 15ms.
	Threshold time.Duration
	// RecoverAfter is how long, in reference time, the skew of a degraded
	// source must stay inside the recovery band before the source recovers.
	// The default value is 5s.
	RecoverAfter time.Duration
	// Scope is rules.ScopeSource (re-time only a degraded source) or
	// rules.ScopeJob (re-time every source while any is degraded). The
	// default value is rules.ScopeSource.
	Scope rules.Scope
	// Window is the reference-time span of the envelope, in whole
	// milliseconds. It must exceed the producers' batching interval (up to
	// 500ms), so that it always holds a record sent right before a flush,
	// which is nearly undelayed; a longer window is steadier but notices a
	// clock that fell behind later. The default value is 1s.
	Window time.Duration
	// MinSamples is the warm-up: a source is judged only once it has sent
	// this many records spanning at least one Window of reference time. The
	// default value is 16.
	MinSamples int
}

// SkewOptionsFrom returns the options a rules file's skew section asks for,
// with the estimator's own settings at their defaults.
func SkewOptionsFrom(c rules.SkewConfig) SkewOptions {
	return SkewOptions{Threshold: c.Threshold, RecoverAfter: c.RecoverAfter, Scope: c.Scope}
}

// withDefaults fills in the zero fields.
func (o SkewOptions) withDefaults() SkewOptions {
	if o.Threshold <= 0 {
		o.Threshold = 15 * time.Millisecond
	}
	if o.RecoverAfter <= 0 {
		o.RecoverAfter = 5 * time.Second
	}
	if o.Window <= 0 {
		o.Window = time.Second
	}
	if o.MinSamples <= 0 {
		o.MinSamples = 16
	}
	return o
}

// Transition is a source entering or leaving the degraded state.
type Transition struct {
	// Source is the source's name.
	Source string
	// Degraded is true when the source became degraded, false when it
	// recovered.
	Degraded bool
	// Skew is the estimate that caused the transition.
	Skew time.Duration
	// At is the reference time (epoch ms) of the transition: the latest
	// reference time the source had sent.
	At int64
}

// SourceSkew is the state of one source, for logs, metrics and tests.
type SourceSkew struct {
	// Source is the source's name.
	Source string
	// Skew is the current estimate of ts - reference; meaningful once Known.
	Skew time.Duration
	// Known is false during the warm-up, when the source is not judged.
	Known bool
	// Degraded is true while the source's events are windowed by their
	// reference time.
	Degraded bool
	// DegradedFor is how long, in reference time, the source has been
	// degraded; 0 when it is not.
	DegradedFor time.Duration
	// Transitions counts the source's transitions in either direction.
	Transitions int
}

// skewSource is the estimator of one source.
type skewSource struct {
	name string
	// slots holds the largest d of each of the last skewSlots sub-windows;
	// sub-window i lives at slots[i mod skewSlots].
	slots [skewSlots]int64
	// head is the index of the newest sub-window.
	head int64
	// headRef is the largest reference time seen; the clocks of the warm-up
	// and of recovery run on it, so a reference time going back (records
	// from several partitions) never turns them back.
	headRef int64
	// runStart and samples describe the run of samples the envelope holds,
	// for the warm-up: a gap of a whole window empties the envelope and starts
	// a new run. samples saturates at MinSamples.
	runStart int64
	samples  int
	// est is the envelope, the largest d in the span; known is the warm-up
	// being over.
	est   int64
	known bool
	// degraded since degradedAt; okSince is when the estimate last entered
	// the recovery band while degraded (valid when okSet).
	degraded   bool
	degradedAt int64
	okSet      bool
	okSince    int64
	trans      int
}

// SkewTracker estimates the clock skew of each source from its records and
// decides which records are windowed by reference time instead of event
// time. It is a pure state machine: time comes only from the records, so a
// replay gives the same decisions as the live run it recorded.
type SkewTracker struct {
	o         SkewOptions
	sub       int64 // sub-window width, ms
	span      int64 // sub * skewSlots, ms
	thr       int64 // threshold, ms
	band      int64 // recovery band, ms
	recover   int64 // RecoverAfter, ms
	sources   map[string]*skewSource
	nDegraded int
}

// NewSkewTracker returns a tracker without sources.
func NewSkewTracker(o SkewOptions) *SkewTracker {
	o = o.withDefaults()
	sub := max(1, o.Window.Milliseconds()/skewSlots)
	thr := max(1, o.Threshold.Milliseconds())
	return &SkewTracker{
		o:       o,
		sub:     sub,
		span:    sub * skewSlots,
		thr:     thr,
		band:    thr - thr/3,
		recover: o.RecoverAfter.Milliseconds(),
		sources: make(map[string]*skewSource),
	}
}

// Observe feeds one record of source with event time ts and reference time
// ref (epoch ms). It returns the time to window the record by (ts, or ref
// when the record is re-timed), whether it was re-timed, and the transition
// the record caused, nil if none.
func (t *SkewTracker) Observe(source []byte, ts, ref int64) (windowTime int64, processing bool, tr *Transition) {
	s := t.sources[string(source)]
	d := clampSkew(ts, ref)
	idx := floorDiv(ref, t.sub)
	switch {
	case s == nil:
		s = t.newSource(string(source), idx, ref)
	case idx > s.head:
		// A negative gap is an overflow between extreme reference times:
		// as far apart as can be.
		if gap := idx - s.head; gap >= skewSlots || gap < 0 {
			// Silence longer than the window: nothing recent is left to judge
			// by, so the warm-up starts again rather than trusting one
			// possibly delayed record.
			for i := range s.slots {
				s.slots[i] = emptySlot
			}
			s.runStart, s.samples = ref, 0
		} else {
			for i := s.head + 1; i <= idx; i++ {
				s.slots[floorMod(i, skewSlots)] = emptySlot
			}
		}
		s.head = idx
	}
	// A record behind the newest sub-window (reference time going back a
	// little across partitions) counts in the newest one: it is recent
	// evidence all the same, and older sub-windows may already be gone.
	slot := &s.slots[floorMod(s.head, skewSlots)]
	*slot = max(*slot, d)
	s.headRef = max(s.headRef, ref)
	if s.samples < t.o.MinSamples {
		s.samples++
	}
	t.refresh(s)
	tr = t.judge(s)
	if s.degraded || (t.o.Scope == rules.ScopeJob && t.nDegraded > 0) {
		return ref, true, tr
	}
	return ts, false, tr
}

// newSource registers a source at its first record.
func (t *SkewTracker) newSource(name string, idx, ref int64) *skewSource {
	s := &skewSource{name: name, head: idx, headRef: ref, runStart: ref}
	for i := range s.slots {
		s.slots[i] = emptySlot
	}
	t.sources[name] = s
	return s
}

// refresh recomputes the envelope and the warm-up from the slots.
func (t *SkewTracker) refresh(s *skewSource) {
	s.est = emptySlot
	for _, v := range s.slots {
		s.est = max(s.est, v)
	}
	s.known = s.samples >= t.o.MinSamples && s.headRef-s.runStart >= t.span
}

// judge moves s between the time domains after a sample and returns the
// transition, if any. Degrading is immediate, since a large positive d cannot
// come from delay; recovering waits RecoverAfter inside the recovery band.
func (t *SkewTracker) judge(s *skewSource) *Transition {
	if !s.known {
		s.okSet = false
		return nil
	}
	a := abs(s.est)
	if !s.degraded {
		if a <= t.thr {
			return nil
		}
		s.degraded, s.degradedAt, s.okSet = true, s.headRef, false
		s.trans++
		t.nDegraded++
		return &Transition{Source: s.name, Degraded: true, Skew: msDuration(s.est), At: s.headRef}
	}
	if a > t.band {
		s.okSet = false
		return nil
	}
	if !s.okSet {
		s.okSet, s.okSince = true, s.headRef
	}
	if s.headRef-s.okSince < t.recover {
		return nil
	}
	s.degraded, s.okSet = false, false
	s.trans++
	t.nDegraded--
	return &Transition{Source: s.name, Degraded: false, Skew: msDuration(s.est), At: s.headRef}
}

// Sources returns the state of every source, sorted by name.
func (t *SkewTracker) Sources() []SourceSkew {
	out := make([]SourceSkew, 0, len(t.sources))
	for _, s := range t.sortedSources() {
		ss := SourceSkew{Source: s.name, Known: s.known, Degraded: s.degraded, Transitions: s.trans}
		if s.est != emptySlot {
			ss.Skew = msDuration(s.est)
		}
		if s.degraded {
			ss.DegradedFor = msDuration(s.headRef - s.degradedAt)
		}
		out = append(out, ss)
	}
	return out
}

// sortedSources returns the estimators sorted by name, so that listings and
// encodings are deterministic.
func (t *SkewTracker) sortedSources() []*skewSource {
	ss := make([]*skewSource, 0, len(t.sources))
	for _, s := range t.sources {
		ss = append(ss, s)
	}
	slices.SortFunc(ss, func(a, b *skewSource) int { return strings.Compare(a.name, b.name) })
	return ss
}

// AppendBinary appends the tracker's state to dst for a checkpoint: a version
// byte, the sub-window width the slots were cut with, then every source in
// name order. The options themselves are not stored; they come from the
// rules file on restore.
func (t *SkewTracker) AppendBinary(dst []byte) []byte {
	dst = append(dst, skewEncodingVersion)
	dst = binary.AppendUvarint(dst, uint64(t.sub))
	dst = binary.AppendUvarint(dst, uint64(len(t.sources)))
	for _, s := range t.sortedSources() {
		dst = binary.AppendUvarint(dst, uint64(len(s.name)))
		dst = append(dst, s.name...)
		for _, v := range s.slots {
			dst = binary.AppendVarint(dst, v)
		}
		for _, v := range []int64{s.head, s.headRef, s.runStart, int64(s.samples), s.degradedAt, s.okSince, int64(s.trans)} {
			dst = binary.AppendVarint(dst, v)
		}
		var flags byte
		if s.degraded {
			flags |= 1
		}
		if s.okSet {
			flags |= 2
		}
		dst = append(dst, flags)
	}
	return dst
}

// errSkewEncoding is returned for input that AppendBinary cannot have made.
var errSkewEncoding = errors.New("watermark: corrupt skew tracker encoding")

// DecodeSkewTracker restores a tracker written by AppendBinary, with options
// o. The window must cut the same sub-windows as when the state was written
// (the slots would mean other spans otherwise); a tracker whose window
// changed must start afresh.
func DecodeSkewTracker(b []byte, o SkewOptions) (*SkewTracker, error) {
	t := NewSkewTracker(o)
	if len(b) == 0 {
		return nil, errSkewEncoding
	}
	if b[0] != skewEncodingVersion {
		return nil, fmt.Errorf("watermark: skew tracker encoding version %d, want %d", b[0], skewEncodingVersion)
	}
	r := skewReader{b: b[1:]}
	if sub := r.uvarint(); r.err == nil && sub != uint64(t.sub) {
		return nil, fmt.Errorf("watermark: skew tracker state has %dms sub-windows, options give %dms", sub, t.sub)
	}
	n := r.uvarint()
	for i := uint64(0); i < n && r.err == nil; i++ {
		name := r.bytes(r.uvarint())
		s := &skewSource{name: string(name)}
		for j := range s.slots {
			s.slots[j] = r.varint()
		}
		s.head, s.headRef, s.runStart = r.varint(), r.varint(), r.varint()
		samples := r.varint()
		s.degradedAt, s.okSince = r.varint(), r.varint()
		trans := r.varint()
		flags := r.readByte()
		if r.err != nil {
			break
		}
		if samples < 0 || trans < 0 || trans > math.MaxInt32 || flags > 3 || t.sources[s.name] != nil {
			return nil, errSkewEncoding
		}
		for _, v := range s.slots {
			if v != emptySlot && (v > maxSkewMs || v < -maxSkewMs) {
				return nil, errSkewEncoding
			}
		}
		s.samples = int(min(samples, int64(t.o.MinSamples)))
		s.trans = int(trans)
		s.degraded, s.okSet = flags&1 != 0, flags&2 != 0
		t.refresh(s)
		if s.degraded {
			t.nDegraded++
		}
		t.sources[s.name] = s
	}
	if r.err != nil || len(r.b) != 0 {
		return nil, errSkewEncoding
	}
	return t, nil
}

// skewReader reads AppendBinary's output, remembering the first error so
// that the decoder checks once per source.
type skewReader struct {
	b   []byte
	err error
}

func (r *skewReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errSkewEncoding
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *skewReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errSkewEncoding
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *skewReader) readByte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = errSkewEncoding
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// bytes reads n bytes; the length is checked against the input before any
// allocation, so a corrupt length cannot exhaust memory.
func (r *skewReader) bytes(n uint64) []byte {
	if r.err != nil || n > uint64(len(r.b)) {
		r.err = errSkewEncoding
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// clampSkew returns ts - ref bounded to ±maxSkewMs, without overflowing.
func clampSkew(ts, ref int64) int64 {
	ts = min(max(ts, math.MinInt64/4), math.MaxInt64/4)
	ref = min(max(ref, math.MinInt64/4), math.MaxInt64/4)
	return min(max(ts-ref, -maxSkewMs), maxSkewMs)
}

// maxDurationMs is the largest whole number of milliseconds a Duration holds.
const maxDurationMs = math.MaxInt64 / int64(time.Millisecond)

// msDuration converts milliseconds to a Duration, saturating instead of
// overflowing on absurd inputs.
func msDuration(ms int64) time.Duration {
	return time.Duration(min(max(ms, -maxDurationMs), maxDurationMs)) * time.Millisecond
}

// floorDiv divides rounding towards minus infinity, so that sub-windows are
// aligned for negative reference times too.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// floorMod is the remainder of floorDiv, never negative for b > 0.
func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
