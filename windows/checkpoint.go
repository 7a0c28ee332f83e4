package windows

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
)

// checkpointVersion is the first byte of an operator checkpoint. Version 1
// held the timer queue.
const checkpointVersion = 2

// Checkpoint writes every changed slot to the Backend (the operator must
// write through: see Options.WriteThrough) and appends to dst
// what the slots do not hold: the watermark and a counter. The caller
// stores both in one atomic batch (with the input offsets they cover);
// Restore on a new operator over the same Backend resumes exactly there.
//
// The timers are not in it: each slot stores the time of its pending timer,
// and Restore rebuilds the queue from the slots. So a checkpoint costs what
// changed since the last one, not what the queue holds, which is every
// live key.
func (op *Operator) Checkpoint(dst []byte) ([]byte, error) {
	if !op.cache.cold.writeThrough {
		return nil, fmt.Errorf("windows: Checkpoint needs Options.WriteThrough")
	}
	if err := op.cache.flush(); err != nil {
		return nil, err
	}
	dst = append(dst, checkpointVersion)
	dst = binary.AppendVarint(dst, op.wm)
	dst = binary.AppendVarint(dst, op.windowed)
	return dst, nil
}

// owns reports whether the state of spec with id is this operator's: all
// are, but for a shard's (Options.Shards).
func (op *Operator) owns(spec int, id slotID) bool {
	return shardOf(op.specs[spec], id, op.shards) == op.shard
}

// Restore loads a Checkpoint into an operator that has processed nothing
// yet, and rebuilds the timer queue from every slot in the Backend. Slots
// are read back from the Backend on demand.
func (op *Operator) Restore(b []byte) error {
	if op.wm != MinWatermark || op.timers.Len() != 0 || op.keyTimers.Len() != 0 || len(op.cache.ring) != 0 {
		return fmt.Errorf("windows: restore into an operator that has already run")
	}
	d := decoder{b: b}
	if v := d.byte(); v != checkpointVersion {
		return fmt.Errorf("windows: checkpoint version %d, want %d (written by another version of riskstream)", v, checkpointVersion)
	}
	op.wm = d.varint()
	op.windowed = d.varint()
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		return fmt.Errorf("windows: checkpoint: %w", d.err)
	}
	type timer struct {
		at  int64
		key string
	}
	var timers []timer
	var retired [][]byte
	c := op.cache
	err := c.cold.backend.Scan(func(key, value []byte) error {
		if len(key) < 2 {
			return fmt.Errorf("windows: restore: slot key %q names no rule", key)
		}
		if specOf(key) >= len(op.specs) || op.specs[specOf(key)] == nil {
			// A rule removed or changed since (see Reload): its
			// state goes, once, with DeleteRetired.
			if op.shard == 0 {
				retired = append(retired, append([]byte(nil), key...))
			}
			return nil
		}
		id := hashSlotKey(c.seeds, string(key))
		if !op.owns(specOf(key), id) {
			return nil // another shard's
		}
		// Any stored slot may be read back; none is in memory.
		c.cold.spilled.add(specOf(key), id)
		at, err := slotTimer(value)
		if err != nil {
			return fmt.Errorf("windows: restore: state of %q: %w", key, err)
		}
		if at != noTimer {
			timers = append(timers, timer{at, string(key)})
		}
		return nil
	})
	if err != nil {
		return err
	}
	op.retired = retired
	// By time, then in key order (the scan's), as the queue runs a
	// heatmap's timers.
	slices.SortStableFunc(timers, func(x, y timer) int { return cmp.Compare(x.at, y.at) })
	for _, t := range timers {
		op.keyTimers.add(t.at, t.key, op.specs[specOf(t.key)].hm != nil)
	}
	return nil
}
