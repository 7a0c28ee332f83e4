package stream

import (
	"reflect"
	"strings"
	"testing"

	"github.com/riskstream/riskstream/checkpoint"
	"github.com/riskstream/riskstream/internal/corrupt"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/sink"
)

// TestRouterCheckpoint: a router checkpoint is a checkpoint manifest that
// reads back as written; one of the layout before it reads the same; one
// of another input partition or topic is refused, and a cut one is
// corruption.
func TestRouterCheckpoint(t *testing.T) {
	want := routerCheckpoint{next: 1234, clocks: []byte{1, 2, 3},
		ends: []kafkaio.OutputEnd{{Partition: sink.Partition{Topic: "decisions", Partition: 0}, Offset: 77}}}
	b := encodeRouterCheckpoint("requests", 3, want)
	if got, err := decodeRouterCheckpoint("requests", 3, b); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, want)
	}
	for _, c := range []struct {
		topic string
		p     int32
	}{{"requests", 2}, {"other", 3}} {
		if _, err := decodeRouterCheckpoint(c.topic, c.p, b); err == nil || !strings.Contains(err.Error(), "another job's") {
			t.Errorf("%s partition %d: %v, want it refused", c.topic, c.p, err)
		}
	}
	if _, err := decodeRouterCheckpoint("requests", 3, b[:len(b)-1]); !corrupt.Is(err) {
		t.Errorf("cut: %v, want corruption", err)
	}
	// The layout before: version 1, the next offset, the clocks, the ends.
	legacy := []byte{1, 0xa4, 0x13, 3, 1, 2, 3}
	legacy = checkpoint.AppendOffsets(legacy, kafkaio.EndOffsets(want.ends))
	if got, err := decodeRouterCheckpoint("requests", 3, legacy); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("the layout before: %+v, %v; want %+v", got, err, want)
	}
	if _, err := decodeRouterCheckpoint("requests", 3, legacy[:3]); !corrupt.Is(err) {
		t.Errorf("the layout before, cut: %v, want corruption", err)
	}
}
