package sink

import (
	"bytes"
	"context"
	"fmt"
	"strconv"

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

// Kafka buffers the outputs as Kafka messages and writes them with Flush:
// the live job flushes every few milliseconds and always before a
// checkpoint, so that no output a checkpoint covers can be lost.
type Kafka struct {
	enc     *Encoder
	w       *kafka.Writer
	topics  Topics
	pending []kafka.Message
	// DecisionRefs holds, for the pending decisions, their event's record
	// timestamp (ms), for the event-to-decision latency.
	DecisionRefs []int64
	// Ref is the record timestamp of the event being processed.
	Ref int64
}

// NewKafka returns a sink writing to brokers. The writer batches for
// milliseconds, not kafka-go's default second, and waits for all replicas.
func NewKafka(brokers []string, topics Topics) *Kafka {
	return &Kafka{
		enc:    NewEncoder(),
		topics: topics,
		w: &kafka.Writer{
			Addr:                   kafka.TCP(brokers...),
			Balancer:               &kafka.Hash{},
			BatchTimeout:           2e6, // 2 ms
			BatchSize:              10_000,
			RequiredAcks:           kafka.RequireAll,
			AllowAutoTopicCreation: true,
		},
	}
}

func (k *Kafka) add(topic string, key, value []byte) {
	value = value[:len(value)-1] // the encoders end records with a newline, for files
	k.pending = append(k.pending, kafka.Message{Topic: topic, Key: key, Value: value})
}

// Decision implements windows.Output; the message key is the event id.
func (k *Kafka) Decision(d *windows.Decision) {
	// EventID is canonical JSON text: quotes around, escapes only where
	// needed, so most ids are their own key once unquoted.
	id := append([]byte(nil), d.EventID[1:len(d.EventID)-1]...)
	if bytes.IndexByte(id, '\\') >= 0 {
		if s, err := strconv.Unquote(string(d.EventID)); err == nil {
			id = []byte(s)
		}
	}
	k.add(k.topics.Decisions, id, k.enc.AppendDecision(nil, d))
	k.DecisionRefs = append(k.DecisionRefs, k.Ref)
}

// Heatmap implements windows.Output; the key is the heatmap name and key.
func (k *Kafka) Heatmap(h *windows.HeatmapWindow) {
	key := append([]byte(h.Heatmap.Name), '/')
	key = k.enc.appendKey(key, h.Heatmap.Key, h.Key)
	k.add(k.topics.Heatmaps, key, k.enc.AppendHeatmap(nil, h))
}

// Late implements engine.Output.
func (k *Kafka) Late(raw []byte, wm int64, p *event.Provenance) {
	k.add(k.topics.Late, nil, AppendLate(nil, raw, wm, p))
}

// DLQ implements engine.Output.
func (k *Kafka) DLQ(raw []byte, reason string, p *event.Provenance) {
	k.add(k.topics.DLQ, nil, AppendDLQ(nil, raw, reason, p))
}

// Flush writes every pending message and waits for the acknowledgements.
// It returns the record timestamps of the decisions it wrote (valid until
// the next Decision), for the event-to-decision latency.
func (k *Kafka) Flush(ctx context.Context) ([]int64, error) {
	refs := k.DecisionRefs
	if len(k.pending) == 0 {
		return nil, nil
	}
	if err := k.w.WriteMessages(ctx, k.pending...); err != nil {
		return nil, fmt.Errorf("sink: write %d messages: %w", len(k.pending), err)
	}
	clear(k.pending)
	k.pending = k.pending[:0]
	k.DecisionRefs = k.DecisionRefs[:0]
	return refs, nil
}

// Close closes the writer; pending messages are dropped (Flush first).
func (k *Kafka) Close() error { return k.w.Close() }
