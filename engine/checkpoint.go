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
	counters := []int64{st.Records, st.Accepted, st.Unmatched, st.Late, st.Invalid, st.Retimed}
	return appendSections([]byte{checkpointVersion}, []byte(cfg.Fingerprint()), op,
		c.wm.AppendBinary(nil), c.skew.AppendBinary(nil), appendCounters(nil, append(counters, st.Decisions...)))
}

// appendSections appends each of sections to dst, its length first: the
// layout of the engine's checkpoints and a Task's.
func appendSections(dst []byte, sections ...[]byte) []byte {
	for _, b := range sections {
		dst = binary.AppendUvarint(dst, uint64(len(b)))
		dst = append(dst, b...)
	}
	return dst
}

// readCheckpoint splits a checkpoint of n sections after its version
// byte, the first the rules fingerprint, written by appendSections: an
// error for another version, ErrRulesChanged for other rules than cfg.
func readCheckpoint(b []byte, version byte, cfg *rules.Config, n int) ([][]byte, error) {
	if len(b) == 0 || b[0] != version {
		return nil, fmt.Errorf("engine: checkpoint version unknown")
	}
	sections, err := readSections(b[1:], n)
	if err != nil {
		return nil, err
	}
	if string(sections[0]) != cfg.Fingerprint() {
		return nil, ErrRulesChanged
	}
	return sections, nil
}

// readSections splits b, of n sections written by appendSections.
func readSections(b []byte, n int) ([][]byte, error) {
	sections := make([][]byte, n)
	for i := range sections {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, fmt.Errorf("engine: checkpoint truncated")
		}
		sections[i], b = b[k:k+int(l)], b[k+int(l):]
	}
	return sections, nil
}

// appendCounters appends counters as varints.
func appendCounters(dst []byte, counters []int64) []byte {
	for _, n := range counters {
		dst = binary.AppendVarint(dst, n)
	}
	return dst
}

// readCounters reads what appendCounters wrote into counters.
func readCounters(b []byte, counters []*int64) error {
	for _, p := range counters {
		v, k := binary.Varint(b)
		if k <= 0 {
			return fmt.Errorf("engine: checkpoint counters truncated")
		}
		*p, b = v, b[k:]
	}
	return nil
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
	sections, err := readCheckpoint(b, checkpointVersion, cfg, 5)
	if err != nil {
		return err
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
	return readCounters(sections[4], counters)
}
