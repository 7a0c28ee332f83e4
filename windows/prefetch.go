package windows

// smallIndex is the number of keys below which a spec's state stays in the
// CPU cache anyway and Prefetch leaves it alone.
const smallIndex = 4096

// Prefetch loads into the CPU cache the state that ProcessElement will touch
// for refs, the SlotRefs of the next events in order. With hundreds of
// thousands of keys nearly every event's state is a cache miss, and
// processing events one at a time pays for those misses one after the
// other; here the loads of a whole batch are independent, so the CPU
// overlaps them. It only reads: calling it or not, with any refs, gives the
// same outputs.
func (op *Operator) Prefetch(refs []SlotRef) {
	// The loops are kept short: the CPU overlaps only the loads that fit in
	// its reorder window.
	var touched uint64
	// First wave: the index entries, which the hash alone locates.
	for _, r := range refs {
		if x := &op.cache.m[r.spec]; x.n >= smallIndex {
			touched += x.entries[x.home(tagOf(r.id))].tag
		}
	}
	// Second wave: the slots and the windows they point to.
	for _, r := range refs {
		x := &op.cache.m[r.spec]
		if x.n < smallIndex {
			continue
		}
		s := x.get(r.id)
		if s == nil {
			continue
		}
		if n := len(s.wins); n > 0 {
			touched += uint64(s.wins[n-1].start) // sessions and panes alike, the latest
		}
	}
	op.touched = touched // a use of the loads, so that none is optimized away
}
