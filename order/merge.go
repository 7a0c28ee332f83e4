// Package order merges the partitions of a topic into one sequence of
// records that depends only on the topic's contents, the way Kafka Streams
// synchronises the partitions of a task: the buffered record with the
// smallest timestamp goes first, ties to the lower partition, and a
// partition that has nothing buffered is waited for, a bounded time,
// before the others go on without it.
//
// The live job and the replay of a topic feed the same Merger, so that a
// replay of what the live job read takes the records in the order it took
// them. The order can depend on timing only when a wait times out (a
// partition with nothing to read while the others have records): then the
// Merger says so (Options.OnTimeout), for the caller to log and count, and
// notes what it did as Runs, for the caller to journal: a Merger given
// those Runs (Follow) takes the same records in the same order again, which
// is how a job restarted from a checkpoint makes again, byte for byte, the
// outputs it wrote after it.
//
// The Merger is a pure state machine: it reads no clock (every call takes
// the processing time), starts no goroutine and does no I/O. Its caller
// fetches the partitions and hands it what each fetch returned.
package order

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/riskstream/riskstream/internal/corrupt"
	"github.com/riskstream/riskstream/internal/varint"
)

// Options configure a Merger.
//
// A record is held for a partition that has nothing buffered until the
// partition has records, or for at most the partition's wait (Wait, or
// BehindWait while it is behind) counted from when the record arrived: a
// record of that partition that arrives within the wait of the held one
// is taken in timestamp order with it. As with Kafka Streams'
// max.task.idle.ms, a partition that has been silent for long holds a new
// record back as one just drained does: only so is the order of the first
// records after a silence the topic's.
type Options[T any] struct {
	// Timestamp returns a record's timestamp, the order's key. Required.
	Timestamp func(*T) int64
	// Wait is how long a partition that has nothing buffered and has read
	// everything the broker had (caught up) holds back a record of another
	// partition: a record written to it meanwhile with a smaller timestamp
	// still goes first. 0 never waits for a caught-up partition.
	Wait int64
	// BehindWait is how long a partition that has nothing buffered but is
	// known to have more to read (a fetch in flight, a leader the fetcher
	// is reconnecting to) holds back a record of another. It is at least
	// Wait.
	BehindWait int64
	// OnTimeout, if set, is called when a wait for partition p runs out
	// while a record of another partition was held back for it, once per
	// silence of p: from then on the order depends on when records
	// arrived. waited is how long that record was held (ms).
	OnTimeout func(p int32, waited int64)
	// Release, if set, is given back each slice of records Push took once
	// every record in it has been taken by Pop.
	Release func([]T)
	// Offset, if set, returns a record's offset in its partition: the
	// Merger then knows where each partition is (Positions), notes the
	// runs it takes without partitions (TakeRuns) and follows runs given
	// (Follow).
	Offset func(*T) int64
}

// Position is where a partition is in the merge: the offset of the next
// record to take, or -1 when none was taken and none given.
type Position struct {
	Partition int32
	Next      int64
}

// A Run is a stretch of the merge taken without some partitions after
// their waits ran out: Picks records, from the positions From, with the
// records of the partitions Without ignored. It is all that a merge owes
// to timing: a Merger that follows the same Runs over the same partitions
// takes the same records in the same order, whenever they arrive.
type Run struct {
	From    []Position
	Without []int32
	Picks   int
}

// sum is a run's start as one number that grows with every record taken:
// the sum of its positions, counting none taken as 0.
func (r *Run) sum() int64 {
	var s int64
	for _, p := range r.From {
		s += max(p.Next, 0)
	}
	return s
}

// Merger merges the records of several partitions by timestamp. The zero
// value is not usable: see New.
type Merger[T any] struct {
	opts  Options[T]
	parts []*partition[T] // by partition id, ascending
	// buffered counts the records held, for Len.
	buffered int
	// runs are the runs taken without partitions since TakeRuns; extend is
	// set while the last record taken extends the last of them.
	runs   []Run
	extend bool
	// follow are the runs Follow gave that have not begun; left is how
	// many records the one begun (following) still takes, 0 when none.
	follow    []Run
	following Run
	left      int
	// missed counts the runs given that the merge went past without
	// meeting their start.
	missed int
	// without is scratch space: the partitions the last Pop went without.
	without []int32
}

// partition is one partition's records and the state of the wait for it.
type partition[T any] struct {
	id int32
	// fetches are the record slices pushed and not yet taken; the first
	// is taken from head on. arrived is when each was pushed.
	fetches [][]T
	arrived []int64
	head    int
	// behind is set while the partition is known to have records not
	// fetched yet (or it is not known whether it has).
	behind bool
	// done is set once the partition has nothing more to give (a replay
	// reached its end): it is never waited for.
	done bool
	// timedOut is set once a wait for the partition ran out, until it
	// has records again or falls behind: one timeout is reported per
	// silence.
	timedOut bool
	// next is the offset of the next record to take, -1 when not known
	// (Options.Offset).
	next int64
	// skipped is set while a run followed goes without the partition.
	skipped bool
}

// New returns a Merger with no partitions.
func New[T any](opts Options[T]) (*Merger[T], error) {
	if opts.Timestamp == nil {
		return nil, fmt.Errorf("order: Options.Timestamp is required")
	}
	if opts.Wait < 0 || opts.BehindWait < 0 {
		return nil, fmt.Errorf("order: waits must not be negative (Wait %d, BehindWait %d)", opts.Wait, opts.BehindWait)
	}
	opts.BehindWait = max(opts.BehindWait, opts.Wait)
	return &Merger[T]{opts: opts}, nil
}

// AddPartition starts merging partition p. Until its first fetch says
// otherwise it counts as behind: the records of the other partitions wait
// for its first ones. Adding a partition twice does nothing.
func (m *Merger[T]) AddPartition(p int32) { m.AddPartitionAt(p, -1) }

// AddPartitionAt starts merging partition p from offset next (where a
// checkpoint left it; -1 when not known), as AddPartition.
func (m *Merger[T]) AddPartitionAt(p int32, next int64) {
	if m.find(p) != nil {
		return
	}
	part := &partition[T]{id: p, behind: true, next: next}
	i := 0
	for i < len(m.parts) && m.parts[i].id < p {
		i++
	}
	m.parts = append(m.parts, nil)
	copy(m.parts[i+1:], m.parts[i:])
	m.parts[i] = part
}

func (m *Merger[T]) find(p int32) *partition[T] {
	for _, part := range m.parts {
		if part.id == p {
			return part
		}
	}
	return nil
}

func (m *Merger[T]) mustFind(p int32) *partition[T] {
	part := m.find(p)
	if part == nil {
		panic(fmt.Sprintf("order: partition %d was not added", p))
	}
	return part
}

// Push hands the Merger what one fetch of partition p returned at
// processing time now: recs, in offset order (possibly none), and whether
// the partition has more to read past them (behind). The Merger keeps recs
// until Pop has taken every record (then Options.Release has it back).
func (m *Merger[T]) Push(p int32, recs []T, behind bool, now int64) {
	part := m.mustFind(p)
	if behind && !part.behind {
		part.timedOut = false
	}
	part.behind = behind
	if len(recs) == 0 {
		if m.opts.Release != nil {
			m.opts.Release(recs)
		}
		return
	}
	part.fetches = append(part.fetches, recs)
	part.arrived = append(part.arrived, now)
	part.timedOut = false
	m.buffered += len(recs)
}

// Done marks partition p as having nothing more to give: the Merger no
// longer waits for it.
func (m *Merger[T]) Done(p int32) { m.mustFind(p).done = true }

// Len returns the number of records buffered.
func (m *Merger[T]) Len() int { return m.buffered }

func (m *Merger[T]) empty(part *partition[T]) bool { return len(part.fetches) == 0 }

// deadline returns until when a record that arrived at arrived is held for
// part, which has nothing buffered.
func (m *Merger[T]) deadline(part *partition[T], arrived int64) int64 {
	if part.behind {
		return arrived + m.opts.BehindWait
	}
	return arrived + m.opts.Wait
}

// best returns the partition whose first record has the smallest
// timestamp, ties to the lower partition; nil when none has records. A
// partition a followed run goes without does not count.
func (m *Merger[T]) best() *partition[T] {
	var best *partition[T]
	var bestTS int64
	for _, part := range m.parts {
		if m.empty(part) || part.skipped {
			continue
		}
		ts := m.opts.Timestamp(&part.fetches[0][part.head])
		if best == nil || ts < bestTS {
			best, bestTS = part, ts
		}
	}
	return best
}

// Pop takes the next record at processing time now: the buffered record
// with the smallest timestamp (ties to the lower partition), provided that
// no partition with nothing buffered is still to be waited for. ok is false
// when there is no record to take yet: the caller tries again when a fetch
// arrives or processing time has moved.
func (m *Merger[T]) Pop(now int64) (rec T, p int32, ok bool) {
	if m.left == 0 && len(m.follow) > 0 {
		m.begin()
	}
	best := m.best()
	if best == nil {
		return rec, 0, false
	}
	arrived := best.arrived[0]
	m.without = m.without[:0]
	for _, part := range m.parts {
		if !m.empty(part) || part.done || part.skipped {
			continue
		}
		if now < m.deadline(part, arrived) {
			return rec, 0, false
		}
		// Going on without the partition: reported once per silence.
		if !part.timedOut {
			part.timedOut = true
			if m.opts.OnTimeout != nil {
				m.opts.OnTimeout(part.id, now-arrived)
			}
		}
		m.without = append(m.without, part.id)
	}
	if m.opts.Offset != nil {
		m.note()
	}
	// Offset is given the buffered record, not rec: the address of rec
	// would move rec to the heap, an allocation for every record taken.
	at := &best.fetches[0][best.head]
	if m.opts.Offset != nil {
		best.next = m.opts.Offset(at) + 1
	}
	rec = *at
	best.head++
	m.buffered--
	if best.head == len(best.fetches[0]) {
		done := best.fetches[0]
		best.fetches[0] = nil
		best.fetches, best.arrived, best.head = best.fetches[1:], best.arrived[1:], 0
		if len(best.fetches) == 0 {
			best.fetches, best.arrived = best.fetches[:0:0], best.arrived[:0:0]
		}
		if m.opts.Release != nil {
			m.opts.Release(done)
		}
	}
	return rec, best.id, true
}

// note records the record about to be taken in the runs: one taken
// without partitions that no followed run skips begins or extends a run.
func (m *Merger[T]) note() {
	if len(m.without) > 0 && m.left > 0 {
		// A wait ran out while a run was followed: this merge went
		// without the run's partitions too.
		m.without = append(m.without, m.following.Without...)
		slices.Sort(m.without)
	}
	if m.left > 0 {
		if m.left--; m.left == 0 {
			for _, part := range m.parts {
				part.skipped = false
			}
		}
	}
	if len(m.without) == 0 {
		m.extend = false
		return
	}
	if m.extend {
		if last := &m.runs[len(m.runs)-1]; slices.Equal(last.Without, m.without) {
			last.Picks++
			return
		}
	}
	m.runs = append(m.runs, Run{From: m.Positions(), Without: append([]int32(nil), m.without...), Picks: 1})
	m.extend = true
}

// Positions returns where every partition is, by partition id.
func (m *Merger[T]) Positions() []Position {
	ps := make([]Position, len(m.parts))
	for i, part := range m.parts {
		ps[i] = Position{part.id, part.next}
	}
	return ps
}

// at reports whether the partitions are where from says; a partition from
// does not name has to have none taken.
func (m *Merger[T]) at(from []Position) bool {
	i := 0
	for _, part := range m.parts {
		want := int64(-1)
		if i < len(from) && from[i].Partition == part.id {
			want = from[i].Next
			i++
		}
		if part.next != want {
			return false
		}
	}
	return i == len(from)
}

// sum is the partitions' positions as Run.sum counts them.
func (m *Merger[T]) sum() int64 {
	var s int64
	for _, part := range m.parts {
		s += max(part.next, 0)
	}
	return s
}

// begin starts the first run to follow if the merge is where it starts,
// and drops the runs whose start the merge went past.
func (m *Merger[T]) begin() {
	for len(m.follow) > 0 {
		r := &m.follow[0]
		if m.at(r.From) {
			m.following, m.left = *r, r.Picks
			for _, part := range m.parts {
				part.skipped = slices.Contains(r.Without, part.id)
			}
			m.follow = m.follow[1:]
			return
		}
		if m.sum() < r.sum() {
			return
		}
		m.follow, m.missed = m.follow[1:], m.missed+1
	}
}

// TakeRuns returns the runs taken without partitions since the last call
// (Options.Offset is required): what the caller must make durable before
// any output of their records leaves, for a Merger to Follow them after a
// crash. Runs a Merger followed are not among them.
func (m *Merger[T]) TakeRuns() []Run {
	runs := m.runs
	m.runs, m.extend = nil, false
	return runs
}

// Follow has the Merger take the runs given, in the order of their
// starts, when the merge reaches each (Options.Offset is required): it
// then takes its records without the partitions it names, not waiting for
// them, as the merge that noted it did. Runs of several merges may be
// given, in the order they were noted: a later one that starts before an
// earlier one's end replaces what the earlier ones noted from there on.
func (m *Merger[T]) Follow(runs []Run) {
	for _, r := range runs {
		s := r.sum()
		// What a later merge took from s on replaces the earlier's.
		kept := m.follow[:0]
		for _, f := range m.follow {
			if f.sum() < s {
				kept = append(kept, f)
			}
		}
		m.follow = append(kept, r)
	}
	slices.SortStableFunc(m.follow, func(a, b Run) int { return cmp.Compare(a.sum(), b.sum()) })
}

// Following returns the runs given to Follow that the merge has not taken
// yet, the one under way from where the merge is: what a checkpoint taken
// now must keep for a restart from it.
func (m *Merger[T]) Following() []Run {
	var runs []Run
	if m.left > 0 {
		runs = append(runs, Run{From: m.Positions(), Without: m.following.Without, Picks: m.left})
	}
	return append(runs, m.follow...)
}

// Missed is how many runs given to Follow the merge went past without
// meeting their start: records the journal's merge took that are gone or
// changed.
func (m *Merger[T]) Missed() int { return m.missed }

// runVersion is the first byte of an encoded Run.
const runVersion = 1

// AppendBinary appends the run, for a journal.
func (r *Run) AppendBinary(dst []byte) []byte {
	dst = append(dst, runVersion)
	dst = binary.AppendUvarint(dst, uint64(len(r.From)))
	for _, p := range r.From {
		dst = binary.AppendVarint(dst, int64(p.Partition))
		dst = binary.AppendVarint(dst, p.Next)
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.Without)))
	for _, p := range r.Without {
		dst = binary.AppendVarint(dst, int64(p))
	}
	return binary.AppendUvarint(dst, uint64(r.Picks))
}

// DecodeRun reads a run AppendBinary wrote.
func DecodeRun(b []byte) (Run, error) {
	var r Run
	if len(b) == 0 || b[0] != runVersion {
		return r, corrupt.Errorf("order: corrupt run: version %v, want %d", b[:min(len(b), 1)], runVersion)
	}
	d := varint.Reader{B: b[1:]}
	r.From = make([]Position, d.Len())
	for i := range r.From {
		r.From[i] = Position{d.Int32(0), d.Varint()}
	}
	r.Without = make([]int32, d.Len())
	for i := range r.Without {
		r.Without[i] = d.Int32(0)
	}
	r.Picks = int(d.Uvarint(math.MaxInt32))
	switch {
	case d.Failed:
		return Run{}, corrupt.Errorf("order: corrupt run: cut short or out of range")
	case len(d.B) > 0:
		return Run{}, corrupt.Errorf("order: corrupt run: %d bytes past its end", len(d.B))
	case r.Picks == 0:
		return Run{}, corrupt.Errorf("order: corrupt run: no record")
	}
	return r, nil
}
