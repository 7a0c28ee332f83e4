// Package job is the loop core of a job over a Kafka topic: it takes the
// records of the topic's partitions in the merge's order (order.Merger),
// runs them through the sharded engine, and knows where each partition is,
// which a checkpoint records beside the engine's state.
//
// A Loop does no I/O and reads no clock, in the manner of etcd's raft
// RawNode: its caller feeds it the fetches its fetchers bring and the
// processing time, and performs what it hands back (the runs to journal
// before their outputs, the manifest to commit with the state). The live
// job (package stream) is one caller, the tests another: they drive a Loop
// over scripted fetches and times, crash it and restore it from its last
// checkpoint (testdata/loop).
package job

import (
	"errors"
	"fmt"

	"github.com/riskstream/riskstream/checkpoint"
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/order"
	"github.com/riskstream/riskstream/rules"
)

// Options configure a Loop.
type Options struct {
	// Engine runs the records, over stores its caller opened. Required.
	Engine *engine.Sharded
	// Topic is the input topic: the manifest's offsets are of it, and
	// errors name it. Required.
	Topic string
	// PartitionWait is how long, in ms of the merge's clock, a caught-up
	// partition with nothing buffered holds back the records of the
	// others (order.Options.Wait: 0 never waits), and BehindWait the same
	// for a partition known to have more to read. A replay waits Forever:
	// its order then depends on the topic alone.
	PartitionWait, BehindWait int64
	// OnWaitTimeout, if set, is told of each wait that ran out
	// (order.Options.OnTimeout).
	OnWaitTimeout func(p int32, waited int64)
	// Process runs a timed batch on every shard. The default value runs
	// them one after the other; the live job runs each on a goroutine of
	// its own.
	Process func(b *engine.Batch) error
}

// errRestoreStarted refuses a restore into a loop or merge that has begun.
var errRestoreStarted = errors.New("job: restore into a loop that has already run")

// Forever is a partition wait that never runs out, with room for the
// merge's sums.
const Forever = 1 << 60

// EnsureDefaults fills in zero fields with their default values.
func (o *Options) EnsureDefaults() {
	if o.Process == nil && o.Engine != nil {
		o.Process = processInTurn(o.Engine)
	}
}

// Validate reports the options that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.Engine == nil {
		errs = append(errs, errors.New("job: needs an engine (Options.Engine)"))
	}
	if o.Topic == "" {
		errs = append(errs, errors.New("job: needs the input topic (Options.Topic)"))
	}
	if o.PartitionWait < 0 || o.BehindWait < o.PartitionWait {
		errs = append(errs, fmt.Errorf("job: partition waits %d ms and %d ms behind: want 0 <= wait <= behind wait",
			o.PartitionWait, o.BehindWait))
	}
	return errors.Join(errs...)
}

// processInTurn runs a batch on e's shards one after the other.
func processInTurn(e *engine.Sharded) func(b *engine.Batch) error {
	return func(b *engine.Batch) error {
		var errs []error
		for _, s := range e.Shards() {
			errs = append(errs, s.Process(b))
		}
		return errors.Join(errs...)
	}
}

// Loop takes a topic's records in the merge's order through the engine.
// It is not safe for concurrent use: one goroutine drives it.
type Loop struct {
	*Merge
	opts  Options
	e     *engine.Sharded
	dec   *engine.Decoder
	batch *engine.Batch
	// taken are the records Take took for Run, and arrived when the fetch
	// of each arrived.
	taken   []engine.Record
	arrived []int64
}

// New returns a Loop with no partitions, at the start of the topic.
func New(opts Options) (*Loop, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	merge, err := NewMerge(MergeOptions{PartitionWait: opts.PartitionWait, BehindWait: opts.BehindWait,
		OnWaitTimeout: opts.OnWaitTimeout})
	if err != nil {
		return nil, err
	}
	return &Loop{
		Merge: merge, opts: opts, e: opts.Engine,
		dec: opts.Engine.NewDecoder(), batch: opts.Engine.NewBatch(),
	}, nil
}

// Engine is the engine the loop runs, for what the loop leaves to its
// caller: reloads, write-back, deleting retired state, its statistics.
func (l *Loop) Engine() *engine.Sharded { return l.e }

// Restore loads a checkpoint's manifest into a Loop that has taken
// nothing yet: the engine's state and where each partition is. Partitions
// added afterwards start at their checkpointed offsets.
func (l *Loop) Restore(m *checkpoint.Manifest) error {
	if l.Merge.started() || l.e.Stats().Records > 0 {
		return errRestoreStarted
	}
	for _, o := range m.Inputs {
		if o.Topic != l.opts.Topic {
			return fmt.Errorf("the checkpoint is of input topic %q, not %q", o.Topic, l.opts.Topic)
		}
	}
	if err := l.e.Restore(m.Engine); err != nil {
		return err
	}
	// The restore laid the rules' state out as the checkpoint had it.
	l.dec, l.batch = l.e.NewDecoder(), l.e.NewBatch()
	return l.Merge.Restore(m.Inputs)
}

// AddPartition starts taking the records of partition p, whose watermark
// starts at processing time now, unless it was added already. It returns
// the offset to fetch p from: its checkpointed one, or kafka.FirstOffset.
func (l *Loop) AddPartition(p int32, now int64) (from int64, added bool) {
	from, added = l.Merge.AddPartition(p)
	if added {
		l.e.AddPartition(p, now)
	}
	return from, added
}

// Take takes every record the merge gives at mergeNow, for Run, and
// returns how many, and the runs it took without partitions: those must
// be durable (the journal) before any output of the records exists, for a
// restart to take them in the same order.
func (l *Loop) Take(mergeNow int64) (n int, runs []order.Run) {
	l.taken, l.arrived, runs = l.Merge.Take(mergeNow, l.taken[:0], l.arrived[:0])
	return len(l.taken), runs
}

// Run runs the records Take took through the engine at processing time
// now (ms): decoded and timed here, their window state updated by every
// shard, their outputs emitted in the order of one engine. Before the
// outputs of each record, before is called with the record's reference
// time (ms) and when its fetch arrived (ns, 0 when not known).
func (l *Loop) Run(now int64, before func(ref, arrived int64)) error {
	rs := l.taken
	if len(rs) == 0 {
		return nil
	}
	b := l.batch
	b.Reset()
	b.Grow(len(rs))
	for i := range rs {
		b.Add(l.dec, &rs[i])
	}
	clear(rs) // drop the records' bytes: the batch has them
	l.taken = rs[:0]
	if err := l.e.Time(b, now); err != nil {
		return fmt.Errorf("input %s: %w", l.opts.Topic, err)
	}
	if err := l.opts.Process(b); err != nil {
		return fmt.Errorf("input %s: %w", l.opts.Topic, err)
	}
	var emit func(i int)
	if before != nil {
		recs, arrived := b.Records(), l.arrived
		emit = func(i int) { before(recs[i].Reference, arrived[i]) }
	}
	l.e.Merge(b, emit)
	return nil
}

// Reload changes the rules between two records (engine.Sharded.Reload):
// the records taken from now on are decoded and keyed under cfg.
func (l *Loop) Reload(cfg *rules.Config) (rules.Diff, error) {
	diff, err := l.e.Reload(cfg)
	if err != nil {
		return diff, err
	}
	l.dec, l.batch = l.e.NewDecoder(), l.e.NewBatch()
	return diff, nil
}

// Tick moves processing time to now (ms): idle partitions' watermarks,
// and the windows that fire with them.
func (l *Loop) Tick(now int64) error { return l.e.Tick(now) }

// Checkpoint returns the manifest of the loop's state now: the engine's
// checkpoint, whose state writes it leaves pending in the engine's
// stores, and where each partition is. The caller adds where the outputs
// ended, and commits it with the state in one batch.
func (l *Loop) Checkpoint() (checkpoint.Manifest, error) {
	cp, err := l.e.Checkpoint()
	if err != nil {
		return checkpoint.Manifest{}, err
	}
	return checkpoint.Manifest{Engine: cp, Inputs: l.Merge.Inputs(l.opts.Topic)}, nil
}
