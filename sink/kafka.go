package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/windows"
	"github.com/segmentio/kafka-go"
)

// Topics names the four output topics.
type Topics struct {
	Decisions, Heatmaps, Late, DLQ string
}

// DefaultTopics are the SPEC's default output topic names.
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
	// DecisionRefs holds, for the pending decisions, their event's record
	// timestamp (ms), for the event-to-decision latency.
	DecisionRefs []int64
	// Ref is the record timestamp of the event being processed.
	Ref int64
}

// NewKafka returns a sink writing to brokers. It waits for all replicas.
// conns are the sink's connections, with the cluster's TLS and SASL (see
// kafkaconn.Security.Transport), for it alone; nil is plaintext. The sink
// sets their MetadataTTL when it is zero, and Close closes them.
func NewKafka(brokers []string, topics Topics, conns *kafka.Transport) *Kafka {
	// Connections of its own, not kafka-go's process-wide default: an
	// output write never queues behind another client's requests on a
	// shared connection (a producer in the same process, in benchmarks).
	if conns == nil {
		conns = &kafka.Transport{}
	}
	// A transport that never reached a broker keeps the error until it
	// next refreshes its metadata: a second, not kafka-go's 6, bounds how
	// long writes fail after an outage ends.
	if conns.MetadataTTL == 0 {
		conns.MetadataTTL = time.Second
	}
	return &Kafka{
		enc:    NewEncoder(),
		topics: topics,
		conns:  conns,
		w: &kafka.Writer{
			Addr:      kafka.TCP(brokers...),
			Transport: conns,
			Balancer:  &kafka.Hash{},
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
			BatchSize:              200,
			RequiredAcks:           kafka.RequireAll,
			AllowAutoTopicCreation: true,
		},
	}
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
func (k *Kafka) add(topic string, keyStart, valueStart int, hasKey bool) {
	b := k.chunk
	var key []byte
	if hasKey {
		key = b[keyStart:valueStart:valueStart]
	}
	end := len(b) - 1 // the encoders end records with a newline, for files
	k.pending = append(k.pending, kafka.Message{Topic: topic, Key: key, Value: b[valueStart:end:end]})
}

// Decision implements windows.Output; the message key is the event id.
func (k *Kafka) Decision(d *windows.Decision) {
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
	k.add(k.topics.Decisions, keyStart, valueStart, true)
	k.DecisionRefs = append(k.DecisionRefs, k.Ref)
}

// Heatmap implements windows.Output; the key is the heatmap name and key.
func (k *Kafka) Heatmap(h *windows.HeatmapWindow) {
	b := k.room()
	keyStart := len(b)
	b = append(append(b, h.Heatmap.Name...), '/')
	b = k.enc.appendKey(b, h.Heatmap.Key, h.Key)
	valueStart := len(b)
	k.chunk = k.enc.AppendHeatmap(b, h)
	k.add(k.topics.Heatmaps, keyStart, valueStart, true)
}

// Late implements engine.Output.
func (k *Kafka) Late(raw []byte, wm int64, p *event.Provenance) {
	b := k.room()
	start := len(b)
	k.chunk = AppendLate(b, raw, wm, p)
	k.add(k.topics.Late, start, start, false)
}

// DLQ implements engine.Output.
func (k *Kafka) DLQ(raw []byte, reason string, p *event.Provenance) {
	b := k.room()
	start := len(b)
	k.chunk = AppendDLQ(b, raw, reason, p)
	k.add(k.topics.DLQ, start, start, false)
}

// Batch is a set of output messages detached from the sink, for Write.
type Batch struct {
	Messages []kafka.Message
	// DecisionRefs are the record timestamps (ms) of the events of the
	// batch's decisions.
	DecisionRefs []int64
}

// Pending is the number of messages not yet detached.
func (k *Kafka) Pending() int { return len(k.pending) }

// Detach hands over the pending messages; the sink starts a new batch.
func (k *Kafka) Detach() Batch {
	b := Batch{Messages: k.pending, DecisionRefs: k.DecisionRefs}
	k.pending, k.DecisionRefs = nil, nil
	return b
}

// Write writes a detached batch and waits for the acknowledgements. It may
// run on another goroutine than the one adding outputs; batches written
// one after the other keep their order. When it fails, the messages the
// broker did acknowledge are dropped from b, so that writing b again sends
// only the others.
func (k *Kafka) Write(ctx context.Context, b *Batch) error {
	if len(b.Messages) == 0 {
		return nil
	}
	err := k.w.WriteMessages(ctx, b.Messages...)
	if err == nil {
		b.Messages = b.Messages[:0]
		return nil
	}
	n := len(b.Messages)
	var perMessage kafka.WriteErrors
	if errors.As(err, &perMessage) && len(perMessage) == n {
		failed := b.Messages[:0]
		for i, m := range b.Messages {
			if perMessage[i] != nil {
				failed = append(failed, m)
			}
		}
		b.Messages = failed
	}
	return fmt.Errorf("sink: write %d messages (%d not acknowledged): %w", n, len(b.Messages), err)
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
