package engine

import (
	"errors"
	"fmt"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows"
)

// Restored says what the last Restore found changed between the
// checkpoint's rules and the engine's: rules and heatmaps whose state it
// kept, those it started empty, and those whose state it deleted.
func (e *Engine) Restored() rules.Diff { return e.restored }

// Restored is Engine's Restored.
func (e *Sharded) Restored() rules.Diff { return e.restored }

// Reload replaces the engine's rules with cfg's between two records,
// keeping the state of every rule and heatmap whose definition is
// unchanged (its name and rules.Identity), however the others changed; a
// changed one starts empty, and a removed one's state is deleted (what
// memory holds of it now, what only the backend holds by DeleteRetired). Thresholds, actions, min_events, modes and
// watermark.max_ahead take effect at once. The watermark settings that
// shape every state, and the skew section, change only with a restart:
// a cfg that changes them is refused, and the engine is left as it was,
// as it is for any error.
// The next Checkpoint records the new rules. It returns what changed.
func (e *Engine) Reload(cfg *rules.Config) (rules.Diff, error) {
	next, diff, schema, err := prepareReload(e.cfg, cfg, &e.layout)
	if err != nil {
		return diff, err
	}
	if err := e.op.Reload(cfg, schema, next.ids()); err != nil {
		return diff, fmt.Errorf("engine: reload: %w", err)
	}
	e.cfg, e.schema, e.layout = cfg, schema, next
	e.retiring = nil // the retired ids are sorted anew
	e.dec = newDecoder(schema, e.op)
	e.maxAhead = cfg.Watermark.MaxAhead.Milliseconds()
	e.stats.Decisions = carryDecisions(diff.Old, e.stats.Decisions, cfg)
	return diff, nil
}

// Reload is Engine's Reload for every shard. No shard may be processing;
// decoders and batches made before must be made again (NewDecoder,
// NewBatch).
func (e *Sharded) Reload(cfg *rules.Config) (rules.Diff, error) {
	next, diff, schema, err := prepareReload(e.cfg, cfg, &e.layout)
	if err != nil {
		return diff, err
	}
	// The shards drop the state of changed rules concurrently, as they
	// fire and purge (Options.Parallel).
	ids := next.ids()
	errs := make([]error, len(e.shards))
	e.parallel(len(e.shards), func(i int) { errs[i] = e.shards[i].op.Reload(cfg, schema, ids) })
	if err := errors.Join(errs...); err != nil {
		// An operator refuses rules before it changes anything, and every
		// shard compiles the same: none or all fail.
		return diff, fmt.Errorf("engine: reload: %w", err)
	}
	for _, s := range e.shards {
		s.rules = len(cfg.Rules)
	}
	e.cfg, e.schema, e.layout = cfg, schema, next
	e.retiring = nil // the retired ids are sorted anew
	e.specs = len(cfg.Rules) + len(cfg.Heatmaps)
	e.maxAhead = cfg.Watermark.MaxAhead.Milliseconds()
	e.stats.Decisions = carryDecisions(diff.Old, e.stats.Decisions, cfg)
	e.end = *e.NewBatch()
	return diff, nil
}

// prepareReload checks that cfg may replace old, and returns the layout
// after the reload, what changes and the event schema of cfg.
func prepareReload(old, cfg *rules.Config, l *layout) (layout, rules.Diff, *event.Schema, error) {
	if err := rules.CheckReload(old, cfg); err != nil {
		return layout{}, rules.Diff{}, nil, fmt.Errorf("engine: reload: %w", err)
	}
	schema, err := event.NewSchema(windows.Fields(cfg))
	if err != nil {
		return layout{}, rules.Diff{}, nil, fmt.Errorf("engine: reload: %w", err)
	}
	next, diff := l.next(cfg)
	return next, diff, schema, nil
}

// DeleteRetired deletes up to n of the stored states of the rules and
// heatmaps a reload, or a restore with other rules, removed or changed
// (a reload drops them from memory at once), with their timer entries; a
// state id whose states are all deleted leaves the layout, from the next
// checkpoint on, which commits the deletions with it. The live job calls
// it between records, so that neither a reload's pause nor a restart
// grows with the state dropped. It returns
// how many it deleted and how many state ids are left to delete.
func (e *Engine) DeleteRetired(n int) (deleted, left int, err error) {
	return deleteRetired(e.op, &e.layout, &e.retiring, n)
}

// DeleteRetired is Engine's DeleteRetired; no shard may be processing.
func (e *Sharded) DeleteRetired(n int) (deleted, left int, err error) {
	return deleteRetired(e.shards[0].op, &e.layout, &e.retiring, n) // one store: one shard deletes for all
}

func deleteRetired(op *windows.Operator, l *layout, after *[]byte, n int) (deleted, left int, err error) {
	for deleted < n && len(l.retired) > 0 {
		last, k, done, err := op.DeleteRetiredSome(l.retired[0], *after, n-deleted)
		deleted += k
		if err != nil {
			return deleted, len(l.retired), err
		}
		*after = last
		if done {
			l.retired, *after = l.retired[1:], nil
		}
	}
	return deleted, len(l.retired), nil
}
