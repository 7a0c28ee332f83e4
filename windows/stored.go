package windows

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/riskstream/riskstream/windows/slot"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// Timer entries in the Backend (docs/format/state.md "Timers"), as Flink
// keeps the timers of its RocksDB state backend: in write-through mode
// every stored slot with a pending timer has one entry, keyed by the
// timer's time and then the slot's key, with TimerValue. A restored
// operator reads them in time order as the watermark reaches them (pages
// them in) instead of rebuilding its timer queue from every slot: a
// restore costs a seek, not a pass over the state, and the timers of
// states nobody touches stay on disk until they are due.
//
// The entries live among the slot keys under a spec number no rule or
// heatmap has, so that they go wherever slots go (checkpoints, changelogs,
// standby copies) in the same atomic writes.

// timerPage is how many rules' timers due at one time are paged in at
// once: a time may have a purge timer for every key of a rule.
const timerPage = 4096

// storedTimers are what the operator has yet to page in of the
// Backend's timer entries.
type storedTimers struct {
	// next is the time of the first entry not paged in yet; NoTimer when
	// there is none.
	next int64
	// from is the Backend key where the next read starts: that entry's, or
	// the start of its time.
	from []byte
	// ids and keys are the rules' timers of a page, run together.
	ids  timerBucket[idTimer]
	keys timerBucket[string]
	// spill is spillTimers' buffer.
	spill []byte
}

// findStored sets op.stored to the first timer entry at or after
// op.stored.from.
func (op *Operator) findStored() error {
	op.stored.next = slot.NoTimer
	err := op.backend.Seek(op.stored.from, func(k, _ []byte) (bool, error) {
		if at, _, ok := slot.SplitTimerKey(k); ok {
			op.stored.next = at
			op.stored.from = append(op.stored.from[:0], k...)
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("windows: read timers: %w", err)
	}
	return nil
}

// pageTimers pages in the Backend's timer entries due at at
// (op.stored.next): rules' (which only purge, in any order, and may be
// one for every key of a rule) timerPage at a time, each page run at
// once; heatmaps' all into the queues, where they run with the queues'
// own in key order (AdvanceWatermark). Another shard's entries are left
// to it.
//
// An entry of a slot key (write-through) stays stored: it changes with
// its slot (cache.writeBack). An entry of a spilled queue's timer
// (spillTimers) is deleted once paged in.
func (op *Operator) pageTimers(at int64) error {
	c := op.cache
	skipRules := op.rulesForgotten()
	for op.stored.next == at {
		paged := 0
		op.stored.next = slot.NoTimer
		var stop []byte
		err := op.backend.Seek(op.stored.from, func(k, _ []byte) (bool, error) {
			t, key, ok := slot.SplitTimerKey(k)
			if !ok {
				return false, nil
			}
			spec := slot.SpecOf(key)
			if spec >= len(op.specs) || op.specs[spec] == nil {
				// A rule's gone: its state and timer entries are deleted
				// by DeleteRetiredSome, if not yet.
				return true, nil
			}
			hm := op.specs[spec].Heatmap != nil
			if t == at && !hm && skipRules {
				return true, nil
			}
			if t != at || !hm && paged >= timerPage {
				op.stored.next = t
				stop = append([]byte(nil), k...) // k is valid during the call only
				return false, nil
			}
			if len(key) == slotstore.SpillKeyLen && key[2] == 0xff {
				e := idTimer{spec: int32(spec), id: slot.ID{binary.BigEndian.Uint64(key[3:]), binary.BigEndian.Uint64(key[11:])}}
				if !op.owns(spec, e.id) {
					return true, nil
				}
				if hm {
					op.timers.add(at, e, true)
				} else {
					op.stored.ids.blocks[0] = append(op.stored.ids.blocks[0], e)
				}
				paged++
				return true, op.backend.Delete(k)
			}
			if !op.owns(spec, slot.HashKey(c.Seeds, string(key))) {
				return true, nil
			}
			if hm {
				op.keyTimers.add(at, string(key), true)
			} else {
				op.stored.keys.blocks[0] = append(op.stored.keys.blocks[0], string(key))
			}
			paged++
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("windows: page in timers: %w", err)
		}
		op.stored.from = stop
		if err := op.runPage(at); err != nil {
			return err
		}
	}
	return nil
}

// runPage runs the rules' timers pageTimers read, due at at.
func (op *Operator) runPage(at int64) error {
	ids, keys := &op.stored.ids, &op.stored.keys
	var ib *timerBucket[idTimer]
	var kb *timerBucket[string]
	if len(ids.blocks[0]) > 0 {
		ib = ids
	}
	if len(keys.blocks[0]) > 0 {
		kb = keys
	}
	err := op.runTimers(at, ib, kb)
	clear(keys.blocks[0])
	ids.blocks[0], keys.blocks[0] = ids.blocks[0][:0], keys.blocks[0][:0]
	return err
}

// minTimerBudget is the least the timer queue may take before it spills:
// below it, spilling would cost more Backend writes and reads than the
// memory it saves.
const minTimerBudget = 64 << 10

// timerBudget is Operator.timerBudget for opts.
func timerBudget(opts Options) int {
	if opts.WriteThrough {
		return math.MaxInt
	}
	return max(int(opts.MemoryBytes/4), minTimerBudget)
}

// spillTimers moves the timers due last to the Backend, as timer entries
// of their spec and slot id that pageTimers reads back when they are due,
// when the queue takes more than a quarter of the operator's memory
// budget, until it takes an eighth: a state takes a timer, and with
// enough keys the timers alone would outgrow any budget. Only a store
// that is never restored spills its timers (the ids' seeds are the
// process's): timerBudget.
func (op *Operator) spillTimers() error {
	q := &op.timers
	c := op.cache.Cold
	first := slot.NoTimer
	n, err := q.removeLatest(op.timerBudget/2/idTimerBytes, func(at int64, e idTimer) error {
		first = min(first, at)
		op.stored.spill = slot.AppendTimerKey(op.stored.spill[:0], at, "")
		op.stored.spill = append(op.stored.spill, c.SpillKey(int(e.spec), e.id)...)
		return op.backend.Set(op.stored.spill, slot.TimerValue)
	})
	if err != nil {
		return fmt.Errorf("windows: spill timers: %w", err)
	}
	op.timersSpilled += int64(n)
	if first <= op.stored.next {
		op.stored.next = first
		op.stored.from = slot.AppendTimerKey(op.stored.from[:0], first, "")
	}
	return nil
}
