package windows

import (
	"encoding/binary"
	"fmt"

	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows/slot"
)

// checkpointVersion is the first byte of an operator checkpoint. Version 1
// held the timer queue; version 2's Backend held no timer entries; version
// 3's held slots of slotVersion 1. A restore reads no slot, so this is
// what refuses a Backend of another layout at start.
const checkpointVersion = 4

// Checkpoint writes every changed slot to the Backend (the operator must
// write through: see Options.WriteThrough) and appends to dst
// what the slots do not hold: the watermark and a counter. The caller
// stores both in one atomic batch (with the input offsets they cover);
// Restore on a new operator over the same Backend resumes exactly there.
//
// The timers are not in it: the Backend holds a timer entry for each
// stored slot with a pending timer (stored.go), written with the slot. So
// a checkpoint costs what changed since the last one, not what the queue
// holds, which is every live key.
func (op *Operator) Checkpoint(dst []byte) ([]byte, error) {
	if !op.writeThrough {
		return nil, fmt.Errorf("windows: Checkpoint needs Options.WriteThrough")
	}
	if err := op.cache.Flush(); err != nil {
		return nil, err
	}
	dst = append(dst, checkpointVersion)
	dst = binary.AppendVarint(dst, op.wm)
	dst = binary.AppendVarint(dst, op.windowed)
	return dst, nil
}

// owns reports whether the state of spec with id is this operator's: all
// are, but for a shard's (Options.Shards).
func (op *Operator) owns(spec int, id slot.ID) bool {
	return shardOf(op.specs[spec], id, op.shards) == op.shard
}

// Restore loads a Checkpoint into an operator that has processed nothing
// yet. It reads no state: slots are read back from the Backend on demand,
// and their timers are paged in from the Backend's timer entries as the
// watermark reaches them, so a restore takes the same time whatever the
// size of the state.
func (op *Operator) Restore(b []byte) error {
	if op.wm != watermark.Min || op.timers.Len() != 0 || op.keyTimers.Len() != 0 || op.cache.Len() != 0 {
		return fmt.Errorf("windows: restore into an operator that has already run")
	}
	if !op.writeThrough {
		return fmt.Errorf("windows: Restore needs Options.WriteThrough")
	}
	d := slot.Decoder{B: b}
	if v := d.Byte(); v != checkpointVersion {
		return fmt.Errorf("windows: checkpoint version %d, want %d (written by another version of riskstream)", v, checkpointVersion)
	}
	op.wm = d.Varint()
	op.windowed = d.Varint()
	if d.Err == nil && len(d.B) != 0 {
		d.Fail()
	}
	if d.Err != nil {
		return fmt.Errorf("windows: checkpoint: %w", d.Err)
	}
	op.cache.Cold.Restored = true
	op.stored.from = slot.AppendTimerKey(op.stored.from[:0], watermark.Min, "")
	return op.findStored()
}
