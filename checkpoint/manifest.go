// Package checkpoint encodes what a checkpoint records beside the window
// state: the engine's own checkpoint, where each input partition's next
// record is, and where each output partition ended once the outputs the
// checkpoint covers were acknowledged. They are one versioned record, the
// manifest, in the state store's metadata, written with the checkpoint's
// atomic batch and read back at a restore; the single job and each task of
// the distributed one write the same record, and each router of a
// distributed job writes one to the routers topic.
//
// The package is a codec and a reader over the store's metadata: it does no
// I/O of its own.
package checkpoint

import (
	"encoding/binary"
	"fmt"

	"github.com/riskstream/riskstream/internal/corrupt"
	"github.com/riskstream/riskstream/internal/varint"
)

// Offset is where one partition of a topic is: for an input, the offset of
// its next record; for an output, where it ended. Partition -1 marks an
// output topic whose partitions not listed held none of the job's outputs
// at the checkpoint (a restart reads them from their start).
type Offset struct {
	Topic     string
	Partition int32
	Offset    int64
}

// Manifest is what one checkpoint records beside the window state.
type Manifest struct {
	// Engine is the engine's (or a task's) checkpoint, opaque here.
	Engine []byte
	// Inputs are the input partitions' next offsets.
	Inputs []Offset
	// Outputs are where the output partitions ended; none when unknown
	// (the brokers did not answer): a restart then writes the outputs
	// past the checkpoint again.
	Outputs []Offset
}

// MetaKey is the manifest's key in the state store's metadata.
const MetaKey = "manifest"

// version is the first byte of an encoded manifest. Version 1 has the
// same layout and reads the same; 2 tells a manifest apart from a router
// checkpoint of the layout before (docs/format/repartition.md "Routers
// topic"), which also began with a 1.
const version = 2

// AppendBinary appends the encoded manifest (docs/format/state.md).
func (m *Manifest) AppendBinary(dst []byte) []byte {
	dst = append(dst, version)
	dst = binary.AppendUvarint(dst, uint64(len(m.Engine)))
	dst = append(dst, m.Engine...)
	dst = AppendOffsets(dst, m.Inputs)
	return AppendOffsets(dst, m.Outputs)
}

// Decode reads a manifest AppendBinary wrote. It refuses, as corruption,
// bytes that are not one, and names a version it does not know.
func Decode(b []byte) (Manifest, error) {
	var m Manifest
	if len(b) == 0 {
		return m, corrupt.Errorf("checkpoint: corrupt manifest: empty")
	}
	if b[0] != version && b[0] != 1 {
		return m, corrupt.Errorf("checkpoint: a manifest of version %d, which this riskstream does not know (it writes version %d): the state was written by another riskstream", b[0], version)
	}
	d := varint.Reader{B: b[1:]}
	if m.Engine = d.Bytes(); d.Failed {
		return m, corrupt.Errorf("checkpoint: corrupt manifest: the engine's checkpoint is cut short")
	}
	b = d.B
	var err error
	if m.Inputs, b, err = DecodeOffsets(b); err != nil {
		return Manifest{}, fmt.Errorf("checkpoint: manifest inputs: %w", err)
	}
	if m.Outputs, b, err = DecodeOffsets(b); err != nil {
		return Manifest{}, fmt.Errorf("checkpoint: manifest outputs: %w", err)
	}
	if len(b) > 0 {
		return Manifest{}, corrupt.Errorf("checkpoint: corrupt manifest: %d bytes past its end", len(b))
	}
	return m, nil
}

// AppendOffsets appends a list of offsets: a uvarint count, then for each
// the topic (uvarint length and bytes), the partition and the offset
// (varints).
func AppendOffsets(dst []byte, offs []Offset) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(offs)))
	for _, o := range offs {
		dst = binary.AppendUvarint(dst, uint64(len(o.Topic)))
		dst = append(dst, o.Topic...)
		dst = binary.AppendVarint(dst, int64(o.Partition))
		dst = binary.AppendVarint(dst, o.Offset)
	}
	return dst
}

// DecodeOffsets reads a list AppendOffsets wrote at the start of b, and
// returns the rest of b.
func DecodeOffsets(b []byte) ([]Offset, []byte, error) {
	d := varint.Reader{B: b}
	offs := make([]Offset, d.Len())
	for i := range offs {
		offs[i] = Offset{Topic: string(d.Bytes()), Partition: d.Int32(-1), Offset: d.Varint()}
	}
	if d.Failed {
		return nil, nil, corrupt.Errorf("checkpoint: corrupt list of offsets")
	}
	return offs, d.B, nil
}

// Store is the metadata of a state store (state.DB), written with its
// pending writes.
type Store interface {
	Meta(name string) (value []byte, found bool, err error)
	SetMeta(name string, value []byte) error
	DeleteMeta(name string) error
}

// Keys of the layout before the manifest: the engine's checkpoint, the
// input offsets and the output ends each had a key of their own.
const (
	legacyEngine  = "checkpoint"
	legacyOffsets = "offsets"
	legacyOutputs = "outputs"
)

// Write stores m with s's pending writes: the commit of the checkpoint's
// batch makes it durable with the state it describes. The keys of the
// layout before the manifest, if s has them, go with the same batch.
func Write(s Store, m *Manifest) error {
	if err := s.SetMeta(MetaKey, m.AppendBinary(nil)); err != nil {
		return err
	}
	_, legacy, err := s.Meta(legacyEngine)
	if err != nil || !legacy {
		return err
	}
	for _, k := range []string{legacyEngine, legacyOffsets, legacyOutputs} {
		if err := s.DeleteMeta(k); err != nil {
			return err
		}
	}
	return nil
}

// Read returns the manifest s holds, or found false when it holds no
// checkpoint. A store written before the manifest existed is read from its
// keys of then: the engine's checkpoint, the output ends (a list as
// AppendOffsets writes), and the input offsets, whose encoding was the
// job's own, which legacyInputs decodes.
func Read(s Store, legacyInputs func([]byte) ([]Offset, error)) (m Manifest, found bool, err error) {
	raw, ok, err := s.Meta(MetaKey)
	if err != nil {
		return m, false, err
	}
	if ok {
		m, err = Decode(raw)
		return m, err == nil, err
	}
	if m.Engine, ok, err = s.Meta(legacyEngine); err != nil || !ok {
		return Manifest{}, false, err
	}
	if raw, _, err = s.Meta(legacyOffsets); err != nil {
		return Manifest{}, false, err
	}
	if m.Inputs, err = legacyInputs(raw); err != nil {
		return Manifest{}, false, fmt.Errorf("checkpoint: input offsets: %w", err)
	}
	if raw, ok, err = s.Meta(legacyOutputs); err != nil {
		return Manifest{}, false, err
	} else if ok {
		var rest []byte
		if m.Outputs, rest, err = DecodeOffsets(raw); err != nil {
			return Manifest{}, false, fmt.Errorf("checkpoint: output ends: %w", err)
		} else if len(rest) > 0 {
			return Manifest{}, false, corrupt.Errorf("checkpoint: corrupt output ends: %d bytes past their end", len(rest))
		}
	}
	return m, true, nil
}
