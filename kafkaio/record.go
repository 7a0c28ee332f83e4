package kafkaio

import (
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/event"
	"github.com/segmentio/kafka-go"
)

// MessageTime is a record's Kafka timestamp in ms, the merge's order.
func MessageTime(m *kafka.Message) int64 { return m.Time.UnixMilli() }

// Record is the engine's record of a Kafka message of partition p: the
// message's timestamp is its reference time, live and in a replay of a
// topic, and its topic, partition and offset are its provenance.
func Record(m *kafka.Message, p int32) engine.Record {
	return engine.Record{
		Value:     m.Value,
		Partition: p,
		Reference: m.Time.UnixMilli(), HasReference: !m.Time.IsZero(),
		Prov: event.Provenance{Topic: m.Topic, Partition: p, Offset: m.Offset},
	}
}
