package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
)

const (
	// fetchMaxWait is how long the broker holds a fetch on a partition with
	// nothing new. With MinBytes 1 it answers as soon as a record arrives,
	// so this bounds only an idle poll.
	fetchMaxWait = 500 * time.Millisecond
	// fetchTimeout is how much longer than fetchMaxWait the answer may take
	// before the connection is taken for broken. kafka-go's Reader uses
	// MaxWait itself as the client deadline and, once it is missed,
	// reconnects after a 100 ms backoff: on a busy machine (GC, a loaded
	// CPU) that added the backoff to every record behind it.
	fetchTimeout = 10 * time.Second
	// recoveryGrace is how long after a broker outage a partition that has
	// read everything its leader has still counts as behind, until it has
	// a record again: its producers reconnect and send what they held
	// (older than what other partitions already have) only after the
	// brokers are back, and a merge that went on without the partition
	// after the usual --partition-wait took those records out of timestamp
	// order, so that decisions differed from a replay of the topic.
	recoveryGrace = 10 * time.Second
	// fetchMaxBytes bounds one fetch's records: Kafka's own default per
	// partition. The loop handles a fetch at once, so with larger fetches a
	// catching-up job made a checkpoint wait for a whole large fetch.
	fetchMaxBytes = 1 << 20
)

// fetched is what one fetch of a partition gave, for the merge of the
// partitions (order.Merger.Push).
type fetched struct {
	partition int32
	msgs      []kafka.Message
	// behind is set when the partition has more to read past msgs, or
	// when that is not known (the fetch failed).
	behind bool
	// done is set when a fetcher with an end reached it: nothing follows.
	done bool
	// at is when the fetch arrived (Unix ns, the job's clock): where the
	// job's own share of a decision's latency starts.
	at int64
}

// fetchArrivals remembers, per input partition, when each fetch whose
// records the merge still holds arrived, by its last offset: the record
// the merge gives at an offset came with the first fetch that reaches it.
type fetchArrivals struct {
	byPartition map[int32][]fetchArrival
}

type fetchArrival struct {
	last int64 // the offset of the fetch's last record
	at   int64 // Unix ns
}

// fetched notes a fetch of partition p up to offset last, arrived at at.
func (a *fetchArrivals) fetched(p int32, last, at int64) {
	if a.byPartition == nil {
		a.byPartition = map[int32][]fetchArrival{}
	}
	a.byPartition[p] = append(a.byPartition[p], fetchArrival{last, at})
}

// of returns when the fetch of partition p's record at offset arrived, 0
// when not known, and forgets the fetches before it.
func (a *fetchArrivals) of(p int32, offset int64) int64 {
	q := a.byPartition[p]
	i := 0
	for i < len(q) && q[i].last < offset {
		i++
	}
	if i > 0 {
		q = append(q[:0], q[i:]...)
		a.byPartition[p] = q
	}
	if len(q) == 0 {
		return 0
	}
	return q[0].at
}

// fetcher reads one input partition from an offset on, and hands its
// records to the job's loop a whole fetch at a time: one channel send per
// fetch rather than, as with kafka-go's Reader, two goroutine hand-offs per
// record. It also says when the partition falls behind or catches up, for
// the merge's waits, sending a fetch without records if it has none.
type fetcher struct {
	brokers []string
	// now is the job's clock (RunOptions.Now), for when the leader last
	// answered and the grace after an outage; socket deadlines are the
	// kernel's.
	now func() time.Time
	// dialer connects with the cluster's TLS and SASL.
	dialer    *kafka.Dialer
	topic     string
	partition int
	// next is the offset to fetch, kafka.FirstOffset for the partition's
	// first. Only the fetching goroutine uses it.
	next int64
	// lag is the high watermark minus next as of the last fetch, for the
	// consumer lag metric.
	lag atomic.Int64
	// answered is set once the partition's leader answered a fetch, for
	// /readyz; lastAnswer is when it last did (or when the fetcher
	// started), in Unix nanoseconds, for /healthz.
	answered   atomic.Bool
	lastAnswer atomic.Int64
	// end, if not negative, is the offset the fetcher stops at (replay of
	// a topic); it then sends a fetch marked done.
	end int64
	out chan<- fetched
	// saidBehind is the behind last sent: the merge starts with every
	// partition behind.
	saidBehind bool
	// recovering, when not zero, is when the fetcher reconnected after
	// failing: until the partition has a record again, or recoveryGrace
	// has passed, it says it is behind (see recoveryGrace).
	recovering time.Time
	log        *slog.Logger
}

// newFetcher returns a fetcher of one partition from offset next
// (kafka.FirstOffset for the first), up to end (-1 for no end).
func newFetcher(brokers []string, dialer *kafka.Dialer, topic string, partition int, next, end int64, out chan<- fetched, log *slog.Logger, now func() time.Time) *fetcher {
	if now == nil {
		now = time.Now
	}
	f := &fetcher{brokers: brokers, dialer: dialer, topic: topic, partition: partition,
		next: next, end: end, out: out, saidBehind: true, log: log, now: now}
	f.lastAnswer.Store(now().UnixNano())
	return f
}

// send hands f to the loop; false when ctx ended first.
func (f *fetcher) send(ctx context.Context, msgs []kafka.Message, behind, done bool) bool {
	select {
	case f.out <- fetched{partition: int32(f.partition), msgs: msgs, behind: behind, done: done, at: f.now().UnixNano()}:
		f.saidBehind = behind
		return true
	case <-ctx.Done():
		return false
	}
}

// atEnd reports whether a fetcher with an end has reached it.
func (f *fetcher) atEnd() bool { return f.end >= 0 && f.next >= f.end }

// run fetches until ctx ends or the fetcher reaches its end, reconnecting
// with a backoff when the connection fails.
func (f *fetcher) run(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if f.atEnd() {
			f.send(ctx, nil, false, true)
			return
		}
		err := f.connectAndFetch(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil { // the end reached
			f.send(ctx, nil, false, true)
			return
		}
		// Until a fetch answers again, the partition may have records the
		// merge must wait for.
		if !f.saidBehind && !f.send(ctx, nil, true, false) {
			return
		}
		f.recovering = f.now()
		f.log.Warn("fetching input, reconnecting", "topic", f.topic, "partition", f.partition,
			"offset", f.next, "in", backoff, "err", err)
		backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
	}
}

func (f *fetcher) connectAndFetch(ctx context.Context) error {
	var (
		conn *kafka.Conn
		err  error
	)
	for _, b := range f.brokers {
		if conn, err = f.dialer.DialLeader(ctx, "tcp", b, f.topic, f.partition); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	// Closing the connection is what interrupts a fetch in flight.
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	// Where the partition starts and ends: an empty partition is known to
	// be caught up at once, not after a first fetch's wait for records.
	conn.SetReadDeadline(time.Now().Add(fetchTimeout))
	first, last, err := conn.ReadOffsets()
	if err != nil {
		return fmt.Errorf("offsets: %w", err)
	}
	if f.next == kafka.FirstOffset {
		f.next = first
	}
	if f.next >= last && f.saidBehind && f.recovering.IsZero() && !f.send(ctx, nil, false, false) {
		return ctx.Err()
	}
	for !f.atEnd() {
		msgs, hwm, err := f.fetch(conn)
		if f.end >= 0 {
			for len(msgs) > 0 && msgs[len(msgs)-1].Offset >= f.end {
				msgs = msgs[:len(msgs)-1]
			}
		}
		// Caught up when the fetch reached the end of the log, or nothing
		// arrived while the broker waited; after an outage, only once the
		// partition has records again or recoveryGrace has passed.
		behind := !(hwm >= 0 && f.next >= hwm || errors.Is(err, kafka.RequestTimedOut))
		if !f.recovering.IsZero() {
			if len(msgs) > 0 || f.now().Sub(f.recovering) >= recoveryGrace {
				f.recovering = time.Time{}
			} else {
				behind = true
			}
		}
		if len(msgs) > 0 {
			f.next = msgs[len(msgs)-1].Offset + 1
			behind = hwm < 0 || f.next < hwm
			if !f.send(ctx, msgs, behind, false) {
				return ctx.Err()
			}
		} else {
			recycleFetched(msgs)
			if behind != f.saidBehind && (err == nil || !behind) && !f.send(ctx, nil, behind, false) {
				return ctx.Err()
			}
		}
		if hwm >= 0 {
			f.lag.Store(max(hwm-f.next, 0))
		}
		if hwm >= 0 || errors.Is(err, kafka.RequestTimedOut) {
			f.answered.Store(true)
			f.lastAnswer.Store(f.now().UnixNano())
		}
		switch {
		case err == nil:
		case errors.Is(err, kafka.RequestTimedOut):
			// Nothing arrived within fetchMaxWait.
		case errors.Is(err, kafka.OffsetOutOfRange):
			conn.SetReadDeadline(time.Now().Add(fetchTimeout))
			first, _, oerr := conn.ReadOffsets()
			if oerr != nil {
				return fmt.Errorf("offsets: %w", oerr)
			}
			if f.next >= first {
				return err
			}
			// Retention deleted records the job never read: nothing can
			// bring them back, so say so and go on from what is left.
			f.log.Error("input records deleted before they were read", "topic", f.topic,
				"partition", f.partition, "from", f.next, "to", first)
			f.next = first
		default:
			return err
		}
	}
	return nil
}

// fetchedPool recycles the slices fetches are read into (the loop puts
// them back with recycleFetched): growing a slice of thousands of messages
// from nothing, on every fetch, was a large part of fetching.
var fetchedPool = sync.Pool{New: func() any { return new([]kafka.Message) }}

// recycleFetched gives back the slice of a fetch whose records are processed.
func recycleFetched(msgs []kafka.Message) {
	clear(msgs) // drop the records' bytes
	msgs = msgs[:0]
	fetchedPool.Put(&msgs)
}

// fetch reads the records from f.next that the broker has, waiting up to
// fetchMaxWait for the first. hwm is -1 when the fetch failed.
func (f *fetcher) fetch(conn *kafka.Conn) (msgs []kafka.Message, hwm int64, err error) {
	if _, err := conn.Seek(f.next, kafka.SeekAbsolute|kafka.SeekDontCheck); err != nil {
		return nil, -1, err
	}
	conn.SetReadDeadline(time.Now().Add(fetchMaxWait + fetchTimeout))
	batch := conn.ReadBatchWith(kafka.ReadBatchConfig{MinBytes: 1, MaxBytes: fetchMaxBytes, MaxWait: fetchMaxWait})
	msgs = (*fetchedPool.Get().(*[]kafka.Message))[:0]
	for {
		m, err := batch.ReadMessage()
		if err != nil {
			break
		}
		msgs = append(msgs, m)
	}
	// Close reports what ended the batch; the end of its records is nil.
	if err := batch.Close(); err != nil {
		return msgs, -1, err
	}
	return msgs, batch.HighWaterMark(), nil
}
