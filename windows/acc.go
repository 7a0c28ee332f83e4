package windows

import (
	"slices"

	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
)

// acc is the aggregate of one pane or session: the rule's aggregate, or the
// heatmap's distribution.
type acc struct {
	n   int64
	sum float64
	// x is out of line because only distinct rules and heatmaps use it:
	// count and sum windows stay small enough for a slot's window and its
	// hot fields to share two cache lines (see slot).
	x *accExtra
}

// accExtra is the part of an aggregate that distinct rules and heatmaps
// use.
type accExtra struct {
	// distinct are the hashes of the distinct values added, in the order
	// they were first added; seen indexes them once they are more than
	// distinctScan (built when first needed, as after decoding): a hot
	// key's minute holds tens of thousands, and a sorted slice took a
	// copy of half of them for each value inserted.
	distinct []uint64
	seen     map[uint64]struct{}
	hm       *heatmap.Acc
}

// distinctScan is how many distinct values a scan of the slice looks
// through before a set indexes them.
const distinctScan = 32

// has reports whether h is among the distinct values.
func (x *accExtra) has(h uint64) bool {
	if len(x.distinct) <= distinctScan {
		return slices.Contains(x.distinct, h)
	}
	if x.seen == nil {
		x.seen = make(map[uint64]struct{}, len(x.distinct))
		for _, v := range x.distinct {
			x.seen[v] = struct{}{}
		}
	}
	_, ok := x.seen[h]
	return ok
}

// hasDistinct reports whether h is among the distinct values added.
func (a *acc) hasDistinct(h uint64) bool {
	return a.x != nil && a.x.has(h)
}

// distinct returns the hashes of the distinct values added.
func (a *acc) distinct() []uint64 {
	if a.x == nil {
		return nil
	}
	return a.x.distinct
}

// heatmap returns the distribution of a heatmap's window, nil when empty.
func (a *acc) heatmap() *heatmap.Acc {
	if a.x == nil {
		return nil
	}
	return a.x.hm
}

func (a *acc) extra() *accExtra {
	if a.x == nil {
		a.x = &accExtra{}
	}
	return a.x
}

// addLatency adds v to the heatmap distribution with bounds, through the
// operator's memo of sketch indexes.
func (a *acc) addLatency(v float64, processing bool, bounds []float64, memo *heatmap.IndexMemo) {
	if a.x == nil {
		a.x = newHeatmapExtra(len(bounds))
	} else if a.x.hm == nil {
		a.x.hm = heatmap.New(len(bounds))
	}
	a.x.hm.Add(v, processing, bounds, memo)
}

// heatmapExtra is an accExtra allocated with its distribution: a decision
// that reads many panes' distributions follows one pointer to each, to
// lines next to each other, where two pointers would each miss the cache.
type heatmapExtra struct {
	accExtra
	hm heatmap.Acc
	// all is the one bucket of a distribution without bounds: a quantile
	// rule's.
	all [1]int64
}

// newHeatmapExtra returns an accExtra holding an empty distribution of
// nBounds bounds.
func newHeatmapExtra(nBounds int) *accExtra {
	e := &heatmapExtra{}
	if nBounds == 0 {
		e.hm.Buckets = e.all[:]
	} else {
		e.hm.Buckets = make([]int64, nBounds+1)
	}
	e.accExtra.hm = &e.hm
	return &e.accExtra
}

// addDistinct adds h to the distinct values, and reports whether it was
// not among them.
func (a *acc) addDistinct(h uint64) bool {
	if a.x != nil && a.x.has(h) {
		return false
	}
	a.appendDistinct(h)
	return true
}

// appendDistinct adds h, not among the distinct values, to them.
func (a *acc) appendDistinct(h uint64) {
	x := a.extra()
	x.distinct = append(x.distinct, h)
	if x.seen != nil {
		x.seen[h] = struct{}{}
	}
}

// keepSampled drops the distinct values a state sampling at level does
// not keep (see distinctCap), and returns how many are left.
func (a *acc) keepSampled(level uint8) int {
	if a.x == nil {
		return 0
	}
	x := a.x
	x.distinct = slices.DeleteFunc(x.distinct, func(h uint64) bool { return !sampled(h, level) })
	x.seen = nil // built again when needed
	return len(x.distinct)
}

// merge folds b into a (session merges) for a spec whose aggregate is
// kind: for min and max rules sum holds the extreme, not a sum.
func (a *acc) merge(b *acc, kind rules.AggregateKind) {
	switch {
	case kind == rules.Min && a.n > 0 && b.n > 0:
		a.sum = min(a.sum, b.sum)
	case kind == rules.Max && a.n > 0 && b.n > 0:
		a.sum = max(a.sum, b.sum)
	default:
		a.sum += b.sum
	}
	a.n += b.n
	for _, h := range b.distinct() {
		a.addDistinct(h)
	}
	if hm := b.heatmap(); hm != nil {
		x := a.extra()
		if x.hm == nil {
			x.hm = heatmap.New(len(hm.Buckets) - 1)
		}
		x.hm.Merge(hm)
	}
}
