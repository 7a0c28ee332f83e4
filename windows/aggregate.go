package windows

import (
	"math"
	"slices"

	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
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
func addToStat(kind rules.AggregateKind, a *acc, v float64, memo *heatmap.IndexMemo) {
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
		a.addLatency(v, false, nil, memo)
	}
}

// sessionValue is the aggregate of a rule's session window, a.
func sessionValue(sp *spec, a *acc) float64 {
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
func (op *Operator) stampScreens(specs []*spec) {
	op.screenGen++
	for _, sp := range specs {
		sp.screenGen = op.screenGen
	}
}

// screenPane counts v, just added to p, a pane of a quantile rule, in p's
// values below the screen's threshold (see spec.screen). A pane that was
// empty starts its count; one whose count is stale (decoded, or counted
// for an earlier threshold) is left to screenPanes.
// It returns by how much the event moved the screen's quantity of every
// window holding p (see inOrderScreen).
func (op *Operator) screenPane(sp *spec, p *win, v float64) float64 {
	if p.rev != sp.screenGen {
		if p.n != 1 {
			return math.NaN() // a stale count: no screen holds
		}
		p.rev, p.sum = sp.screenGen, 0
	}
	if sp.screen.Below(v, &op.sketchIndexes) {
		p.sum++
		return 1 - sp.q
	}
	return -sp.q
}

// screenPanes brings the counts of a quantile rule's panes (or sessions)
// up to date: one decoded from the store, merged from sessions, or counted
// for an earlier threshold, counts its sketch's values below the threshold
// again.
func screenPanes(sp *spec, panes []win) {
	for i := range panes {
		rescreen(sp, &panes[i])
	}
}

// screenedAll reports whether every one of ws, panes or sessions of sp, has
// its count up to date.
func screenedAll(sp *spec, ws []win) bool {
	for i := range ws {
		if ws[i].rev != sp.screenGen {
			return false
		}
	}
	return true
}

// rescreen brings the count of p, a pane or session of sp, up to date.
func rescreen(sp *spec, p *win) {
	if p.rev != sp.screenGen {
		p.rev, p.sum = sp.screenGen, float64(p.heatmap().CountBelow(sp.screen))
	}
}

// sessionMayExceed reports whether the aggregate of se, a session of sp,
// may exceed the threshold: false only for a quantile its screen rules out.
func sessionMayExceed(sp *spec, se *win) bool {
	if sp.agg != rules.Quantile {
		return true
	}
	rescreen(sp, se)
	return heatmap.MayExceed(sp.q, se.n, int64(se.sum))
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
func (op *Operator) bestQuantile(sp *spec, s *slot, panes []win, first int64) (int64, float64) {
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
		if v := a.Quantile(sp.q); v >= best {
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
				m.Merge(panes[merged-1].heatmap())
			}
			take(w, m)
		case w.hi-w.lo == 1:
			take(w, panes[w.lo].heatmap())
		default:
			m.Reset()
			for j := w.lo; j < w.hi; j++ {
				m.Merge(panes[j].heatmap())
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
// extreme of the windows' screen quantities (inOrderScreen), and the next
// events in order rule every window out from it without a pass, until the
// windows change.
func (op *Operator) bestInOrder(sp *spec, s *slot, panes []win, first, last int64, lo int) (int64, float64) {
	best, bestStart := math.Inf(-1), first
	if sp.agg == rules.Distinct {
		// The first window holds the others' values and events.
		if sp.minEvents > 1 && events(panes[lo:]) < sp.minEvents {
			return bestStart, best
		}
		return first, float64(op.union(panes[lo:]))
	}
	if sp.agg == rules.Min || sp.agg == rules.Max {
		// From the last pane back, a tie going to the earlier start. The
		// windows holding panes[j:] start after panes[j-1], at the
		// earliest at s; none does when the slide passes panes[j] too.
		ext := panes[len(panes)-1].sum
		var n int64
		for j := len(panes) - 1; j >= lo; j-- {
			n += panes[j].n
			if sp.agg == rules.Min {
				ext = min(ext, panes[j].sum)
			} else {
				ext = max(ext, panes[j].sum)
			}
			s := first
			if j > lo {
				s = sp.slideDiv.ceil(panes[j-1].start + 1)
			}
			if s <= last && s <= panes[j].start && n >= sp.minEvents && ext >= best {
				best, bestStart = ext, s
			}
		}
		return bestStart, best
	}
	// Every suffix of the panes is a window of the event's when the event
	// is in the last pane, as in-order events are.
	all := last >= sp.slideDiv.floor(panes[len(panes)-1].start)
	var screen *inOrderScreen
	if s != nil && s.more != nil {
		screen = &s.more.inOrder
	}
	current := all && screen.current(sp, panes, first)
	if current && screen.rulesOut(sp) {
		return bestStart, best
	}
	// A hot key's quantile windows, each of which passed the screen at the
	// last event and the same now (more may pass, none that may exceed
	// fails), are read from its table without a pass: a window left in
	// that cannot exceed the threshold is not the best of those that do.
	remember := sp.agg == rules.Quantile && all && s != nil && sp.minEvents <= 1 && !noTops
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
		n += panes[j].n
		sum += panes[j].sum
		magnitude += math.Abs(panes[j].sum)
	}
	bound := math.Inf(1)
	if sp.agg != rules.Quantile {
		bound = math.Inf(-1)
	}
	t := sp.rule.Threshold
	slack := 1e-9 * (magnitude + (1+math.Abs(t))*float64(n+1))
	for j, ws := lo, first; ; {
		if sp.agg == rules.Quantile {
			bound = min(bound, sum-float64(sp.q*float64(n-1)))
		} else {
			bound = max(bound, sum-t*float64(n))
		}
		if n >= sp.minEvents {
			switch sp.agg {
			case rules.Avg, rules.Ratio:
				if mayExceed(sum, n, t) {
					if v := sum / float64(n); v > best {
						best, bestStart = v, ws
					}
				}
			case rules.Quantile:
				windows++
				// sum counts the values below the threshold's bin (screenPane).
				if heatmap.MayExceed(sp.q, n, int64(sum)) {
					op.windows = append(op.windows, sweptWindow{ws, j, len(panes)})
				}
			}
		}
		// The next window starts after panes[j], and may leave more
		// panes behind when they are narrower than the slide.
		if sp.pane == sp.slide {
			ws = panes[j].start + sp.slide
		} else {
			ws = sp.slideDiv.ceil(panes[j].start + 1)
		}
		if ws > last {
			break
		}
		for ; j < len(panes) && panes[j].start < ws; j++ {
			n -= panes[j].n
			sum -= panes[j].sum
		}
		if j == len(panes) {
			break
		}
	}
	if all && s != nil && len(panes)-lo >= inOrderScreenMin {
		s.extra().inOrder = inOrderScreen{first: first, lastPane: panes[len(panes)-1].start, panes: len(panes),
			gen: sp.screenGen, bound: bound, slack: slack}
	}
	if sp.agg == rules.Quantile {
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
// distinctIndexOf) they are few, and a scan of the ones already counted is
// cheaper than a map.
func (op *Operator) union(panes []win) int {
	var few [32]uint64
	n := 0
	for i := range panes {
		for _, h := range panes[i].distinct() {
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
func (op *Operator) unionMap(panes []win) int {
	defer clear(op.counts)
	for i := range panes {
		for _, h := range panes[i].distinct() {
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
