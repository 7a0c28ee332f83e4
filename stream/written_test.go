package stream

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/riskstream/riskstream/sink"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestOutputEndsCodec: the output ends a checkpoint records decode to
// themselves; cut or padded bytes are refused.
func TestOutputEndsCodec(t *testing.T) {
	for _, ends := range [][]partitionEnd{
		nil,
		{{sink.Partition{Topic: "decisions", Partition: 0}, 0}},
		{{sink.Partition{Topic: "decisions", Partition: 3}, 1 << 40}, {sink.Partition{Topic: "dlq", Partition: 0}, 7}, {sink.Partition{Topic: "héatmaps", Partition: 1}, 12}},
	} {
		b := encodeOutputEnds(ends)
		got, err := decodeOutputEnds(b)
		if err != nil || len(got) != len(ends) || len(ends) > 0 && !reflect.DeepEqual(got, ends) {
			t.Errorf("%v: decoded %v, %v", ends, got, err)
		}
		for i := range len(b) {
			if _, err := decodeOutputEnds(b[:i]); !errors.Is(err, errCorruptOutputs) {
				t.Errorf("%v cut to %d bytes: %v", ends, i, err)
			}
		}
		if _, err := decodeOutputEnds(append(b, 0)); !errors.Is(err, errCorruptOutputs) {
			t.Errorf("%v with a byte more: %v", ends, err)
		}
	}
}

// TestOutputEnds: the end of every partition of the output topics; a topic
// not created yet (no output of its kind so far) has none.
func TestOutputEnds(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "decisions"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Acknowledged writes: by default kafka-go's Writer does not wait for
	// the broker, and the ends could be read before the last write lands.
	w := &kafka.Writer{Addr: kafka.TCP(c.ListenAddrs()...), Topic: "decisions", Balancer: &kafka.RoundRobin{},
		RequiredAcks: kafka.RequireAll}
	if err := w.WriteMessages(context.Background(), kafka.Message{Value: []byte("a")}, kafka.Message{Value: []byte("b")},
		kafka.Message{Value: []byte("c")}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	client := &kafka.Client{Addr: kafka.TCP(c.ListenAddrs()...)}
	ends, err := outputEnds(context.Background(), client, []string{"decisions", "late"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ends) != 2 || ends[0].Topic != "decisions" || ends[1].Partition.Partition != 1 || ends[0].offset+ends[1].offset != 3 {
		t.Errorf("ends %+v, want 3 records over decisions' 2 partitions and nothing of late", ends)
	}
}
