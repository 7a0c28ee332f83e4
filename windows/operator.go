package windows

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/internal/prefetch"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows/slot"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// Options configure an Operator.
type Options struct {
	// MemoryBytes is the memory the operator's state may take: decoded
	// slots in the cache, the encoded states of the cold store, and the
	// timer queue; of it the encoded states take at most 4 GiB
	// (maxColdBytes). What does not fit goes to the Backend. The default
	// value is 768 MiB.
	MemoryBytes int64
	// CacheSlots is how many (rule, key) states are kept decoded in memory;
	// the least recently used beyond it are encoded into the cold store.
	// The default value is MemoryBytes/4 divided by HotSlotBytes.
	CacheSlots int
	// WriteThrough writes every state the cache evicts or flushes to the
	// Backend at once, as well as to the cold store, so that a Flush leaves
	// all of the state in the Backend: the live job's checkpoints need it.
	// Without it the cold store writes to the Backend only what does not
	// fit in memory. The default value is false.
	WriteThrough bool
	// SameKeysAs, if set, is an operator of the same rules whose key hashes
	// this one uses, so that one Keyer's SlotRefs serve both: the shards of
	// one engine.
	SameKeysAs *Operator
	// Shard and Shards say which of how many shards of one engine this
	// operator is (Keyer.Shard), when its Backend holds the state of every
	// shard: Restore then takes only the states of its own keys. The
	// default value, 0 of 0, is a whole engine's operator.
	Shard, Shards int
}

// EnsureDefaults fills in zero fields with their default values.
func (o *Options) EnsureDefaults() {
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = 768 << 20
	}
	if o.CacheSlots <= 0 {
		o.CacheSlots = int(max(o.MemoryBytes/4/slot.HotSlotBytes, 64))
	}
}

// Sizes of a pending timer's entry, for the memory budget.
const (
	idTimerBytes  = int(unsafe.Sizeof(idTimer{}))
	keyTimerBytes = 16 + 16 // a string and its bytes
)

// Operator is the window operator: it assigns events to the windows of every
// rule and heatmap, makes decisions on arrival, and fires and purges windows
// as the watermark advances. It is a plain state machine: no goroutines, no
// clock; its caller feeds it events and watermarks in order, and the same
// sequence of calls always produces the same outputs.
type Operator struct {
	// specs are by state id, nil for ids no rule or heatmap has; ordered
	// are the same in file order.
	specs   []*slot.Spec
	ordered []*slot.Spec
	out     Output
	cache   *slotstore.Cache
	timers  timerQueue[idTimer]
	// keyTimers are the timers of slots found by key: restored ones, and
	// those a cold store that writes through spilled.
	keyTimers timerQueue[string]
	// stored are the Backend's timer entries not yet paged in.
	stored storedTimers
	// timerBudget is the bytes the timer queue may take before
	// spillTimers moves its latest timers to the Backend: unlimited when
	// writing through, where the Backend keeps every stored state's timer
	// anyway.
	timerBudget   int
	timersSpilled int64
	wm            int64
	// firing is AdvanceWatermark's buffer for timers run in key order.
	firing []string
	// spilledTimers, and the keys and actions that go with them, are
	// purgeSpilled's buffers.
	spilledTimers []idTimer
	spilledKeys   [][]byte
	spilledKeyBuf []byte
	spilledActs   []byte
	// spilledVals holds the spilled states purgeSpilled loads, read
	// once, and spilledSpans where each is in it.
	spilledVals  []byte
	spilledSpans [][2]int

	dec      Decision
	hw       HeatmapWindow
	scratch  []*heatmap.Acc   // per spec: the merge of a sliding window's panes
	horizons []horizon        // per spec: window bounds derived from the watermark
	counts   map[uint64]int32 // distinct values in the window being swept
	extremes extremes         // the min or max of the window being swept
	// windows are the windows a quantile rule's sweep found.
	windows []sweptWindow
	// quantile is the merge of a quantile rule's panes, in bestQuantile.
	quantile *heatmap.Acc
	// tops are hot slots' tables of their older panes, for
	// bestQuantileTops, and the rest its scratch space.
	tops      [topsSlots]quantileTops
	topsClock uint64
	topsAsked [topsDoor]topsAsker
	// rememberedAnswers counts the decisions read from a table's
	// remembered windows (bestRemembered), which tests compare with the
	// merge.
	rememberedAnswers         int
	topBins                   []heatmap.Bin
	topEnds, topCursor        []int
	topNeed, topRow, topByRow []float64
	// fewSet is bestQuantileFew's scratch space.
	fewSet heatmap.BinSet
	// lastValue is the last value a quantile rule added, to lastValueAcc:
	// a table follows its slot's latest pane by it.
	lastValue    float64
	lastValueAcc *heatmap.Acc
	// sketchIndexes remembers the sketch indexes of the values heatmaps
	// and quantile rules add.
	sketchIndexes heatmap.IndexMemo
	// ahead holds the loads Prefetch gathered, for IssuePrefetches, and
	// timersAhead those of prefetchTimers, which runTimers issues.
	ahead, timersAhead prefetch.Queue
	// nearSlots are the slots Prefetch found for near, by position, nil
	// where none: for the now of the next call, whose panes they locate
	// without a probe of the index. nearAt and nearFirst are the address
	// and a copy of near's first ref, which tell that now is that near.
	nearSlots []*slot.Slot
	nearAt    uintptr
	nearFirst SlotRef
	// nowSlots are the slots Prefetch found for now, by position, nil where
	// none, and nowAt the address of now's first ref. The next call keeps
	// them as groupSlots and groupAt: the slots of the group of events
	// being processed, which slotOf takes instead of probing the index.
	nowSlots, groupSlots []*slot.Slot
	nowAt, groupAt       uintptr
	windowed             int64 // heatmap windows emitted, revisions included
	// shard and shards are Options.Shard and Options.Shards.
	shard, shards int
	// backend is where the store spills and writes through, and the timer
	// entries are; writeThrough is Options.WriteThrough.
	backend      slotstore.Backend
	writeThrough bool
	// screenGen counts the compilations of the rules (New, Reload): the
	// generation of the rules' screens (slot.Spec.ScreenGen, slot.InOrderScreen),
	// which a new threshold makes stale.
	screenGen int32
}

// New returns an operator for cfg. Events must be decoded with a schema
// built from Fields(cfg).
func New(cfg *rules.Config, schema *event.Schema, backend slotstore.Backend, out Output, opts Options) (*Operator, error) {
	opts.EnsureDefaults()
	if opts.Shards > 0 && (opts.Shard < 0 || opts.Shard >= opts.Shards) {
		return nil, fmt.Errorf("windows: shard %d of %d", opts.Shard, opts.Shards)
	}
	ordered, err := slot.Compile(cfg, schema, nil)
	if err != nil {
		return nil, err
	}
	specs := byID(ordered, 0)
	coldBudget := max(int(opts.MemoryBytes)-opts.CacheSlots*slot.HotSlotBytes, 0)
	cold := slotstore.NewCold(backend, len(specs), coldBudget, opts.WriteThrough)
	op := &Operator{
		specs:   specs,
		ordered: ordered,
		out:     out,
		cache:   slotstore.NewCache(opts.CacheSlots, cold, specs),
		wm:      watermark.Min,
		stored: storedTimers{next: slot.NoTimer, ids: timerBucket[idTimer]{blocks: make([][]idTimer, 1)},
			keys: timerBucket[string]{blocks: make([][]string, 1)}},
		timerBudget:  timerBudget(opts),
		scratch:      make([]*heatmap.Acc, len(specs)),
		horizons:     make([]horizon, len(specs)),
		quantile:     heatmap.New(0),
		counts:       make(map[uint64]int32),
		shard:        opts.Shard,
		shards:       opts.Shards,
		backend:      backend,
		writeThrough: opts.WriteThrough,
	}
	op.stampScreens(ordered)
	for _, sp := range ordered {
		op.scratchFor(sp)
	}
	if opts.SameKeysAs != nil {
		op.cache.SetSeeds(opts.SameKeysAs.cache.Seeds)
	}
	cold.Outside = func() int {
		return op.timers.Len()*idTimerBytes + op.keyTimers.Len()*keyTimerBytes + cold.Spilled.Bytes()
	}
	cold.OnExpiringSpill = func(spec int, id slot.ID, at int64) {
		op.timers.add(at, idTimer{id: id, spec: int32(spec)}, false)
	}
	cold.OnSpill = func(key []byte, at int64) {
		op.keyTimers.add(at, string(key), op.specs[slot.SpecOf(key)].Heatmap != nil)
	}
	return op, nil
}

// Watermark returns the current event-time watermark.
func (op *Operator) Watermark() int64 { return op.wm }

// Spilled counts the states the cold store wrote to the Backend because
// they did not fit its memory budget (none when it writes through).
func (op *Operator) Spilled() int64 { return op.cache.Cold.Spills }

// TimersSpilled counts the timers moved to the Backend because the queue
// outgrew its share of the memory budget (spillTimers).
func (op *Operator) TimersSpilled() int64 { return op.timersSpilled }

// WindowsFired counts heatmap records emitted, revisions included.
func (op *Operator) WindowsFired() int64 { return op.windowed }

// ProcessElement adds an event to the windows of every rule and heatmap it
// matches and emits the decisions it causes. refs are the event's SlotRefs
// from a Keyer of op, and keys the keys it appended with them: all the
// operator needs of the event, which it is not given (the caller's Output
// names the event in its decisions, see Decision). t is the time that
// windows the event: its ts, or its reference time when processing is set
// (its source's clock is skewed). An error comes only from the Backend.
func (op *Operator) ProcessElement(refs []SlotRef, keys []byte, t int64, processing bool) (Result, error) {
	matched, accepted := false, false
	for i := range refs {
		r := &refs[i]
		sp := op.specs[r.spec]
		if sp.InGap(t) {
			continue
		}
		matched = true
		var ok bool
		var err error
		if sp.WindowType == rules.Session {
			ok, err = op.addToSession(sp, r, keys, t, processing)
		} else {
			ok, err = op.addToPane(sp, r, keys, t, processing)
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", sp.Name(), err)
		}
		accepted = accepted || ok
	}
	if op.timers.n*idTimerBytes > op.timerBudget {
		if err := op.spillTimers(); err != nil {
			return 0, err
		}
	}
	switch {
	case !matched:
		return Unmatched, nil
	case !accepted:
		return Late, nil
	}
	return Accepted, nil
}

// slotOf returns r's slot, or nil when it is not cached, not stored and
// create is false. keys hold r's key.
func (op *Operator) slotOf(sp *slot.Spec, r *SlotRef, keys []byte, create bool) (*slot.Slot, error) {
	if s := op.prefetchedSlot(sp, r); s != nil {
		s.Referenced = true
		return s, nil
	}
	s, loc := op.cache.Find(sp.Index, r.id)
	if s != nil {
		return s, nil
	}
	// The key's text is borrowed from keys for the event: a slot the cache
	// keeps takes a copy, the fresh one (see cache.load), whose state goes
	// to the cold store when the event is done, does not.
	kb := r.slotKey(keys)
	s, err := op.cache.Load(r.id, unsafe.String(unsafe.SliceData(kb), len(kb)), loc, create, true)
	if s != nil && s != op.cache.Fresh {
		s.Key = strings.Clone(s.Key)
	}
	return s, err
}

func (op *Operator) addToPane(sp *slot.Spec, r *SlotRef, keys []byte, t int64, processing bool) (bool, error) {
	p, first, last := sp.WindowsOf(t)
	live := op.horizon(sp)
	first = max(first, live.firstLive)
	if first > last {
		return false, nil // every window containing t is purged
	}
	s, err := op.slotOf(sp, r, keys, true)
	if err != nil {
		return false, err
	}
	s.Purge(op.wm)
	pn := s.PaneAt(p)
	s.Added(sp.Cleanup(last + sp.Size)) // the pane's cleanup: its latest window's
	if sp.Agg == rules.Distinct {
		slot.AddDistinct(sp, s, pn, r.val, first)
		slot.CapDistinct(s, slot.DistinctHeld(s))
	} else {
		op.addTo(sp, &pn.Acc, r.val, processing)
	}
	switch {
	case sp.Running:
		s.Counted(pn)
	case sp.Agg == rules.Quantile:
		d := op.screenPane(sp, pn, math.Float64frombits(r.val))
		if s.More != nil {
			s.More.InOrder.Moved(s, pn, d)
		}
	case (sp.Agg == rules.Avg || sp.Agg == rules.Ratio) && s.More != nil:
		s.More.InOrder.Moved(s, pn, math.Float64frombits(r.val)-sp.Rule.Threshold)
	}
	op.cache.MarkDirty(s)
	if sp.Heatmap != nil {
		// Windows the watermark has passed are done: the timers fired those
		// that had content. This event must not make the timers fire the
		// others, purged or not; those it belongs to and that are kept for
		// allowed lateness fire again (or for the first time) right away, as
		// Flink's EventTimeTrigger does for late elements.
		s.FiredEnd = max(s.FiredEnd, live.passedEnd)
		for ws := first; ws <= last && ws+sp.Size-1 <= op.wm; ws += sp.Slide {
			op.fireWindow(s, ws, s.BumpFired(ws))
		}
	} else {
		var start int64
		var v float64
		if x := slot.DistinctIndexOf(sp, s, live.firstLive, first); x != nil {
			start, v = x.Best(sp, s.Wins, first, last)
		} else {
			start, v = op.bestWindow(sp, s, s.Wins, first, last)
		}
		op.decide(sp, s, start, start+sp.Size, v, processing)
	}
	op.schedule(s)
	return true, op.cache.Settle(s)
}

func (op *Operator) addToSession(sp *slot.Spec, r *SlotRef, keys []byte, t int64, processing bool) (bool, error) {
	ns, ne := t, t+sp.Gap
	onTime := sp.SessionOnTime(t, op.wm)
	s, err := op.slotOf(sp, r, keys, onTime)
	if err != nil || s == nil {
		return false, err
	}
	s.Purge(op.wm)
	ss := s.Wins
	i := 0
	for i < len(ss) && ss[i].End < ns {
		i++
	}
	j := i
	for j < len(ss) && ss[j].Start <= ne {
		j++
	}
	switch {
	case i == j:
		if !onTime {
			return false, nil // would only merge with purged sessions
		}
		s.Wins = insertAt(ss, i, slot.Win{Start: ns, End: ne})
	case j == i+1 && ss[i].Start <= ns && ne <= ss[i].End:
		// Inside an existing session: the same window.
	default:
		// A merged session is a window of its own (Flink's MergingWindowSet):
		// it has not fired, whatever the sessions it absorbed did.
		m := slot.Win{Start: min(ns, ss[i].Start), End: max(ne, ss[j-1].End), Acc: ss[i].Acc}
		for k := i + 1; k < j; k++ {
			m.Acc.Merge(&ss[k].Acc, sp.Agg)
		}
		if sp.Agg == rules.Quantile && screenedAll(sp, ss[i:j]) {
			m.Rev = sp.ScreenGen // the merged counts add up (screenPane)
		}
		ss[i] = m
		s.Wins = append(ss[:i+1], ss[j:]...)
		clear(ss[len(s.Wins):]) // drop references held by the shifted-out tail
	}
	se := &s.Wins[i]
	s.Added(sp.Cleanup(se.End))
	if sp.Agg == rules.Distinct {
		se.Acc.N++
		if slot.Sampled(r.val, s.DistinctLevel()) && se.Acc.AddDistinct(r.val) {
			slot.CapDistinct(s, slot.DistinctHeld(s))
		}
	} else {
		op.addTo(sp, &se.Acc, r.val, processing)
	}
	if sp.Agg == rules.Quantile {
		op.screenPane(sp, se, math.Float64frombits(r.val))
	}
	op.cache.MarkDirty(s)
	if sp.Heatmap != nil {
		switch {
		case se.Fired:
			se.Rev++
			op.fireSession(s, se)
		case se.End-1 <= op.wm:
			se.Fired = true
			op.fireSession(s, se)
		}
	} else {
		if se.Acc.N >= sp.MinEvents && sessionMayExceed(sp, se) {
			op.decide(sp, s, se.Start, se.End, sessionValue(sp, &se.Acc), processing)
		}
	}
	op.schedule(s)
	return true, op.cache.Settle(s)
}

// horizon holds what a pane-based spec derives from the watermark, computed
// once per watermark value instead of once per event.
type horizon struct {
	wm        int64
	valid     bool
	firstLive int64 // start of the earliest window not yet purged
	passedEnd int64 // end of the latest window the watermark has passed
}

func (op *Operator) horizon(sp *slot.Spec) *horizon {
	h := &op.horizons[sp.Index]
	if !h.valid || h.wm != op.wm {
		wm := slot.ClampWM(op.wm)
		*h = horizon{
			wm:        op.wm,
			valid:     true,
			firstLive: sp.FirstLiveStart(wm),
			passedEnd: sp.SlideDiv.Floor(wm-sp.Size+1) + sp.Size,
		}
	}
	return h
}

func insertAt[T any](xs []T, i int, x T) []T {
	xs = append(xs, x)
	copy(xs[i+1:], xs[i:])
	xs[i] = x
	return xs
}

// addTo adds an event, whose SlotRef.val is val, to the aggregate a (a
// distinct rule's: AddDistinct, or addToSession).
func (op *Operator) addTo(sp *slot.Spec, a *slot.Acc, val uint64, processing bool) {
	a.N++
	if sp.Heatmap != nil {
		a.AddLatency(math.Float64frombits(val), processing, sp.Bounds, &op.sketchIndexes)
		return
	}
	switch sp.Agg {
	case rules.Sum:
		a.Sum += math.Float64frombits(val)
	case rules.Avg, rules.Ratio, rules.Min, rules.Max, rules.Quantile:
		addToStat(sp.Agg, a, math.Float64frombits(val), &op.sketchIndexes)
		if sp.Agg == rules.Quantile {
			op.lastValue, op.lastValueAcc = math.Float64frombits(val), a.Heatmap()
		}
	}
}

func (op *Operator) decide(sp *slot.Spec, s *slot.Slot, start, end int64, v float64, processing bool) {
	if sp.Agg == rules.Distinct {
		v = s.ScaleDistinct(v)
	}
	if !(v > sp.Rule.Threshold) {
		return
	}
	op.dec = Decision{
		Rule:       sp.Rule,
		RuleIndex:  sp.Pos,
		Key:        op.keyText(s),
		Start:      start,
		End:        end,
		Value:      v,
		Processing: processing,
	}
	op.out.Decision(&op.dec)
}

// keyText is the key part of s's key, without the spec index, for an
// output, which outlives the event: the fresh slot's key is borrowed (see
// slotOf).
func (op *Operator) keyText(s *slot.Slot) string {
	if s == op.cache.Fresh {
		return strings.Clone(s.Key[2:])
	}
	return s.Key[2:]
}

// bestWindow returns the window with the highest aggregate among those
// starting in [first, last], ties going to the earliest. Between two starts
// where no pane enters or leaves the aggregate is constant, so it jumps from
// one such change to the next: the cost follows the number of panes, not
// size/slide. panes are those of s (nil: a slot that keeps no screen).
func (op *Operator) bestWindow(sp *slot.Spec, s *slot.Slot, panes []slot.Win, first, last int64) (int64, float64) {
	switch sp.Agg {
	case rules.Count, rules.Sum:
		return bestAdditive(sp, panes, first, last)
	case rules.Quantile:
		// A slot whose in-order screen is current has had its panes'
		// counts current since the screen was taken.
		if s == nil || s.More == nil || s.More.InOrder.Panes != len(panes) || s.More.InOrder.Gen != sp.ScreenGen {
			screenPanes(sp, panes)
		}
	}
	lo := slot.FirstFrom(panes, first)
	if n := len(panes); lo < n && panes[n-1].Start < first+sp.Size {
		return op.bestInOrder(sp, s, panes, first, last, lo)
	}
	hi := lo
	var n int64
	var sum float64
	distinct := 0
	add := func(p *slot.Win, sign int64) {
		n += sign * p.N
		sum += float64(sign) * p.Sum
		for _, h := range p.Distinct() {
			c := op.counts[h] + int32(sign)
			switch {
			case c == 0:
				delete(op.counts, h)
				distinct--
			case c == 1 && sign > 0:
				distinct++
				op.counts[h] = c
			default:
				op.counts[h] = c
			}
		}
	}
	extreme := op.extremes.reset(sp.Agg)
	best, bestStart := math.Inf(-1), first
	for ws := first; ; {
		for lo < hi && panes[lo].Start < ws {
			add(&panes[lo], -1)
			extreme.leave(lo)
			lo++
		}
		for hi < len(panes) && panes[hi].Start < ws+sp.Size {
			add(&panes[hi], 1)
			extreme.enter(panes, hi)
			hi++
		}
		var v float64
		switch sp.Agg { // count and sum: bestAdditive
		case rules.Distinct:
			v = float64(distinct)
		case rules.Avg, rules.Ratio:
			v = math.Inf(-1)
			if mayExceed(sum, n, sp.Rule.Threshold) {
				v = sum / float64(n)
			}
		case rules.Min, rules.Max:
			v = extreme.value(panes)
		case rules.Quantile:
			// sum counts the window's values below the threshold's bin:
			// only the windows the screen leaves in can make a decision,
			// and their quantiles are merged once the sweep has found
			// them all.
			if n >= sp.MinEvents && heatmap.MayExceed(sp.Q, n, int64(sum)) {
				op.windows = append(op.windows, sweptWindow{ws, lo, hi})
			}
		}
		if v > best && n >= sp.MinEvents && sp.Agg != rules.Quantile {
			best, bestStart = v, ws
		}
		next := nextChange(sp, panes, lo, hi)
		if next > last {
			break
		}
		ws = next
	}
	if sp.Agg == rules.Distinct {
		clear(op.counts)
	}
	if sp.Agg == rules.Quantile {
		bestStart, best = op.bestQuantile(sp, s, panes, first)
	}
	return bestStart, best
}

// bestAdditive is bestWindow for count and sum, the aggregates a pane adds
// to and removes from a window with one addition each: during an attack
// every event of the attackers runs it over a full window of panes, so it
// has none of the general sweep's bookkeeping.
func bestAdditive(sp *slot.Spec, panes []slot.Win, first, last int64) (int64, float64) {
	count := sp.Agg == rules.Count
	lo := slot.FirstFrom(panes, first)
	// Every pane from lo enters the first window, as when events come in
	// order: that window is the best (see the stop below), and the running
	// counts of its first and last panes give its count without adding
	// its panes up.
	if n := len(panes); sp.Running && lo < n && panes[n-1].Start < first+sp.Size {
		if c := panes[n-1].End - panes[lo].End + panes[lo].N; c >= sp.MinEvents {
			return first, float64(c)
		}
		return first, math.Inf(-1)
	}
	hi := lo
	var n int64
	var sum float64
	negative := 0 // panes of the window with a negative sum
	best, bestStart := math.Inf(-1), first
	for ws := first; ; {
		for lo < hi && panes[lo].Start < ws {
			n -= panes[lo].N
			sum -= panes[lo].Sum
			if panes[lo].Sum < 0 {
				negative--
			}
			lo++
		}
		for end := ws + sp.Size; hi < len(panes) && panes[hi].Start < end; hi++ {
			n += panes[hi].N
			sum += panes[hi].Sum
			if panes[hi].Sum < 0 {
				negative++
			}
		}
		v := sum
		if count {
			v = float64(n)
		}
		if v > best && n >= sp.MinEvents {
			best, bestStart = v, ws
		}
		// Once every pane has entered, each later window holds fewer of
		// this one's panes: without a negative one, none has more, nor
		// more events. When events come in order that is the first
		// window already.
		if hi == len(panes) && (count || negative == 0) {
			break
		}
		// sp.nextChange, with the case of most steps inline: this loop
		// runs for every event of every attacker.
		var next int64
		if sp.Pane == sp.Slide && lo < hi && hi < len(panes) {
			next = min(panes[lo].Start+sp.Slide, panes[hi].Start-sp.Size+sp.Slide)
		} else {
			next = nextChange(sp, panes, lo, hi)
		}
		if next > last {
			break
		}
		ws = next
	}
	return bestStart, best
}

// nextChange returns, for a sweep of window starts over panes whose window
// holds panes lo to hi-1, the next start at which a pane leaves (lo) or
// enters (hi) the window: watermark.Max when none does. When panes are as
// wide as the slide (sliding windows whose size is a multiple of their
// slide) every such start is on the slide grid already and needs no
// rounding.
func nextChange(sp *slot.Spec, panes []slot.Win, lo, hi int) int64 {
	next := watermark.Max
	aligned := sp.Pane == sp.Slide
	if lo < hi {
		next = panes[lo].Start + sp.Slide
		if !aligned {
			next = sp.SlideDiv.Ceil(panes[lo].Start + 1)
		}
	}
	if hi < len(panes) {
		in := panes[hi].Start - sp.Size + sp.Slide
		if !aligned {
			in = sp.SlideDiv.Ceil(panes[hi].Start - sp.Size + 1)
		}
		next = min(next, in)
	}
	return next
}

// AdvanceWatermark moves event time to wm (a watermark never goes back) and
// runs every timer due: heatmap windows fire at end-1 and state is purged at
// end-1+allowed_lateness, in time order.
//
// Timers due at the same time run in the order they were set, except that
// when a heatmap's timer is among them they run in key order: heatmap
// windows fired at one time are then emitted in the same order whether the
// slots were cached, cold, spilled or restored. Rules' timers only purge, so
// their order shows in no output, and sorting their large buckets would be
// wasted work.
func (op *Operator) AdvanceWatermark(wm int64) error {
	if wm <= op.wm {
		return nil
	}
	op.wm = wm
	op.cache.Cold.Expire(wm)
	if wm == watermark.Max {
		if err := op.cache.DropRules(); err != nil {
			return err
		}
	}
	for op.timers.Len() > 0 || op.keyTimers.Len() > 0 || op.stored.next != slot.NoTimer {
		at := op.stored.next
		if op.timers.Len() > 0 {
			at = min(at, op.timers.next())
		}
		if op.keyTimers.Len() > 0 {
			at = min(at, op.keyTimers.next())
		}
		if at > wm || at == slot.NoTimer {
			return nil
		}
		if op.stored.next == at {
			if err := op.pageTimers(at); err != nil {
				return err
			}
			continue // the heatmaps' timers paged in run with the queues'
		}
		var ib *timerBucket[idTimer]
		var kb *timerBucket[string]
		if op.timers.Len() > 0 && op.timers.next() == at {
			ib = op.timers.popBucket()
		}
		if op.keyTimers.Len() > 0 && op.keyTimers.next() == at {
			kb = op.keyTimers.popBucket()
		}
		var err error
		if (ib != nil && ib.keyed) || (kb != nil && kb.keyed) {
			err = op.runInKeyOrder(at, ib, kb)
		} else {
			err = op.runTimers(at, ib, kb)
		}
		op.timers.recycle(ib)
		op.keyTimers.recycle(kb)
		if err != nil {
			return err
		}
	}
	return nil
}

// rulesForgotten reports whether the rules' states are gone for good, so
// that their timers have nothing to do: at the end of a replay's input,
// where DropRules forgot what memory held, and what was spilled stays in a
// store no one reads again.
func (op *Operator) rulesForgotten() bool {
	return op.wm == watermark.Max && !op.writeThrough
}

// runTimers runs the timers of ib, then those of kb (either may be nil),
// all due at at.
func (op *Operator) runTimers(at int64, ib *timerBucket[idTimer], kb *timerBucket[string]) error {
	if ib != nil {
		for _, blk := range ib.blocks {
			for i, e := range blk {
				if i%timerPrefetch == 0 {
					op.prefetchTimers(blk, i)
				}
				op.timersAhead.Issue(timerPrefetch - i%timerPrefetch)
				sp := op.specs[e.spec]
				if sp == nil {
					continue // its state went with its rule (Reload)
				}
				if sp.Rule != nil {
					if op.rulesForgotten() {
						continue
					}
					if op.cache.SpilledOnly(sp.Index, e.id) {
						op.spilledTimers = append(op.spilledTimers, e)
						continue
					}
					done, err := op.cache.PurgeCold(sp, e.id, at, op.wm)
					if err != nil {
						return err
					}
					if done {
						continue
					}
				}
				s, err := op.cache.LookupID(int(e.spec), e.id)
				if err != nil {
					return err
				}
				if err := op.runTimer(s, at); err != nil {
					return err
				}
			}
		}
		if err := op.purgeSpilled(at); err != nil {
			return err
		}
	}
	if kb != nil {
		for _, blk := range kb.blocks {
			for _, key := range blk {
				if err := op.runKeyTimer(key, at); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// purgeSpilled runs the purge timers, due at at, of rules' states that
// only the Backend holds (spilled), collected in op.spilledTimers: it reads
// them in one sorted run, deletes those the watermark wholly expired
// without decoding them, and loads the others to purge them as onTimer
// does. Most purges are of states untouched since they were spilled.
func (op *Operator) purgeSpilled(at int64) error {
	ts := op.spilledTimers
	if len(ts) == 0 {
		return nil
	}
	defer func() {
		clear(ts)
		op.spilledTimers = ts[:0]
	}()
	slices.SortFunc(ts, func(x, y idTimer) int {
		if c := cmp.Compare(x.spec, y.spec); c != 0 {
			return c
		}
		if c := cmp.Compare(x.id[0], y.id[0]); c != 0 {
			return c
		}
		return cmp.Compare(x.id[1], y.id[1])
	})
	c := op.cache.Cold
	keys, buf := op.spilledKeys[:0], op.spilledKeyBuf[:0]
	for _, e := range ts {
		buf = append(buf, c.SpillKey(int(e.spec), e.id)...)
	}
	for i := range ts {
		keys = append(keys, buf[i*slotstore.SpillKeyLen:(i+1)*slotstore.SpillKeyLen])
	}
	op.spilledKeys, op.spilledKeyBuf = keys, buf
	acts := slices.Grow(op.spilledActs[:0], len(ts))[:len(ts)]
	spans := slices.Grow(op.spilledSpans[:0], len(ts))[:len(ts)]
	vals := op.spilledVals[:0]
	err := op.backend.GetSorted(keys, func(i int, b []byte, found bool) error {
		acts[i] = slot.PurgeNone
		if !found {
			return nil
		}
		_, val, err := slotstore.SplitSpilled(b)
		if err == nil {
			var act int
			act, err = op.specs[ts[i].spec].PurgeAction(val, at, op.wm)
			acts[i] = byte(act)
		}
		if acts[i] == slot.PurgeLoad {
			// Kept for the load below, which then reads it only once.
			spans[i] = [2]int{len(vals), len(vals) + len(b)}
			vals = append(vals, b...)
		}
		return err
	})
	op.spilledActs, op.spilledSpans, op.spilledVals = acts, spans, vals
	if err != nil {
		return fmt.Errorf("windows: load state: %w", err)
	}
	for i, e := range ts {
		switch acts[i] {
		case slot.PurgeDelete:
			err = c.Del(int(e.spec), e.id, "", at)
		case slot.PurgeLoad:
			var key, val []byte
			if key, val, err = slotstore.SplitSpilled(vals[spans[i][0]:spans[i][1]]); err != nil {
				return err
			}
			var s *slot.Slot
			if s, err = op.cache.Adopt(int(e.spec), e.id, key, val); err == nil {
				err = op.runTimer(s, at)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// runInKeyOrder runs the timers of ib and kb, due at at, in key order.
func (op *Operator) runInKeyOrder(at int64, ib *timerBucket[idTimer], kb *timerBucket[string]) error {
	firing := op.firing[:0]
	if ib != nil {
		for _, blk := range ib.blocks {
			for _, e := range blk {
				sp := op.specs[e.spec]
				if sp == nil {
					continue // its state went with its rule (Reload)
				}
				if sp.Rule != nil && op.rulesForgotten() {
					continue
				}
				// One the cache and the cold store do not hold is gone, or
				// was spilled writing through: its key timer is in kb.
				key, err := op.cache.KeyOf(int(e.spec), e.id)
				if err != nil {
					return err
				}
				if key != "" {
					firing = append(firing, key)
				}
			}
		}
	}
	if kb != nil {
		for _, blk := range kb.blocks {
			firing = append(firing, blk...)
		}
	}
	slices.SortStableFunc(firing, strings.Compare)
	var err error
	for _, key := range firing {
		if err = op.runKeyTimer(key, at); err != nil {
			break
		}
	}
	clear(firing)
	op.firing = firing[:0]
	return err
}

func (op *Operator) runKeyTimer(key string, at int64) error {
	if op.specs[slot.SpecOf(key)] == nil {
		return nil // its state went with its rule (Reload)
	}
	s, err := op.cache.Lookup(key)
	if err != nil {
		return err
	}
	return op.runTimer(s, at)
}

// runTimer runs the onTimer of s (nil: gone) for a timer set at at, unless
// an earlier timer of s superseded it.
func (op *Operator) runTimer(s *slot.Slot, at int64) error {
	if s == nil || s.TimerAt != at {
		return nil
	}
	return op.onTimer(s, at)
}

func (op *Operator) onTimer(s *slot.Slot, at int64) error {
	s.TimerAt = slot.NoTimer
	sp := s.Spec
	switch {
	case sp.Rule != nil:
		s.Purge(op.wm)
	case sp.WindowType == rules.Session:
		for i := range s.Wins {
			se := &s.Wins[i]
			if !se.Fired && se.End-1 <= at {
				se.Fired = true
				op.fireSession(s, se)
			}
		}
		s.Purge(at)
	default:
		for {
			end := nextFireEnd(s)
			if end == slot.NoTimer || end-1 > at {
				break
			}
			s.FiredEnd = end
			if sp.Lateness > 0 {
				op.fireWindow(s, end-sp.Size, s.BumpFired(end-sp.Size))
			} else {
				op.fireWindow(s, end-sp.Size, 0)
			}
		}
		s.Purge(at)
	}
	op.cache.MarkDirty(s)
	if s.Empty() {
		return op.cache.Remove(s)
	}
	op.schedule(s)
	return nil
}

// nextFireEnd is the end of the earliest window of a pane-based heatmap that
// has content and has not fired, or NoTimer.
func nextFireEnd(s *slot.Slot) int64 {
	sp := s.Spec
	after := sp.SlideDiv.Ceil(slot.ClampWM(s.FiredEnd) - sp.Size + 1) // first start ending past firedEnd
	for i := range s.Wins {
		p := s.Wins[i].Start
		ws := max(sp.SlideDiv.Ceil(p-sp.Size+1), after)
		if ws <= sp.SlideDiv.Floor(p) {
			return ws + sp.Size
		}
	}
	return slot.NoTimer
}

// nextAction is when the slot next needs its timer: for heatmaps the earliest
// firing or cleanup; for rules, whose purges nobody sees, the time the whole
// slot can go, which keeps timers to about one per key and window size.
func nextAction(s *slot.Slot) int64 {
	sp := s.Spec
	next := slot.NoTimer
	switch {
	case sp.WindowType == rules.Session:
		if n := len(s.Wins); n > 0 && sp.Rule != nil {
			return sp.Cleanup(s.Wins[n-1].End)
		}
		for i := range s.Wins {
			se := &s.Wins[i]
			if se.Fired {
				next = min(next, sp.Cleanup(se.End))
			} else {
				next = min(next, se.End-1)
			}
		}
	case sp.Rule != nil:
		if n := len(s.Wins); n > 0 {
			return sp.PaneCleanup(s.Wins[n-1].Start)
		}
	default:
		if e := nextFireEnd(s); e != slot.NoTimer {
			next = e - 1
		}
		if len(s.Wins) > 0 {
			next = min(next, sp.PaneCleanup(s.Wins[0].Start))
		}
		if fired := s.FiredWins(); len(fired) > 0 {
			next = min(next, sp.Cleanup(fired[0].Start+sp.Size))
		}
	}
	return next
}

func (op *Operator) schedule(s *slot.Slot) {
	if s.Spec.Rule != nil && s.TimerAt != slot.NoTimer {
		return // the pending timer re-registers when it finds work left
	}
	next := nextAction(s)
	if next == slot.NoTimer {
		return
	}
	if s.Spec.Rule != nil {
		next = min(slot.CeilTo(next, s.Spec.PurgeGrain), slot.NoTimer-1)
	}
	if next < s.TimerAt {
		s.TimerAt = next
		op.cache.MarkDirty(s)
		if op.cache.Untimed(s) {
			return
		}
		op.timers.add(next, idTimer{id: s.ID, spec: int32(s.Spec.Index)}, s.Spec.Heatmap != nil)
	}
}

func (op *Operator) fireWindow(s *slot.Slot, start int64, rev int32) {
	sp := s.Spec
	var a *heatmap.Acc
	if sp.Size == sp.Pane {
		// A tumbling window is a single pane.
		for i := range s.Wins {
			if s.Wins[i].Start == start {
				a = s.Wins[i].Heatmap()
				break
			}
		}
	} else {
		a = op.scratch[sp.Index]
		a.Reset()
		for i := range s.Wins {
			p := &s.Wins[i]
			if hm := p.Heatmap(); p.Start >= start && p.Start < start+sp.Size && hm != nil {
				a.Merge(hm)
			}
		}
	}
	if a == nil || a.Count == 0 {
		return
	}
	op.emitHeatmap(s, start, start+sp.Size, rev, a)
}

func (op *Operator) fireSession(s *slot.Slot, se *slot.Win) {
	op.emitHeatmap(s, se.Start, se.End, se.Rev, se.Heatmap())
}

func (op *Operator) emitHeatmap(s *slot.Slot, start, end int64, rev int32, a *heatmap.Acc) {
	op.hw = HeatmapWindow{
		Heatmap:      s.Spec.Heatmap,
		HeatmapIndex: s.Spec.Pos,
		Key:          op.keyText(s),
		Start:        start,
		End:          end,
		Revision:     rev,
		Acc:          a,
	}
	op.windowed++
	op.out.Heatmap(&op.hw)
}

// Flush writes every changed state to the Backend, as a checkpoint or at the
// end of a run.
func (op *Operator) Flush() error { return op.cache.Flush() }

// WriteBack writes up to n changed states to the Backend, those changed
// longest ago first. The live job calls it between records, so that the
// next checkpoint, which pauses the job, finds less left to write.
func (op *Operator) WriteBack(n int) error { return op.cache.WriteBackSome(n) }

// Changed returns how many states are queued for WriteBack: changed since
// they were last written, or written since (a few).
func (op *Operator) Changed() int { return op.cache.Changes() }
