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

// TestRouterCheckpoint: the router's checkpoint is a checkpoint manifest
// that reads back as written, and one of another topic is refused; an
// input partition's checkpoint of the layout that routed them apart reads
// as one of that partition, in either of its layouts, and one of another
// input partition or topic is refused; a cut one is corruption.
func TestRouterCheckpoint(t *testing.T) {
	ends := []kafkaio.OutputEnd{{Partition: sink.Partition{Topic: "decisions", Partition: 0}, Offset: 77}}
	want := routerCheckpoint{inputs: []checkpoint.Offset{{Topic: "requests", Partition: 0, Offset: 5}, {Topic: "requests", Partition: 3, Offset: 1234}},
		rules: 3, clocks: []byte{1, 2, 3}, ends: ends}
	b := encodeRouterCheckpoint(want)
	if got, err := decodeRouterCheckpoint("requests", b); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, want)
	}
	if _, err := decodeRouterCheckpoint("other", b); err == nil || !strings.Contains(err.Error(), "another job's") {
		t.Errorf("of another topic: %v, want it refused", err)
	}
	if _, err := decodeRouterCheckpoint("requests", b[:len(b)-1]); !corrupt.Is(err) {
		t.Errorf("cut: %v, want corruption", err)
	}

	// An input partition's, routed apart: a manifest with its one input.
	apart := routerCheckpoint{inputs: []checkpoint.Offset{{Topic: "requests", Partition: 3, Offset: 1234}}, clocks: []byte{1, 2, 3}, ends: ends}
	m := checkpoint.Manifest{Engine: apart.clocks, Inputs: apart.inputs, Outputs: kafkaio.EndOffsets(ends)}
	b = m.AppendBinary(nil)
	if got, err := decodeApartCheckpoint("requests", 3, b); err != nil || !reflect.DeepEqual(got, apart) {
		t.Fatalf("routed apart: %+v, %v; want %+v", got, err, apart)
	}
	for _, c := range []struct {
		topic string
		p     int32
	}{{"requests", 2}, {"other", 3}} {
		if _, err := decodeApartCheckpoint(c.topic, c.p, b); err == nil || !strings.Contains(err.Error(), "another job's") {
			t.Errorf("%s partition %d: %v, want it refused", c.topic, c.p, err)
		}
	}
	// The layout before the manifest: version 1, the next offset, the
	// clocks, the ends.
	legacy := []byte{1, 0xa4, 0x13, 3, 1, 2, 3}
	legacy = checkpoint.AppendOffsets(legacy, kafkaio.EndOffsets(ends))
	if got, err := decodeApartCheckpoint("requests", 3, legacy); err != nil || !reflect.DeepEqual(got, apart) {
		t.Fatalf("the layout before: %+v, %v; want %+v", got, err, apart)
	}
	if _, err := decodeApartCheckpoint("requests", 3, legacy[:3]); !corrupt.Is(err) {
		t.Errorf("the layout before, cut: %v, want corruption", err)
	}
}
