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
// Merger says so (Options.OnTimeout), for the caller to log and count.
//
// The Merger is a pure state machine: it reads no clock (every call takes
// the processing time), starts no goroutine and does no I/O. Its caller
// fetches the partitions and hands it what each fetch returned.
package order

import "fmt"

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
}

// Merger merges the records of several partitions by timestamp. The zero
// value is not usable: see New.
type Merger[T any] struct {
	opts  Options[T]
	parts []*partition[T] // by partition id, ascending
	// buffered counts the records held, for Len.
	buffered int
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
func (m *Merger[T]) AddPartition(p int32) {
	if m.find(p) != nil {
		return
	}
	part := &partition[T]{id: p, behind: true}
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
// timestamp, ties to the lower partition; nil when none has records.
func (m *Merger[T]) best() *partition[T] {
	var best *partition[T]
	var bestTS int64
	for _, part := range m.parts {
		if m.empty(part) {
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
	best := m.best()
	if best == nil {
		return rec, 0, false
	}
	arrived := best.arrived[0]
	for _, part := range m.parts {
		if !m.empty(part) || part.done {
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
	}
	rec = best.fetches[0][best.head]
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
