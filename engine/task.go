package engine

import (
	"encoding/binary"
	"errors"
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
//
// The job's rules change by version: each Router sends a RulesMessage to
// every partition when it routes by new rules, and a Task takes them once
// every input partition has sent it, as Flink aligns a checkpoint's
// barriers: until then it holds back the messages of the input partitions
// routed by the new rules, and applies them after the reload, keeping the
// state of the rules whose definition is unchanged (Engine.Reload).
type Task struct {
	ruleSet
	// version is the version of the rules the task applies.
	version    int64
	topic      string
	partition  int
	partitions int
	op         *windows.Operator
	dec        *Decoder
	valve      *watermark.Valve
	// applied is, per input partition, the offset of the last record or
	// mark applied.
	applied map[int32]int64
	// inputs are the input partitions whose rules messages a reload
	// waits for; reached is the version of the last one each sent, and
	// next the rules of the versions sent and not taken yet.
	inputs  []int32
	reached map[int32]int64
	next    map[int64]*rules.Config
	// aligning is Aligning, kept: every message asks.
	aligning bool
	// held are the messages of input partitions routed by rules not taken
	// yet, in the order they came, each with that version.
	held  []heldMessage
	out   Output
	count countingOutput
	stats Stats
	ev    event.Event
	refs  []windows.SlotRef
	keys  []byte
	prov  event.Provenance
}

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
	t := &Task{ruleSet: newRuleSet(opts.Config, schema), version: opts.RulesVersion, topic: opts.Topic,
		partition: opts.Partition, partitions: opts.Partitions, valve: watermark.NewValve(opts.Inputs),
		applied: make(map[int32]int64), inputs: slices.Clone(opts.Inputs), reached: make(map[int32]int64),
		next: make(map[int64]*rules.Config), out: opts.Output}
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
	switch {
	case m.Kind == RulesMessage:
		return true, t.reachRules(m)
	case t.aligning && t.reached[m.Partition] > t.version:
		// Routed by rules the task does not apply yet.
		t.held = append(t.held, heldMessage{version: t.reached[m.Partition], m: *m})
		t.held[len(t.held)-1].m.Value = slices.Clone(m.Value)
		return true, nil
	}
	return t.apply(m)
}

// heldMessage is a message held back until the task takes the rules of
// version, by which it was routed.
type heldMessage struct {
	version int64
	m       Message
}

// apply applies a message routed by the rules the task applies.
func (t *Task) apply(m *Message) (bool, error) {
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

// reachRules notes that input partition m.Partition routes by the rules of
// m.Version from now on, and takes every version all input partitions
// have reached.
func (t *Task) reachRules(m *Message) error {
	p := m.Partition
	if m.Version <= max(t.reached[p], t.version) {
		return nil // sent again, by a router that restarted
	}
	if t.next[m.Version] == nil {
		cfg, err := rules.Parse(fmt.Sprintf("rules version %d", m.Version), m.Value)
		if err != nil {
			return fmt.Errorf("engine: rules version %d from input partition %d: %w", m.Version, p, err)
		}
		t.next[m.Version] = cfg
	}
	t.reached[p] = m.Version
	defer func() { t.aligning = t.Aligning() }()
	for {
		least := m.Version
		for _, q := range t.inputs {
			least = min(least, max(t.reached[q], t.version))
		}
		if least <= t.version {
			return nil
		}
		// The first version after the task's that every input partition
		// reached: the rules in between, in turn, as the routers took them.
		v := least
		for w := range t.next {
			if w > t.version && w < v {
				v = w
			}
		}
		if err := t.takeRules(v); err != nil {
			return err
		}
	}
}

// takeRules reloads the rules of version v and applies the messages held
// back that were routed by them or earlier ones.
func (t *Task) takeRules(v int64) error {
	dec, _, err := t.reloadOperator(t.next[v], t.op, nil, &t.stats)
	if err != nil {
		return fmt.Errorf("engine: rules version %d: %w", v, err)
	}
	t.dec, t.version = dec, v
	for w := range t.next {
		if w <= v {
			delete(t.next, w)
		}
	}
	held := t.held
	t.held = nil
	for i := range held {
		h := &held[i]
		if h.version > v {
			t.held = append(t.held, *h)
			continue
		}
		if _, err := t.apply(&h.m); err != nil {
			return err
		}
	}
	return nil
}

// RulesVersion returns the version of the rules the task applies.
func (t *Task) RulesVersion() int64 { return t.version }

// Aligning reports whether some input partition routes by rules the task
// does not apply yet: its messages are held back, and a checkpoint must
// wait.
func (t *Task) Aligning() bool {
	for _, v := range t.reached {
		if v > t.version {
			return true
		}
	}
	return false
}

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

// ErrAligning is returned by Checkpoint while a reload waits for input
// partitions (Aligning): the messages held back are in no checkpoint.
var ErrAligning = errors.New("engine: a reload of the rules is waiting for input partitions")

// Checkpoint writes every changed window state to the backend and returns
// the rest of the task's state (its rules and their version, the layout
// of their state, watermarks, the offsets applied per input partition,
// counters), to be stored with it. It fails with ErrAligning while
// Aligning.
func (t *Task) Checkpoint() ([]byte, error) {
	if t.Aligning() {
		return nil, ErrAligning
	}
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
	t.valve = valve
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
