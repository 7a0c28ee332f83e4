package engine

import (
	"encoding/binary"
	"errors"
	"fmt"

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
	dst := []byte{checkpointVersion}
	section := func(b []byte) {
		dst = binary.AppendUvarint(dst, uint64(len(b)))
		dst = append(dst, b...)
	}
	section([]byte(e.cfg.Fingerprint()))
	section(op)
	section(e.wm.AppendBinary(nil))
	section(e.skew.AppendBinary(nil))
	s := e.stats
	counters := []int64{s.Records, s.Accepted, s.Unmatched, s.Late, s.Invalid, s.Retimed}
	counters = append(counters, s.Decisions...)
	var c []byte
	for _, n := range counters {
		c = binary.AppendVarint(c, n)
	}
	section(c)
	return dst, nil
}

// Restore resumes a new engine, over the backend the checkpoint's state was
// written to, from what Checkpoint returned.
func (e *Engine) Restore(b []byte) error {
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
	if string(sections[0]) != e.cfg.Fingerprint() {
		return ErrRulesChanged
	}
	if err := e.op.Restore(sections[1]); err != nil {
		return err
	}
	wm, rest, err := watermark.DecodeCombined(sections[2],
		e.cfg.Watermark.OutOfOrderness.Milliseconds(), e.cfg.Watermark.IdleTimeout.Milliseconds())
	if err != nil || len(rest) != 0 {
		return fmt.Errorf("engine: checkpoint watermarks: %v", err)
	}
	e.wm = wm
	if e.skew, err = watermark.DecodeSkewTracker(sections[3], watermark.SkewOptionsFrom(e.cfg.Skew)); err != nil {
		return fmt.Errorf("engine: checkpoint skew: %w", err)
	}
	c := sections[4]
	counters := []*int64{&e.stats.Records, &e.stats.Accepted, &e.stats.Unmatched, &e.stats.Late, &e.stats.Invalid, &e.stats.Retimed}
	for i := range e.stats.Decisions {
		counters = append(counters, &e.stats.Decisions[i])
	}
	for _, p := range counters {
		v, k := binary.Varint(c)
		if k <= 0 {
			return fmt.Errorf("engine: checkpoint counters truncated")
		}
		*p, c = v, c[k:]
	}
	return nil
}
