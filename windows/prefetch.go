package windows

import (
	"unsafe"

	"github.com/riskstream/riskstream/internal/prefetch"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows/slot"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// Prefetch gathers what to load into the CPU cache of the state that
// ProcessElement will touch for the SlotRefs of upcoming events, in three
// stages: the index entries of far, the slots of near, which the index
// entries locate, and the panes of now, which the slots locate. With
// hundreds of thousands of keys nearly every event's state is a cache
// miss; processing events one at a time would pay for those misses one
// after the other.
//
// A caller processing events in groups calls it at the start of each group
// with the refs of the next group as now, of the one after as near and of
// the third as far, and IssuePrefetches before each event of the group,
// which asks for the loads a share at a time in the order gathered: far's
// index entries, now's panes, then near's slots, which the next call
// reads. What a stage reads was asked for during the group before. The
// stages may also be given the same refs, at the cost of waiting for what
// an earlier stage asked.
//
// The slots found for now also serve processing: when the events of a
// call's now are processed after the next call, as in the groups above,
// ProcessElement takes their cached slots from it instead of probing the
// index a second time (prefetchedSlot).
//
// The loads are prefetch instructions, which the CPU does not wait for, and
// Prefetch itself reads only index entries, slots and, to tell apart the
// states of now whose index entries match, the heads of their records (see
// stateEntry). Calling it or not, with any refs, gives the same outputs.
func (op *Operator) Prefetch(now, near, far []SlotRef) {
	idx := op.cache.Cold.Idx
	q := &op.ahead
	q.Reset()
	for i := range far {
		r := &far[i]
		if x := &idx[r.spec]; x.N >= slotstore.SmallIndex {
			q.Add(x.HomeAddr(r.id))
		}
	}
	// The slots near's entries locate are those of the next call's now
	// when the caller's groups move on by one. A slot may have been dropped
	// and reused for another key since; its panes are then loaded for
	// nothing.
	var slots []*slot.Slot
	if len(now) > 0 && len(now) == len(op.nearSlots) && prefetch.Addr(&now[0]) == op.nearAt && now[0] == op.nearFirst {
		slots = op.nearSlots
	}
	op.groupSlots, op.nowSlots = op.nowSlots, op.groupSlots[:0]
	op.groupAt, op.nowAt = op.nowAt, 0
	// The group processed next: its slots' panes, and the line of a
	// screened slot's out-of-line part, were asked for during the last one.
	// A quantile's decision reads the distribution of each pane, out of
	// line, and an avg, ratio or quantile rule's event moves its screen:
	// asked for first, they come for the group's first events.
	for _, s := range op.groupSlots {
		if s == nil || !screened(s.Spec) {
			continue
		}
		if s.Spec.Agg == rules.Quantile && len(s.Wins) <= quantilePrefetchPanes {
			for j := range s.Wins {
				if x := s.Wins[j].X; x != nil {
					addQuantileLines(q, x)
				}
			}
		}
		if s.More != nil {
			screen := prefetch.Addr(&s.More.InOrder)
			q.Add(screen)
			q.Add(screen + unsafe.Sizeof(slot.InOrderScreen{}) - 1)
		}
	}
	if len(now) > 0 {
		op.nowAt = prefetch.Addr(&now[0])
	}
	for i := range now {
		r := &now[i]
		op.nowSlots = append(op.nowSlots, nil)
		if x := &idx[r.spec]; x.N >= slotstore.SmallIndex {
			s := (*slot.Slot)(nil)
			if slots != nil {
				s = slots[i]
			} else {
				s = op.cache.Cached(int(r.spec), r.id)
			}
			// Panes out of the slot: an event adds to the last, or
			// opens the one after it (mostly, with panes of a second
			// and an attacker's few payments a second), and a rule's
			// decision sweeps them from the first.
			op.nowSlots[i] = s
			if s != nil && len(s.Wins) > 1 {
				last := prefetch.Addr(&s.Wins[len(s.Wins)-1])
				q.Add(prefetch.Addr(&s.Wins[0]))
				q.Add(last)
				q.Add(last + unsafe.Sizeof(slot.Win{}))
			}
			// The line of the slot's pointer to its screen, which the
			// next call reads (see above).
			if s != nil && screened(s.Spec) {
				q.Add(prefetch.Addr(&s.More))
			}
		}
	}
	op.nearSlots = op.nearSlots[:0]
	for i := range near {
		r := &near[i]
		var found *slot.Slot
		if x := &idx[r.spec]; x.N >= slotstore.SmallIndex {
			found = op.cache.AddCandidate(q, x, r.id)
		}
		op.nearSlots = append(op.nearSlots, found)
	}
	op.nearAt, op.nearFirst = 0, SlotRef{}
	if len(near) > 0 {
		op.nearAt, op.nearFirst = prefetch.Addr(&near[0]), near[0]
	}
}

// screened reports whether sp's events move their slot's screen
// (InOrderScreen), out of line.
func screened(sp *slot.Spec) bool {
	return sp.Agg == rules.Avg || sp.Agg == rules.Ratio || sp.Agg == rules.Quantile
}

// quantilePrefetchPanes is the most panes of a slot whose distributions
// Prefetch asks for: a cold key's. A hot key's stay in the CPU cache.
const quantilePrefetchPanes = 16

// addQuantileLines gathers the lines of x that a quantile reads: its
// distribution's pointer and, when allocated with it (HeatmapExtra), the
// distribution's fields up to Degraded.
func addQuantileLines(q *prefetch.Queue, x *slot.AccExtra) {
	from := prefetch.Addr(x) + unsafe.Offsetof(x.Heatmap)
	to := prefetch.Addr(x) + unsafe.Offsetof(slot.HeatmapExtra{}.Heatmap) + unsafe.Offsetof(slot.HeatmapExtra{}.Heatmap.Degraded) - 1
	q.Add(from)
	if to/64 != from/64 {
		q.Add(to)
	}
}

// IssuePrefetches asks for a share of the loads the last Prefetch
// gathered and has not asked for yet, before each of the left events of
// the group still to process (this one included): all of them when left
// is 1. Asked for all at once, a group's few hundred loads would overflow
// what a core keeps in flight (prefetch.Queue).
func (op *Operator) IssuePrefetches(left int) { op.ahead.Issue(left) }

// prefetchedSlot returns the slot of r that Prefetch found when r was in
// now of the call before the last, if that slot is still the cached one of
// r's spec and id; else nil. A slot may have been evicted since, and reused
// for another key: the checks read the two lines of the slot that Prefetch
// loaded, where a probe of the index would miss again in an index of
// hundreds of thousands of keys. Only one cached slot has a spec and id;
// the rules of one key share the id (see cache), and a slot evicted while
// one of an event's rules loads its state may be taken for it at once.
func (op *Operator) prefetchedSlot(sp *slot.Spec, r *SlotRef) *slot.Slot {
	k := (prefetch.Addr(r) - op.groupAt) / unsafe.Sizeof(*r)
	if op.groupAt == 0 || k >= uintptr(len(op.groupSlots)) {
		return nil
	}
	if s := op.groupSlots[k]; s != nil && s.RingIdx >= 0 && s.ID == r.id && s.Spec == sp {
		return s
	}
	return nil
}

// timerPrefetch is how many timers prefetchTimers gathers the loads of at
// a time.
const timerPrefetch = 16

// prefetchTimers gathers, at timer i of a block, what running the timers
// after it touches, for runTimers to ask for over the next timerPrefetch
// timers (prefetch.Queue.Issue). Most timers are rules' purges, due for
// every key of a rule at once (their grain is the window), so each is a
// slot long out of the CPU cache, or a record of the cold store. In two
// stages, as Prefetch: the index entries two groups ahead, and the slots
// or records of the next group, which those entries, asked for a group
// earlier, locate.
func (op *Operator) prefetchTimers(blk []idTimer, i int) {
	const g = timerPrefetch
	c := op.cache
	idx := c.Cold.Idx
	q := &op.timersAhead
	q.Reset()
	entries := func(from, to int) {
		for _, e := range blk[min(from, len(blk)):min(to, len(blk))] {
			if x := &idx[e.spec]; x.N >= slotstore.SmallIndex {
				q.Add(x.HomeAddr(e.id))
			}
		}
	}
	if i == 0 {
		entries(0, 2*g)
	}
	entries(i+2*g, i+3*g)
	for _, t := range blk[min(i+g, len(blk)):min(i+2*g, len(blk))] {
		if x := &idx[t.spec]; x.N >= slotstore.SmallIndex {
			c.AddCandidate(q, x, t.id)
		}
	}
}
