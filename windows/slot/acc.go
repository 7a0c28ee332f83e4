package slot

import (
	"slices"

	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
)

// Acc is the aggregate of one pane or session: the rule's aggregate, or the
// heatmap's distribution.
type Acc struct {
	N   int64
	Sum float64
	// X is out of line because only distinct rules and heatmaps use it:
	// count and sum windows stay small enough for a slot's window and its
	// hot fields to share two cache lines (see slot).
	X *AccExtra
}

// AccExtra is the part of an aggregate that distinct rules and heatmaps
// use.
type AccExtra struct {
	// distinct are the hashes of the distinct values added, in the order
	// they were first added; seen indexes them once they are more than
	// distinctScan (built when first needed, as after decoding): a hot
	// key's minute holds tens of thousands, and a sorted slice took a
	// copy of half of them for each value inserted.
	distinct []uint64
	seen     map[uint64]struct{}
	Heatmap  *heatmap.Acc
}

// distinctScan is how many distinct values a scan of the slice looks
// through before a set indexes them.
const distinctScan = 32

// has reports whether h is among the distinct values.
func (x *AccExtra) has(h uint64) bool {
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
func (a *Acc) hasDistinct(h uint64) bool {
	return a.X != nil && a.X.has(h)
}

// Distinct returns the hashes of the distinct values added.
func (a *Acc) Distinct() []uint64 {
	if a.X == nil {
		return nil
	}
	return a.X.distinct
}

// Heatmap returns the distribution of a heatmap's window, nil when empty.
func (a *Acc) Heatmap() *heatmap.Acc {
	if a.X == nil {
		return nil
	}
	return a.X.Heatmap
}

func (a *Acc) extra() *AccExtra {
	if a.X == nil {
		a.X = &AccExtra{}
	}
	return a.X
}

// AddLatency adds v to the heatmap distribution with bounds, through the
// operator's memo of sketch indexes.
func (a *Acc) AddLatency(v float64, processing bool, bounds []float64, memo *heatmap.IndexMemo) {
	if a.X == nil {
		a.X = newHeatmapExtra(len(bounds))
	} else if a.X.Heatmap == nil {
		a.X.Heatmap = heatmap.New(len(bounds))
	}
	a.X.Heatmap.Add(v, processing, bounds, memo)
}

// HeatmapExtra is an AccExtra allocated with its distribution: a decision
// that reads many panes' distributions follows one pointer to each, to
// lines next to each other, where two pointers would each miss the cache.
type HeatmapExtra struct {
	AccExtra
	Heatmap heatmap.Acc
	// all is the one bucket of a distribution without bounds: a quantile
	// rule's.
	all [1]int64
}

// newHeatmapExtra returns an AccExtra holding an empty distribution of
// nBounds bounds.
func newHeatmapExtra(nBounds int) *AccExtra {
	e := &HeatmapExtra{}
	if nBounds == 0 {
		e.Heatmap.Buckets = e.all[:]
	} else {
		e.Heatmap.Buckets = make([]int64, nBounds+1)
	}
	e.AccExtra.Heatmap = &e.Heatmap
	return &e.AccExtra
}

// AddDistinct adds h to the distinct values, and reports whether it was
// not among them.
func (a *Acc) AddDistinct(h uint64) bool {
	if a.X != nil && a.X.has(h) {
		return false
	}
	a.appendDistinct(h)
	return true
}

// appendDistinct adds h, not among the distinct values, to them.
func (a *Acc) appendDistinct(h uint64) {
	x := a.extra()
	x.distinct = append(x.distinct, h)
	if x.seen != nil {
		x.seen[h] = struct{}{}
	}
}

// keepSampled drops the distinct values a state sampling at level does
// not keep (see DistinctCap), and returns how many are left.
func (a *Acc) keepSampled(level uint8) int {
	if a.X == nil {
		return 0
	}
	x := a.X
	x.distinct = slices.DeleteFunc(x.distinct, func(h uint64) bool { return !Sampled(h, level) })
	x.seen = nil // built again when needed
	return len(x.distinct)
}

// Merge folds b into a (session merges) for a spec whose aggregate is
// kind: for min and max rules sum holds the extreme, not a sum.
func (a *Acc) Merge(b *Acc, kind rules.AggregateKind) {
	switch {
	case kind == rules.Min && a.N > 0 && b.N > 0:
		a.Sum = min(a.Sum, b.Sum)
	case kind == rules.Max && a.N > 0 && b.N > 0:
		a.Sum = max(a.Sum, b.Sum)
	default:
		a.Sum += b.Sum
	}
	a.N += b.N
	for _, h := range b.Distinct() {
		a.AddDistinct(h)
	}
	if hm := b.Heatmap(); hm != nil {
		x := a.extra()
		if x.Heatmap == nil {
			x.Heatmap = heatmap.New(len(hm.Buckets) - 1)
		}
		x.Heatmap.Merge(hm)
	}
}
