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
	"maps"
	"slices"

	"github.com/riskstream/riskstream/checkpoint"
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/order"
	"github.com/riskstream/riskstream/rules"
	"github.com/segmentio/kafka-go"
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
	opts  Options
	e     *engine.Sharded
	merge *order.Merger[kafka.Message]
	dec   *engine.Decoder
	batch *engine.Batch
	// offsets are the next offset of each partition: of the record after
	// the last one taken, or the checkpoint's before any is.
	offsets map[int32]int64
	known   map[int32]bool // partitions added
	// taken are the records Take took for Run, and arrived when the fetch
	// of each arrived (arrivals).
	taken    []engine.Record
	arrived  []int64
	arrivals arrivals
	// stops are, per partition, the offset Take stops before (StopBefore);
	// held is the record it stopped before, which the next Take takes
	// first, and stopped says the last Take stopped.
	stops   map[int32]int64
	held    *heldRecord
	stopped bool
}

// heldRecord is a record Take took from the merge and stopped before.
type heldRecord struct {
	rec     engine.Record
	arrived int64
	offset  int64
}

// New returns a Loop with no partitions, at the start of the topic.
func New(opts Options) (*Loop, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	merge, err := order.New(order.Options[kafka.Message]{
		Timestamp: kafkaio.MessageTime,
		Wait:      opts.PartitionWait, BehindWait: opts.BehindWait,
		OnTimeout: opts.OnWaitTimeout,
		Release:   kafkaio.Recycle,
		Offset:    func(m *kafka.Message) int64 { return m.Offset },
	})
	if err != nil {
		return nil, err
	}
	return &Loop{
		opts: opts, e: opts.Engine, merge: merge,
		dec: opts.Engine.NewDecoder(), batch: opts.Engine.NewBatch(),
		offsets: map[int32]int64{}, known: map[int32]bool{},
	}, nil
}

// Engine is the engine the loop runs, for what the loop leaves to its
// caller: reloads, write-back, deleting retired state, its statistics.
func (l *Loop) Engine() *engine.Sharded { return l.e }

// Restore loads a checkpoint's manifest into a Loop that has taken
// nothing yet: the engine's state and where each partition is. Partitions
// added afterwards start at their checkpointed offsets.
func (l *Loop) Restore(m *checkpoint.Manifest) error {
	if len(l.known) > 0 || l.e.Stats().Records > 0 {
		return errors.New("job: restore into a loop that has already run")
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
	for _, o := range m.Inputs {
		l.offsets[o.Partition] = o.Offset
	}
	return nil
}

// Follow makes the merge take the records past the checkpoint restored in
// the order of runs, the runs a run before took without partitions after
// it (the journal).
func (l *Loop) Follow(runs []order.Run) { l.merge.Follow(runs) }

// AddPartition starts taking the records of partition p, whose watermark
// starts at processing time now, unless it was added already. It returns
// the offset to fetch p from: its checkpointed one, or kafka.FirstOffset.
func (l *Loop) AddPartition(p int32, now int64) (from int64, added bool) {
	if l.known[p] {
		return 0, false
	}
	l.known[p] = true
	l.e.AddPartition(p, now)
	from, ok := l.offsets[p]
	if !ok {
		l.merge.AddPartition(p)
		return kafka.FirstOffset, true
	}
	l.merge.AddPartitionAt(p, from)
	return from, true
}

// Push hands the loop a fetch of partition f.Partition, at mergeNow on
// the merge's clock (ms). A fetch with Done set ends its partition.
func (l *Loop) Push(f kafkaio.Fetch, mergeNow int64) {
	if f.Done {
		l.merge.Done(f.Partition)
		return
	}
	if len(f.Msgs) > 0 {
		l.arrivals.fetched(f.Partition, f.Msgs[len(f.Msgs)-1].Offset, f.At)
	}
	l.merge.Push(f.Partition, f.Msgs, f.Behind, mergeNow)
}

// Take takes every record the merge gives at mergeNow, for Run, and
// returns how many, and the runs it took without partitions: those must
// be durable (the journal) before any output of the records exists, for a
// restart to take them in the same order.
func (l *Loop) Take(mergeNow int64) (n int, runs []order.Run) {
	rs, arrived := l.taken[:0], l.arrived[:0]
	if h := l.held; h != nil {
		l.held = nil
		rs, arrived = append(rs, h.rec), append(arrived, h.arrived)
		l.offsets[h.rec.Partition] = h.offset + 1
	}
	l.stopped = false
	for {
		m, p, ok := l.merge.Pop(mergeNow)
		if !ok {
			break
		}
		rec, at := kafkaio.Record(&m, p), l.arrivals.of(p, m.Offset)
		if o, ok := l.stops[p]; ok && m.Offset >= o {
			delete(l.stops, p)
			l.held, l.stopped = &heldRecord{rec, at, m.Offset}, true
			break
		}
		rs, arrived = append(rs, rec), append(arrived, at)
		l.offsets[p] = m.Offset + 1
	}
	l.taken, l.arrived = rs, arrived
	if len(rs) == 0 && !l.stopped {
		return 0, nil
	}
	return len(rs), l.merge.TakeRuns()
}

// StopBefore makes Take stop before the first record of partition p at
// offset or later, and take it first the next time: its caller can change
// the rules between the two records (Reload), where a distributed job's
// routers began to route by new ones (a replay of its input). A stop
// replaces p's earlier one.
func (l *Loop) StopBefore(p int32, offset int64) {
	if l.stops == nil {
		l.stops = map[int32]int64{}
	}
	l.stops[p] = offset
}

// Stopped reports whether the last Take stopped before a record
// (StopBefore), and which: its partition and offset.
func (l *Loop) Stopped() (p int32, offset int64, ok bool) {
	if !l.stopped {
		return 0, 0, false
	}
	return l.held.rec.Partition, l.held.offset, true
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

// Offsets are the next offset of each partition taken from, or
// restored: what a checkpoint now records, and what the group is told.
func (l *Loop) Offsets() map[int32]int64 { return l.offsets }

// Checkpoint returns the manifest of the loop's state now: the engine's
// checkpoint, whose state writes it leaves pending in the engine's
// stores, and where each partition is. The caller adds where the outputs
// ended, and commits it with the state in one batch.
func (l *Loop) Checkpoint() (checkpoint.Manifest, error) {
	cp, err := l.e.Checkpoint()
	if err != nil {
		return checkpoint.Manifest{}, err
	}
	inputs := make([]checkpoint.Offset, 0, len(l.offsets))
	for _, p := range slices.Sorted(maps.Keys(l.offsets)) {
		inputs = append(inputs, checkpoint.Offset{Topic: l.opts.Topic, Partition: p, Offset: l.offsets[p]})
	}
	return checkpoint.Manifest{Engine: cp, Inputs: inputs}, nil
}

// Following returns the runs being followed that the merge has not taken
// yet: they lie past a checkpoint taken now, and are journaled again.
func (l *Loop) Following() []order.Run { return l.merge.Following() }

// Missed counts the runs followed that the merge could not take as they
// were: records they name are gone or changed.
func (l *Loop) Missed() int { return l.merge.Missed() }

// Buffered is the number of records fetched and not taken yet.
func (l *Loop) Buffered() int { return l.merge.Len() }
