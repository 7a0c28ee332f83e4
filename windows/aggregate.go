package windows

import (
	"math"
	"slices"

	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows/slot"
)

// The aggregates beyond count, sum and distinct keep their state in the
// fields an acc already has, so that a slot's layout stays as it is (its
// encoding stores the fields each aggregate uses: docs/format/state.md
// "Aggregates"): n counts the events of
// every rule; sum is the sum of the field for avg, the number of events
// that pass the match filters for ratio, and the smallest or largest value
// for min and max; a quantile rule keeps the heatmaps' sketch, with no
// buckets, out of line, and in a pane's sum the count of its screen
// (spec.screen), which is derived from the sketch and not stored.

// addToStat adds v, an event's value, to a, whose n already counts the
// event, for an avg, ratio (v is 1 or 0), min, max or quantile rule (memo
// as in heatmap.Acc.Add).
func addToStat(kind rules.AggregateKind, a *slot.Acc, v float64, memo *heatmap.IndexMemo) {
	switch kind {
	case rules.Avg, rules.Ratio:
		a.Sum += v
	case rules.Min:
		if a.N == 1 || v < a.Sum {
			a.Sum = v
		}
	case rules.Max:
		if a.N == 1 || v > a.Sum {
			a.Sum = v
		}
	case rules.Quantile:
		a.AddLatency(v, false, nil, memo)
	}
}

// sessionValue is the aggregate of a rule's session window, a.
func sessionValue(sp *slot.Spec, a *slot.Acc) float64 {
	switch sp.Agg {
	case rules.Sum, rules.Min, rules.Max:
		return a.Sum
	case rules.Distinct:
		return float64(len(a.Distinct()))
	case rules.Avg, rules.Ratio:
		return a.Sum / float64(a.N)
	case rules.Quantile:
		return a.Heatmap().Quantile(sp.Q)
	}
	return float64(a.N)
}

// sweptWindow is a window of a quantile rule's sweep that its screen left
// in: its start, and its panes panes[lo:hi].
type sweptWindow struct {
	start  int64
	lo, hi int
}

// stampScreens gives the quantile rules of specs, just compiled, a new
// screen generation: their thresholds may have changed (Reload keeps a
// rule's state across a new threshold), so the counts their panes keep
// are rebuilt before they are next used.
func (op *Operator) stampScreens(specs []*slot.Spec) {
	op.screenGen++
	for _, sp := range specs {
		sp.ScreenGen = op.screenGen
	}
}

// screenPane counts v, just added to p, a pane of a quantile rule, in p's
// values below the screen's threshold (see spec.screen). A pane that was
// empty starts its count; one whose count is stale (decoded, or counted
// for an earlier threshold) is left to screenPanes.
// It returns by how much the event moved the screen's quantity of every
// window holding p (see InOrderScreen).
func (op *Operator) screenPane(sp *slot.Spec, p *slot.Win, v float64) float64 {
	if p.Rev != sp.ScreenGen {
		if p.N != 1 {
			return math.NaN() // a stale count: no screen holds
		}
		p.Rev, p.Sum = sp.ScreenGen, 0
	}
	if sp.Screen.Below(v, &op.sketchIndexes) {
		p.Sum++
		return 1 - sp.Q
	}
	return -sp.Q
}

// screenPanes brings the counts of a quantile rule's panes (or sessions)
// up to date: one decoded from the store, merged from sessions, or counted
// for an earlier threshold, counts its sketch's values below the threshold
// again.
func screenPanes(sp *slot.Spec, panes []slot.Win) {
	for i := range panes {
		rescreen(sp, &panes[i])
	}
}

// screenedAll reports whether every one of ws, panes or sessions of sp, has
// its count up to date.
func screenedAll(sp *slot.Spec, ws []slot.Win) bool {
	for i := range ws {
		if ws[i].Rev != sp.ScreenGen {
			return false
		}
	}
	return true
}

// rescreen brings the count of p, a pane or session of sp, up to date.
func rescreen(sp *slot.Spec, p *slot.Win) {
	if p.Rev != sp.ScreenGen {
		p.Rev, p.Sum = sp.ScreenGen, float64(p.Heatmap().CountBelow(sp.Screen))
	}
}

// sessionMayExceed reports whether the aggregate of se, a session of sp,
// may exceed the threshold: false only for a quantile its screen rules out.
func sessionMayExceed(sp *slot.Spec, se *slot.Win) bool {
	if sp.Agg != rules.Quantile {
		return true
	}
	rescreen(sp, se)
	return heatmap.MayExceed(sp.Q, se.N, int64(se.Sum))
}

// bestQuantile returns the start and quantile of the window with the
// highest quantile among op.windows, the windows the sweep's screen left in
// (ties to the earliest; first and -Inf with none), and empties op.windows.
// Windows that are suffixes of a few values are read from their bins
// (bestQuantileFew), and the windows of slot s (not nil) from its table
// of its panes but the latest (bestQuantileTops).
//
// Each window's quantile is of a merge of its panes. When the windows all
// end at the same pane (the event is in the latest pane, as in-order
// events are) they are suffixes of one run: merged from the latest start
// back, each pane is merged once; otherwise each window merges its own.
func (op *Operator) bestQuantile(sp *slot.Spec, s *slot.Slot, panes []slot.Win, first int64) (int64, float64) {
	ws := op.windows
	best, bestStart := math.Inf(-1), first
	if len(ws) == 0 {
		return bestStart, best
	}
	suffixes := ws[0].hi == ws[len(ws)-1].hi
	if suffixes && !noTops {
		if start, v, ok := op.bestQuantileFew(sp, panes, ws, first); ok {
			return start, v
		}
	}
	if s != nil && !noTops {
		if start, v, ok := op.bestQuantileTops(sp, s, panes, ws, first); ok {
			return start, v
		}
	}
	defer func() { op.windows = ws[:0] }()
	take := func(w *sweptWindow, a *heatmap.Acc) {
		// Visited from the latest start back, a tie goes to the earlier.
		if v := a.Quantile(sp.Q); v >= best {
			best, bestStart = v, w.start
		}
	}
	m := op.quantile
	m.Reset()
	merged := len(panes)
	if suffixes {
		merged = ws[0].hi
	}
	for i := len(ws) - 1; i >= 0; i-- {
		w := &ws[i]
		switch {
		case suffixes:
			for ; merged > w.lo; merged-- {
				m.Merge(panes[merged-1].Heatmap())
			}
			take(w, m)
		case w.hi-w.lo == 1:
			take(w, panes[w.lo].Heatmap())
		default:
			m.Reset()
			for j := w.lo; j < w.hi; j++ {
				m.Merge(panes[j].Heatmap())
			}
			take(w, m)
		}
	}
	return bestStart, best
}

// bestInOrder is bestWindow when every pane from panes[lo] on is in every
// window starting in [first, last], as when events come in order: the
// windows are then suffixes of the panes, the first holding them all and
// each of the others one pane fewer, so one pass over the panes finds the
// best, without the general sweep's bookkeeping. Sums are added and taken
// away in the order the general sweep takes, so that an avg is the same to
// the last bit.
//
// For avg, ratio and quantile, the pass remembers in s (nil: nowhere) the
// extreme of the windows' screen quantities (InOrderScreen), and the next
// events in order rule every window out from it without a pass, until the
// windows change.
func (op *Operator) bestInOrder(sp *slot.Spec, s *slot.Slot, panes []slot.Win, first, last int64, lo int) (int64, float64) {
	best, bestStart := math.Inf(-1), first
	if sp.Agg == rules.Distinct {
		// The first window holds the others' values and events.
		if sp.MinEvents > 1 && slot.Events(panes[lo:]) < sp.MinEvents {
			return bestStart, best
		}
		return first, float64(op.union(panes[lo:]))
	}
	if sp.Agg == rules.Min || sp.Agg == rules.Max {
		// From the last pane back, a tie going to the earlier start. The
		// windows holding panes[j:] start after panes[j-1], at the
		// earliest at s; none does when the slide passes panes[j] too.
		ext := panes[len(panes)-1].Sum
		var n int64
		for j := len(panes) - 1; j >= lo; j-- {
			n += panes[j].N
			if sp.Agg == rules.Min {
				ext = min(ext, panes[j].Sum)
			} else {
				ext = max(ext, panes[j].Sum)
			}
			s := first
			if j > lo {
				s = sp.SlideDiv.Ceil(panes[j-1].Start + 1)
			}
			if s <= last && s <= panes[j].Start && n >= sp.MinEvents && ext >= best {
				best, bestStart = ext, s
			}
		}
		return bestStart, best
	}
	// Every suffix of the panes is a window of the event's when the event
	// is in the last pane, as in-order events are.
	all := last >= sp.SlideDiv.Floor(panes[len(panes)-1].Start)
	var screen *slot.InOrderScreen
	if s != nil && s.More != nil {
		screen = &s.More.InOrder
	}
	current := all && screen.Current(sp, panes, first)
	if current && screen.RulesOut(sp) {
		return bestStart, best
	}
	// A hot key's quantile windows, each of which passed the screen at the
	// last event and the same now (more may pass, none that may exceed
	// fails), are read from its table without a pass: a window left in
	// that cannot exceed the threshold is not the best of those that do.
	remember := sp.Agg == rules.Quantile && all && s != nil && sp.MinEvents <= 1 && !noTops
	var key windowsKey
	if remember {
		key = keyOfWindows(panes, first, last, lo)
		if current {
			if start, v, ok := op.bestRemembered(sp, s, panes, key); ok {
				return start, v
			}
		}
	}
	windows := 0
	var n int64
	var sum, magnitude float64
	for j := lo; j < len(panes); j++ {
		n += panes[j].N
		sum += panes[j].Sum
		magnitude += math.Abs(panes[j].Sum)
	}
	bound := math.Inf(1)
	if sp.Agg != rules.Quantile {
		bound = math.Inf(-1)
	}
	t := sp.Rule.Threshold
	slack := 1e-9 * (magnitude + (1+math.Abs(t))*float64(n+1))
	for j, ws := lo, first; ; {
		if sp.Agg == rules.Quantile {
			bound = min(bound, sum-float64(sp.Q*float64(n-1)))
		} else {
			bound = max(bound, sum-t*float64(n))
		}
		if n >= sp.MinEvents {
			switch sp.Agg {
			case rules.Avg, rules.Ratio:
				if mayExceed(sum, n, t) {
					if v := sum / float64(n); v > best {
						best, bestStart = v, ws
					}
				}
			case rules.Quantile:
				windows++
				// sum counts the values below the threshold's bin (screenPane).
				if heatmap.MayExceed(sp.Q, n, int64(sum)) {
					op.windows = append(op.windows, sweptWindow{ws, j, len(panes)})
				}
			}
		}
		// The next window starts after panes[j], and may leave more
		// panes behind when they are narrower than the slide.
		if sp.Pane == sp.Slide {
			ws = panes[j].Start + sp.Slide
		} else {
			ws = sp.SlideDiv.Ceil(panes[j].Start + 1)
		}
		if ws > last {
			break
		}
		for ; j < len(panes) && panes[j].Start < ws; j++ {
			n -= panes[j].N
			sum -= panes[j].Sum
		}
		if j == len(panes) {
			break
		}
	}
	if all && s != nil && len(panes)-lo >= inOrderScreenMin {
		s.Extra().InOrder = slot.InOrderScreen{First: first, LastPane: panes[len(panes)-1].Start, Panes: len(panes),
			Gen: sp.ScreenGen, Bound: bound, Slack: slack}
	}
	if sp.Agg == rules.Quantile {
		if remember && windows == len(op.windows) {
			op.rememberWindows(sp, s, key, op.windows)
		}
		return op.bestQuantile(sp, s, panes, first)
	}
	return bestStart, best
}

// inOrderScreenMin is how many windows make a slot remember its screen:
// for fewer, the pass costs little and the memory would not pay. Tests
// set it to 0 and to the maximum to compare the two.
var inOrderScreenMin = 8

// union returns how many distinct values panes hold: without an index (see
// DistinctIndexOf) they are few, and a scan of the ones already counted is
// cheaper than a map.
func (op *Operator) union(panes []slot.Win) int {
	var few [32]uint64
	n := 0
	for i := range panes {
		for _, h := range panes[i].Distinct() {
			if n < len(few) && !slices.Contains(few[:n], h) {
				few[n], n = h, n+1
				continue
			}
			if n == len(few) {
				return op.unionMap(panes)
			}
		}
	}
	return n
}

// unionMap is union for many values.
func (op *Operator) unionMap(panes []slot.Win) int {
	defer clear(op.counts)
	for i := range panes {
		for _, h := range panes[i].Distinct() {
			op.counts[h] = 1
		}
	}
	return len(op.counts)
}

// mayExceed reports whether sum/n, a window's avg or ratio, may exceed
// threshold: when it does not, sum is at most threshold·n, with room for
// the product's rounding, and the division is not needed.
func mayExceed(sum float64, n int64, threshold float64) bool {
	m := threshold * float64(n)
	return !(sum <= m-math.Abs(m)*0x1p-51)
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
func (e *extremes) enter(panes []slot.Win, i int) {
	if !e.active {
		return
	}
	v := panes[i].Sum
	for len(e.queue) > e.head && !e.beats(panes[e.queue[len(e.queue)-1]].Sum, v) {
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
func (e *extremes) value(all []slot.Win) float64 { return all[e.queue[e.head]].Sum }

// beats reports whether a stays ahead of b, entered after it.
func (e *extremes) beats(a, b float64) bool {
	if e.max {
		return a > b
	}
	return a < b
}
