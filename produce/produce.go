// Package produce is the producer of riskstream produce: it publishes the
// lines of a file (or standard input), one event each, to a topic, at the
// pace of their timestamps or as fast as the brokers take them, re-timed
// as live traffic when asked (retime.go), keyed by an attribute, and
// reports every line it could not send.
package produce

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/infile"
	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/riskstream/riskstream/sink"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/metadata"
)

// Options configures Run. Zero fields take the defaults below.
type Options struct {
	// File is the JSONL input (.jsonl, .jsonl.gz, or "-" for Stdin).
	// Required.
	File string
	// Brokers are the bootstrap brokers; default 127.0.0.1:9092, the
	// embedded broker that `riskstream run` starts.
	Brokers []string
	// Security is the TLS and SASL the connections to Brokers use; default
	// plaintext without authentication.
	Security kafkaconn.Options
	// Topic to publish to; default "requests".
	Topic string
	// Key is the top-level attribute whose value becomes the message key,
	// so that one user's (or device's...) events keep their order in one
	// partition; default "id". Lines without it get a nil key.
	Key string
	// Rate is the steady send rate in records per second; 0 sends as fast
	// as the broker takes them, or with Retime at the recorded pace.
	Rate float64
	// Retime shifts every line's ts and ingest_ts by one offset, so that
	// the first record's reference time (its ingest_ts, else its ts) is
	// the moment it is sent, keeping the times relative to each other:
	// a capture recorded long ago then plays as live traffic, and the
	// live job's latency and lag metrics read as they would live. Without
	// Rate, each record is sent when the wall clock reaches its retimed
	// reference time, at the pace it was recorded; with Rate, at that
	// rate, its times still shifted by the one offset. The default is to
	// send the records as they are (a faithful replay).
	Retime bool
	// BatchTimeout bounds how long the writer holds a partial batch;
	// default 1ms, instead of kafka-go's 1s, so a paced stream arrives
	// promptly rather than in one-second lumps (the timeout adds to every
	// event-to-decision latency); 5ms above 50,000 records/s or unpaced,
	// where batches must be large.
	BatchTimeout time.Duration
	// Stdin is read when File is "-"; default os.Stdin.
	Stdin io.Reader
	// MaxMessageBytes is the largest message, key and value, sent: a
	// longer line is reported and not sent. Default
	// sink.DefaultMaxMessageBytes, under Kafka's default
	// message.max.bytes with room for a batch's headers.
	MaxMessageBytes int
	// Logger receives the lines not sent, by file and line number (the
	// first maxReportedLines, then a count); default slog.Default().
	Logger *slog.Logger
	// Now is the wall clock: the send times, the pace and the retimed
	// reference times. The default is time.Now.
	Now func() time.Time
}

// Defaults of Options.
const (
	// DefaultBroker is where `riskstream run` without brokers starts its
	// development broker, and so where produce sends by default.
	DefaultBroker = broker.DefaultAddr
	// DefaultTopic is the live job's input topic by default
	// (stream.DefaultTopic, which is this one).
	DefaultTopic = "requests"
	DefaultKey   = "id"
)

// fastRate is the rate above which, as unpaced, batches must be large
// (Options.BatchTimeout).
const fastRate = 50_000

// fast reports whether o sends fast enough that batches must be large:
// unpaced, or over fastRate.
func (o *Options) fast() bool { return o.Rate == 0 && !o.Retime || o.Rate > fastRate }

// EnsureDefaults fills in zero fields with their default values.
func (o *Options) EnsureDefaults() {
	if len(o.Brokers) == 0 {
		o.Brokers = []string{DefaultBroker}
	}
	if o.Topic == "" {
		o.Topic = DefaultTopic
	}
	if o.Key == "" {
		o.Key = DefaultKey
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = sink.DefaultMaxMessageBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.BatchTimeout <= 0 {
		o.BatchTimeout = time.Millisecond
		if o.fast() {
			o.BatchTimeout = 5 * time.Millisecond
		}
	}
	if o.Stdin == nil {
		o.Stdin = os.Stdin
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate reports, all at once, the options that cannot work; Run calls
// it after EnsureDefaults.
func (o *Options) Validate() error {
	var errs []error
	if o.File == "" {
		errs = append(errs, errors.New("produce: no input file"))
	}
	if o.Rate < 0 {
		errs = append(errs, fmt.Errorf("produce %s: negative rate %v", o.File, o.Rate))
	}
	if o.MaxMessageBytes < 0 {
		errs = append(errs, fmt.Errorf("produce %s: negative maximum message size %d", o.File, o.MaxMessageBytes))
	}
	return errors.Join(errs...)
}

// Stats summarizes a Run call.
type Stats struct {
	// Records is the number of records the broker acknowledged.
	Records int64
	// Failed is the number of records that could not be written for
	// another reason than their size.
	Failed int64
	// TooLarge is the number of lines not sent because they are larger
	// than MaxMessageBytes or the broker refused them, alone, as too large
	// for the topic.
	TooLarge int64
	// WithIngestTS is how many records were timestamped with their
	// ingest_ts rather than the send time.
	WithIngestTS int64
	// Keyless is how many records had no key attribute (or were not JSON
	// objects) and went out with a nil key.
	Keyless int64
	// Elapsed is the wall time from the first send to the last ack.
	Elapsed time.Duration
	// RetimedBy is what Retime added to every time (zero without it).
	RetimedBy time.Duration
}

// maxInFlight bounds the records handed to the async writer but not yet
// acknowledged, so a large file streams in bounded memory.
const maxInFlight = 10000

// maxGroup is the most records handed to the writer in one call; well
// under maxInFlight, whose slots the records waiting in a group hold.
const maxGroup = 256

// maxReportedLines is how many lines not sent Run reports one by one
// (and names in its error); the others are counted.
const maxReportedLines = 10

// batchOverhead is what kafka-go counts for a message besides its key and
// value, without headers (23 bytes), against Writer.BatchBytes.
const batchOverhead = 64

// oversized deals with Run's lines too large for the topic: those
// larger than the maximum message size, never sent, and those the broker
// refused as too large in a batch, sent again one at a time. It reports
// the lines not sent. Only refuse may be called from another goroutine
// than Run's.
type oversized struct {
	file string
	log  *slog.Logger
	// one sends records again, each in a batch of its own: a record it
	// cannot send is too large for the topic.
	one     *kafka.Writer
	mu      sync.Mutex
	refused []kafka.Message
	lines   []int64 // the first maxReportedLines not sent
	n       int64   // lines not sent
}

// skip reports line, of size bytes, as not sent, for why.
func (o *oversized) skip(line int64, size int, why string) {
	o.n++
	if len(o.lines) < maxReportedLines {
		o.lines = append(o.lines, line)
		o.log.Warn("line not sent", "file", o.file, "line", line, "bytes", size, "reason", why)
	}
}

// refuse keeps records the broker refused as too large, for resend.
func (o *oversized) refuse(msgs []kafka.Message) {
	o.mu.Lock()
	o.refused = append(o.refused, msgs...)
	o.mu.Unlock()
}

// resend sends the refused records again, one per batch, and reports
// those refused again. It returns how many it sent, and how many failed
// for another reason, with the first error.
func (o *oversized) resend(ctx context.Context) (sent, failed int64, err error) {
	o.mu.Lock()
	msgs := o.refused
	o.refused = nil
	o.mu.Unlock()
	if len(msgs) == 0 {
		return 0, 0, nil
	}
	for i := range msgs {
		msgs[i].Topic = "" // the writer's, which kafka-go set on them
	}
	werr := o.one.WriteMessages(ctx, msgs...)
	var perMessage kafka.WriteErrors
	if werr != nil && (!errors.As(werr, &perMessage) || len(perMessage) != len(msgs)) {
		perMessage = make(kafka.WriteErrors, len(msgs))
		for i := range perMessage {
			perMessage[i] = werr
		}
	}
	for i, m := range msgs {
		switch {
		case werr == nil || perMessage[i] == nil:
			sent++
		case sink.TooLarge(perMessage[i]):
			o.skip(*m.WriterData.(*int64), len(m.Key)+len(m.Value), "refused by the broker: "+perMessage[i].Error())
		default:
			failed++
			if err == nil {
				err = perMessage[i]
			}
		}
	}
	return sent, failed, err
}

// err describes the lines not sent, or is nil.
func (o *oversized) err(topic string) error {
	if o.n == 0 {
		return nil
	}
	more := o.n - int64(len(o.lines))
	if more > 0 {
		o.log.Warn("more lines not sent", "file", o.file, "lines", more)
	}
	var b strings.Builder
	for i, l := range o.lines {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s:%d", o.file, l)
	}
	if more > 0 {
		fmt.Fprintf(&b, " and %d more", more)
	}
	return fmt.Errorf("%d lines too large for topic %s, not sent: %s", o.n, topic, b.String())
}

// Run publishes every non-blank line of opts.File as one message to
// opts.Topic. The record timestamp is the line's integer ingest_ts when it
// has one, so a recorded capture replays with its original reference
// clock; a line without one after lines with it takes the last one's, so
// that the topic's times stay in the capture's time (the job takes its
// partitions' records in timestamp order); else the send time. With
// opts.Retime, the times are shifted to start now, and a line without
// ingest_ts is stamped when it is sent. Lines without a key go
// to the partition of their bytes' murmur2, so that producing a file twice
// makes the same topic. Lines that are not valid events are sent
// anyway: the job's dlq is where they belong, not a producer-side filter.
//
// A line larger than opts.MaxMessageBytes is not sent, nor one the broker
// refuses as too large for the topic: each is reported, by file and line
// number, and Run goes on and returns an error at the end. Lines the
// broker refused only together with others (a batch over the topic's
// max.message.bytes) are sent again one at a time, after the lines sent
// meanwhile.
func Run(ctx context.Context, opts Options) (Stats, error) {
	var st Stats
	// tried is the development broker's address when no broker was
	// named: a refusal then means it is not running.
	var tried string
	if len(opts.Brokers) == 0 {
		tried = DefaultBroker
	}
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return st, err
	}
	sec, err := kafkaconn.New(opts.Security)
	if err != nil {
		return st, fmt.Errorf("produce %s: %w", opts.File, err)
	}
	// kafka-go writes a partition's batches one at a time, each closed by
	// its BatchTimeout or BatchSize: a partition moves at most a batch per
	// round trip. A paced stream gets its records out within a
	// millisecond; a fast one (over fastRate, or unpaced) needs batches
	// that outgrow the round trips of a busy broker.
	batchSize := 100
	// minSleep is the least a paced producer sleeps: it hands the writer
	// what it grouped before each sleep, and at a fast rate groups of a
	// few dozen records would cap the rate by the writer's cost per call.
	minSleep := 200 * time.Microsecond
	if opts.fast() {
		batchSize = 1000
		minSleep = 2 * time.Millisecond
	}

	r, closeIn, err := infile.Open(opts.File, opts.Stdin)
	if err != nil {
		return st, fmt.Errorf("produce %s: %w", opts.File, err)
	}
	defer closeIn()
	// A wrong password or a TLS mismatch fails here, saying so, rather
	// than as an EOF for every record.
	if err := sec.Check(ctx, opts.Brokers); err != nil {
		err = fmt.Errorf("produce %s: brokers %v (%v): %w", opts.File, opts.Brokers, sec, err)
		if hint := kafkaconn.RefusedHint(err, tried); hint != "" {
			err = fmt.Errorf("%w\n%s", err, hint)
		}
		return st, err
	}

	var (
		mu       sync.Mutex
		firstErr error
		slots    = make(chan struct{}, maxInFlight)
		large    = &oversized{file: opts.File, log: opts.Logger}
	)
	// Connections of its own: kafka-go's default transport is shared by
	// every client in the process (the job's, when both run in one).
	conns := sec.Transport()
	defer conns.CloseIdleConnections()
	w := &kafka.Writer{
		Addr:      kafka.TCP(opts.Brokers...),
		Transport: &metadataCache{RoundTripper: conns, now: opts.Now},
		Topic:     opts.Topic,
		// Murmur2 places keys on the same partitions as the Java client's
		// default partitioner, so other tools agree on where a key lives.
		Balancer:     keylessByValue{},
		BatchTimeout: opts.BatchTimeout,
		BatchSize:    batchSize,
		// Room for a line of MaxMessageBytes, so that kafka-go never
		// refuses one; batches no larger, so that a topic whose
		// max.message.bytes suits MaxMessageBytes takes them.
		BatchBytes:   int64(opts.MaxMessageBytes) + batchOverhead,
		RequiredAcks: kafka.RequireAll,
		// Async lets a paced stream go out one record at a time without
		// each send waiting for its ack; slots provide the backpressure.
		Async: true,
		Completion: func(msgs []kafka.Message, err error) {
			mu.Lock()
			switch {
			case err == nil:
				st.Records += int64(len(msgs))
			case sink.TooLarge(err):
				large.refuse(msgs)
			default:
				st.Failed += int64(len(msgs))
				if firstErr == nil {
					firstErr = err
				}
			}
			mu.Unlock()
			for range msgs {
				<-slots
			}
		},
	}

	large.one = &kafka.Writer{
		Addr:         w.Addr,
		Transport:    w.Transport,
		Topic:        opts.Topic,
		Balancer:     keylessByValue{},
		BatchTimeout: time.Millisecond,
		BatchSize:    1,
		BatchBytes:   w.BatchBytes,
		RequiredAcks: kafka.RequireAll,
	}
	defer large.one.Close()
	resend := func() {
		acked, failed, err := large.resend(ctx)
		mu.Lock()
		st.Records += acked
		st.Failed += failed
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}

	start := opts.Now()
	var sent int64
	// Records go to the writer in groups: kafka-go's WriteMessages costs
	// about as much for one message as for a few hundred.
	var group []kafka.Message
	send := func() error {
		if len(group) == 0 {
			return nil
		}
		if err := w.WriteMessages(ctx, group...); err != nil {
			for range group {
				<-slots
			}
			return fmt.Errorf("write: %w", err)
		}
		sent += int64(len(group))
		clear(group)
		group = group[:0]
		resend()
		return nil
	}
	// lineNumbers holds the line number of each record in flight, for
	// its WriterData: one allocation per block of lines, not per line.
	var lineNumbers []int64
	lineNumber := func(n int64) *int64 {
		if len(lineNumbers) == cap(lineNumbers) {
			lineNumbers = make([]int64, 0, 1024)
		}
		lineNumbers = append(lineNumbers, n)
		return &lineNumbers[len(lineNumbers)-1]
	}
	var lineNo int64
	keys := newKeyScanner(opts.Key)
	var clock retimer
	// lastTime is the last ingest_ts taken, the time of the lines after it
	// that have none.
	var lastTime time.Time
	sendErr := func() error {
		br := bufio.NewReaderSize(r, 256<<10)
		for {
			// A group waits for no input: when the next line is not
			// buffered yet (a slow pipe), what is grouped goes first.
			if buffered, _ := br.Peek(br.Buffered()); bytes.IndexByte(buffered, '\n') < 0 {
				if err := send(); err != nil {
					return err
				}
			}
			// ReadBytes allocates each line afresh, which the async writer
			// needs: it holds on to the value until the ack.
			line, rerr := br.ReadBytes('\n')
			if rerr != nil && rerr != io.EOF {
				return fmt.Errorf("read: %w", rerr)
			}
			if len(line) > 0 {
				lineNo++
			}
			line = bytes.TrimRight(line, "\r\n")
			if len(bytes.TrimSpace(line)) > 0 {
				var ref int64
				hasRef := false
				if opts.Retime {
					line, ref, hasRef = clock.retime(line, opts.Now())
				}
				// The group goes before a sleep: held back, its records
				// would be late.
				switch {
				case opts.Rate > 0:
					if err := pace(ctx, opts.Now, start, sent+int64(len(group)), opts.Rate, minSleep, send); err != nil {
						return err
					}
				case hasRef:
					if err := sleepUntil(ctx, opts.Now, time.UnixMilli(ref), minSleep, send); err != nil {
						return err
					}
				}
				key, ingestTS, ok := keys.scan(line)
				if size := len(key) + len(line); size > opts.MaxMessageBytes {
					large.skip(lineNo, size, fmt.Sprintf("larger than the maximum message size of %d bytes", opts.MaxMessageBytes))
					if rerr == io.EOF {
						return send()
					}
					continue
				}
				m := kafka.Message{Key: key, Value: line, Time: lastTime, WriterData: lineNumber(lineNo)}
				if m.Time.IsZero() {
					m.Time = opts.Now()
				}
				if ok && ingestTS.set {
					m.Time = time.UnixMilli(ingestTS.ms)
					if !opts.Retime { // retimed, the send time is in the capture's time
						lastTime = m.Time
					}
					if st.WithIngestTS == 0 && !opts.Retime {
						hintOld(opts.Logger, m.Time, opts.Now())
					}
					st.WithIngestTS++
				}
				if key == nil {
					st.Keyless++
				}
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return ctx.Err()
				}
				if group = append(group, m); len(group) == maxGroup {
					if err := send(); err != nil {
						return err
					}
				}
			}
			if rerr == io.EOF {
				return send()
			}
		}
	}()
	// Close flushes what is buffered and waits for every Completion call.
	closeErr := w.Close()
	resend()
	st.Elapsed = opts.Now().Sub(start)
	st.RetimedBy = time.Duration(clock.offset) * time.Millisecond

	mu.Lock()
	defer mu.Unlock()
	st.TooLarge = large.n
	if sendErr != nil {
		return st, fmt.Errorf("produce %s: %w", opts.File, sendErr)
	}
	var errs []error
	if err := large.err(opts.Topic); err != nil {
		errs = append(errs, err)
	}
	if firstErr != nil {
		errs = append(errs, fmt.Errorf("%d of %d records failed: %w", st.Failed, sent, firstErr))
	}
	if closeErr != nil {
		errs = append(errs, fmt.Errorf("close writer: %w", closeErr))
	}
	if len(errs) > 0 {
		return st, fmt.Errorf("produce %s: %w", opts.File, errors.Join(errs...))
	}
	return st, nil
}

// oldCapture is how far behind the wall clock a capture's first record
// timestamp must be for Run to mention Retime.
const oldCapture = time.Hour

// hintOld logs, when first is older than oldCapture at now, that the
// records go out with their old timestamps, and how to play them as live
// instead.
func hintOld(log *slog.Logger, first, now time.Time) {
	if age := now.Sub(first); age > oldCapture {
		log.Info("records are stamped with their recorded ingest_ts, the first "+age.Round(time.Second).String()+
			" ago: the live job's latency and lag metrics will count that age; --retime plays them as live traffic",
			"first", first.UTC().Format(time.RFC3339))
	}
}

// keylessByValue places keyed messages by murmur2 of their key, as the
// Java client's default partitioner does, and keyless ones by murmur2 of
// their value rather than at random, so that the same file makes the same
// topic every time it is produced.
type keylessByValue struct{}

func (keylessByValue) Balance(m kafka.Message, partitions ...int) int {
	if m.Key == nil {
		m.Key = m.Value
	}
	return kafka.Murmur2Balancer{Consistent: true}.Balance(m, partitions...)
}

// metadataCache answers metadata requests from the last answer for up to
// a second. kafka-go's Writer asks for the topic's partitions once per
// message, and its transport filters and copies its own cached answer each
// time, a large part of the producer's CPU.
type metadataCache struct {
	kafka.RoundTripper
	mu     sync.Mutex
	topics []string
	last   *metadata.Response
	at     time.Time
	// now is the clock of at.
	now func() time.Time
}

func (c *metadataCache) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	m, ok := req.(*metadata.Request)
	if !ok {
		return c.RoundTripper.RoundTrip(ctx, addr, req)
	}
	c.mu.Lock()
	if c.last != nil && c.now().Sub(c.at) < time.Second && slices.Equal(c.topics, m.TopicNames) {
		defer c.mu.Unlock()
		return c.last, nil
	}
	c.mu.Unlock()
	resp, err := c.RoundTripper.RoundTrip(ctx, addr, req)
	if r, ok := resp.(*metadata.Response); ok && err == nil && !slices.ContainsFunc(r.Topics,
		func(t metadata.ResponseTopic) bool { return t.ErrorCode != 0 }) {
		// Only a complete answer is kept: a topic still being created is
		// asked for again.
		c.mu.Lock()
		c.topics, c.last, c.at = slices.Clone(m.TopicNames), r, c.now()
		c.mu.Unlock()
	}
	return resp, err
}

// pace sleeps until record n (from 0) is due at rate records/s after
// start, calling beforeSleep first if it sleeps. Scheduling against the
// start, not the previous send, keeps the long-run rate exact even when
// individual sleeps overshoot. It does not sleep for less than minSleep
// (shorter sleeps cost more than they smooth): the schedule catches up on
// the next one.
func pace(ctx context.Context, now func() time.Time, start time.Time, n int64, rate float64, minSleep time.Duration, beforeSleep func() error) error {
	return sleepUntil(ctx, now, start.Add(time.Duration(float64(n)/rate*float64(time.Second))), minSleep, beforeSleep)
}

// sleepUntil sleeps until due, calling beforeSleep first if it sleeps; not
// at all when due is less than minSleep away.
func sleepUntil(ctx context.Context, now func() time.Time, due time.Time, minSleep time.Duration, beforeSleep func() error) error {
	if due.Sub(now()) < minSleep {
		return nil
	}
	if err := beforeSleep(); err != nil {
		return err
	}
	t := time.NewTimer(due.Sub(now()))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// optMillis is an optional integer millisecond timestamp.
type optMillis struct {
	ms  int64
	set bool
}

// keyScanner finds each line's message key and ingest_ts. The job's event
// decoder, cheaper than scanMembers (BenchmarkScanEvent), serves the lines
// that are valid events (nearly all), and scanMembers the others and the
// keys the decoder gives only in canonical form (escaped, or with invalid
// UTF-8). Both give the same key and timestamp for a line: TestKeyScanner
// and FuzzKeyScanner check it.
type keyScanner struct {
	attr string
	// dec decodes the key attribute, and id and ingest_ts with it; nil
	// when the key is ts, ingest_ts or source, which the decoder reads its
	// own way.
	dec *event.Decoder
	ev  event.Event
	// members scans the lines dec does not serve (event.Decoder.Members).
	members *event.Decoder
}

func newKeyScanner(attr string) *keyScanner {
	k := &keyScanner{attr: attr, members: newMemberScanner()}
	var fields []event.Field
	if attr != "id" {
		fields = []event.Field{{Name: attr}}
	}
	if s, err := event.NewSchema(fields); err == nil && attr != "source" {
		k.dec = event.NewDecoder(s)
	}
	return k
}

// newMemberScanner returns a decoder of no fields, for its Members.
func newMemberScanner() *event.Decoder {
	s, err := event.NewSchema(nil)
	if err != nil {
		panic(err) // a schema of no fields is always valid
	}
	return event.NewDecoder(s)
}

func (k *keyScanner) scan(line []byte) (key []byte, ingestTS optMillis, ok bool) {
	if k.dec == nil || k.dec.Decode(line, &k.ev) != nil {
		return k.scanMembers(line)
	}
	v := event.Value{Kind: event.String, Text: k.ev.ID}
	if k.attr != "id" {
		v = k.ev.Attrs[0]
	}
	switch v.Kind {
	case event.Missing:
		key = nil
	case event.String:
		body := v.Text[1 : len(v.Text)-1]
		if bytes.IndexByte(body, '\\') >= 0 || bytes.ContainsRune(body, utf8.RuneError) {
			return k.scanMembers(line)
		}
		key = bytes.Clone(body) // the text may be in the decoder's scratch space
	default:
		key = bytes.Clone(v.Text)
	}
	if k.ev.HasIngestTS {
		ingestTS = optMillis{ms: k.ev.IngestTS, set: true}
	}
	return key, ingestTS, true
}

// scanMembers pulls the key attribute and ingest_ts out of a JSON object
// line without decoding the rest: a single pass over the top level that
// skips nested values. ok is false when the line is not one valid JSON
// object (then key is nil). A key attribute that is a string yields its
// unescaped text; any other JSON value yields its raw text; null yields a
// nil key. ingest_ts counts only when it is an integer.
func (k *keyScanner) scanMembers(line []byte) (key []byte, ingestTS optMillis, ok bool) {
	err := k.members.Members(line, func(name []byte, start, end int) {
		raw := line[start:end]
		switch {
		case nameIs(name, k.attr):
			key = keyBytes(raw)
		case nameIs(name, "ingest_ts"):
			if v, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
				ingestTS = optMillis{ms: v, set: true}
			} else {
				ingestTS = optMillis{}
			}
		}
	})
	if err != nil {
		return nil, optMillis{}, false
	}
	return key, ingestTS, true
}

// nameIs compares a raw (still quoted-content) member name with want,
// unescaping only in the rare case that the name has escapes.
func nameIs(raw []byte, want string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == want
	}
	var s string
	if json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &s) != nil {
		return false
	}
	return s == want
}

// keyBytes turns a raw JSON value into a message key. The key shares the
// line's memory when it can: the line lives as long as the message.
func keyBytes(raw []byte) []byte {
	switch {
	case string(raw) == "null":
		return nil
	case raw[0] != '"':
		return raw
	case bytes.IndexByte(raw, '\\') < 0:
		return raw[1 : len(raw)-1]
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return nil
	}
	return []byte(s)
}
