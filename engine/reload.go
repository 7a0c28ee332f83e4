package engine

import (
	"errors"
	"fmt"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows"
)

// ruleSet is what Engine and Sharded hold of their rules.
type ruleSet struct {
	cfg    *rules.Config
	schema *event.Schema // of cfg
	// layout is where each rule's state is; restored, what the restore
	// found changed since the checkpoint's rules; retiring, where
	// DeleteRetired goes on.
	layout   layout
	restored rules.Diff
	retiring []byte
}

func newRuleSet(cfg *rules.Config, schema *event.Schema) ruleSet {
	return ruleSet{cfg: cfg, schema: schema, layout: identityLayout(cfg)}
}

// Rules returns the rules the engine applies now.
func (r *ruleSet) Rules() *rules.Config { return r.cfg }

// Restored says what the last Restore found changed between the
// checkpoint's rules and the engine's: rules and heatmaps whose state it
// kept, those it started empty, and those it retired.
func (r *ruleSet) Restored() rules.Diff { return r.restored }

// prepareReload checks that cfg may replace the rules, and returns the
// layout after the reload, what changes and the event schema of cfg.
func (r *ruleSet) prepareReload(cfg *rules.Config) (layout, rules.Diff, *event.Schema, error) {
	if err := rules.CheckReload(r.cfg, cfg); err != nil {
		return layout{}, rules.Diff{}, nil, fmt.Errorf("engine: reload: %w", err)
	}
	schema, err := event.NewSchema(windows.Fields(cfg))
	if err != nil {
		return layout{}, rules.Diff{}, nil, fmt.Errorf("engine: reload: %w", err)
	}
	next, diff := r.layout.next(cfg)
	return next, diff, schema, nil
}

// adopt takes the rules of a reload the operators took: cfg, its schema
// and layout next; c's max_ahead (c nil: none, a Task's) and st's
// decisions (carried by rule name) follow.
func (r *ruleSet) adopt(cfg *rules.Config, schema *event.Schema, next layout, diff rules.Diff, c *clocks, st *Stats) {
	r.cfg, r.schema, r.layout = cfg, schema, next
	r.retiring = nil // the retired ids are sorted anew
	if c != nil {
		c.maxAhead = cfg.Watermark.MaxAhead.Milliseconds()
	}
	st.Decisions = carryDecisions(diff.Old, st.Decisions, cfg)
}

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
	dec, diff, err := e.reloadOperator(cfg, e.op, &e.clocks, &e.stats)
	if err == nil {
		e.dec = dec
	}
	return diff, err
}

// reloadOperator is Reload for the rules of one operator, op, and the
// clocks c (nil: none) and counts st that follow them: it returns the
// decoder of the new rules, and changes nothing on an error.
func (r *ruleSet) reloadOperator(cfg *rules.Config, op *windows.Operator, c *clocks, st *Stats) (*Decoder, rules.Diff, error) {
	next, diff, schema, err := r.prepareReload(cfg)
	if err != nil {
		return nil, diff, err
	}
	if err := op.Reload(cfg, schema, next.ids()); err != nil {
		return nil, diff, fmt.Errorf("engine: reload: %w", err)
	}
	r.adopt(cfg, schema, next, diff, c, st)
	return newDecoder(schema, op), diff, nil
}

// Reload is Engine's Reload for every shard. No shard may be processing;
// decoders and batches made before must be made again (NewDecoder,
// NewBatch).
func (e *Sharded) Reload(cfg *rules.Config) (rules.Diff, error) {
	next, diff, schema, err := e.prepareReload(cfg)
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
	e.adopt(cfg, schema, next, diff, &e.clocks, &e.stats)
	e.end = *e.NewBatch()
	return diff, nil
}

// DeleteRetired deletes up to n of the stored states of the rules and
// heatmaps a reload, or a restore with other rules, removed or changed
// (a reload drops them from memory at once), with their timer entries; a
// state id whose states are all deleted leaves the layout, from the next
// checkpoint on, which commits the deletions with it. The live job calls
// it between records, so that neither a reload's pause nor a restart
// grows with the state dropped. It returns
// how many it deleted and how many state ids are left to delete.
//
// The store is read through Seek, which sees only what was committed: a
// retired state written since the last checkpoint (evicted before the
// reload) would be missed, and its id reported done. So the live job
// checkpoints right after each reload, before any DeleteRetired.
func (e *Engine) DeleteRetired(n int) (deleted, left int, err error) {
	return e.deleteRetired(e.op, n)
}

// DeleteRetired is Engine's DeleteRetired; no shard may be processing.
func (e *Sharded) DeleteRetired(n int) (deleted, left int, err error) {
	return e.deleteRetired(e.shards[0].op, n) // one store: one shard deletes for all
}

// deleteRetired is DeleteRetired through op, which writes to the store.
func (r *ruleSet) deleteRetired(op *windows.Operator, n int) (deleted, left int, err error) {
	l := &r.layout
	for deleted < n && len(l.retired) > 0 {
		last, k, done, err := op.DeleteRetiredSome(l.retired[0], r.retiring, n-deleted)
		deleted += k
		if err != nil {
			return deleted, len(l.retired), err
		}
		r.retiring = last
		if done {
			l.retired, r.retiring = l.retired[1:], nil
		}
	}
	return deleted, len(l.retired), nil
}
