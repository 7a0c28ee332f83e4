package windows

import (
	"fmt"
	"slices"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows/slot"
)

// byID returns specs in a table by state id, at least n long, with nil
// for the ids no spec has.
func byID(specs []*slot.Spec, n int) []*slot.Spec {
	for _, sp := range specs {
		n = max(n, sp.Index+1)
	}
	table := make([]*slot.Spec, n)
	for _, sp := range specs {
		table[sp.Index] = sp
	}
	return table
}

// scratchFor makes the buffer a heatmap's sliding windows are merged into.
func (op *Operator) scratchFor(sp *slot.Spec) {
	op.scratch[sp.Index] = nil
	if sp.Heatmap != nil {
		op.scratch[sp.Index] = heatmap.New(len(sp.Bounds))
	}
}

// Reload replaces the operator's rules and heatmaps with cfg's, between
// two events, keeping the state of those that keep their state id. ids
// are the state ids of cfg's rules, then heatmaps, in file order, distinct
// and below StateIDs (a new operator's are their places): a rule or heatmap
// whose id is one of the operator's takes over its state and timers, and
// must have the same definition (rules.Identity) and window settings; its threshold,
// action, min_events and mode may differ. The state of every id the
// operator has and ids leave out is dropped from memory; its copies in
// the Backend are left to DeleteRetiredSome. A new id may be one a dropped
// rule had, once its stored states are deleted: the dropped states'
// timers still queued then name it, and run only where a state of the
// new rule with the same key has a timer at that very time, which is its
// own (runTimer and PurgeAction check the state's timer). An error (rules that do not compile) comes before
// anything changed. Events must then be decoded with a schema built from
// Fields(cfg), and keyed by new Keyers.
func (op *Operator) Reload(cfg *rules.Config, schema *event.Schema, ids []int) error {
	ordered, err := slot.Compile(cfg, schema, ids)
	if err != nil {
		return err
	}
	op.stampScreens(ordered)
	n := len(op.specs)
	for _, sp := range ordered {
		n = max(n, sp.Index+1)
	}
	kept := make([]bool, n)
	for i, sp := range ordered {
		if sp.Index < len(op.specs) && op.specs[sp.Index] != nil {
			// Slots point to their spec: the kept one is updated in place,
			// its attribute indexes now the new schema's.
			old := op.specs[sp.Index]
			*old = *sp
			ordered[i] = old
			kept[sp.Index] = true
		}
	}
	var dropped []int
	for id, sp := range op.specs {
		if sp != nil && !kept[id] {
			dropped = append(dropped, id)
		}
	}
	op.dropState(dropped)
	op.grow(n)
	for _, id := range dropped {
		op.specs[id] = nil
		op.horizons[id] = horizon{}
		op.scratch[id] = nil
	}
	// A new id's tables are empty: never used, or emptied when dropped.
	for _, sp := range ordered {
		if !kept[sp.Index] {
			op.specs[sp.Index] = sp
			op.scratchFor(sp)
		}
	}
	op.ordered = ordered
	return nil
}

// grow makes the tables by state id n long.
func (op *Operator) grow(n int) {
	if n <= len(op.specs) {
		return
	}
	more := n - len(op.specs) // every table is as long
	op.specs = append(op.specs, make([]*slot.Spec, more)...)
	op.cache.SetSpecs(op.specs)
	op.horizons = append(op.horizons, make([]horizon, more)...)
	op.scratch = append(op.scratch, make([]*heatmap.Acc, more)...)
}

// dropState forgets the state of the specs with ids, in the cache and the
// cold store. The Backend's copies stay: deleting each of a rule's states
// there took most of a reload's pause (BENCHMARKS.md "Rules reload"), and
// the ids are retired, never read again, until DeleteRetiredSome deletes
// them a part at a time between records.
func (op *Operator) dropState(ids []int) {
	if len(ids) == 0 {
		return
	}
	op.cache.Forget(ids)
}

// DeleteRetiredSome deletes up to n of the states stored under the
// retired state id, which no rule or heatmap has any more (removed, or
// changed, since they were written), with their timer entries, from the
// first key after after on (nil: from the first). It reads those states
// alone, not the rest. It returns the last key it deleted, for the next
// call, how many it deleted, and whether none is left: a caller between
// records deletes a large state a part at a time. Of the operators
// sharing a Backend (the shards of one engine) one is enough. An operator
// that does not write through stores only the states its memory spilled,
// which have no timer entry beside them (docs/format/state.md).
func (op *Operator) DeleteRetiredSome(id int, after []byte, n int) (last []byte, deleted int, done bool, err error) {
	b := op.backend
	prefix := []byte{byte(id >> 8), byte(id)}
	start := prefix
	if after != nil {
		start = append(slices.Clone(after), 0) // the first key after it
	}
	done = true
	err = b.Seek(start, func(k, v []byte) (bool, error) {
		if k[0] != prefix[0] || k[1] != prefix[1] {
			return false, nil
		}
		if deleted == n {
			done = false
			return false, nil
		}
		if op.writeThrough {
			if err := op.cache.Cold.DeleteTimerOf(k, v); err != nil {
				return false, err
			}
		}
		last = append(last[:0], k...)
		deleted++
		return true, b.Delete(k)
	})
	if err != nil {
		return nil, deleted, false, fmt.Errorf("windows: delete the state of a rule gone: %w", err)
	}
	return last, deleted, done, nil
}
