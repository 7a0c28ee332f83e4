package engine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/watermark"
)

// checkpointVersion is the first byte of an engine checkpoint. Version 1
// had the fingerprint of the whole rules file instead of the settings'
// and the layout, and is restored only with the same rules.
const checkpointVersion = 2

// ErrRulesChanged is returned by Restore when the checkpoint was written
// with rules whose state is laid out differently: with other watermark
// settings or, for a version 1 checkpoint, any other rules.
var ErrRulesChanged = errors.New("engine: the state was written with different rules")

// Checkpoint writes every changed window state to the backend and returns
// the rest of the engine's state (the rules fingerprint, watermarks, skew
// estimators, counters), to be stored with the input offsets it covers in
// the same atomic batch (docs/format/state.md). It is small: the timers are
// rebuilt from the window state (windows.Operator.Restore).
func (e *Engine) Checkpoint() ([]byte, error) {
	e.expireIDs()
	op, err := e.op.Checkpoint(nil)
	if err != nil {
		return nil, err
	}
	if err := e.writeIDs(); err != nil {
		return nil, err
	}
	return e.clocks.checkpoint(e.cfg, &e.layout, op, &e.stats), nil
}

// Checkpoint writes every changed window state of every shard to its
// backend and returns the rest of the engine's state, as Engine's
// Checkpoint: either engine, with any number of shards, restores the
// other's checkpoints. No shard may be processing; the engine must have
// been built with Options.Checkpoints.
func (e *Sharded) Checkpoint() ([]byte, error) {
	e.expireIDs()
	ops := make([][]byte, len(e.shards))
	errs := make([]error, len(e.shards))
	e.parallel(len(e.shards), func(i int) { ops[i], errs[i] = e.shards[i].op.Checkpoint(nil) })
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Shard 0's store, whose shard is done.
	if err := e.writeIDs(); err != nil {
		return nil, err
	}
	// Every shard has the same watermark, and heatmaps, the only windows
	// counted, are all in shard 0.
	return e.clocks.checkpoint(e.cfg, &e.layout, ops[0], &e.stats), nil
}

// checkpoint encodes a checkpoint of an engine with layout l whose
// operator's (or first shard's) checkpoint is op.
func (c *clocks) checkpoint(cfg *rules.Config, l *layout, op []byte, st *Stats) []byte {
	counters := []int64{st.Records, st.Accepted, st.Unmatched, st.Late, st.Invalid, st.Retimed}
	sections := [][]byte{[]byte(cfg.StateSettings()), l.appendBinary(nil), op,
		c.wm.AppendBinary(nil), c.skew.AppendBinary(nil), appendCounters(nil, append(counters, st.Decisions...))}
	if c.dd != nil {
		// A seventh section, which a checkpoint without it leaves out and
		// an earlier version does not read.
		sections = append(sections, c.dd.appendBinary(nil))
	}
	return appendSections([]byte{checkpointVersion}, sections...)
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
// byte, written by appendSections, the first the rules fingerprint of
// cfg: an error for another version, ErrRulesChanged for other rules.
func readCheckpoint(b []byte, version byte, cfg *rules.Config, n int) ([][]byte, error) {
	return readChecked(b, version, n, cfg.Fingerprint(), ErrRulesChanged)
}

// readChecked splits a checkpoint of n sections after its version byte,
// written by appendSections: an error for another version, changed when
// the first section is not first.
func readChecked(b []byte, version byte, n int, first string, changed error) ([][]byte, error) {
	if len(b) == 0 || b[0] != version {
		return nil, fmt.Errorf("engine: checkpoint version unknown")
	}
	sections, err := readSections(b[1:], n)
	if err != nil {
		return nil, err
	}
	if string(sections[0]) != first {
		return nil, changed
	}
	return sections, nil
}

// readSections splits b, of n sections or more written by appendSections:
// a later version may add sections after those an earlier one reads.
func readSections(b []byte, n int) ([][]byte, error) {
	sections := make([][]byte, 0, n+1)
	for len(sections) < n || len(b) > 0 {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, fmt.Errorf("engine: checkpoint truncated")
		}
		sections, b = append(sections, b[k:k+int(l)]), b[k+int(l):]
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
// written to, from what Checkpoint returned. When the checkpoint was
// written with other rules, the state of those whose definition is
// unchanged is kept, and the rest is left to DeleteRetired, as after a
// reload: Restored says what became of each.
func (e *Engine) Restore(b []byte) error {
	l, diff, err := e.clocks.restore(e.cfg, b, &e.stats, func(ids []int, op []byte) error {
		if err := e.op.Reload(e.cfg, e.schema, ids); err != nil {
			return err
		}
		e.dec = newDecoder(e.schema, e.op)
		return e.op.Restore(op)
	})
	if err == nil {
		e.layout, e.restored = l, diff
	}
	return err
}

// Restore resumes a new sharded engine, over backends that hold the state
// of the checkpoint (parts of one store: each shard takes the states of
// its keys), from what a Checkpoint of either engine returned, as Engine's
// Restore. Decoders and batches made before must be made again.
func (e *Sharded) Restore(b []byte) error {
	l, diff, err := e.clocks.restore(e.cfg, b, &e.stats, func(ids []int, op []byte) error {
		for _, s := range e.shards {
			if err := s.op.Reload(e.cfg, e.schema, ids); err != nil {
				return err
			}
		}
		e.end = *e.NewBatch()
		for _, s := range e.shards {
			if err := s.op.Restore(op); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		e.layout, e.restored = l, diff
		e.merged = e.shards[0].op.Watermark()
		e.stats.WindowsFired = e.shards[0].op.WindowsFired()
		e.forgotten = e.skew.Forgotten()
	}
	return err
}

// restore decodes a checkpoint into c and st, and hands the state ids of
// cfg's rules and heatmaps and the operator section to op. It returns the
// layout after it, whose retired ids (of rules changed or removed since,
// or before and not yet deleted) are left to DeleteRetired, and what
// changed since the checkpoint's rules.
func (c *clocks) restore(cfg *rules.Config, b []byte, st *Stats, op func(ids []int, op []byte) error) (layout, rules.Diff, error) {
	var sections [][]byte
	var prev layout
	var err error
	if len(b) > 0 && b[0] == 1 {
		var v1 [][]byte
		if v1, err = readCheckpoint(b, 1, cfg, 5); err == nil {
			// The same rules, laid out at their places; no layout section.
			prev = identityLayout(cfg)
			sections = append([][]byte{v1[0], nil}, v1[1:]...)
		}
	} else {
		// The state settings' fingerprint, the layout, the operator's,
		// watermarks, skew and counters.
		sections, err = readChecked(b, checkpointVersion, 6, cfg.StateSettings(),
			fmt.Errorf("%w: watermark out_of_orderness, idle_timeout or allowed_lateness changed", ErrRulesChanged))
		if err == nil {
			prev, err = decodeLayout(sections[1])
		}
	}
	if err != nil {
		return layout{}, rules.Diff{}, err
	}
	next, diff := prev.next(cfg)
	if err := op(next.ids(), sections[2]); err != nil {
		return layout{}, rules.Diff{}, err
	}
	wm, rest, err := watermark.DecodeCombined(sections[3],
		cfg.Watermark.OutOfOrderness.Milliseconds(), cfg.Watermark.IdleTimeout.Milliseconds())
	if err != nil || len(rest) != 0 {
		return layout{}, rules.Diff{}, fmt.Errorf("engine: checkpoint watermarks: %v", err)
	}
	c.wm = wm
	if c.skew, err = watermark.DecodeSkewTracker(sections[4], watermark.SkewOptionsFrom(cfg.Skew)); err != nil {
		return layout{}, rules.Diff{}, fmt.Errorf("engine: checkpoint skew: %w", err)
	}
	counters := []*int64{&st.Records, &st.Accepted, &st.Unmatched, &st.Late, &st.Invalid, &st.Retimed}
	if st.Decisions, err = readDecisionCounters(sections[5], counters, &prev, diff, cfg); err != nil {
		return layout{}, rules.Diff{}, err
	}
	if c.dd != nil {
		var dd []byte
		if len(sections) > 6 {
			dd = sections[6]
		}
		if c.ids != nil {
			if err := c.ids.load(); err != nil {
				return layout{}, rules.Diff{}, err
			}
		}
		if err := c.dd.restore(dd); err != nil {
			return layout{}, rules.Diff{}, err
		}
	}
	return next, diff, nil
}

// readDecisionCounters reads a checkpoint's counters: the varints of
// counters, then the decision counts of the rules of its layout prev; it
// returns those of the rules of cfg of the same names (diff is prev's to
// cfg's).
func readDecisionCounters(b []byte, counters []*int64, prev *layout, diff rules.Diff, cfg *rules.Config) ([]int64, error) {
	decisions := make([]int64, 0, len(prev.specs))
	for _, s := range prev.specs {
		if !s.Heatmap {
			decisions = append(decisions, 0)
		}
	}
	for i := range decisions {
		counters = append(counters, &decisions[i])
	}
	if err := readCounters(b, counters); err != nil {
		return nil, err
	}
	return carryDecisions(diff.Old, decisions, cfg), nil
}

// carryDecisions returns the decision counts of cfg's rules: those of the
// rules of the same names among old, whose counts are counts, else 0.
func carryDecisions(old []rules.Identity, counts []int64, cfg *rules.Config) []int64 {
	byName := map[string]int64{}
	i := 0
	for _, id := range old {
		if !id.Heatmap {
			byName[id.Name] = counts[i]
			i++
		}
	}
	out := make([]int64, len(cfg.Rules))
	for j, r := range cfg.Rules {
		out[j] = byName[r.Name]
	}
	return out
}
