// Package slotstore is where the window operator's slots are: the
// memory-tiered store. A write-back Cache of decoded slots (CLOCK
// eviction) sits in front of the Cold store, which keeps evicted slots
// encoded in byte chunks within a memory budget, found through one
// open-addressing Index per rule or heatmap, and spills past the budget to
// a Backend (Pebble in production, MemBackend in tests).
//
// The store finds, admits, evicts, writes back and expires slots; what a
// slot's windows mean is package windows' concern. It starts no goroutines
// and reads no clock: the operator calls it on its own goroutine, and
// expiry follows the watermark it is given.
package slotstore
