package slot

import (
	"math"

	"github.com/riskstream/riskstream/rules"
)

// DistinctIndex keeps the distinct count of every live window of a distinct
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
type DistinctIndex struct {
	// Latest is the start of each value's latest pane.
	Latest map[uint64]int64
	// counts[i] is the number of distinct values of the window starting at
	// base + i·slide.
	Base   int64
	Counts []int32
	// held is how many values the panes' sets hold, in all.
	held int
}

// DistinctCap is how many values a distinct rule's state holds in its
// panes' or sessions' sets, in all, before it samples them: past it the
// state keeps only the values whose hashes' top bits are zero, one bit
// more each time it is past the cap again, and a window's count is the
// values it keeps times two to the power of those bits (Gibbons' distinct
// sampling). Hashes spread values evenly, so every window keeps about the
// same share of its values, and one that keeps k of them is counted
// within about 1/√k (one standard deviation); below the cap counts are
// exact. A cap on the sets bounds the index too (its entries are values
// of the sets) and so the state's memory. Tests lower it.
var DistinctCap = 1 << 15

// maxDistinctLevel is the sparsest sampling: one value in 2⁶³.
const maxDistinctLevel = 63

// Sampled reports whether a state sampling at level keeps the value whose
// hash is h (see DistinctCap).
func Sampled(h uint64, level uint8) bool { return h>>(64-level) == 0 }

// DistinctHeld returns how many values the sets of s, a distinct rule's
// state, hold in all.
func DistinctHeld(s *Slot) int {
	if x := s.DistinctIndex(); x != nil {
		return x.held
	}
	held := 0
	for i := range s.Wins {
		held += len(s.Wins[i].Distinct())
	}
	return held
}

// CapDistinct samples the values of s, a distinct rule's state whose sets
// hold held values, more sparsely while they hold more than DistinctCap
// (see there). Its index, if any, is dropped, to be built again from the
// sets.
func CapDistinct(s *Slot, held int) {
	if held <= DistinctCap {
		return
	}
	m := s.Extra()
	for held > DistinctCap && m.distinctLevel < maxDistinctLevel {
		m.distinctLevel++
		held = 0
		for i := range s.Wins {
			held += s.Wins[i].keepSampled(m.distinctLevel)
		}
	}
	m.distinct = nil
}

// ScaleDistinct returns a count v of the values a window of s keeps as a
// count of its values (see DistinctCap).
func (s *Slot) ScaleDistinct(v float64) float64 {
	if l := s.DistinctLevel(); l > 0 {
		return math.Ldexp(v, int(l))
	}
	return v
}

// DistinctIndexMin is how many values a slot's panes hold, in all, before a
// decision builds its index: below it the sweep's merge of the sets costs
// less than building and keeping a map. Tests set it to 0 and to the
// maximum to compare the two.
var DistinctIndexMin = 16

// DistinctIndexOf returns, for a distinct rule over panes, s's index for
// an event whose windows start at first or later, live being the start of
// the earliest window not purged: s's own, its purged windows let go, or
// one built from s.wins; nil when s holds fewer values than
// DistinctIndexMin, or for another aggregate.
func DistinctIndexOf(sp *Spec, s *Slot, live, first int64) *DistinctIndex {
	if sp.Agg != rules.Distinct {
		return nil
	}
	if x := s.DistinctIndex(); x != nil && first >= x.Base {
		if k := (live - x.Base) / sp.Slide; k > 0 {
			k = min(k, int64(len(x.Counts)))
			x.Counts, x.Base = x.Counts[k:], x.Base+k*sp.Slide
		}
		return x
	}
	values := 0
	for i := range s.Wins {
		values += len(s.Wins[i].Distinct())
	}
	if values < DistinctIndexMin {
		if s.More != nil {
			s.More.distinct = nil
		}
		return nil
	}
	x := &DistinctIndex{Latest: make(map[uint64]int64, values), Base: first}
	if len(s.Wins) > 0 {
		x.Base = max(min(live, first), sp.FirstStart(s.Wins[0].Start))
		x.Counts = make([]int32, (sp.LastStart(s.Wins[len(s.Wins)-1].Start)-x.Base)/sp.Slide+1)
	}
	for i := range s.Wins {
		for _, h := range s.Wins[i].Distinct() {
			x.add(sp, s.Wins, i, h)
		}
	}
	s.Extra().distinct = x
	return x
}

// DistinctIndex returns s's index, nil when it has none.
func (s *Slot) DistinctIndex() *DistinctIndex {
	if s.More == nil {
		return nil
	}
	return s.More.distinct
}

// AddDistinct adds an event of a distinct rule whose value is h to pn, one
// of s's panes, and to s's index, if any; first is the start of the
// event's first window not purged. An event in the last pane, as in-order
// events are, asks the index whether h is in the pane: the pane's set is
// then only appended to, and a hot key's pane needs no hash set.
func AddDistinct(sp *Spec, s *Slot, pn *Win, h uint64, first int64) {
	x := s.DistinctIndex()
	if x != nil && first < x.Base {
		s.More.distinct, x = nil, nil // built again from a lower base
	}
	pn.N++
	if !Sampled(h, s.DistinctLevel()) {
		if x != nil {
			x.cover(sp, pn.Start) // the pane may be new
		}
		return
	}
	if n := len(s.Wins); x != nil && pn == &s.Wins[n-1] {
		if l, ok := x.Latest[h]; !ok || l != pn.Start {
			pn.appendDistinct(h)
			x.count(sp, s.Wins, n-1, h, l, ok)
		}
		return
	}
	if pn.AddDistinct(h) && x != nil {
		x.add(sp, s.Wins, s.paneIndex(pn), h)
	}
}

// add counts h, just added to panes[i] where it was not, in the windows it
// is new to. The windows of panes[i] that start before base are purged.
func (x *DistinctIndex) add(sp *Spec, panes []Win, i int, h uint64) {
	l, ok := x.Latest[h]
	x.count(sp, panes, i, h, l, ok)
}

// count is add, given h's latest pane l (ok: h has one).
func (x *DistinctIndex) count(sp *Spec, panes []Win, i int, h uint64, l int64, ok bool) {
	x.held++
	p := panes[i].Start
	first, last := sp.FirstStart(p), sp.LastStart(p)
	if first < x.Base {
		first = x.Base // windows before base are purged (distinctIndexOf)
	}
	x.cover(sp, p)
	prev, next := int64(math.MinInt64), int64(math.MaxInt64)
	if !ok || l < p {
		prev = l
		if !ok {
			prev = math.MinInt64
		}
		x.Latest[h] = p
	} else {
		for j := i + 1; j < len(panes); j++ {
			if panes[j].hasDistinct(h) {
				next = panes[j].Start
				break
			}
		}
		for j := i - 1; j >= 0 && panes[j].Start >= first; j-- {
			if panes[j].hasDistinct(h) {
				prev = panes[j].Start
				break
			}
		}
	}
	// New to the windows starting after prev whose end is at or before
	// next.
	if prev >= first {
		first = sp.SlideDiv.Floor(prev) + sp.Slide
	}
	if next != math.MaxInt64 {
		last = min(last, sp.SlideDiv.Floor(next-sp.Size))
	}
	for s := first; s <= last; s += sp.Slide {
		x.Counts[(s-x.Base)/sp.Slide]++
	}
}

// cover counts the windows of the pane starting at p, from 0 for those
// after the last counted: they start after every pane.
func (x *DistinctIndex) cover(sp *Spec, p int64) {
	if n := (sp.LastStart(p)-x.Base)/sp.Slide + 1; int64(len(x.Counts)) < n {
		x.Counts = append(x.Counts, make([]int32, n-int64(len(x.Counts)))...)
	}
}

// Events is how many events panes hold.
func Events(panes []Win) int64 {
	n := int64(0)
	for i := range panes {
		n += panes[i].N
	}
	return n
}

// forget drops the values whose latest pane is p, a pane being purged.
func (x *DistinctIndex) forget(p *Win) {
	x.held -= len(p.Distinct())
	for _, h := range p.Distinct() {
		if x.Latest[h] == p.Start {
			delete(x.Latest, h)
		}
	}
}

// Best returns the window with the most distinct values among those
// starting in [first, last], both counted, ties going to the earliest,
// and its count; only windows with min_events count (-Inf when none has).
func (x *DistinctIndex) Best(sp *Spec, panes []Win, first, last int64) (int64, float64) {
	best, bestStart := math.Inf(-1), first
	counts := x.Counts[(first-x.Base)/sp.Slide : (last-x.Base)/sp.Slide+1]
	lo := FirstFrom(panes, first)
	if panes[len(panes)-1].Start < first+sp.Size {
		// Every pane from lo is in every window, as when events come in
		// order: the first window holds the others' values and events.
		if sp.MinEvents > 1 && Events(panes[lo:]) < sp.MinEvents {
			return bestStart, best
		}
		return first, float64(counts[0])
	}
	if sp.MinEvents <= 1 { // every window holds the event
		for i, c := range counts {
			if v := float64(c); v > best {
				best, bestStart = v, first+int64(i)*sp.Slide
			}
		}
		return bestStart, best
	}
	hi := lo
	var n int64 // the events of the window
	for i, s := 0, first; s <= last; i, s = i+1, s+sp.Slide {
		for ; lo < hi && panes[lo].Start < s; lo++ {
			n -= panes[lo].N
		}
		for ; hi < len(panes) && panes[hi].Start < s+sp.Size; hi++ {
			n += panes[hi].N
		}
		if n < sp.MinEvents {
			continue
		}
		if v := float64(counts[i]); v > best {
			best, bestStart = v, s
		}
	}
	return bestStart, best
}
