package windows

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// checkpointVersion is the first byte of an operator checkpoint.
const checkpointVersion = 1

// Checkpoint writes every changed slot to the Backend and appends to dst
// what the slots do not hold: the watermark and the timer queue. The caller
// stores both in one atomic batch (with the input offsets they cover);
// Restore on a new operator over the same Backend resumes exactly there.
func (op *Operator) Checkpoint(dst []byte) ([]byte, error) {
	if err := op.cache.flush(); err != nil {
		return nil, err
	}
	dst = append(dst, checkpointVersion)
	dst = binary.AppendVarint(dst, op.wm)
	dst = binary.AppendVarint(dst, op.windowed)
	q := &op.timers
	times := append([]int64(nil), q.times...)
	slices.Sort(times)
	dst = binary.AppendUvarint(dst, uint64(len(times)))
	for _, at := range times {
		b := q.byTime[at]
		dst = binary.AppendVarint(dst, at)
		dst = binary.AppendUvarint(dst, uint64(len(b.entries)))
		for _, e := range b.entries {
			dst = binary.AppendUvarint(dst, uint64(len(e.key)))
			dst = append(dst, e.key...)
		}
	}
	return dst, nil
}

// Restore loads a Checkpoint into an operator that has processed nothing
// yet. Slots are read back from the Backend on demand.
func (op *Operator) Restore(b []byte) error {
	if op.wm != MinWatermark || op.timers.Len() != 0 || len(op.cache.ring) != 0 {
		return fmt.Errorf("windows: restore into an operator that has already run")
	}
	d := decoder{b: b}
	if v := d.byte(); v != checkpointVersion {
		return fmt.Errorf("windows: checkpoint version %d, want %d", v, checkpointVersion)
	}
	op.wm = d.varint()
	op.windowed = d.varint()
	for range d.count(2) {
		at := d.varint()
		for range d.count(1) {
			n := d.count(1)
			if d.err != nil || n > len(d.b) || n < 2 {
				d.fail()
				break
			}
			key := string(d.b[:n])
			d.b = d.b[n:]
			if specOf(key) >= len(op.specs) {
				d.fail()
				break
			}
			op.timers.pushKey(at, key)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		return fmt.Errorf("windows: checkpoint: %w", d.err)
	}
	// Any slot may be in the Backend, none is cached.
	op.cache.uncached = math.MaxInt / 2
	return nil
}
