package stream

import (
	"errors"
	"reflect"
	"testing"
)

// TestOutputEndsCodec: the output ends a checkpoint records decode to
// themselves; cut or padded bytes are refused.
func TestOutputEndsCodec(t *testing.T) {
	for _, ends := range [][]partitionEnd{
		nil,
		{{topic: "decisions", partition: 0, offset: 0}},
		{{topic: "decisions", partition: 3, offset: 1 << 40}, {topic: "dlq", partition: 0, offset: 7}, {topic: "héatmaps", partition: 1, offset: 12}},
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
