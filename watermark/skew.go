package watermark

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/riskstream/riskstream/internal/corrupt"

	"github.com/riskstream/riskstream/rules"
)

// Clock-skew detection.
//
// A record's d = ts - ref is its source clock's offset minus the delay
// between stamping and reaching the reference clock. Delay is never
// negative, so, as NTP's minimum-delay filter does, the estimator takes the
// upper envelope of d over a recent span of reference time: the records that
// waited least carry the offset. Per source the state is a ring of
// skewBuckets sub-windows holding the largest d each, bounded whatever the
// record rate, and an Observe is O(1) amortized: the envelope of the older
// sub-windows is recomputed only when a new sub-window starts.
//
// The envelope is the plain maximum, not a second largest or a quantile:
// delay only ever lowers d, so one large d is the clock's doing, and the
// earliest evidence of a clock running ahead. A clock running behind must
// lower every d in the window, so no single record can hide or fake it.
//
// Both clocks tick in whole milliseconds, and over many records the largest
// d is the true envelope rounded up: the records of a clock 15.4ms behind
// show -15 or -16 as the millisecond boundaries fall, the largest is -15.
// Hence the bounds: degraded when the estimate is > threshold or
// <= -threshold, which is |true envelope| > threshold on both sides.
//
// Hysteresis is in time and in level. Degrading is immediate. Recovering
// takes RecoverAfter with the estimate inside a narrower band, so that a
// clock hovering at the threshold does not flap. The band is asymmetric
// because delay noise is: it only lowers the estimate. A clock ahead reads
// better than it is whenever the window's least-delayed record was a few ms
// late (with 500ms batching the window holds only one or two flushes), so
// the positive bound is well inside the threshold, at 2/3 of it. A clock
// behind, and an in-sync clock, read worse than they are by the same delay,
// so a wide negative band would keep a fixed source degraded behind a
// jittery link: the negative bound is 7/8 of the threshold, enough for the
// millisecond rounding and a wandering clock.

// skewBuckets is how many sub-windows the window is cut into: a record
// stays in the envelope until the reference time is between 7/8 of the
// window and the whole window past its own.
const skewBuckets = 8

// skewNone marks an empty sub-window; observed differences are clamped
// above it.
const skewNone = math.MinInt64

// skewVersion is the first byte of an encoded SkewTracker; a change of layout
// bumps it, so that old state is refused instead of misread.
const skewVersion = 1

// errCorruptSkew reports an encoded SkewTracker that cannot be decoded.
var errCorruptSkew = corrupt.Errorf("watermark: corrupt skew state")

// SkewOptions configure skew detection. Zero (or negative) fields get their
// defaults.
type SkewOptions struct {
	// Threshold is the |skew| above which a source is degraded: its events
	// are windowed by reference time. To recover, the skew must come back
	// within -7/8 and +2/3 of it (-13ms..+10ms by default; see the
	// hysteresis above). The default value is 15ms.
	Threshold time.Duration
	// RecoverAfter is how long, in reference time, the skew of a degraded
	// source must stay within the recovery band before it recovers. The
	// default value is 5s.
	RecoverAfter time.Duration
	// Scope is which sources are re-timed while one is degraded. The default
	// value is rules.ScopeSource.
	Scope rules.Scope
	// Window is the span of reference time the envelope covers, rounded up
	// to a multiple of 8ms. A record stays in the envelope between 7/8 of it
	// and all of it, which must exceed the longest producer batching
	// (linger) interval plus transport jitter, so that the envelope always
	// holds a record that waited almost nothing: the default covers 500ms
	// batching with room to spare. A clock stepping backwards is seen once
	// the last records stamped before the step have left, so a longer window
	// delays that as much. The default value is 800ms.
	Window time.Duration
	// MinSamples is the warm-up: a source is judged only once it has this
	// many samples and they span a full Window of reference time, after it
	// first appears and after every silence longer than the Window. The
	// default value is 16.
	MinSamples int
	// MaxSources bounds the sources tracked, whose names come from the
	// input: past it, the tenth of them seen least recently (in reference
	// time; healthy before degraded) are forgotten, and one that comes
	// back warms up again. Without a bound, any producer sending new
	// source names would grow the tracker, and each checkpoint, without
	// end. The default value is 10000.
	MaxSources int
}

// SkewOptionsFrom returns the options a rules file's skew block asks for,
// with the estimator's own settings at their defaults.
func SkewOptionsFrom(c rules.SkewConfig) SkewOptions {
	return SkewOptions{Threshold: c.Threshold, RecoverAfter: c.RecoverAfter, Scope: c.Scope, MaxSources: c.MaxSources}
}

// Transition is a source becoming degraded or recovering, for the caller to
// log and count.
type Transition struct {
	// Source is the source whose state changed.
	Source string
	// Degraded is the new state: true when the source's events are now
	// windowed by reference time.
	Degraded bool
	// Skew is the estimate at the transition, in whole milliseconds.
	Skew time.Duration
	// At is the source's reference time of the transition, epoch ms.
	At int64
}

// SourceSkew is one source's state, for metrics and the replay summary.
type SourceSkew struct {
	// Source is the source name.
	Source string
	// Skew is the estimate at the source's last record.
	Skew time.Duration
	// Known reports whether the source is past its warm-up, so that Skew is
	// judged.
	Known bool
	// Degraded reports whether the source is degraded.
	Degraded bool
	// DegradedFor is the total reference time the source has spent degraded,
	// up to its last record.
	DegradedFor time.Duration
	// Transitions counts the source's degradations and recoveries.
	Transitions int
}

// SkewTracker holds one skew estimator per source and decides, record by
// record, whether a record is windowed by its event time or by its
// reference time. It reads no clock: both times come with the records, so a
// replay makes the same decisions as the live run it recorded.
type SkewTracker struct {
	// In milliseconds, the resolution of both clocks. A degraded source is
	// good again while -recoverLo < estimate <= recoverHi.
	thr, recoverLo, recoverHi, recoverAfter, window, sub int64
	minSamples                                           int64
	maxSources                                           int
	forgotten                                            int64
	scope                                                rules.Scope
	srcs                                                 map[string]*skewEst
	degraded                                             int // sources degraded now, for scope job
	// recent holds the sources of the last records, replaced in turn:
	// a partition carries records of a few sources, in runs (a producer's
	// batch) or interleaved, and comparing a few short names is cheaper
	// than hashing one.
	recent     [4]*skewEst
	nextRecent int
}

// skewBucket is one sub-window: its index (ref / sub) and largest d,
// skewNone when it has none.
type skewBucket struct {
	idx, max int64
}

// skewEst is the estimator and state of one source. A ring slot belongs to
// the window when its idx is within skewBuckets of head; others are stale
// and are reset when written.
type skewEst struct {
	name  string
	ring  [skewBuckets]skewBucket
	older int64 // envelope of the window's buckets before head
	head  int64 // bucket index of now
	start int64 // head * sub, where the head bucket begins
	now   int64 // largest reference time seen: ref may step back a little
	since int64 // reference time at which the current run of samples began
	n     int64 // samples since then

	started, degraded, good bool
	degradedAt              int64 // reference time of the last degradation
	degradedFor             int64 // ms spent degraded, episodes that ended
	goodSince               int64 // when the estimate entered the band, if good
	transitions             int64
}

// NewSkewTracker returns a tracker with no sources.
func NewSkewTracker(o SkewOptions) *SkewTracker {
	orDefault := func(d, def time.Duration) int64 {
		if d <= 0 {
			d = def
		}
		return int64((d + time.Millisecond - 1) / time.Millisecond)
	}
	thr := orDefault(o.Threshold, 15*time.Millisecond)
	sub := (orDefault(o.Window, 800*time.Millisecond) + skewBuckets - 1) / skewBuckets
	minSamples := int64(o.MinSamples)
	if minSamples <= 0 {
		minSamples = 16
	}
	maxSources := o.MaxSources
	if maxSources <= 0 {
		maxSources = 10000
	}
	return &SkewTracker{
		maxSources: maxSources,
		thr:        thr, recoverLo: max(1, thr*7/8), recoverHi: thr * 2 / 3, recoverAfter: orDefault(o.RecoverAfter, 5*time.Second),
		window: sub * skewBuckets, sub: sub, minSamples: minSamples, scope: o.Scope,
		srcs: make(map[string]*skewEst),
	}
}

// Observe feeds one record of source (as bytes, the way the event decoder
// holds it: the lookup does not allocate) with event time ts and reference
// time ref, both epoch ms. It returns the time to window the record at: ts,
// or ref with processing true while the source (with scope job, any source)
// is degraded. tr is the transition this record caused, if any.
func (t *SkewTracker) Observe(source []byte, ts, ref int64) (windowTime int64, processing bool, tr *Transition) {
	e := t.recentSource(source)
	if e == nil {
		if e = t.srcs[string(source)]; e == nil {
			if len(t.srcs) >= t.maxSources {
				t.forget()
			}
			e = &skewEst{name: string(source)}
			t.srcs[e.name] = e
		}
		t.recent[t.nextRecent] = e
		t.nextRecent = (t.nextRecent + 1) % len(t.recent)
	}
	tr = t.observe(e, skewSub(ts, ref), ref)
	if e.degraded || t.scope == rules.ScopeJob && t.degraded > 0 {
		return ref, true, tr
	}
	return ts, false, tr
}

// forget drops the tenth of the sources seen least recently, healthy ones
// first: the order depends only on the records, so a replay forgets what
// the live run did.
func (t *SkewTracker) forget() {
	all := make([]*skewEst, 0, len(t.srcs))
	for _, e := range t.srcs {
		all = append(all, e)
	}
	slices.SortFunc(all, func(a, b *skewEst) int {
		if a.degraded != b.degraded {
			if a.degraded {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(a.now, b.now); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	for _, e := range all[:max(1, len(all)/10)] {
		delete(t.srcs, e.name)
		if e.degraded {
			t.degraded--
		}
		t.forgotten++
	}
	t.recent = [len(t.recent)]*skewEst{}
}

// Forgotten counts the sources forgotten to stay within MaxSources.
func (t *SkewTracker) Forgotten() int64 { return t.forgotten }

// recentSource returns source's state if it is among the recent ones.
func (t *SkewTracker) recentSource(source []byte) *skewEst {
	for _, e := range t.recent {
		if e != nil && e.name == string(source) {
			return e
		}
	}
	return nil
}

// skewSub is a - b clamped to the int64 range, above skewNone, so that a
// wild timestamp reads as a huge skew rather than wrapping around.
func skewSub(a, b int64) int64 {
	d := a - b
	if (d < a) != (b > 0) {
		if b > 0 {
			return skewNone + 1
		}
		return math.MaxInt64
	}
	return max(d, skewNone+1)
}

// skewSlot is the ring position of bucket idx.
func skewSlot(idx int64) int {
	return int(uint64(idx) % skewBuckets)
}

func (t *SkewTracker) observe(e *skewEst, d, ref int64) *Transition {
	// Differences are taken as uint64, exact for ordered operands whatever
	// their magnitude.
	idx := e.head
	if uint64(ref)-uint64(e.start) >= uint64(t.sub) || !e.started {
		// Not in the newest sub-window: dividing is the costly part.
		if idx = ref / t.sub; ref < 0 && ref%t.sub != 0 {
			idx--
		}
	}
	switch {
	case !e.started || idx > e.head && uint64(idx)-uint64(e.head) >= skewBuckets:
		// A first record, or one after a silence longer than the window:
		// nothing in the window is left to judge by, so warm up again.
		e.started, e.good = true, false
		e.head, e.start, e.since, e.n, e.now = idx, idx*t.sub, ref, 0, ref
		for i := range e.ring {
			e.ring[i] = skewBucket{idx: idx, max: skewNone}
		}
		e.older = skewNone
	case idx > e.head:
		e.head, e.start = idx, idx*t.sub
		e.ring[skewSlot(idx)] = skewBucket{idx: idx, max: skewNone}
		e.older = e.envelopeBefore()
	case uint64(e.head)-uint64(idx) >= skewBuckets:
		// Older than the window: the source's reference time went back
		// (records of a partition further behind in a backlog, say). The
		// leading records suffice to judge by.
		return nil
	}
	e.now = max(e.now, ref)
	b := &e.ring[skewSlot(idx)]
	if b.idx != idx {
		*b = skewBucket{idx: idx, max: skewNone}
	}
	b.max = max(b.max, d)
	if idx < e.head {
		e.older = max(e.older, d)
	}
	e.n++
	return t.judge(e)
}

// envelopeBefore is the largest d of the window's buckets before head.
func (e *skewEst) envelopeBefore() int64 {
	m := int64(skewNone)
	for _, b := range e.ring {
		if b.idx < e.head && uint64(e.head)-uint64(b.idx) < skewBuckets {
			m = max(m, b.max)
		}
	}
	return m
}

// estimate is the envelope of the window: the largest d.
func (e *skewEst) estimate() int64 {
	return max(e.older, e.ring[skewSlot(e.head)].max)
}

func (t *SkewTracker) known(e *skewEst) bool {
	return e.started && e.n >= t.minSamples && uint64(e.now)-uint64(e.since) >= uint64(t.window)
}

// judge degrades a source as soon as its estimate is beyond the threshold,
// and recovers it once the estimate stayed within the recovery band for
// recoverAfter.
func (t *SkewTracker) judge(e *skewEst) *Transition {
	if !t.known(e) {
		return nil
	}
	est := e.estimate()
	switch {
	case !e.degraded && (est > t.thr || est <= -t.thr):
		e.degraded, e.good, e.degradedAt = true, false, e.now
		t.degraded++
	case !e.degraded:
		return nil
	case est > t.recoverHi || est <= -t.recoverLo:
		e.good = false
		return nil
	case !e.good:
		e.good, e.goodSince = true, e.now
		fallthrough
	default:
		if e.now-e.goodSince < t.recoverAfter {
			return nil
		}
		e.degraded, e.good = false, false
		e.degradedFor += e.now - e.degradedAt
		t.degraded--
	}
	e.transitions++
	return &Transition{Source: e.name, Degraded: e.degraded, Skew: skewDuration(est), At: e.now}
}

// skewDuration converts ms to a Duration, saturating instead of wrapping.
func skewDuration(ms int64) time.Duration {
	const lim = math.MaxInt64 / int64(time.Millisecond)
	return time.Duration(min(max(ms, -lim), lim)) * time.Millisecond
}

// Sources lists every source seen, sorted by name.
func (t *SkewTracker) Sources() []SourceSkew {
	out := make([]SourceSkew, 0, len(t.srcs))
	for _, e := range t.srcs {
		s := SourceSkew{
			Source: e.name, Known: t.known(e), Degraded: e.degraded,
			Transitions: int(e.transitions),
		}
		if e.started {
			s.Skew = skewDuration(e.estimate())
		}
		ms := e.degradedFor
		if e.degraded {
			ms += e.now - e.degradedAt
		}
		s.DegradedFor = skewDuration(ms)
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b SourceSkew) int { return strings.Compare(a.Source, b.Source) })
	return out
}

// Flags of an encoded source.
const (
	skewStarted = 1 << iota
	skewDegraded
	skewGood
)

func skewFlag(on bool, f byte) byte {
	if on {
		return f
	}
	return 0
}

// AppendBinary appends the tracker's encoding to dst, for checkpoints: a
// version byte, the sub-window width, then each source in name order with
// the sub-windows still in its window. The options are not encoded: they
// come from the rules file on restart.
func (t *SkewTracker) AppendBinary(dst []byte) []byte {
	dst = append(dst, skewVersion)
	dst = binary.AppendVarint(dst, t.sub)
	names := make([]string, 0, len(t.srcs))
	for name := range t.srcs {
		names = append(names, name)
	}
	slices.Sort(names)
	dst = binary.AppendUvarint(dst, uint64(len(names)))
	for _, name := range names {
		e := t.srcs[name]
		dst = binary.AppendUvarint(dst, uint64(len(name)))
		dst = append(dst, name...)
		dst = append(dst, skewFlag(e.started, skewStarted)|skewFlag(e.degraded, skewDegraded)|skewFlag(e.good, skewGood))
		for _, v := range []int64{e.head, e.now, e.since, e.n, e.degradedAt, e.degradedFor, e.goodSince, e.transitions} {
			dst = binary.AppendVarint(dst, v)
		}
		// Only the sub-windows still in the window: stale slots mean nothing.
		live := e.ring[:0:0]
		for _, b := range e.ring {
			if e.started && b.max != skewNone && b.idx <= e.head && uint64(e.head)-uint64(b.idx) < skewBuckets {
				live = append(live, b)
			}
		}
		dst = binary.AppendUvarint(dst, uint64(len(live)))
		for _, b := range live {
			dst = binary.AppendVarint(dst, b.idx)
			dst = binary.AppendVarint(dst, b.max)
		}
	}
	return dst
}

// skewDecoder reads an encoding, remembering the first failure.
type skewDecoder struct {
	b  []byte
	ok bool
}

func (d *skewDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.ok, d.b = false, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length that must fit in what is left of the input, each
// element taking at least one byte.
func (d *skewDecoder) count() int {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > uint64(len(d.b)-n) {
		d.ok, d.b = false, nil
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

func (d *skewDecoder) bytes(n int) []byte {
	if n > len(d.b) {
		d.ok, d.b = false, nil
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// DecodeSkewTracker restores a tracker written by AppendBinary, with
// options o. It continues exactly where the encoded tracker stopped, unless
// the window changed: then each source warms up again, keeping its state.
func DecodeSkewTracker(b []byte, o SkewOptions) (*SkewTracker, error) {
	if len(b) == 0 {
		return nil, errCorruptSkew
	}
	if b[0] != skewVersion {
		return nil, fmt.Errorf("watermark: skew state has version %d, want %d", b[0], skewVersion)
	}
	t := NewSkewTracker(o)
	d := skewDecoder{b: b[1:], ok: true}
	sub := d.varint()
	n := d.count()
	prev := ""
	for i := 0; i < n && d.ok; i++ {
		name := string(d.bytes(d.count()))
		if i > 0 && name <= prev {
			return nil, errCorruptSkew // written sorted, each once
		}
		prev = name
		flags := d.bytes(1)
		e := &skewEst{name: name}
		for _, p := range []*int64{&e.head, &e.now, &e.since, &e.n, &e.degradedAt, &e.degradedFor, &e.goodSince, &e.transitions} {
			*p = d.varint()
		}
		if !d.ok || flags[0]&^(skewStarted|skewDegraded|skewGood) != 0 {
			return nil, errCorruptSkew
		}
		e.started = flags[0]&skewStarted != 0
		e.degraded = flags[0]&skewDegraded != 0
		e.good = flags[0]&skewGood != 0
		for j := range e.ring {
			e.ring[j] = skewBucket{idx: e.head, max: skewNone}
		}
		var filled [skewBuckets]bool
		nb := d.count()
		if nb > skewBuckets || nb > 0 && !e.started {
			return nil, errCorruptSkew
		}
		for range nb {
			bk := skewBucket{idx: d.varint(), max: d.varint()}
			s := skewSlot(bk.idx)
			if !d.ok || filled[s] || bk.max == skewNone || bk.idx > e.head || uint64(e.head)-uint64(bk.idx) >= skewBuckets {
				return nil, errCorruptSkew
			}
			filled[s], e.ring[s] = true, bk
		}
		if sub != t.sub {
			e.started = false // bucket indices mean other times now
		}
		e.start = e.head * t.sub
		e.older = e.envelopeBefore()
		if e.degraded {
			t.degraded++
		}
		t.srcs[name] = e
	}
	if !d.ok || len(d.b) != 0 {
		return nil, errCorruptSkew
	}
	return t, nil
}
