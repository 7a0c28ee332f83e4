// Package windows is the window operator: event-time tumbling, sliding and
// session windows per key, with Flink's semantics (see docs/time.md, and
// testdata/scenarios for each rule spelled out).
//
// The Operator is a pure state machine in the manner of etcd's raft
// RawNode. Its caller drives it with a loop of
//
//	res, err := op.ProcessElement(refs, keys, t, processing) // assign, update, decide
//	err = op.AdvanceWatermark(wm)                            // fire and purge what is due
//
// and receives what to emit through its Output (decisions on arrival,
// heatmap windows on firing). It starts no goroutines and reads no clock:
// the same calls in the same order always produce the same outputs, which is
// what makes a replay and a live run agree.
//
// State is kept per (rule or heatmap, key) in a slot (package slot):
//
//   - tumbling and sliding windows as panes of gcd(size, slide) width, so an
//     event updates one pane however many windows contain it, and a window's
//     aggregate is the sum of its panes (decisions sweep the panes once to
//     find the window with the highest value);
//   - session windows as a sorted list of disjoint sessions, merged in place
//     when an event bridges or touches them (the MergingWindowSet idea: a
//     merge rewrites one slot, not the state of every window it absorbs).
//
// Slots live in the memory-tiered store (package slotstore): a write-back
// cache (CLOCK eviction) in front of the cold store, which keeps evicted
// slots encoded in memory within a byte budget, and in front of a Backend
// (Pebble in production, MemBackend in tests) beyond it: a slot is encoded
// when evicted or flushed, not per event, and read back on demand, so state
// may exceed memory. The operator decides what a slot's windows mean; the
// store only finds, keeps and evicts slots. Timers find slots by the
// hash of their key (restored ones by the key). One timer queue orders
// every firing and cleanup; there is no goroutine or timer per key or
// window.
package windows
