package checkpoint

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/riskstream/riskstream/internal/corrupt"
)

// TestRouter: the router's checkpoint reads back as written, and one of
// another topic is refused; an input partition's checkpoint of the layout
// that routed them apart reads as one of that partition, in either of its
// layouts, and one of another input partition or topic is refused; a cut
// one is corruption.
func TestRouter(t *testing.T) {
	ends := []Offset{{Topic: "decisions", Partition: 0, Offset: 77}}
	want := Router{Inputs: []Offset{{Topic: "requests", Partition: 0, Offset: 5}, {Topic: "requests", Partition: 3, Offset: 1234}},
		Rules: 3, Clocks: []byte{1, 2, 3}, Outputs: ends}
	b := want.AppendBinary(nil)
	if got, err := DecodeRouter("requests", b); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, want)
	}
	if _, err := DecodeRouter("other", b); err == nil || !strings.Contains(err.Error(), "another job's") {
		t.Errorf("of another topic: %v, want it refused", err)
	}
	if _, err := DecodeRouter("requests", b[:len(b)-1]); !corrupt.Is(err) {
		t.Errorf("cut: %v, want corruption", err)
	}

	// An input partition's, routed apart: a manifest with its one input.
	apart := Router{Inputs: []Offset{{Topic: "requests", Partition: 3, Offset: 1234}}, Clocks: []byte{1, 2, 3}, Outputs: ends}
	m := Manifest{Engine: apart.Clocks, Inputs: apart.Inputs, Outputs: ends}
	b = m.AppendBinary(nil)
	if got, err := DecodeApart("requests", 3, b); err != nil || !reflect.DeepEqual(got, apart) {
		t.Fatalf("routed apart: %+v, %v; want %+v", got, err, apart)
	}
	for _, c := range []struct {
		topic string
		p     int32
	}{{"requests", 2}, {"other", 3}} {
		if _, err := DecodeApart(c.topic, c.p, b); err == nil || !strings.Contains(err.Error(), "another job's") {
			t.Errorf("%s partition %d: %v, want it refused", c.topic, c.p, err)
		}
	}
	// The layout before the manifest: version 1, the next offset, the
	// clocks, the ends.
	legacy := []byte{1, 0xa4, 0x13, 3, 1, 2, 3}
	legacy = AppendOffsets(legacy, ends)
	if got, err := DecodeApart("requests", 3, legacy); err != nil || !reflect.DeepEqual(got, apart) {
		t.Fatalf("the layout before: %+v, %v; want %+v", got, err, apart)
	}
	if _, err := DecodeApart("requests", 3, legacy[:3]); !corrupt.Is(err) {
		t.Errorf("the layout before, cut: %v, want corruption", err)
	}
}

// TestInputsBeforeManifest: the input offsets of a single job's and of a
// task's checkpoint of the layout before the manifest read as the offsets
// they were, and cut ones are corruption.
func TestInputsBeforeManifest(t *testing.T) {
	// Partition 1 at offset 300, partition 2 at offset 0: zigzag varints.
	single := []byte{2, 0xd8, 0x04, 4, 0}
	got, err := SingleInputsBeforeManifest("requests")(single)
	want := []Offset{{Topic: "requests", Partition: 1, Offset: 300}, {Topic: "requests", Partition: 2, Offset: 0}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("single job's: %+v, %v; want %+v", got, err, want)
	}
	if _, err := SingleInputsBeforeManifest("requests")(single[:4]); !corrupt.Is(err) {
		t.Errorf("single job's, cut: %v, want corruption", err)
	}
	got, err = TaskInputBeforeManifest("rep", 5)([]byte{0xd8, 0x04})
	if want := []Offset{{Topic: "rep", Partition: 5, Offset: 300}}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("task's: %+v, %v; want %+v", got, err, want)
	}
	if got, err := TaskInputBeforeManifest("rep", 5)(nil); err != nil || got != nil {
		t.Errorf("task's, none: %+v, %v; want none", got, err)
	}
	if _, err := TaskInputBeforeManifest("rep", 5)([]byte{0xd8}); !corrupt.Is(err) {
		t.Errorf("task's, cut: %v, want corruption", err)
	}
}

// FuzzDecodeRouter: the router's checkpoint, which the instance that takes
// the routing over reads from the routers topic, and an input partition's
// of the layout that routed them apart, decode or fail on any bytes, and
// what decodes encodes to bytes that decode to the same.
func FuzzDecodeRouter(f *testing.F) {
	r := Router{Inputs: []Offset{{Topic: "requests", Partition: 2, Offset: 1500}},
		Clocks: []byte{2, 1, 'x'}, Outputs: []Offset{{Topic: "decisions", Partition: 0, Offset: 7}}}
	f.Add(r.AppendBinary(nil))
	f.Add([]byte{1, 2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, decode := range []func([]byte) (Router, error){
			func(b []byte) (Router, error) { return DecodeRouter("requests", b) },
			func(b []byte) (Router, error) { return DecodeApart("requests", 2, b) },
		} {
			c, err := decode(b)
			if err != nil {
				continue
			}
			again, err := DecodeRouter("requests", c.AppendBinary(nil))
			if err != nil || !slices.Equal(again.Inputs, c.Inputs) || !bytes.Equal(again.Clocks, c.Clocks) || !slices.Equal(again.Outputs, c.Outputs) {
				t.Fatalf("%x decodes to %+v, which encodes to bytes that decode to %+v (%v)", b, c, again, err)
			}
		}
	})
}
