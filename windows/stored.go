package windows

import (
	"encoding/binary"
	"fmt"
)

// Timer entries in the Backend (docs/format/state.md "Timers"), as Flink
// keeps the timers of its RocksDB state backend: in write-through mode
// every stored slot with a pending timer has one entry, keyed by the
// timer's time and then the slot's key, with timerValue. A restored
// operator reads them in time order as the watermark reaches them (pages
// them in) instead of rebuilding its timer queue from every slot: a
// restore costs a seek, not a pass over the state, and the timers of
// states nobody touches stay on disk until they are due.
//
// The entries live among the slot keys under a spec number no rule or
// heatmap has, so that they go wherever slots go (checkpoints, changelogs,
// standby copies) in the same atomic writes.

// timerSpec is the spec number of timer entries; compile allows fewer
// specs than it.
const timerSpec = 0xffff

// timerValue is the value of a timer entry: not empty, which a changelog
// record could not tell from a deletion.
var timerValue = []byte{1}

// timerKeyHead is the length of a timer entry's key before the slot key:
// the spec and the time.
const timerKeyHead = 2 + 8

// timerPage is how many rules' timers due at one time are paged in at
// once: a time may have a purge timer for every key of a rule.
const timerPage = 4096

// appendTimerKey appends the Backend key of the timer entry at at of the
// slot with key: big-endian with the sign bit flipped, so that keys sort
// by time.
func appendTimerKey(dst []byte, at int64, key string) []byte {
	dst = append(dst, timerSpec>>8, timerSpec&0xff)
	dst = binary.BigEndian.AppendUint64(dst, uint64(at)^1<<63)
	return append(dst, key...)
}

// splitTimerKey returns the time and slot key of a timer entry's key; ok
// is false for any other key.
func splitTimerKey(k []byte) (at int64, key []byte, ok bool) {
	if len(k) < timerKeyHead+2 || specOf(k) != timerSpec {
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(k[2:]) ^ 1<<63), k[timerKeyHead:], true
}

// storedTimers are what a restored operator has yet to page in of the
// Backend's timer entries.
type storedTimers struct {
	// next is the time of the first entry not paged in yet; noTimer when
	// there is none (or the operator was not restored).
	next int64
	// from is the Backend key of that entry, where the next read starts.
	from []byte
}

// findStored sets op.stored to the first timer entry at or after
// op.stored.from.
func (op *Operator) findStored() error {
	op.stored.next = noTimer
	err := op.cache.cold.backend.Seek(op.stored.from, func(k []byte) (bool, error) {
		if at, _, ok := splitTimerKey(k); ok {
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

// pageTimers adds the Backend's timer entries due at at (op.stored.next)
// to the key timer queue. They stay stored: a slot's entry changes with
// its timer when the slot is written back (cache.writeBack). A heatmap's entries at one time are paged in together,
// to run in key order with the queue's; a rule's (which only purge, in any
// order) up to timerPage at a time, ahead of the heatmaps' (spec numbers
// order the keys: rules come first). Another shard's entries are left to
// it.
func (op *Operator) pageTimers(at int64) error {
	c := op.cache
	paged := 0
	op.stored.next = noTimer
	var stop []byte
	err := c.cold.backend.Seek(op.stored.from, func(k []byte) (bool, error) {
		t, key, ok := splitTimerKey(k)
		if !ok {
			return false, nil
		}
		spec := specOf(key)
		if spec >= len(op.specs) {
			return false, fmt.Errorf("timer of slot key %q names no rule", key)
		}
		hm := op.specs[spec].hm != nil
		if t != at || !hm && paged >= timerPage {
			op.stored.next = t
			stop = append([]byte(nil), k...) // k is valid during the call only
			return false, nil
		}
		if !op.owns(spec, hashSlotKey(c.seeds, string(key))) {
			return true, nil
		}
		op.keyTimers.add(at, string(key), hm)
		paged++
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("windows: page in timers: %w", err)
	}
	op.stored.from = stop
	return nil
}

// storeTimer replaces the timer entry of the slot with key at old with one
// at at (either noTimer: none).
func (c *coldStore) storeTimer(key string, old, at int64) error {
	if old == at {
		return nil
	}
	if old != noTimer {
		c.timerKey = appendTimerKey(c.timerKey[:0], old, key)
		if err := c.backend.Delete(c.timerKey); err != nil {
			return fmt.Errorf("windows: delete timer: %w", err)
		}
	}
	if at != noTimer {
		c.timerKey = appendTimerKey(c.timerKey[:0], at, key)
		if err := c.backend.Set(c.timerKey, timerValue); err != nil {
			return fmt.Errorf("windows: write timer: %w", err)
		}
	}
	return nil
}
