package windows

import (
	"math"
	"slices"

	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/windows/slot"
)

// A quantile rule decides an event by the highest quantile among its
// windows, and the windows of an in-order event are the suffixes of its
// key's panes, from each window's first pane to the latest. Merging those
// panes' sketches for every event costs as many merges as the windows have
// panes. But until the latest pane is complete only it changes, and a
// quantile near the top of a distribution is found from the top: so a hot
// key's older panes are summed once, from their highest bin down, into a
// table of how many of each suffix's values are at or above each bin
// (quantileTops), and an event reads each window's quantile from the table
// and the latest pane alone, the same value the merge gives.

// quantileTops is a quantile rule's table of one slot's older panes: those
// of its in-order windows but the latest.
type quantileTops struct {
	// What the table is of: the spec, the slot (and its key's hash, which a
	// slot reused for another key changes), and its columns' panes, by
	// start: the older panes of the windows since it was built, some of
	// them purged since (the first a window holds is found by its start).
	sp     *slot.Spec
	s      *slot.Slot
	id     slot.ID
	starts []int64
	// usable is false when the older panes hold a zero or a negative
	// value: the table counts positive bins only.
	usable bool
	// The table holds the keys from maxKey down to floor, row r being key
	// maxKey-r: pre[c*rows+r] is how many values of the panes before
	// column c are in bins at or above it, so that panes c to e hold
	// pre[e*rows+r] - pre[c*rows+r] (counts of whole values, exact in a
	// float64); a pane that ends the older ones adds a column. vals[r] is
	// the bin's value, NaN until read.
	maxKey, floor int
	pre, vals     []float64
	// cols are the columns' counts, by column (see topsCol).
	cols []topsCol
	// latestAbove[r] is how many values of the latest pane, latest, are
	// in bins at or above row r's, when it held latestCount: an event
	// adds one to the rows at and below its value's bin.
	latest      *heatmap.Acc
	latestStart int64
	latestCount int64
	latestAbove []float64
	// used is when the table was last read (Operator.topsClock).
	used uint64
	// windows are the windows of the slot's in-order events when every
	// one of them passed the screen, as when most events are decided, and
	// WindowsOf what they are of: the next event in the same latest pane
	// has the same, and bestInOrder takes them without its pass.
	windows   []sweptWindow
	windowsOf windowsKey
}

// windowsKey is what an in-order event's windows follow from: the range
// of their starts and the slot's panes (how many, the first's and the
// latest's starts, and the first in a window).
type windowsKey struct {
	first, last           int64
	panes, lo             int
	firstPane, latestPane int64
}

// keyOfWindows returns the windowsKey of windows starting in [first, last]
// over panes from lo.
func keyOfWindows(panes []slot.Win, first, last int64, lo int) windowsKey {
	return windowsKey{first: first, last: last, panes: len(panes), lo: lo,
		firstPane: panes[0].Start, latestPane: panes[len(panes)-1].Start}
}

// rememberWindows keeps ws, every window of sp's slot s for key, in the
// slot's table when it has one.
func (op *Operator) rememberWindows(sp *slot.Spec, s *slot.Slot, key windowsKey, ws []sweptWindow) {
	if t := op.findTops(sp, s); t.sp == sp && t.s == s && t.id == s.ID {
		t.windows, t.windowsOf = append(t.windows[:0], ws...), key
	}
}

// bestRemembered is bestQuantileTops over the windows remembered for key
// in sp's table of slot s; ok is false when there are none, or the table
// cannot give the answer.
func (op *Operator) bestRemembered(sp *slot.Spec, s *slot.Slot, panes []slot.Win, key windowsKey) (int64, float64, bool) {
	t := op.findTops(sp, s)
	if t.sp != sp || t.s != s || t.id != s.ID || t.windowsOf != key || len(t.windows) == 0 {
		return 0, 0, false
	}
	kept := op.windows
	start, v, ok := op.bestQuantileTops(sp, s, panes, t.windows, key.first)
	op.windows = kept[:0]
	if ok {
		op.rememberedAnswers++
	}
	return start, v, ok
}

// topsCol is what a table keeps by column c, beside its rows' counts,
// together for a window's read: how many values the panes before c hold,
// the least and greatest of the values from c on, and the row the
// quantile of the window from c's pane to the latest was in at the last
// event (-1 before one).
type topsCol struct {
	preN           int64
	sufMin, sufMax float64
	lastRow        int32
}

// findTops returns sp's table of slot s, or the least recently used one
// to build it in.
func (op *Operator) findTops(sp *slot.Spec, s *slot.Slot) *quantileTops {
	lru := &op.tops[0]
	for i := range op.tops {
		t := &op.tops[i]
		if t.sp == sp && t.s == s && t.id == s.ID {
			return t
		}
		if t.used < lru.used {
			lru = t
		}
	}
	return lru
}

// topsDoor is how many slots without a table askedAgain remembers: a few
// times the tables, so that a key that asks again before a few dozen
// others ask is taken, and its table then outlives the next few asks.
const topsDoor = 64

// askedAgain reports whether sp's slot s asked for a table a short while
// ago, and remembers it asked: a table is built for such a slot only.
// A key with few events a second among many (a busy user among a
// hundred thousand) would evict a table, and have its own evicted, at
// each event, where merging its few panes costs less than the build.
func (op *Operator) askedAgain(sp *slot.Spec, s *slot.Slot) bool {
	h := (s.ID[0] ^ s.ID[1]*0x9e3779b97f4a7c15 ^ uint64(sp.Pos)) % topsDoor
	if op.topsAsked[h] == (topsAsker{sp, s.ID}) {
		return true
	}
	op.topsAsked[h] = topsAsker{sp, s.ID}
	return false
}

// topsAsker is a slot that asked for a table: its spec and key hash.
type topsAsker struct {
	sp *slot.Spec
	id slot.ID
}

// noTops turns bestQuantileFew and bestQuantileTops off, for tests that
// compare them with the merge.
var noTops = false

// fewMergeMax is the most bins bestQuantileFew takes: a cold key's
// windows, whose panes hold their few values inline, or the bins of their
// highest values beside a sketch.
const fewMergeMax = 256

// bestQuantileFew is bestQuantile for windows that are suffixes of panes
// whose bins, fewMergeMax at most in all, give their quantiles, as a cold
// key's do: kept in order as panes are added from the latest back
// (heatmap.BinSet), the bins give each window's quantile as a merge
// would, without a sketch to fill and clear; a pane with a sketch gives
// the bins of its highest values, which serve a quantile near the top. ok
// is false when the panes do not qualify.
func (op *Operator) bestQuantileFew(sp *slot.Spec, panes []slot.Win, ws []sweptWindow, first int64) (int64, float64, bool) {
	hi, bins, values, sketched := ws[0].hi, 0, int64(0), false
	// Each pane's distribution is a load of its own, out of the CPU cache
	// for a cold key: checked in a loop of their own, the loads overlap.
	// With a sketch among them, the widest window's quantile must be among
	// its highest values (so are the others', of fewer values): a hot key's
	// is not, and is refused at its first panes.
	for j := ws[0].lo; j < hi; j++ {
		h := panes[j].Heatmap()
		if h == nil {
			return 0, 0, false
		}
		n, ok := h.Bins()
		bins, values, sketched = bins+n, values+h.Count, sketched || int64(n) < h.Count
		if !ok || bins > fewMergeMax || sketched && !heatmap.TopQuantile(sp.Q, values) {
			return 0, 0, false
		}
	}
	set := &op.fewSet
	set.Reset()
	best, bestStart := math.Inf(-1), first
	merged := hi
	v, valued := 0.0, false
	// From the latest start back, a tie going to the earlier start. A
	// window holding no pane more than the one after it has its quantile:
	// a cold key's windows mostly do.
	for i := len(ws) - 1; i >= 0; i-- {
		w := &ws[i]
		for ; merged > w.lo; merged-- {
			if h := panes[merged-1].Heatmap(); h.Count > 0 {
				set.Add(h)
				valued = false
			}
		}
		if !valued {
			var ok bool
			if v, ok = set.Quantile(sp.Q); !ok {
				return 0, 0, false // among values the set does not hold
			}
			valued = true
		}
		if v >= best {
			best, bestStart = v, w.start
		}
	}
	op.windows = ws[:0]
	return bestStart, best, true
}

// topsSlots is how many slots' tables an operator keeps: the hot keys a
// decision-heavy stream repeats.
const topsSlots = 16

// topsMinLatest and topsMinOlder are the fewest values the latest pane,
// or else the older ones, must hold for a table to be worth it: a key with
// fewer has few events per pane, each of which would build one.
const (
	topsMinLatest = 16
	topsMinOlder  = 1024
)

// topsMaxCells bounds a table's counts (8 bytes each), so that the tables
// of every hot slot take at most topsSlots × 512 KiB: a rule with
// thousands of panes per window, or values over a wide range, merges.
const topsMaxCells = 1 << 16

// topsHeadroom is how many keys above the highest one seen a table holds,
// so that a latest pane's new maximum a little higher still fits.
const topsHeadroom = 8

// bestQuantileTops is bestQuantile read from s's table of its panes but
// the latest: a window's counts at or above a bin are its first pane's
// suffix less the suffix after its last pane, and the latest pane's when
// it holds it. ok is false when the table cannot give the answer (a cold
// key, zero or negative values, a value beyond the table), and
// bestQuantile merges.
func (op *Operator) bestQuantileTops(sp *slot.Spec, s *slot.Slot, panes []slot.Win, ws []sweptWindow, first int64) (int64, float64, bool) {
	latest := panes[len(panes)-1].Heatmap()
	if latest == nil {
		return 0, 0, false
	}
	base := ws[0].lo
	var n int64
	for j := base; j < len(panes)-1; j++ {
		if h := panes[j].Heatmap(); h != nil {
			n += h.Count
		}
	}
	if latest.Count < topsMinLatest && n < topsMinOlder {
		return 0, 0, false // a cold key: a table would serve few events
	}
	t := op.findTops(sp, s)
	mine := t.sp == sp && t.s == s && t.id == s.ID
	if !mine && !op.askedAgain(sp, s) {
		return 0, 0, false
	}
	off, ok := 0, false
	if mine && t.usable {
		off, ok = op.followTops(t, panes, base, n)
	}
	if !ok {
		op.buildTops(t, sp, s, panes[base:])
	}
	op.topsClock++
	t.used = op.topsClock
	if !t.usable {
		return 0, 0, false
	}
	rows := t.maxKey - t.floor + 1
	la := t.latestAbove[:rows]
	end := len(t.starts) // the column after the older panes
	last := t.pre[end*rows : (end+1)*rows]
	switch same := t.latest == latest && t.latestStart == panes[len(panes)-1].Start; {
	case same && latest.Count == t.latestCount:
	case same && latest.Count == t.latestCount+1 && op.lastValueAcc == latest:
		// One value more, the event's: its bin and those below count it.
		key, ok := heatmap.PositiveKey(op.lastValue, &op.sketchIndexes)
		if !ok {
			t.latest = nil
			return 0, 0, false
		}
		if key > t.maxKey {
			t.sp = nil // built again, higher, for the next event
			return 0, 0, false
		}
		for r := max(0, t.maxKey-key); r < rows; r++ {
			la[r]++
		}
		t.latestCount++
	default:
		if !op.countAbove(t, latest, la) {
			return 0, 0, false
		}
		t.latest, t.latestStart, t.latestCount = latest, panes[len(panes)-1].Start, latest.Count
	}
	best, bestStart := math.Inf(-1), first
	latestN, latestMin, latestMax := float64(latest.Count), latest.Min, latest.Max
	endN := t.cols[end].preN
	// From the latest start back, a tie going to the earlier start, as
	// bestQuantile takes them.
	for i := len(ws) - 1; i >= 0; i-- {
		w := &ws[i]
		var lo int
		var lowest, highest float64
		if w.hi == len(panes) {
			// The windows of an in-order event: the older panes from
			// column k and the latest, whose rows count
			// last[r]-col[r] + la[r] values at or above row r.
			k := off + w.lo - base
			c := &t.cols[k]
			count := float64(endN-c.preN) + latestN
			// Compared, not math.Min and math.Max: no value is NaN.
			lowest, highest = c.sufMin, c.sufMax
			if latestMin < lowest {
				lowest = latestMin
			}
			if latestMax > highest {
				highest = latestMax
			}
			// GetValueAtQuantile's rank, and its bin: the lowest whose
			// values and those below are more than rank, which is the
			// highest bin whose values below it are at most rank. The
			// values below a row are fewer the lower the row.
			rank := float64(sp.Q * (count - 1))
			col := t.pre[k*rows : (k+1)*rows]
			// The row the window's quantile was in at the last event,
			// most often still it (which shows the table deep enough);
			// else a binary search.
			if r := int(c.lastRow); r >= 0 && r < rows && count-(last[r]-col[r]+la[r]) <= rank &&
				(r == 0 || count-(last[r-1]-col[r-1]+la[r-1]) > rank) {
				lo = r
			} else {
				if count-(last[rows-1]-col[rows-1]+la[rows-1]) > rank {
					t.sp = nil // deeper, for the next event
					return 0, 0, false
				}
				for hi := rows - 1; lo < hi; { // below hi is at most rank
					if mid := (lo + hi) / 2; count-(last[mid]-col[mid]+la[mid]) <= rank {
						hi = mid
					} else {
						lo = mid + 1
					}
				}
			}
			c.lastRow = int32(lo)
		} else {
			// A window of an event out of order: the older panes from
			// column k to e.
			k, e := off+w.lo-base, off+w.hi-base
			count := t.cols[e].preN - t.cols[k].preN
			lowest, highest = t.cols[k].sufMin, t.cols[k].sufMax
			if e < end {
				lowest, highest = math.Inf(1), math.Inf(-1)
				for j := w.lo; j < w.hi; j++ {
					h := panes[j].Heatmap()
					lowest, highest = min(lowest, h.Min), max(highest, h.Max)
				}
			}
			rank := float64(sp.Q * float64(count-1))
			col, upto := t.pre[k*rows:(k+1)*rows], t.pre[e*rows:(e+1)*rows]
			below := func(r int) float64 { return float64(count) - (upto[r] - col[r]) }
			if below(rows-1) > rank {
				return 0, 0, false
			}
			for hi := rows - 1; lo < hi; {
				if mid := (lo + hi) / 2; below(mid) <= rank {
					hi = mid
				} else {
					lo = mid + 1
				}
			}
		}
		val := t.vals[lo]
		if val != val {
			val = heatmap.BinValue(t.maxKey - lo)
			t.vals[lo] = val
		}
		// As Quantile clamps (min and max are math.Min and math.Max's
		// intrinsics): the values are positive, none NaN.
		if val < lowest {
			val = lowest
		}
		if val > highest {
			val = highest
		}
		if val >= best {
			best, bestStart = val, w.start
		}
	}
	op.windows = ws[:0]
	return bestStart, best, true
}

// buildTops builds t, for sp's slot s, of the older panes of panes (all
// but the last), which hold n values: from their highest bin down to the
// one where every suffix, the latest pane's values with them, has at
// least twice as many values at or above as its quantile needs (and 16
// more): the latest pane grows, and the windows' quantiles move down, for
// many events before the table falls short.
func (op *Operator) buildTops(t *quantileTops, sp *slot.Spec, s *slot.Slot, panes []slot.Win) {
	older := len(panes) - 1
	*t = quantileTops{sp: sp, s: s, id: s.ID, starts: t.starts[:0], vals: t.vals[:0],
		cols: t.cols[:0], latestAbove: t.latestAbove[:0], pre: t.pre[:0], windows: t.windows[:0]}
	for j := range older {
		t.starts = append(t.starts, panes[j].Start)
	}
	// Every pane's bins, ascending, one after the other: ends[j] is where
	// pane j's end.
	bins, ends := op.topBins[:0], op.topEnds[:0]
	maxKey, minKey := math.MinInt, math.MaxInt
	for j := range panes {
		h := panes[j].Heatmap()
		if h != nil {
			var ok bool
			start := len(bins)
			if bins, ok = h.PositiveBins(bins); !ok {
				op.topBins, op.topEnds = bins, ends
				return
			}
			if len(bins) > start {
				minKey, maxKey = min(minKey, bins[start].Key), max(maxKey, bins[len(bins)-1].Key)
			}
		}
		ends = append(ends, len(bins))
	}
	op.topBins, op.topEnds = bins, ends
	if maxKey < minKey {
		return // no value at all
	}
	maxKey += topsHeadroom
	t.maxKey, t.usable = maxKey, true

	cols := older + 1
	t.cols = slot.Sized(t.cols, cols)
	t.cols[0] = topsCol{lastRow: -1}
	for k := range older {
		t.cols[k+1] = topsCol{preN: t.cols[k].preN, lastRow: -1}
		if h := panes[k].Heatmap(); h != nil {
			t.cols[k+1].preN += h.Count
		}
	}
	t.cols[older].sufMin, t.cols[older].sufMax = math.Inf(1), math.Inf(-1)
	for k := older - 1; k >= 0; k-- {
		c := &t.cols[k]
		c.sufMin, c.sufMax = t.cols[k+1].sufMin, t.cols[k+1].sufMax
		if h := panes[k].Heatmap(); h != nil && h.Count > 0 {
			c.sufMin, c.sufMax = math.Min(c.sufMin, h.Min), math.Max(c.sufMax, h.Max)
		}
	}
	latestCount := panes[older].Heatmap().Count
	// need[k]: the values at or above the floor suffix k must have.
	if cap(op.topNeed) < cols {
		op.topNeed = make([]float64, cols)
	}
	need := op.topNeed[:cols]
	for k := range need {
		count := t.cols[older].preN - t.cols[k].preN + latestCount
		rank := float64(sp.Q * float64(count-1))
		need[k] = math.Min(float64(count), 2*(float64(count)-rank)+16)
	}
	// Walk the keys down, each pane's bins from its end.
	if cap(op.topCursor) < cols {
		op.topCursor = make([]int, cols)
	}
	cursor := op.topCursor[:cols]
	for j := range cursor {
		cursor[j] = ends[j] - 1
	}
	starts := func(j int) int {
		if j == 0 {
			return 0
		}
		return ends[j-1]
	}
	if cap(op.topRow) < cols {
		op.topRow = make([]float64, cols)
	}
	row := op.topRow[:cols]
	// The table by row as the walk makes it, then by window (byWindow).
	byRow := op.topByRow[:0]
	clear(row)
	var latestAbove float64
	for key := maxKey; key >= minKey; key-- {
		if c := cursor[older]; c >= starts(older) && bins[c].Key == key {
			latestAbove += bins[c].Count
			cursor[older]--
		}
		var suffix float64
		done := row[older]+latestAbove >= need[older]
		for k := older - 1; k >= 0; k-- {
			if c := cursor[k]; c >= starts(k) && bins[c].Key == key {
				suffix += bins[c].Count
				cursor[k]--
			}
			row[k] += suffix
			done = done && row[k]+latestAbove >= need[k]
		}
		if len(byRow)+cols > topsMaxCells {
			t.usable = false // a long window's wide table: merged instead
			op.topByRow = byRow
			return
		}
		byRow = append(byRow, row...)
		t.vals = append(t.vals, math.NaN()) // an exponential, when first read
		t.floor = key
		if done {
			break
		}
	}
	// By column, of the panes before it (all of them less the suffix
	// from it): a window's search reads two columns' counts, together.
	rows := len(t.vals)
	op.topByRow = byRow
	t.pre = slot.Sized(t.pre, len(byRow))
	for r := range rows {
		all := byRow[r*cols]
		for k, v := range byRow[r*cols : (r+1)*cols] {
			t.pre[k*rows+r] = all - v
		}
	}
	t.latestAbove = slot.Sized(t.latestAbove, rows)
}

// countAbove sets la[r] to how many of h's values are in t's bins at or
// above row r; false when it cannot: h holds a zero or negative value
// (t.latest is then reset, and the event merges), or one above t's rows
// (t is then built again, higher, for the next event).
func (op *Operator) countAbove(t *quantileTops, h *heatmap.Acc, la []float64) bool {
	bins, ok := h.PositiveBins(op.topBins[:0])
	op.topBins = bins
	if !ok {
		t.latest = nil
		return false
	}
	if len(bins) > 0 && bins[len(bins)-1].Key > t.maxKey {
		t.sp = nil
		return false
	}
	clear(la)
	for _, b := range bins {
		if b.Key >= t.floor {
			la[t.maxKey-b.Key] += b.Count
		}
	}
	for r := 1; r < len(la); r++ {
		la[r] += la[r-1]
	}
	return true
}

// followTops returns the column of panes[base] in t, a usable table of the
// same slot, when the table holds panes[base:] but the latest, adding as
// a column the pane that was the latest when a new one began; ok is false
// when the table must be built again: a late event changed an older pane
// (n, their values, differs), panes the table does not hold, a pane that
// ended with a value above its rows, or columns of purged panes as many
// as the live ones.
func (op *Operator) followTops(t *quantileTops, panes []slot.Win, base int, n int64) (int, bool) {
	older := len(panes) - 1 - base
	off := len(t.starts) // with no older pane, the empty suffix
	if older > 0 {
		off, _ = slices.BinarySearch(t.starts, panes[base].Start)
	}
	if off > older+8 || off+older > len(t.starts)+1 {
		return 0, false
	}
	if off+older == len(t.starts)+1 {
		// The latest pane of the table's last event is an older one now.
		p := &panes[len(panes)-2]
		h := p.Heatmap()
		if t.latest == nil || h != t.latest || p.Start != t.latestStart || len(t.starts) > 0 && t.starts[len(t.starts)-1] >= p.Start {
			return 0, false
		}
		rows := t.maxKey - t.floor + 1
		if (len(t.starts)+2)*rows > topsMaxCells {
			return 0, false
		}
		la := t.latestAbove[:rows]
		if h.Count != t.latestCount && !op.countAbove(t, h, la) {
			return 0, false
		}
		prev := t.pre[len(t.starts)*rows : (len(t.starts)+1)*rows]
		for r := range rows {
			t.pre = append(t.pre, prev[r]+la[r])
		}
		t.starts = append(t.starts, p.Start)
		if h.Count > 0 {
			for c := range t.cols {
				t.cols[c].sufMin, t.cols[c].sufMax = math.Min(t.cols[c].sufMin, h.Min), math.Max(t.cols[c].sufMax, h.Max)
			}
		}
		t.cols = append(t.cols, topsCol{preN: t.cols[len(t.cols)-1].preN + h.Count, sufMin: math.Inf(1), sufMax: math.Inf(-1), lastRow: -1})
		t.latest = nil // the new latest pane's counts, next
	}
	if older > 0 && (t.starts[off] != panes[base].Start || t.starts[len(t.starts)-1] != panes[len(panes)-2].Start) {
		return 0, false
	}
	if t.cols[len(t.starts)].preN-t.cols[off].preN != n {
		return 0, false
	}
	return off, true
}
