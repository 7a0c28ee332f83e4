package job

import (
	"maps"
	"slices"

	"github.com/riskstream/riskstream/checkpoint"
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/order"
	"github.com/segmentio/kafka-go"
)

// MergeOptions configure a Merge.
type MergeOptions struct {
	// PartitionWait, BehindWait and OnWaitTimeout are Options'.
	PartitionWait, BehindWait int64
	OnWaitTimeout             func(p int32, waited int64)
}

// Merge takes the records of a topic's partitions, as their fetches bring
// them, in the merge's order (order.Merger), and knows where each
// partition is. A Loop runs what it takes through an engine; a
// distributed job's router (package stream) routes it. Like a Loop, it
// does no I/O and reads no clock.
type Merge struct {
	merge *order.Merger[kafka.Message]
	// offsets are the next offset of each partition: of the record after
	// the last one taken, or the checkpoint's before any is.
	offsets  map[int32]int64
	known    map[int32]bool // partitions added
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

// NewMerge returns a Merge with no partitions, at the start of the topic.
func NewMerge(opts MergeOptions) (*Merge, error) {
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
	return &Merge{merge: merge, offsets: map[int32]int64{}, known: map[int32]bool{}}, nil
}

// started reports whether a partition was added.
func (m *Merge) started() bool { return len(m.known) > 0 }

// Restore sets where partitions added afterwards start: the offsets a
// checkpoint recorded.
func (m *Merge) Restore(inputs []checkpoint.Offset) error {
	if m.started() {
		return errRestoreStarted
	}
	for _, o := range inputs {
		m.offsets[o.Partition] = o.Offset
	}
	return nil
}

// Follow makes the merge take the records past the checkpoint restored in
// the order of runs, the runs a run before took without partitions after
// it (the journal).
func (m *Merge) Follow(runs []order.Run) { m.merge.Follow(runs) }

// AddPartition starts taking the records of partition p, unless it was
// added already. It returns the offset to fetch p from: its checkpointed
// one, or kafka.FirstOffset.
func (m *Merge) AddPartition(p int32) (from int64, added bool) {
	if m.known[p] {
		return 0, false
	}
	m.known[p] = true
	from, ok := m.offsets[p]
	if !ok {
		m.merge.AddPartition(p)
		return kafka.FirstOffset, true
	}
	m.merge.AddPartitionAt(p, from)
	return from, true
}

// Push hands the merge a fetch of partition f.Partition, at mergeNow on
// the merge's clock (ms). A fetch with Done set ends its partition.
func (m *Merge) Push(f kafkaio.Fetch, mergeNow int64) {
	if f.Done {
		m.merge.Done(f.Partition)
		return
	}
	if len(f.Msgs) > 0 {
		m.arrivals.fetched(f.Partition, f.Msgs[len(f.Msgs)-1].Offset, f.At)
	}
	m.merge.Push(f.Partition, f.Msgs, f.Behind, mergeNow)
}

// Take appends to rs every record the merge gives at mergeNow, and to
// arrived when the fetch of each arrived (Unix ns, 0 when not known), and
// returns them with the runs it took without partitions: those must be
// durable (the journal) before any output of the records exists, for a
// restart to take them in the same order. The records' values are the
// fetches' bytes, theirs until the next Take.
func (m *Merge) Take(mergeNow int64, rs []engine.Record, arrived []int64) ([]engine.Record, []int64, []order.Run) {
	start := len(rs)
	if h := m.held; h != nil {
		m.held = nil
		rs, arrived = append(rs, h.rec), append(arrived, h.arrived)
		m.offsets[h.rec.Partition] = h.offset + 1
	}
	m.stopped = false
	for {
		msg, p, ok := m.merge.Pop(mergeNow)
		if !ok {
			break
		}
		rec, at := kafkaio.Record(&msg, p), m.arrivals.of(p, msg.Offset)
		if o, ok := m.stops[p]; ok && msg.Offset >= o {
			delete(m.stops, p)
			m.held, m.stopped = &heldRecord{rec, at, msg.Offset}, true
			break
		}
		rs, arrived = append(rs, rec), append(arrived, at)
		m.offsets[p] = msg.Offset + 1
	}
	if len(rs) == start && !m.stopped {
		return rs, arrived, nil
	}
	return rs, arrived, m.merge.TakeRuns()
}

// StopBefore makes Take stop before the first record of partition p at
// offset or later, and take it first the next time: its caller can change
// the rules between the two records (Loop.Reload), where a distributed
// job's router began to route by new ones (a replay of its input). A stop
// replaces p's earlier one.
func (m *Merge) StopBefore(p int32, offset int64) {
	if m.stops == nil {
		m.stops = map[int32]int64{}
	}
	m.stops[p] = offset
}

// Stopped reports whether the last Take stopped before a record
// (StopBefore), and which: its partition and offset.
func (m *Merge) Stopped() (p int32, offset int64, ok bool) {
	if !m.stopped {
		return 0, 0, false
	}
	return m.held.rec.Partition, m.held.offset, true
}

// Offsets are the next offset of each partition taken from, or
// restored: what a checkpoint now records, and what the group is told.
func (m *Merge) Offsets() map[int32]int64 { return m.offsets }

// Inputs are the Offsets as a checkpoint's manifest records them, of
// topic, by partition.
func (m *Merge) Inputs(topic string) []checkpoint.Offset {
	inputs := make([]checkpoint.Offset, 0, len(m.offsets))
	for _, p := range slices.Sorted(maps.Keys(m.offsets)) {
		inputs = append(inputs, checkpoint.Offset{Topic: topic, Partition: p, Offset: m.offsets[p]})
	}
	return inputs
}

// Following returns the runs being followed that the merge has not taken
// yet: they lie past a checkpoint taken now, and are journaled again.
func (m *Merge) Following() []order.Run { return m.merge.Following() }

// Missed counts the runs followed that the merge could not take as they
// were: records they name are gone or changed.
func (m *Merge) Missed() int { return m.merge.Missed() }

// Buffered is the number of records fetched and not taken yet.
func (m *Merge) Buffered() int { return m.merge.Len() }
