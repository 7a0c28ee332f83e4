package engine

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// Task is the second stage of a distributed job (docs/distributed.md): the
// window state of the keys of one partition of the repartition topic. It
// takes the Messages Routers send that partition, in the order they come:
// a record updates the windows of the keys the partition holds, a mark
// moves an input partition's watermark. Its watermark is the minimum over
// the input partitions (watermark.Valve), set to the record's input
// partition's watermark before each record, so that with one input
// partition every record meets the watermark it met in one engine, and
// the outputs are the same.
//
// A record is applied once: a Task keeps the offset of the last record of
// each input partition it applied and ignores records at or before it, so
// that what a Router sends again after it restarts from a checkpoint (or
// what two instances routing one partition in turn both sent) is skipped.
type Task struct {
	cfg        *rules.Config
	topic      string
	partition  int
	partitions int
	op         *windows.Operator
	dec        *Decoder
	valve      *watermark.Valve
	// applied is, per input partition, the offset of the last record or
	// mark applied.
	applied map[int32]int64
	out     Output
	count   countingOutput
	stats   Stats
	ev      event.Event
	refs    []windows.SlotRef
	keys    []byte
	prov    event.Provenance
}

// TaskOptions configure a Task.
type TaskOptions struct {
	// Config is the validated rules file. Required.
	Config *rules.Config
	// Backend stores the task's window state. Required.
	Backend slotstore.Backend
	// Output receives what the task emits. Required.
	Output Output
	// Partition is the partition of the repartition topic the task holds,
	// of Partitions.
	Partition, Partitions int
	// Topic is the input topic, for the records' provenance.
	Topic string
	// Inputs are the input topic's partitions, each holding the watermark
	// back until it reports.
	Inputs []int32
	// MemoryBytes and CacheSlots bound the window state in memory; see
	// windows.Options.
	MemoryBytes int64
	CacheSlots  int
}

// NewTask returns a Task for one partition of the repartition topic.
func NewTask(opts TaskOptions) (*Task, error) {
	if opts.Config == nil || opts.Backend == nil || opts.Output == nil {
		return nil, fmt.Errorf("engine: Config, Backend and Output are required")
	}
	if opts.Partition < 0 || opts.Partition >= opts.Partitions {
		return nil, fmt.Errorf("engine: task of partition %d of %d", opts.Partition, opts.Partitions)
	}
	schema, err := event.NewSchema(windows.Fields(opts.Config))
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	t := &Task{cfg: opts.Config, topic: opts.Topic, partition: opts.Partition, partitions: opts.Partitions,
		valve: watermark.NewValve(opts.Inputs), applied: make(map[int32]int64), out: opts.Output}
	t.stats.Decisions = make([]int64, len(opts.Config.Rules))
	t.count = countingOutput{Output: opts.Output, stats: &t.stats}
	t.op, err = windows.New(opts.Config, schema, opts.Backend, &t.count, windows.Options{
		MemoryBytes: opts.MemoryBytes, CacheSlots: opts.CacheSlots, WriteThrough: true,
	})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	t.dec = newDecoder(schema, t.op)
	return t, nil
}

// fresh reports whether a message of input partition p at offset o comes
// after everything applied, and notes it applied.
func (t *Task) fresh(p int32, o int64) bool {
	if last, ok := t.applied[p]; ok && o <= last {
		return false
	}
	t.applied[p] = o
	return true
}

// Applied is the offset of the last record or mark of input partition p
// the task applied, -1 when none.
func (t *Task) Applied(p int32) int64 {
	if o, ok := t.applied[p]; ok {
		return o
	}
	return -1
}

// Apply takes one message. It returns false for a record applied before
// (skipped). An error comes only from the state backend, or a record that
// does not decode as it did when it was routed.
func (t *Task) Apply(m *Message) (bool, error) {
	if m.Kind == MarkMessage {
		if last, ok := t.applied[m.Partition]; !ok || m.Offset > last {
			t.applied[m.Partition] = m.Offset
		}
		return true, t.op.AdvanceWatermark(t.valve.Set(m.Partition, m.Watermark, m.Idle))
	}
	if !t.fresh(m.Partition, m.Offset) {
		return false, nil
	}
	if err := t.op.AdvanceWatermark(t.valve.Set(m.Partition, m.Before, false)); err != nil {
		return true, err
	}
	refs, keys, err := t.dec.Decode(m.Value, &t.ev, t.refs[:0], t.keys[:0])
	if err != nil {
		return true, fmt.Errorf("engine: record %d/%d was routed but does not decode: %w", m.Partition, m.Offset, err)
	}
	// Only the state of the keys this partition holds.
	mine := refs[:0]
	for _, r := range refs {
		if t.dec.keyer.Route(r, keys, t.partitions) == t.partition {
			mine = append(mine, r)
		}
	}
	t.refs, t.keys = mine, keys
	t.prov = event.Provenance{Topic: t.topic, Partition: m.Partition, Offset: m.Offset}
	t.count.ev, t.count.prov = &t.ev, &t.prov
	t.stats.Records++
	if m.Processing {
		t.stats.Retimed++
	}
	res, err := t.op.ProcessElement(mine, keys, m.Time, m.Processing)
	t.count.ev, t.count.prov = nil, nil // a rule decides only on arrival
	if err != nil {
		return true, err
	}
	if res == windows.Late && !m.Decider {
		res = windows.Unmatched // another partition tells
	}
	settle(&t.stats, t.out, res, m.Value, t.op.Watermark(), &t.prov)
	return true, t.op.AdvanceWatermark(t.valve.Set(m.Partition, m.Watermark, false))
}

// Finish ends the input: the watermark goes to +infinity, windows that have
// not fired fire once, and state is flushed to the backend.
func (t *Task) Finish() error {
	if err := t.op.AdvanceWatermark(watermark.Max); err != nil {
		return err
	}
	return t.op.Flush()
}

// WriteBack writes up to n changed window states to the backend ahead of
// the next Checkpoint; see windows.Operator.WriteBack.
func (t *Task) WriteBack(n int) error { return t.op.WriteBack(n) }

// Watermark returns the task's watermark.
func (t *Task) Watermark() int64 { return t.op.Watermark() }

// Stats returns the counts so far: Records counts the records applied,
// Late those this partition decided were late.
func (t *Task) Stats() Stats {
	s := t.stats
	s.Decisions = slices.Clone(s.Decisions)
	s.WindowsFired = t.op.WindowsFired()
	return s
}

// taskCheckpointVersion is the first byte of a Task's checkpoint.
const taskCheckpointVersion = 1

// Checkpoint writes every changed window state to the backend and returns
// the rest of the task's state (rules fingerprint, watermarks, the offsets
// applied per input partition, counters), to be stored with it.
func (t *Task) Checkpoint() ([]byte, error) {
	op, err := t.op.Checkpoint(nil)
	if err != nil {
		return nil, err
	}
	inputs := slices.Sorted(maps.Keys(t.applied))
	applied := binary.AppendUvarint(nil, uint64(len(inputs)))
	for _, p := range inputs {
		applied = binary.AppendVarint(applied, int64(p))
		applied = binary.AppendVarint(applied, t.applied[p])
	}
	counters := append([]int64{t.stats.Records, t.stats.Accepted, t.stats.Unmatched, t.stats.Late, t.stats.Retimed}, t.stats.Decisions...)
	return appendSections([]byte{taskCheckpointVersion}, []byte(t.cfg.Fingerprint()), op,
		t.valve.AppendBinary(nil), applied, appendCounters(nil, counters)), nil
}

// Restore resumes a new task, over the backend the checkpoint's state was
// written to, from what Checkpoint returned.
func (t *Task) Restore(b []byte) error {
	sections, err := readCheckpoint(b, taskCheckpointVersion, t.cfg, 5)
	if err != nil {
		return err
	}
	if err := t.op.Restore(sections[1]); err != nil {
		return err
	}
	valve, rest, err := watermark.DecodeValve(sections[2])
	if err != nil || len(rest) != 0 {
		return fmt.Errorf("engine: task checkpoint watermarks: %v", err)
	}
	t.valve = valve
	ab := sections[3]
	n, k := binary.Uvarint(ab)
	if k <= 0 || n > uint64(len(ab)) {
		return fmt.Errorf("engine: task checkpoint offsets truncated")
	}
	ab = ab[k:]
	for range n {
		p, rest, ok := varint(ab)
		if !ok {
			return fmt.Errorf("engine: task checkpoint offsets truncated")
		}
		o, rest, ok := varint(rest)
		if !ok {
			return fmt.Errorf("engine: task checkpoint offsets truncated")
		}
		t.applied[int32(p)], ab = o, rest
	}
	counters := []*int64{&t.stats.Records, &t.stats.Accepted, &t.stats.Unmatched, &t.stats.Late, &t.stats.Retimed}
	for i := range t.stats.Decisions {
		counters = append(counters, &t.stats.Decisions[i])
	}
	return readCounters(sections[4], counters)
}
