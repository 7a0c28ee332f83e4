package windows

import (
	"slices"

	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
)

// acc is the aggregate of one pane or session: the rule's aggregate, or the
// heatmap's distribution.
type acc struct {
	n        int64
	sum      float64
	distinct []uint64 // sorted hashes of distinct values
	hm       *heatmap.Acc
}

func (a *acc) addDistinct(h uint64) {
	i, found := slices.BinarySearch(a.distinct, h)
	if !found {
		a.distinct = slices.Insert(a.distinct, i, h)
	}
}

// merge folds b into a (session merges).
func (a *acc) merge(b *acc) {
	a.n += b.n
	a.sum += b.sum
	for _, h := range b.distinct {
		a.addDistinct(h)
	}
	if b.hm != nil {
		if a.hm == nil {
			a.hm = heatmap.New(len(b.hm.Buckets) - 1)
		}
		a.hm.Merge(b.hm)
	}
}

// value is the rule aggregate of a single pane or session.
func (a *acc) value(kind rules.AggregateKind) float64 {
	switch kind {
	case rules.Sum:
		return a.sum
	case rules.Distinct:
		return float64(len(a.distinct))
	default:
		return float64(a.n)
	}
}
