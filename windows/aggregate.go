package windows

import "github.com/riskstream/riskstream/rules"

// The aggregates beyond count, sum and distinct keep their state in the
// fields an acc already has, so that a slot's layout and encoding stay as
// they are (docs/format/state.md "Aggregates"): n counts the events of
// every rule; sum is the sum of the field for avg, the number of events
// that pass the match filters for ratio, and the smallest or largest value
// for min and max; a quantile rule keeps the heatmaps' sketch, with no
// buckets, out of line.

// addToStat adds v, an event's value, to a, whose n already counts the
// event, for an avg, ratio (v is 1 or 0), min, max or quantile rule.
func addToStat(kind rules.AggregateKind, a *acc, v float64) {
	switch kind {
	case rules.Avg, rules.Ratio:
		a.sum += v
	case rules.Min:
		if a.n == 1 || v < a.sum {
			a.sum = v
		}
	case rules.Max:
		if a.n == 1 || v > a.sum {
			a.sum = v
		}
	case rules.Quantile:
		a.addLatency(v, false, nil)
	}
}

// sessionValue is the aggregate of a rule's session window, a.
func (sp *spec) sessionValue(a *acc) float64 {
	switch sp.agg {
	case rules.Sum, rules.Min, rules.Max:
		return a.sum
	case rules.Distinct:
		return float64(len(a.distinct()))
	case rules.Avg, rules.Ratio:
		return a.sum / float64(a.n)
	case rules.Quantile:
		return a.heatmap().Quantile(sp.q)
	}
	return float64(a.n)
}

// statValue is the aggregate of an avg, ratio, min, max or quantile rule's
// window made of panes (at least one, a run of all), holding n events
// whose sums add up to sum; extreme follows the smallest or largest of the
// panes' values.
func (op *Operator) statValue(sp *spec, all, panes []win, n int64, sum float64, extreme *extremes) float64 {
	switch sp.agg {
	case rules.Avg, rules.Ratio:
		return sum / float64(n)
	case rules.Min, rules.Max:
		return extreme.value(all)
	}
	if len(panes) == 1 {
		return panes[0].heatmap().Quantile(sp.q)
	}
	// DDSketch merges by adding bin counts, so the merge of the panes is the
	// sketch of the window's values, whatever the panes.
	m := op.quantiles[sp.index]
	m.Reset()
	for i := range panes {
		m.Merge(panes[i].heatmap())
	}
	return m.Quantile(sp.q)
}

// extremes is the minimum or maximum of a sliding run of panes, which enter
// and leave in order: a monotonic queue of pane indexes from head on, each
// pane's value beating all those queued after it, so that the one at head
// is the extreme. It does nothing for other aggregates.
type extremes struct {
	active, max bool
	queue       []int
	head        int
}

// reset empties e for a sweep of a rule aggregating kind, and returns it.
func (e *extremes) reset(kind rules.AggregateKind) *extremes {
	e.active, e.max = kind == rules.Min || kind == rules.Max, kind == rules.Max
	e.queue, e.head = e.queue[:0], 0
	return e
}

// enter adds panes[i], later than every pane queued.
func (e *extremes) enter(panes []win, i int) {
	if !e.active {
		return
	}
	v := panes[i].sum
	for len(e.queue) > e.head && !e.beats(panes[e.queue[len(e.queue)-1]].sum, v) {
		e.queue = e.queue[:len(e.queue)-1]
	}
	e.queue = append(e.queue, i)
}

// leave drops pane i, the earliest of those that entered and not left.
func (e *extremes) leave(i int) {
	if len(e.queue) > e.head && e.queue[e.head] == i {
		e.head++
	}
}

// value is the extreme of the run, whose panes are among all.
func (e *extremes) value(all []win) float64 { return all[e.queue[e.head]].sum }

// beats reports whether a stays ahead of b, entered after it.
func (e *extremes) beats(a, b float64) bool {
	if e.max {
		return a > b
	}
	return a < b
}
