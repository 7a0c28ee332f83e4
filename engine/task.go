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
// takes the Messages the Router sends that partition, in the order they
// come, which is the order the Router took the input in: a record updates
// the windows of the keys the partition holds, a mark moves the
// watermark, a rules message changes the rules. Before each record the
// watermark moves to the one the record met in the Router, and after it
// to the one the record made, so that every record meets the watermark it
// met in one engine, and the outputs are the same.
//
// A record is applied once: a Task keeps the offset of the last record of
// each input partition it applied and ignores records at or before it, so
// that what a Router sends again after it restarts from a checkpoint (or
// what two instances routing in turn both sent) is skipped.
//
// The job's rules change by version: the Router sends a RulesMessage to
// every partition at the point of the input where it begins to route by
// new rules, and each Task reloads there, keeping the state of the rules
// whose definition is unchanged (Engine.Reload).
type Task struct {
	ruleSet
	// version is the version of the rules the task applies.
	version    int64
	topic      string
	partition  int
	partitions int
	op         *windows.Operator
	dec        *Decoder
	// valve holds the watermark the Router sent last, on one channel: it
	// never goes back.
	valve *watermark.Valve
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
	// routerSchema is the schema of the last event handed to the task
	// decoded (ApplyDecoded), and sameSchema whether the task's decoder
	// reads records the same.
	routerSchema *event.Schema
	sameSchema   bool
}

// routerChannel is the valve's one channel: the Router's.
const routerChannel = 0

// TaskOptions configure a Task.
type TaskOptions struct {
	// Config is the validated rules file. Required.
	Config *rules.Config
	// RulesVersion is Config's version among the job's rules (the first
	// is 1); a restore takes the checkpoint's.
	RulesVersion int64
	// Backend stores the task's window state. Required.
	Backend slotstore.Backend
	// Output receives what the task emits. Required.
	Output Output
	// Partition is the partition of the repartition topic the task holds,
	// of Partitions.
	Partition, Partitions int
	// Topic is the input topic, for the records' provenance.
	Topic string
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
	t := &Task{ruleSet: newRuleSet(opts.Config, schema), version: opts.RulesVersion, topic: opts.Topic,
		partition: opts.Partition, partitions: opts.Partitions, valve: watermark.NewValve([]int32{routerChannel}),
		applied: make(map[int32]int64), out: opts.Output}
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
func (t *Task) Apply(m *Message) (bool, error) { return t.ApplyDecoded(m, nil) }

// ApplyDecoded is Apply of a record message with its event as a Router in
// this process decoded it (nil: none), which the task takes instead of
// decoding the record when its rules read the same fields.
func (t *Task) ApplyDecoded(m *Message, d *Decoded) (bool, error) {
	switch m.Kind {
	case RulesMessage:
		return true, t.takeRules(m)
	case MarkMessage:
		if last, ok := t.applied[m.Partition]; !ok || m.Offset > last {
			t.applied[m.Partition] = m.Offset
		}
		return true, t.op.AdvanceWatermark(t.valve.Set(routerChannel, m.Watermark, false))
	}
	if !t.fresh(m.Partition, m.Offset) {
		return false, nil
	}
	if err := t.op.AdvanceWatermark(t.valve.Set(routerChannel, m.Before, false)); err != nil {
		return true, err
	}
	ev := &t.ev
	var refs []windows.SlotRef
	var keys []byte
	if d != nil && t.decodesAs(d.schema) {
		ev = &d.Event
		refs, keys = t.dec.keyer.Append(t.refs[:0], t.keys[:0], ev)
	} else {
		var err error
		refs, keys, err = t.dec.Decode(m.Value, ev, t.refs[:0], t.keys[:0])
		if err != nil {
			return true, fmt.Errorf("engine: record %d/%d was routed but does not decode: %w", m.Partition, m.Offset, err)
		}
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
	t.count.ev, t.count.prov = ev, &t.prov
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
	return true, t.op.AdvanceWatermark(t.valve.Set(routerChannel, m.Watermark, false))
}

// decodesAs reports whether the task decodes records as schema does.
func (t *Task) decodesAs(schema *event.Schema) bool {
	if schema != t.routerSchema {
		t.routerSchema, t.sameSchema = schema, schema.Equal(t.dec.dec.Schema())
	}
	return t.sameSchema
}

// takeRules reloads the rules of a rules message, unless the task applies
// them or later ones already: a Router that restarted from a checkpoint
// sends them again.
func (t *Task) takeRules(m *Message) error {
	if m.Version <= t.version {
		return nil
	}
	cfg, err := rules.Parse(fmt.Sprintf("rules version %d", m.Version), m.Value)
	if err != nil {
		return fmt.Errorf("engine: rules version %d: %w", m.Version, err)
	}
	dec, _, err := t.reloadOperator(cfg, t.op, nil, &t.stats)
	if err != nil {
		return fmt.Errorf("engine: rules version %d: %w", m.Version, err)
	}
	t.dec, t.version, t.routerSchema = dec, m.Version, nil
	return nil
}

// RulesVersion returns the version of the rules the task applies.
func (t *Task) RulesVersion() int64 { return t.version }

// DeleteRetired deletes up to n of the stored states of the rules a reload
// removed or changed, as Engine's DeleteRetired, which says why it must
// follow a checkpoint after the reload.
func (t *Task) DeleteRetired(n int) (deleted, left int, err error) {
	return t.deleteRetired(t.op, n)
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

// taskCheckpointVersion is the first byte of a Task's checkpoint. Version
// 1 began with the fingerprint of the whole rules file, held no rules nor
// layout, and is restored only with the same rules.
const taskCheckpointVersion = 2

// Checkpoint writes every changed window state to the backend and returns
// the rest of the task's state (its rules and their version, the layout
// of their state, watermarks, the offsets applied per input partition,
// counters), to be stored with it.
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
	ruleSection := append(binary.AppendVarint(nil, t.version), t.cfg.Source...)
	return appendSections([]byte{taskCheckpointVersion}, []byte(t.cfg.StateSettings()), t.layout.appendBinary(nil), ruleSection, op,
		t.valve.AppendBinary(nil), applied, appendCounters(nil, counters)), nil
}

// TaskRules returns the rules a Task's checkpoint b was written with and
// their version, to make the Task that restores it with; 0 and nil for a
// checkpoint of version 1, which holds none.
func TaskRules(b []byte) (version int64, source []byte, err error) {
	if len(b) > 0 && b[0] == 1 {
		return 0, nil, nil
	}
	if len(b) == 0 || b[0] != taskCheckpointVersion {
		return 0, nil, fmt.Errorf("engine: checkpoint version unknown")
	}
	sections, err := readSections(b[1:], 7)
	if err != nil {
		return 0, nil, err
	}
	version, source, ok := varint(sections[2])
	if !ok || version < 0 {
		return 0, nil, fmt.Errorf("engine: task checkpoint rules truncated")
	}
	return version, source, nil
}

// Restore resumes a new task, over the backend the checkpoint's state was
// written to, from what Checkpoint returned. The task is made with the
// checkpoint's rules (TaskRules), or others whose state settings are the
// same: then the state of the rules whose definition is unchanged is kept,
// as after a reload. A checkpoint of version 1 restores only with the same
// rules.
func (t *Task) Restore(b []byte) error {
	var sections [][]byte
	prev := identityLayout(t.cfg)
	var err error
	if len(b) > 0 && b[0] == 1 {
		var v1 [][]byte
		if v1, err = readCheckpoint(b, 1, t.cfg, 5); err == nil {
			sections = append([][]byte{v1[0], nil, nil}, v1[1:]...)
		}
	} else if sections, err = readChecked(b, taskCheckpointVersion, 7, t.cfg.StateSettings(),
		fmt.Errorf("%w: watermark out_of_orderness, idle_timeout or allowed_lateness changed", ErrRulesChanged)); err == nil {
		prev, err = decodeLayout(sections[1])
		if err == nil {
			if t.version, err = checkpointRulesVersion(sections[2]); err != nil {
				return err
			}
		}
	}
	if err != nil {
		return err
	}
	next, diff := prev.next(t.cfg)
	if err := t.op.Reload(t.cfg, t.schema, next.ids()); err != nil {
		return err
	}
	t.dec = newDecoder(t.schema, t.op)
	t.layout, t.restored = next, diff
	if err := t.op.Restore(sections[3]); err != nil {
		return err
	}
	valve, rest, err := watermark.DecodeValve(sections[4])
	if err != nil || len(rest) != 0 {
		return fmt.Errorf("engine: task checkpoint watermarks: %v", err)
	}
	// A checkpoint of a task that took a router per input partition
	// has a channel each: the job's watermark was the least of them.
	t.valve.Set(routerChannel, valve.Current(), false)
	ab := sections[5]
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
	t.stats.Decisions, err = readDecisionCounters(sections[6], counters, &prev, diff, t.cfg)
	return err
}

// checkpointRulesVersion reads the version of a task checkpoint's rules
// section.
func checkpointRulesVersion(b []byte) (int64, error) {
	v, _, ok := varint(b)
	if !ok || v < 0 {
		return 0, fmt.Errorf("engine: task checkpoint rules truncated")
	}
	return v, nil
}
