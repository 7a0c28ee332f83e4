package windows

import (
	"math"

	"github.com/riskstream/riskstream/rules"
)

// distinctIndex keeps the distinct count of every live window of a distinct
// rule's slot over panes, so that a decision reads its windows' counts
// instead of merging its panes' sets: over a sliding minute of a hot key
// that merge took sixty sets of thousands of values for every event.
//
// A value added to a pane is new to exactly the windows that contain the
// pane and neither its previous nor its next occurrence, a run of
// consecutive starts; the index counts it in those. latest gives both
// occurrences at once for an event in a pane after the value's latest, as
// in-order events are; otherwise they are looked up in the panes' sets,
// at most one window's span of panes each way.
//
// The index is derived from the panes' sets (they stay the state that is
// stored and checkpointed): a slot builds it when a decision first needs it
// and drops it with the slot. It counts the windows from base to the last
// that holds the slot's last pane; a window that starts before base holds
// no pane unless an event came earlier than every pane, and then the index
// is built again from a lower base.
type distinctIndex struct {
	// latest is the start of each value's latest pane.
	latest map[uint64]int64
	// counts[i] is the number of distinct values of the window starting at
	// base + i·slide.
	base   int64
	counts []int32
	// held is how many values the panes' sets hold, in all.
	held int
}

// distinctCap is how many values a distinct rule's state holds in its
// panes' or sessions' sets, in all, before it samples them: past it the
// state keeps only the values whose hashes' top bits are zero, one bit
// more each time it is past the cap again, and a window's count is the
// values it keeps times two to the power of those bits (Gibbons' distinct
// sampling). Hashes spread values evenly, so every window keeps about the
// same share of its values, and one that keeps k of them is counted
// within about 1/√k (one standard deviation); below the cap counts are
// exact. A cap on the sets bounds the index too (its entries are values
// of the sets) and so the state's memory. Tests lower it.
var distinctCap = 1 << 15

// maxDistinctLevel is the sparsest sampling: one value in 2⁶³.
const maxDistinctLevel = 63

// sampled reports whether a state sampling at level keeps the value whose
// hash is h (see distinctCap).
func sampled(h uint64, level uint8) bool { return h>>(64-level) == 0 }

// distinctHeld returns how many values the sets of s, a distinct rule's
// state, hold in all.
func distinctHeld(s *slot) int {
	if x := s.distinctIndex(); x != nil {
		return x.held
	}
	held := 0
	for i := range s.wins {
		held += len(s.wins[i].distinct())
	}
	return held
}

// capDistinct samples the values of s, a distinct rule's state whose sets
// hold held values, more sparsely while they hold more than distinctCap
// (see there). Its index, if any, is dropped, to be built again from the
// sets.
func capDistinct(s *slot, held int) {
	if held <= distinctCap {
		return
	}
	m := s.extra()
	for held > distinctCap && m.distinctLevel < maxDistinctLevel {
		m.distinctLevel++
		held = 0
		for i := range s.wins {
			held += s.wins[i].keepSampled(m.distinctLevel)
		}
	}
	m.distinct = nil
}

// scaleDistinct returns a count v of the values a window of s keeps as a
// count of its values (see distinctCap).
func (s *slot) scaleDistinct(v float64) float64 {
	if l := s.distinctLevel(); l > 0 {
		return math.Ldexp(v, int(l))
	}
	return v
}

// distinctIndexMin is how many values a slot's panes hold, in all, before a
// decision builds its index: below it the sweep's merge of the sets costs
// less than building and keeping a map. Tests set it to 0 and to the
// maximum to compare the two.
var distinctIndexMin = 16

// distinctIndexOf returns, for a distinct rule over panes, s's index for
// an event whose windows start at first or later, live being the start of
// the earliest window not purged: s's own, its purged windows let go, or
// one built from s.wins; nil when s holds fewer values than
// distinctIndexMin, or for another aggregate.
func distinctIndexOf(sp *spec, s *slot, live, first int64) *distinctIndex {
	if sp.agg != rules.Distinct {
		return nil
	}
	if x := s.distinctIndex(); x != nil && first >= x.base {
		if k := (live - x.base) / sp.slide; k > 0 {
			k = min(k, int64(len(x.counts)))
			x.counts, x.base = x.counts[k:], x.base+k*sp.slide
		}
		return x
	}
	values := 0
	for i := range s.wins {
		values += len(s.wins[i].distinct())
	}
	if values < distinctIndexMin {
		if s.more != nil {
			s.more.distinct = nil
		}
		return nil
	}
	x := &distinctIndex{latest: make(map[uint64]int64, values), base: first}
	if len(s.wins) > 0 {
		x.base = max(min(live, first), sp.firstStart(s.wins[0].start))
		x.counts = make([]int32, (sp.lastStart(s.wins[len(s.wins)-1].start)-x.base)/sp.slide+1)
	}
	for i := range s.wins {
		for _, h := range s.wins[i].distinct() {
			x.add(sp, s.wins, i, h)
		}
	}
	s.extra().distinct = x
	return x
}

// distinctIndex returns s's index, nil when it has none.
func (s *slot) distinctIndex() *distinctIndex {
	if s.more == nil {
		return nil
	}
	return s.more.distinct
}

// addDistinct adds an event of a distinct rule whose value is h to pn, one
// of s's panes, and to s's index, if any; first is the start of the
// event's first window not purged. An event in the last pane, as in-order
// events are, asks the index whether h is in the pane: the pane's set is
// then only appended to, and a hot key's pane needs no hash set.
func addDistinct(sp *spec, s *slot, pn *win, h uint64, first int64) {
	x := s.distinctIndex()
	if x != nil && first < x.base {
		s.more.distinct, x = nil, nil // built again from a lower base
	}
	pn.n++
	if !sampled(h, s.distinctLevel()) {
		if x != nil {
			x.cover(sp, pn.start) // the pane may be new
		}
		return
	}
	if n := len(s.wins); x != nil && pn == &s.wins[n-1] {
		if l, ok := x.latest[h]; !ok || l != pn.start {
			pn.appendDistinct(h)
			x.count(sp, s.wins, n-1, h, l, ok)
		}
		return
	}
	if pn.addDistinct(h) && x != nil {
		x.add(sp, s.wins, s.paneIndex(pn), h)
	}
}

// add counts h, just added to panes[i] where it was not, in the windows it
// is new to. The windows of panes[i] that start before base are purged.
func (x *distinctIndex) add(sp *spec, panes []win, i int, h uint64) {
	l, ok := x.latest[h]
	x.count(sp, panes, i, h, l, ok)
}

// count is add, given h's latest pane l (ok: h has one).
func (x *distinctIndex) count(sp *spec, panes []win, i int, h uint64, l int64, ok bool) {
	x.held++
	p := panes[i].start
	first, last := sp.firstStart(p), sp.lastStart(p)
	if first < x.base {
		first = x.base // windows before base are purged (distinctIndexOf)
	}
	x.cover(sp, p)
	prev, next := int64(math.MinInt64), int64(math.MaxInt64)
	if !ok || l < p {
		prev = l
		if !ok {
			prev = math.MinInt64
		}
		x.latest[h] = p
	} else {
		for j := i + 1; j < len(panes); j++ {
			if panes[j].hasDistinct(h) {
				next = panes[j].start
				break
			}
		}
		for j := i - 1; j >= 0 && panes[j].start >= first; j-- {
			if panes[j].hasDistinct(h) {
				prev = panes[j].start
				break
			}
		}
	}
	// New to the windows starting after prev whose end is at or before
	// next.
	if prev >= first {
		first = sp.slideDiv.floor(prev) + sp.slide
	}
	if next != math.MaxInt64 {
		last = min(last, sp.slideDiv.floor(next-sp.size))
	}
	for s := first; s <= last; s += sp.slide {
		x.counts[(s-x.base)/sp.slide]++
	}
}

// cover counts the windows of the pane starting at p, from 0 for those
// after the last counted: they start after every pane.
func (x *distinctIndex) cover(sp *spec, p int64) {
	if n := (sp.lastStart(p)-x.base)/sp.slide + 1; int64(len(x.counts)) < n {
		x.counts = append(x.counts, make([]int32, n-int64(len(x.counts)))...)
	}
}

// events is how many events panes hold.
func events(panes []win) int64 {
	n := int64(0)
	for i := range panes {
		n += panes[i].n
	}
	return n
}

// forget drops the values whose latest pane is p, a pane being purged.
func (x *distinctIndex) forget(p *win) {
	x.held -= len(p.distinct())
	for _, h := range p.distinct() {
		if x.latest[h] == p.start {
			delete(x.latest, h)
		}
	}
}

// best returns the window with the most distinct values among those
// starting in [first, last], both counted, ties going to the earliest,
// and its count; only windows with min_events count (-Inf when none has).
func (x *distinctIndex) best(sp *spec, panes []win, first, last int64) (int64, float64) {
	best, bestStart := math.Inf(-1), first
	counts := x.counts[(first-x.base)/sp.slide : (last-x.base)/sp.slide+1]
	lo := firstFrom(panes, first)
	if panes[len(panes)-1].start < first+sp.size {
		// Every pane from lo is in every window, as when events come in
		// order: the first window holds the others' values and events.
		if sp.minEvents > 1 && events(panes[lo:]) < sp.minEvents {
			return bestStart, best
		}
		return first, float64(counts[0])
	}
	if sp.minEvents <= 1 { // every window holds the event
		for i, c := range counts {
			if v := float64(c); v > best {
				best, bestStart = v, first+int64(i)*sp.slide
			}
		}
		return bestStart, best
	}
	hi := lo
	var n int64 // the events of the window
	for i, s := 0, first; s <= last; i, s = i+1, s+sp.slide {
		for ; lo < hi && panes[lo].start < s; lo++ {
			n -= panes[lo].n
		}
		for ; hi < len(panes) && panes[hi].start < s+sp.size; hi++ {
			n += panes[hi].n
		}
		if n < sp.minEvents {
			continue
		}
		if v := float64(counts[i]); v > best {
			best, bestStart = v, s
		}
	}
	return bestStart, best
}
