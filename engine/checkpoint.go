package engine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/watermark"
)

// checkpointVersion is the first byte of an engine checkpoint.
const checkpointVersion = 1

// ErrRulesChanged is returned by Restore when the checkpoint was written
// with rules whose state is laid out differently.
var ErrRulesChanged = errors.New("engine: the state was written with different rules")

// Checkpoint writes every changed window state to the backend and returns
// the rest of the engine's state (the rules fingerprint, watermarks, skew
// estimators, counters), to be stored with the input offsets it covers in
// the same atomic batch (docs/format/state.md). It is small: the timers are
// rebuilt from the window state (windows.Operator.Restore).
func (e *Engine) Checkpoint() ([]byte, error) {
	op, err := e.op.Checkpoint(nil)
	if err != nil {
		return nil, err
	}
	return e.clocks.checkpoint(e.cfg, op, &e.stats), nil
}

// Checkpoint writes every changed window state of every shard to its
// backend and returns the rest of the engine's state, as Engine's
// Checkpoint: either engine, with any number of shards, restores the
// other's checkpoints. No shard may be processing; the engine must have
// been built with Options.Checkpoints.
func (e *Sharded) Checkpoint() ([]byte, error) {
	ops := make([][]byte, len(e.shards))
	errs := make([]error, len(e.shards))
	e.parallel(len(e.shards), func(i int) { ops[i], errs[i] = e.shards[i].op.Checkpoint(nil) })
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Every shard has the same watermark, and heatmaps, the only windows
	// counted, are all in shard 0.
	return e.clocks.checkpoint(e.cfg, ops[0], &e.stats), nil
}

// checkpoint encodes a checkpoint of an engine whose operator's (or first
// shard's) checkpoint is op.
func (c *clocks) checkpoint(cfg *rules.Config, op []byte, st *Stats) []byte {
	dst := []byte{checkpointVersion}
	section := func(b []byte) {
		dst = binary.AppendUvarint(dst, uint64(len(b)))
		dst = append(dst, b...)
	}
	section([]byte(cfg.Fingerprint()))
	section(op)
	section(c.wm.AppendBinary(nil))
	section(c.skew.AppendBinary(nil))
	counters := []int64{st.Records, st.Accepted, st.Unmatched, st.Late, st.Invalid, st.Retimed}
	counters = append(counters, st.Decisions...)
	var b []byte
	for _, n := range counters {
		b = binary.AppendVarint(b, n)
	}
	section(b)
	return dst
}

// Restore resumes a new engine, over the backend the checkpoint's state was
// written to, from what Checkpoint returned.
func (e *Engine) Restore(b []byte) error {
	return e.clocks.restore(e.cfg, b, &e.stats, e.op.Restore)
}

// Restore resumes a new sharded engine, over backends that hold the state
// of the checkpoint (parts of one store: each shard takes the states of
// its keys), from what a Checkpoint of either engine returned.
func (e *Sharded) Restore(b []byte) error {
	err := e.clocks.restore(e.cfg, b, &e.stats, func(op []byte) error {
		for _, s := range e.shards {
			if err := s.op.Restore(op); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		e.merged = e.shards[0].op.Watermark()
		e.stats.WindowsFired = e.shards[0].op.WindowsFired()
		e.forgotten = e.skew.Forgotten()
	}
	return err
}

// restore decodes a checkpoint into c and st, and hands its operator
// section to op.
func (c *clocks) restore(cfg *rules.Config, b []byte, st *Stats, op func([]byte) error) error {
	if len(b) == 0 || b[0] != checkpointVersion {
		return fmt.Errorf("engine: checkpoint version unknown")
	}
	b = b[1:]
	var sections [5][]byte
	for i := range sections {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return fmt.Errorf("engine: checkpoint truncated")
		}
		sections[i], b = b[k:k+int(n)], b[k+int(n):]
	}
	if string(sections[0]) != cfg.Fingerprint() {
		return ErrRulesChanged
	}
	if err := op(sections[1]); err != nil {
		return err
	}
	wm, rest, err := watermark.DecodeCombined(sections[2],
		cfg.Watermark.OutOfOrderness.Milliseconds(), cfg.Watermark.IdleTimeout.Milliseconds())
	if err != nil || len(rest) != 0 {
		return fmt.Errorf("engine: checkpoint watermarks: %v", err)
	}
	c.wm = wm
	if c.skew, err = watermark.DecodeSkewTracker(sections[3], watermark.SkewOptionsFrom(cfg.Skew)); err != nil {
		return fmt.Errorf("engine: checkpoint skew: %w", err)
	}
	counters := []*int64{&st.Records, &st.Accepted, &st.Unmatched, &st.Late, &st.Invalid, &st.Retimed}
	for i := range st.Decisions {
		counters = append(counters, &st.Decisions[i])
	}
	cs := sections[4]
	for _, p := range counters {
		v, k := binary.Varint(cs)
		if k <= 0 {
			return fmt.Errorf("engine: checkpoint counters truncated")
		}
		*p, cs = v, cs[k:]
	}
	return nil
}
