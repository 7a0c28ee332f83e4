package kafkaio

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
	// FetchTimeout is how much longer than fetchMaxWait the answer may take
	// before the connection is taken for broken. kafka-go's Reader uses
	// MaxWait itself as the client deadline and, once it is missed,
	// reconnects after a 100 ms backoff: on a busy machine (GC, a loaded
	// CPU) that added the backoff to every record behind it.
	FetchTimeout = 10 * time.Second
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

// Fetch is what one fetch of a partition gave, for the merge of the
// partitions (order.Merger.Push).
type Fetch struct {
	Partition int32
	Msgs      []kafka.Message
	// Behind is set when the partition has more to read past msgs, or
	// when that is not known (the fetch failed).
	Behind bool
	// Done is set when a fetcher with an end reached it: nothing follows.
	Done bool
	// At is when the fetch arrived (Unix ns, the job's clock): where the
	// job's own share of a decision's latency starts.
	At int64
}

// Fetcher reads one input partition from an offset on, and hands its
// records to the job's loop a whole fetch at a time: one channel send per
// fetch rather than, as with kafka-go's Reader, two goroutine hand-offs per
// record. It also says when the partition falls behind or catches up, for
// the merge's waits, sending a fetch without records if it has none.
type Fetcher struct {
	brokers []string
	// now is the job's clock (stream.RunOptions.Now), for when the leader last
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
	out chan<- Fetch
	// saidBehind is the behind last sent: the merge starts with every
	// partition behind.
	saidBehind bool
	// recovering, when not zero, is when the fetcher reconnected after
	// failing: until the partition has a record again, or recoveryGrace
	// has passed, it says it is behind (see recoveryGrace).
	recovering time.Time
	log        *slog.Logger
}

// FetcherOptions configure a Fetcher.
type FetcherOptions struct {
	// Brokers are the bootstrap addresses, and Dialer how to connect to
	// them (TLS, SASL). Required.
	Brokers []string
	Dialer  *kafka.Dialer
	// Topic and Partition are what the fetcher reads. Required.
	Topic     string
	Partition int
	// From is the offset of the first record to read:
	// kafka.FirstOffset for the partition's first, kafka.LastOffset for
	// where the partition ends when the fetcher first reaches it.
	From int64
	// End, when positive, is the offset the fetcher stops at, having read
	// the records before it (a replay's range); 0 reads on without end.
	End int64
	// Out receives the fetches. Required.
	Out chan<- Fetch
	// Log receives the fetcher's warnings; the default is slog.Default().
	Log *slog.Logger
	// Now is the job's clock, for when the leader last answered; the
	// default is time.Now.
	Now func() time.Time
}

// EnsureDefaults fills in zero fields with their default values.
func (o *FetcherOptions) EnsureDefaults() {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// NewFetcher returns a fetcher of one partition (FetcherOptions).
func NewFetcher(o FetcherOptions) *Fetcher {
	o.EnsureDefaults()
	end := o.End
	if end <= 0 {
		end = -1
	}
	f := &Fetcher{brokers: o.Brokers, dialer: o.Dialer, topic: o.Topic, partition: o.Partition,
		next: o.From, end: end, out: o.Out, saidBehind: true, log: o.Log, now: o.Now}
	f.lastAnswer.Store(o.Now().UnixNano())
	return f
}

// Topic is the topic f reads.
func (f *Fetcher) Topic() string { return f.topic }

// Partition is the partition f reads.
func (f *Fetcher) Partition() int { return f.partition }

// Lag is the partition's high watermark minus f's next offset, as of the
// last fetch: the consumer lag.
func (f *Fetcher) Lag() int64 { return f.lag.Load() }

// Answered reports whether the partition's leader has answered a fetch.
func (f *Fetcher) Answered() bool { return f.answered.Load() }

// LastAnswer is when the leader last answered a fetch, or when f started.
func (f *Fetcher) LastAnswer() time.Time { return time.Unix(0, f.lastAnswer.Load()) }

// send hands f to the loop; false when ctx ended first.
func (f *Fetcher) send(ctx context.Context, msgs []kafka.Message, behind, done bool) bool {
	select {
	case f.out <- Fetch{Partition: int32(f.partition), Msgs: msgs, Behind: behind, Done: done, At: f.now().UnixNano()}:
		f.saidBehind = behind
		return true
	case <-ctx.Done():
		return false
	}
}

// atEnd reports whether a fetcher with an end has reached it.
func (f *Fetcher) atEnd() bool { return f.end >= 0 && f.next >= f.end }

// Run fetches until ctx ends or the fetcher reaches its end, reconnecting
// with a backoff when the connection fails.
func (f *Fetcher) Run(ctx context.Context) {
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

func (f *Fetcher) connectAndFetch(ctx context.Context) error {
	conn, err := dialLeader(ctx, f.dialer, f.brokers, f.topic, f.partition)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	// Closing the connection is what interrupts a fetch in flight.
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	// Where the partition starts and ends: an empty partition is known to
	// be caught up at once, not after a first fetch's wait for records.
	conn.SetReadDeadline(time.Now().Add(FetchTimeout))
	first, last, err := conn.ReadOffsets()
	if err != nil {
		return fmt.Errorf("offsets: %w", err)
	}
	switch f.next {
	case kafka.FirstOffset:
		f.next = first
	case kafka.LastOffset:
		f.next = last
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
			Recycle(msgs)
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
			conn.SetReadDeadline(time.Now().Add(FetchTimeout))
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

// dialLeader connects to the leader of a partition of topic, asking each
// of brokers in turn where it is; the error is the last broker's.
func dialLeader(ctx context.Context, dialer *kafka.Dialer, brokers []string, topic string, partition int) (conn *kafka.Conn, err error) {
	for _, b := range brokers {
		if conn, err = dialer.DialLeader(ctx, "tcp", b, topic, partition); err == nil {
			return conn, nil
		}
	}
	return nil, err
}

// fetchedPool recycles the slices fetches are read into (the loop puts
// them back with Recycle): growing a slice of thousands of messages
// from nothing, on every fetch, was a large part of fetching.
var fetchedPool = sync.Pool{New: func() any { return new([]kafka.Message) }}

// Recycle gives back the slice of a fetch whose records are processed.
func Recycle(msgs []kafka.Message) {
	clear(msgs) // drop the records' bytes
	msgs = msgs[:0]
	fetchedPool.Put(&msgs)
}

// fetch reads the records from f.next that the broker has, waiting up to
// fetchMaxWait for the first. hwm is -1 when the fetch failed.
func (f *Fetcher) fetch(conn *kafka.Conn) (msgs []kafka.Message, hwm int64, err error) {
	if _, err := conn.Seek(f.next, kafka.SeekAbsolute|kafka.SeekDontCheck); err != nil {
		return nil, -1, err
	}
	conn.SetReadDeadline(time.Now().Add(fetchMaxWait + FetchTimeout))
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
