package sink

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows"
	"github.com/segmentio/kafka-go"
)

// Topics names the four output topics, and the shadow rules' own.
type Topics struct {
	Decisions, Heatmaps, Late, DLQ string
	// Shadow, if set, takes the decisions of the rules in mode shadow,
	// which otherwise go to Decisions marked "mode": "shadow".
	Shadow string
}

// Names lists the topics the outputs are written to, each once.
func (t Topics) Names() []string {
	names := []string{t.Decisions, t.Heatmaps, t.Late, t.DLQ}
	if t.Shadow != "" && !slices.Contains(names, t.Shadow) {
		names = append(names, t.Shadow)
	}
	return names
}

// Flag names the run flags that set topic name, for a message about it.
func (t Topics) Flag(name string) string {
	var flags []string
	for _, f := range []struct{ topic, flag string }{
		{t.Decisions, "--decisions-topic"}, {t.Heatmaps, "--heatmaps-topic"}, {t.Late, "--late-topic"},
		{t.DLQ, "--dlq-topic"}, {t.Shadow, "--shadow-decisions-topic"},
	} {
		if f.topic == name {
			flags = append(flags, f.flag)
		}
	}
	return strings.Join(flags, " and ")
}

// DefaultTopics are the default output topic names (docs/outputs.md "Where
// they go").
var DefaultTopics = Topics{Decisions: Decisions, Heatmaps: Heatmaps, Late: Late, DLQ: DLQ}

// Kafka buffers the outputs as Kafka messages. The live job detaches the
// pending messages as a Batch as soon as its writer is free and writes them
// from another goroutine, and always before a checkpoint, so that no output
// a checkpoint covers can be lost.
type Kafka struct {
	enc     *Encoder
	w       *kafka.Writer
	conns   *kafka.Transport
	topics  Topics
	pending []kafka.Message
	// chunk holds the pending messages' keys and values (see room).
	chunk []byte
	// decisionTimes are the pending decisions' times, for the latency
	// metrics.
	decisionTimes []DecisionTimes
	// maxBytes is the largest message, key and value, written.
	maxBytes int
	metrics  kafkaMetrics
	log      *slog.Logger
	// now stamps the messages written without a time (Clock).
	now func() time.Time
	// written, until it is empty, holds messages already in their topics,
	// which add skips (see SkipWritten).
	written *Written
	// acked holds, per output partition, the offset after the last
	// message the brokers acknowledged (see Acknowledged). kafka-go's
	// writer goroutines update it.
	ackedMu sync.Mutex
	acked   map[Partition]int64
}

// Partition names a partition of an output topic.
type Partition struct {
	Topic     string
	Partition int
}

// Acknowledged returns, for each output partition written to, the offset
// after the last message of the sink's the brokers acknowledged: once no
// write is in flight, where the sink's messages end in it (the live job's
// checkpoint records it).
func (k *Kafka) Acknowledged() map[Partition]int64 {
	k.ackedMu.Lock()
	defer k.ackedMu.Unlock()
	return maps.Clone(k.acked)
}

// acknowledge notes the offsets of messages the brokers acknowledged
// (kafka-go's Writer.Completion): a batch of one partition, in offset
// order, so its last message says where the partition ends.
func (k *Kafka) acknowledge(msgs []kafka.Message, err error) {
	if err != nil || len(msgs) == 0 {
		return
	}
	last := &msgs[len(msgs)-1]
	p := Partition{last.Topic, last.Partition}
	k.ackedMu.Lock()
	defer k.ackedMu.Unlock()
	k.acked[p] = max(k.acked[p], last.Offset+1)
}

// KafkaOption configures NewKafka.
type KafkaOption func(*kafkaConfig)

type kafkaConfig struct {
	direct          []string
	conns           *kafka.Transport
	maxMessageBytes int
	batchSize       int
	reg             prometheus.Registerer
	log             *slog.Logger
	now             func() time.Time
}

// Transport sets the sink's connections, with the cluster's TLS and SASL
// (see kafkaconn.Security.Transport), for it alone. The sink sets their
// MetadataTTL when it is zero, and Close closes them. The default value is
// plaintext connections of the sink's own.
func Transport(conns *kafka.Transport) KafkaOption {
	return func(c *kafkaConfig) { c.conns = conns }
}

// MaxMessageBytes sets the largest output message, key and value, that the
// sink writes. A dlq record's raw bytes, or a late record's event, that
// would make the record larger are cut (see appendRaw); any other message
// larger than n goes to the dlq topic instead, as one the broker refuses
// as too large does. n is at least MinMaxMessageBytes, and should not be
// above the output topics' max.message.bytes less a batch's overhead. The
// default value is DefaultMaxMessageBytes.
func MaxMessageBytes(n int) KafkaOption {
	return func(c *kafkaConfig) { c.maxMessageBytes = max(n, MinMaxMessageBytes) }
}

// DirectTopics names topics of the job's own the sink writes messages to
// with Send, each to the partition Send names (a distributed job's
// repartition topic). The default value is none.
func DirectTopics(topics ...string) KafkaOption {
	return func(c *kafkaConfig) { c.direct = append(c.direct, topics...) }
}

// BatchSize sets how many messages of one partition go in one request.
// kafka-go allocates room for that many in every batch however few it
// holds, so the outputs' writes, a few messages at a time, use a small
// one. The default value is 200.
func BatchSize(n int) KafkaOption {
	return func(c *kafkaConfig) { c.batchSize = max(n, 1) }
}

// Metrics registers the sink's counters on reg: output records cut to
// size, messages refused for their topic and replaced by a dlq record, and
// messages lost, per topic. By default they are registered nowhere.
func Metrics(reg prometheus.Registerer) KafkaOption {
	return func(c *kafkaConfig) { c.reg = reg }
}

// Clock sets the clock that stamps the messages written without a
// timestamp of their own (the outputs; Send's carry theirs) with the time
// of their write, as the Java client stamps a record without one when it
// sends it: a record's timestamp is what the brokers' time-based retention
// and a consumer's search by time go by. The default value is time.Now.
func Clock(now func() time.Time) KafkaOption {
	return func(c *kafkaConfig) { c.now = now }
}

// Logger sets where the sink reports the messages it drops. The default
// value is slog.Default().
func Logger(l *slog.Logger) KafkaOption {
	return func(c *kafkaConfig) { c.log = l }
}

// kafkaMetrics count what happens to output messages too large for their
// topic. Labels are the four output topics.
type kafkaMetrics struct {
	truncated, refused, dropped, skipped, changed *prometheus.CounterVec
}

func newKafkaMetrics(reg prometheus.Registerer, topics Topics) kafkaMetrics {
	m := kafkaMetrics{
		truncated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "riskstream_output_truncated_total",
			Help: "Late and dlq records whose input record was cut to the maximum message size."}, []string{"topic"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "riskstream_output_refused_total",
			Help: "Output messages too large for their topic, written to the dlq topic instead."}, []string{"topic"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "riskstream_output_dropped_total",
			Help: "Output messages lost: too large for their topic, and their dlq record refused too."}, []string{"topic"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "riskstream_output_duplicates_skipped_total",
			Help: "Output messages not written again after a restart: a run that stopped without a final checkpoint had written them already."}, []string{"topic"}),
		changed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "riskstream_output_duplicates_changed_total",
			Help: "Of the output messages not written again after a restart, those made again with another value (one that depended on when records arrived); the one written before stands."}, []string{"topic"}),
	}
	for _, t := range topics.Names() {
		m.truncated.WithLabelValues(t)
		m.refused.WithLabelValues(t)
		m.dropped.WithLabelValues(t)
		m.skipped.WithLabelValues(t)
		m.changed.WithLabelValues(t)
	}
	if reg != nil {
		reg.MustRegister(m.truncated, m.refused, m.dropped, m.skipped, m.changed)
	}
	return m
}

// NewKafka returns a sink writing to brokers. It waits for all replicas.
func NewKafka(brokers []string, topics Topics, opts ...KafkaOption) *Kafka {
	cfg := kafkaConfig{maxMessageBytes: DefaultMaxMessageBytes, batchSize: 200, log: slog.Default(), now: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	// Connections of its own, not kafka-go's process-wide default: an
	// output write never queues behind another client's requests on a
	// shared connection (a producer in the same process, in benchmarks).
	conns := cfg.conns
	if conns == nil {
		conns = &kafka.Transport{}
	}
	// A transport that never reached a broker keeps the error until it
	// next refreshes its metadata: a second, not kafka-go's 6, bounds how
	// long writes fail after an outage ends.
	if conns.MetadataTTL == 0 {
		conns.MetadataTTL = time.Second
	}
	direct := make(map[string]bool, len(cfg.direct))
	for _, t := range cfg.direct {
		direct[t] = true
	}
	k := &Kafka{
		acked:    make(map[Partition]int64),
		enc:      NewEncoder(),
		topics:   topics,
		conns:    conns,
		maxBytes: cfg.maxMessageBytes,
		now:      cfg.now,
		metrics:  newKafkaMetrics(cfg.reg, topics),
		log:      cfg.log,
		w: &kafka.Writer{
			Addr:      kafka.TCP(brokers...),
			Transport: conns,
			// Keys go to the partitions the Java client's default
			// partitioner (murmur2) gives them, as produce's do: a consumer
			// or producer of any client finds an event id's decisions
			// where it would put them.
			Balancer: directBalancer{direct: direct},
			// A batch is sent when its BatchTimeout expires or it is full,
			// even by a synchronous WriteMessages: kafka-go's default of a
			// second (or any milliseconds) would be added to every
			// decision. Write hands over everything pending at once, so a
			// timeout that expires at once still sends it in one request
			// per partition.
			BatchTimeout: time.Microsecond,
			// kafka-go allocates room for BatchSize messages in every
			// batch, however few it holds: a large value made most of the
			// job's garbage. More messages than this go out in several
			// requests.
			BatchSize: cfg.batchSize,
			// Room for a message of maxMessageBytes and kafka-go's
			// reckoning of its headers, so that kafka-go itself never
			// refuses one (Write refuses those larger).
			BatchBytes:             int64(cfg.maxMessageBytes) + messageOverhead,
			RequiredAcks:           kafka.RequireAll,
			AllowAutoTopicCreation: true,
		},
	}
	k.w.Completion = k.acknowledge
	return k
}

// Room for the keys and values of pending messages is taken from chunks
// of memory, not allocated per message: messages keep pointing into a
// chunk while it is written to beyond them, never over them.
const (
	chunkSize = 64 << 10
	// chunkRoom is the room a record should find left in the chunk; a
	// record that needs more makes the encoder move the chunk's bytes to a
	// larger array, which is correct, merely slower.
	chunkRoom = 2 << 10
)

// room returns the chunk to append a message's key or value to.
func (k *Kafka) room() []byte {
	if cap(k.chunk)-len(k.chunk) < chunkRoom {
		k.chunk = make([]byte, 0, chunkSize)
	}
	return k.chunk
}

// add queues a message whose key and value were appended to the chunk
// from keyStart and valueStart on.
//
// It returns false, and takes the message's bytes back, when the message
// is one of those SkipWritten named.
func (k *Kafka) add(topic string, keyStart, valueStart int, hasKey bool) bool {
	b := k.chunk
	var key []byte
	if hasKey {
		key = b[keyStart:valueStart:valueStart]
	}
	end := len(b) - 1 // the encoders end records with a newline, for files
	value := b[valueStart:end:end]
	if k.written != nil {
		if found, changed := k.written.take(topic, key, value); found {
			if changed {
				k.metrics.changed.WithLabelValues(topic).Inc()
				if k.written.Changed() == 1 {
					k.log.Warn("an output made again after a restart has another value than the one written before it, which stands (riskstream_output_duplicates_changed_total counts these)",
						"topic", topic, "key", string(key))
				}
			}
			if k.written.Len() == 0 {
				k.written = nil
			}
			k.chunk = b[:keyStart]
			k.metrics.skipped.WithLabelValues(topic).Inc()
			return false
		}
	}
	k.pending = append(k.pending, kafka.Message{Topic: topic, Key: key, Value: value})
	return true
}

// SkipWritten makes the sink leave out the messages of w, once each, when
// they are made again: those a run that stopped without a final checkpoint
// had written past it. w is the sink's from then on.
func (k *Kafka) SkipWritten(w *Written) {
	if w != nil && w.Len() > 0 {
		k.written = w
	}
}

// Unmade is how many of the messages SkipWritten named have not been made
// again yet.
func (k *Kafka) Unmade() int {
	if k.written == nil {
		return 0
	}
	return k.written.Len()
}

// UnmadeIn reports whether messages of topic that SkipWritten named have
// not been made again yet: a checkpoint must not record topic's end past
// them.
func (k *Kafka) UnmadeIn(topic string) bool {
	return k.written != nil && k.written.LeftIn(topic)
}

// ForgetUnmade stops skipping the messages SkipWritten named that have not
// been made again, and returns how many there were.
func (k *Kafka) ForgetUnmade() int {
	n := k.Unmade()
	k.written = nil
	return n
}

// Decision implements windows.Output; the message key is the event id.
// The decision's times are not known: see DecisionAt.
func (k *Kafka) Decision(d *windows.Decision) { k.DecisionAt(d, DecisionTimes{}) }

// DecisionAt is Decision, with the times of the decision's event in the
// job, which the latency metrics observe once the decision is
// acknowledged.
func (k *Kafka) DecisionAt(d *windows.Decision, t DecisionTimes) {
	b := k.room()
	keyStart := len(b)
	// EventID is canonical JSON text: quotes around, escapes only where
	// needed, so most ids are their own key once unquoted.
	b = append(b, d.EventID[1:len(d.EventID)-1]...)
	if bytes.IndexByte(b[keyStart:], '\\') >= 0 {
		if s, err := strconv.Unquote(string(d.EventID)); err == nil {
			b = append(b[:keyStart], s...)
		}
	}
	valueStart := len(b)
	k.chunk = k.enc.AppendDecision(b, d)
	topic := k.topics.Decisions
	if d.Rule.Mode == rules.Shadow && k.topics.Shadow != "" {
		topic = k.topics.Shadow
	}
	if k.add(topic, keyStart, valueStart, true) {
		k.decisionTimes = append(k.decisionTimes, t)
	}
}

// Heatmap implements windows.Output; the key is the heatmap name and key.
func (k *Kafka) Heatmap(h *windows.HeatmapWindow) {
	b := k.room()
	keyStart := len(b)
	b = append(append(b, h.Heatmap.Name...), '/')
	b = k.enc.appendHeatmapKey(b, h)
	valueStart := len(b)
	k.chunk = k.enc.AppendHeatmap(b, h)
	k.add(k.topics.Heatmaps, keyStart, valueStart, true)
}

// messageOverhead is how much more than its key and value kafka-go counts
// for a message without headers against Writer.BatchBytes (23 bytes).
const messageOverhead = 64

// Late implements engine.Output. An event that would make the record
// larger than the maximum message size is cut (see appendLate).
func (k *Kafka) Late(raw []byte, wm int64, p *event.Provenance) {
	b := k.room()
	start := len(b)
	var cut bool
	k.chunk, cut = appendLate(b, raw, wm, p, k.maxBytes)
	if k.add(k.topics.Late, start, start, false) && cut {
		k.metrics.truncated.WithLabelValues(k.topics.Late).Inc()
	}
}

// DLQ implements engine.Output. Raw bytes that would make the record
// larger than the maximum message size are cut (see appendRaw).
func (k *Kafka) DLQ(raw []byte, reason string, p *event.Provenance) {
	b := k.room()
	start := len(b)
	var cut bool
	k.chunk, cut = appendDLQ(b, raw, reason, p, k.maxBytes)
	if k.add(k.topics.DLQ, start, start, false) && cut {
		k.metrics.truncated.WithLabelValues(k.topics.DLQ).Inc()
	}
}

// directBalancer puts the messages of the direct topics in the partition
// Send named, and the others where the Java client's default partitioner
// (murmur2) puts their keys.
type directBalancer struct {
	kafka.Murmur2Balancer
	direct map[string]bool
}

func (b directBalancer) Balance(m kafka.Message, partitions ...int) int {
	if b.direct[m.Topic] {
		return m.Partition
	}
	return b.Murmur2Balancer.Balance(m, partitions...)
}

// Send queues a keyless message of value, with timestamp t, to partition
// of topic, one of DirectTopics: it is written in order with the sink's
// other messages.
func (k *Kafka) Send(topic string, partition int, value []byte, t time.Time) {
	b := k.room()
	start := len(b)
	b = append(b, value...)
	k.chunk = b
	k.pending = append(k.pending, kafka.Message{Topic: topic, Partition: partition, Value: b[start:len(b):len(b)], Time: t})
}

// Batch is a set of output messages detached from the sink, for Write.
type Batch struct {
	Messages []kafka.Message
	// Decisions are the times of the batch's decisions, in order.
	Decisions []DecisionTimes
}

// DecisionTimes are when a decision's event went through the job's stages,
// for the latency metrics: Ref, the record timestamp, in ms; the others
// in Unix ns, 0 when not known.
type DecisionTimes struct {
	Ref int64
	// Arrived is when the fetch that carried the event arrived.
	Arrived int64
	// Popped is when the job's loop took the event from the merge of the
	// input partitions, and Made when the engine was done with the
	// events taken with it and the decision made.
	Popped, Made int64
}

// Pending is the number of messages not yet detached.
func (k *Kafka) Pending() int { return len(k.pending) }

// Detach hands over the pending messages; the sink starts a new batch.
func (k *Kafka) Detach() Batch {
	b := Batch{Messages: k.pending, Decisions: k.decisionTimes}
	k.pending, k.decisionTimes = nil, nil
	return b
}

// Write writes a detached batch and waits for the acknowledgements. It may
// run on another goroutine than the one adding outputs; batches written
// one after the other keep their order. When it fails, the messages the
// broker did acknowledge are dropped from b, so that writing b again sends
// only the others.
//
// A message too large for its topic, larger than the maximum message size
// or refused by the broker as too large when written alone, never fails a
// write: the dlq topic gets a record in its place saying which topic
// refused it and why, with a prefix, the length and the hash of its value
// (see appendRefused). If the broker refuses that record too, or the
// message was a dlq record no larger, it is logged and counted as dropped.
// Messages the broker refuses as too large together (a batch over a
// topic's limit) are written again in halves, down to one at a time.
func (k *Kafka) Write(ctx context.Context, b *Batch) error {
	if len(b.Messages) == 0 {
		return nil
	}
	for i := range b.Messages {
		if m := &b.Messages[i]; len(m.Key)+len(m.Value) > k.maxBytes {
			*m = k.refuse(*m, fmt.Sprintf("output message of %d bytes is larger than the maximum message size of %d bytes",
				len(m.Key)+len(m.Value), k.maxBytes))
		}
	}
	now := k.now()
	for i := range b.Messages {
		if m := &b.Messages[i]; m.Time.IsZero() {
			m.Time = now
		}
	}
	rest, err := k.write(ctx, b.Messages)
	b.Messages = append(b.Messages[:0], rest...)
	return err
}

// write writes msgs and returns those not acknowledged, for a reason
// other than their size, with the error.
func (k *Kafka) write(ctx context.Context, msgs []kafka.Message) ([]kafka.Message, error) {
	err := k.w.WriteMessages(ctx, msgs...)
	if err == nil {
		return nil, nil
	}
	var perMessage kafka.WriteErrors
	if !errors.As(err, &perMessage) || len(perMessage) != len(msgs) {
		return msgs, fmt.Errorf("sink: write %d messages to %s: %w", len(msgs), topicNames(msgs), err)
	}
	var rest, large []kafka.Message
	var first error // the first error, or the first permanent one
	firstTopic := ""
	for i, e := range perMessage {
		switch {
		case e == nil:
		case TooLarge(e):
			large = append(large, msgs[i])
		default:
			rest = append(rest, msgs[i])
			if first == nil || (!Permanent(first) && Permanent(e)) {
				first, firstTopic = e, msgs[i].Topic
			}
		}
	}
	switch {
	case len(large) == 1:
		// A batch's messages share its fate: this one was alone.
		if r, err := k.refusedAlone(ctx, large[0], perMessage[slices.IndexFunc(perMessage, TooLarge)]); err != nil {
			rest = append(rest, r)
			if first == nil {
				first, firstTopic = err, r.Topic
			}
		}
	case len(large) > 1:
		half := len(large) / 2
		for _, part := range [][]kafka.Message{large[:half], large[half:]} {
			r, err := k.write(ctx, part)
			rest = append(rest, r...)
			if err != nil && first == nil {
				first, firstTopic = err, r[0].Topic
			}
		}
	}
	if len(rest) == 0 {
		return nil, nil
	}
	return rest, fmt.Errorf("sink: write topic %s: %d of %d messages not acknowledged: %w", firstTopic, len(rest), len(msgs), first)
}

// refusedAlone handles a message the broker refused as too large on its
// own: the dlq topic gets a record in its place, or, when that is refused
// too or cannot be smaller, the message is dropped. A record written that
// fails for another reason is returned with the error, to write again.
func (k *Kafka) refusedAlone(ctx context.Context, m kafka.Message, cause error) (kafka.Message, error) {
	size := len(m.Key) + len(m.Value)
	if m.Topic == k.topics.DLQ && size <= k.refusedLimit() {
		k.drop(m, cause)
		return kafka.Message{}, nil
	}
	r := k.refuse(m, fmt.Sprintf("output message of %d bytes refused by the broker: %v", size, cause))
	err := k.w.WriteMessages(ctx, r)
	switch {
	case err == nil:
		return kafka.Message{}, nil
	case TooLarge(err):
		k.drop(m, fmt.Errorf("%w; its dlq record of %d bytes refused too: %w", cause, len(r.Value), err))
		return kafka.Message{}, nil
	}
	return r, fmt.Errorf("topic %s: %w", r.Topic, err)
}

// refusedLimit is the largest dlq record replacing a refused message.
func (k *Kafka) refusedLimit() int { return min(k.maxBytes, maxRefusedCopyBytes) }

// refuse returns the dlq message replacing m, which is too large for its
// topic, and counts it. Its memory is its own: it is made by Write, on
// another goroutine than the one filling the chunks.
func (k *Kafka) refuse(m kafka.Message, why string) kafka.Message {
	k.metrics.refused.WithLabelValues(m.Topic).Inc()
	v := appendRefused(nil, m.Topic, m.Value, why, k.refusedLimit())
	return kafka.Message{Topic: k.topics.DLQ, Value: v[:len(v)-1], Time: m.Time}
}

// drop reports a message lost.
func (k *Kafka) drop(m kafka.Message, cause error) {
	k.metrics.dropped.WithLabelValues(m.Topic).Inc()
	sum := sha256.Sum256(m.Value)
	k.log.Error("output message dropped: too large for its topic and for the dlq", "topic", m.Topic,
		"key", string(m.Key[:min(len(m.Key), 200)]), "bytes", len(m.Key)+len(m.Value),
		"value_sha256", fmt.Sprintf("%x", sum), "err", cause)
}

// TooLarge reports whether err is the broker's, or kafka-go's, refusal of
// messages for their size (for kafka.WriteErrors: of every message that
// failed).
func TooLarge(err error) bool {
	var perMessage kafka.WriteErrors
	if errors.As(err, &perMessage) {
		for _, e := range perMessage {
			if e != nil && !TooLarge(e) {
				return false
			}
		}
		return len(perMessage) > 0
	}
	return errors.Is(err, kafka.MessageSizeTooLarge) || errors.Is(err, kafka.RecordListTooLarge)
}

// topicNames lists the topics of msgs, for an error.
func topicNames(msgs []kafka.Message) string {
	var names []string
	for _, m := range msgs {
		if !slices.Contains(names, m.Topic) {
			names = append(names, m.Topic)
		}
	}
	return strings.Join(names, ", ")
}

// Permanent reports whether a write error will not go away by writing
// again: the broker refused the messages themselves (too large, a topic
// invalid or not authorized). Network failures, timeouts, brokers or
// partition leaders unavailable for a while, and connections the brokers'
// SASL refused (the credentials were checked at start) are not permanent.
func Permanent(err error) bool {
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return true
	}
	var perMessage kafka.WriteErrors
	if errors.As(err, &perMessage) {
		for _, e := range perMessage {
			if e != nil && Permanent(e) {
				return true
			}
		}
		return false
	}
	var refused kafka.Error
	return errors.As(err, &refused) && !refused.Temporary() && !saslRefused(refused)
}

// saslRefused reports whether e is about a connection's SASL
// authentication rather than the messages written on it.
func saslRefused(e kafka.Error) bool {
	return e == kafka.SASLAuthenticationFailed || e == kafka.IllegalSASLState || e == kafka.UnsupportedSASLMechanism
}

// Close closes the writer; pending messages are dropped (Write them
// first).
func (k *Kafka) Close() error {
	err := k.w.Close()
	k.conns.CloseIdleConnections()
	return err
}
