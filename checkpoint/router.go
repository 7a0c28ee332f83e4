package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/riskstream/riskstream/internal/corrupt"
)

// Router is a distributed job's router checkpoint, as its routers topic
// holds it (docs/format/repartition.md "Routers topic"): a manifest whose
// engine part is the version of the rules the router routes by (a uvarint)
// followed by the router's clocks, and whose inputs are where each input
// partition's next record is.
type Router struct {
	Inputs []Offset
	// Rules is the version of the job's rules the router routes by; 0 in
	// the checkpoint of an input partition routed apart (DecodeApart),
	// which has none.
	Rules   int64
	Clocks  []byte
	Outputs []Offset
}

// AppendBinary appends the encoded checkpoint.
func (r *Router) AppendBinary(dst []byte) []byte {
	engine := append(binary.AppendUvarint(nil, uint64(r.Rules)), r.Clocks...)
	m := Manifest{Engine: engine, Inputs: r.Inputs, Outputs: r.Outputs}
	return m.AppendBinary(dst)
}

// DecodeRouter reads a router checkpoint AppendBinary wrote, refusing one
// of another input topic than topic: its routers topic is another job's.
func DecodeRouter(topic string, b []byte) (Router, error) {
	m, err := Decode(b)
	if err != nil {
		return Router{}, err
	}
	for _, in := range m.Inputs {
		if in.Topic != topic {
			return Router{}, fmt.Errorf("a router checkpoint of topic %s, not %s: the routers topic is another job's", in.Topic, topic)
		}
	}
	version, n := binary.Uvarint(m.Engine)
	if n <= 0 || version > math.MaxInt64 {
		return Router{}, corrupt.Errorf("checkpoint: corrupt router checkpoint: its rules version")
	}
	return Router{Inputs: m.Inputs, Rules: int64(version), Clocks: m.Engine[n:], Outputs: m.Outputs}, nil
}

// DecodeApart reads the router checkpoint of input partition p of topic
// of the layout that routed each input partition apart: a manifest with
// that one input and the clocks as its engine part, or, before the
// manifest, a value whose first byte is 1. One of another partition or
// topic is refused.
func DecodeApart(topic string, p int32, b []byte) (Router, error) {
	if len(b) > 0 && b[0] == 1 {
		return decodeApartBeforeManifest(topic, p, b)
	}
	m, err := Decode(b)
	if err != nil {
		return Router{}, err
	}
	if len(m.Inputs) != 1 || m.Inputs[0].Topic != topic || m.Inputs[0].Partition != p {
		return Router{}, fmt.Errorf("a router checkpoint of %v, not of %s partition %d: the routers topic is another job's", m.Inputs, topic, p)
	}
	return Router{Inputs: m.Inputs, Clocks: m.Engine, Outputs: m.Outputs}, nil
}

// decodeApartBeforeManifest reads an input partition's router checkpoint
// of the layout before the manifest: 1, the next offset (a varint), the
// clocks (uvarint length and bytes), the output ends (AppendOffsets).
func decodeApartBeforeManifest(topic string, p int32, b []byte) (Router, error) {
	bad := corrupt.Errorf("checkpoint: corrupt router checkpoint")
	b = b[1:]
	next, n := binary.Varint(b)
	if n <= 0 {
		return Router{}, bad
	}
	r := Router{Inputs: []Offset{{Topic: topic, Partition: p, Offset: next}}}
	b = b[n:]
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return Router{}, bad
	}
	r.Clocks, b = b[n:n+int(l)], b[n+int(l):]
	outs, rest, err := DecodeOffsets(b)
	if err != nil {
		return Router{}, err
	}
	if len(rest) > 0 {
		return Router{}, bad
	}
	r.Outputs = outs
	return r, nil
}

// SingleInputsBeforeManifest decodes, for Read, the input offsets of a
// single job's checkpoint of topic written before the manifest: varint
// pairs of partition and offset.
func SingleInputsBeforeManifest(topic string) func([]byte) ([]Offset, error) {
	return func(b []byte) ([]Offset, error) {
		var offs []Offset
		for len(b) > 0 {
			p, n := binary.Varint(b)
			if n <= 0 {
				return nil, corrupt.Errorf("checkpoint: corrupt offsets in checkpoint")
			}
			o, k := binary.Varint(b[n:])
			if k <= 0 {
				return nil, corrupt.Errorf("checkpoint: corrupt offsets in checkpoint")
			}
			offs, b = append(offs, Offset{Topic: topic, Partition: int32(p), Offset: o}), b[n+k:]
		}
		return offs, nil
	}
}

// TaskInputBeforeManifest decodes, for Read, the input offset of a
// distributed task's checkpoint of partition k of repartition topic topic
// written before the manifest: one varint, the partition's next offset,
// or none.
func TaskInputBeforeManifest(topic string, k int) func([]byte) ([]Offset, error) {
	return func(b []byte) ([]Offset, error) {
		if len(b) == 0 {
			return nil, nil
		}
		next, n := binary.Varint(b)
		if n <= 0 {
			return nil, corrupt.Errorf("checkpoint: corrupt repartition offset in checkpoint")
		}
		return []Offset{{Topic: topic, Partition: int32(k), Offset: next}}, nil
	}
}
