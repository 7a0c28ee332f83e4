package checkpoint

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/riskstream/riskstream/internal/corrupt"
)

// memStore is a Store in a map.
type memStore map[string][]byte

func (s memStore) Meta(name string) ([]byte, bool, error) { v, ok := s[name]; return v, ok, nil }
func (s memStore) SetMeta(name string, v []byte) error    { s[name] = v; return nil }
func (s memStore) DeleteMeta(name string) error           { delete(s, name); return nil }

// deleteCounter counts the deletions asked of a memStore.
type deleteCounter struct {
	memStore
	deletes int
}

func (d *deleteCounter) DeleteMeta(name string) error {
	d.deletes++
	return d.memStore.DeleteMeta(name)
}

var sample = Manifest{
	Engine:  []byte("engine checkpoint"),
	Inputs:  []Offset{{"requests", 0, 1200}, {"requests", 3, 77}},
	Outputs: []Offset{{"decisions", 0, 9}, {"decisions", -1, -2}, {"heatmaps", 2, 0}},
}

// TestRoundTrip: what Write stores, Read gives back; the keys of the
// layout before go.
func TestRoundTrip(t *testing.T) {
	s := memStore{legacyEngine: []byte("old"), legacyOffsets: nil, legacyOutputs: {0}}
	if err := Write(s, &sample); err != nil {
		t.Fatal(err)
	}
	if len(s) != 1 {
		t.Errorf("keys after Write: %v, want only %s", s, MetaKey)
	}
	m, found, err := Read(s, nil)
	if err != nil || !found || !reflect.DeepEqual(m, sample) {
		t.Fatalf("read %+v, %v, %v; want %+v", m, found, err, sample)
	}
	// A store of the manifest's layout is not given deletions to commit
	// at every checkpoint.
	counted := &deleteCounter{memStore: s}
	if err := Write(counted, &sample); err != nil || counted.deletes != 0 {
		t.Errorf("a second Write: %v, %d deletions", err, counted.deletes)
	}
	if _, found, err := Read(memStore{}, nil); found || err != nil {
		t.Errorf("an empty store: found %v, %v", found, err)
	}
}

// TestReadLegacy: a store written before the manifest (its own keys for
// the engine's checkpoint, the offsets in the job's encoding, the output
// ends) reads as the same manifest.
func TestReadLegacy(t *testing.T) {
	pairs := func(b []byte) ([]Offset, error) {
		var offs []Offset
		for len(b) > 0 {
			p, n := binary.Varint(b)
			o, k := binary.Varint(b[n:])
			offs, b = append(offs, Offset{"requests", int32(p), o}), b[n+k:]
		}
		return offs, nil
	}
	var offsets []byte
	for _, o := range sample.Inputs {
		offsets = binary.AppendVarint(binary.AppendVarint(offsets, int64(o.Partition)), o.Offset)
	}
	s := memStore{legacyEngine: sample.Engine, legacyOffsets: offsets, legacyOutputs: AppendOffsets(nil, sample.Outputs)}
	m, found, err := Read(s, pairs)
	if err != nil || !found || !reflect.DeepEqual(m, sample) {
		t.Fatalf("read %+v, %v, %v; want %+v", m, found, err, sample)
	}
	s[legacyOutputs] = s[legacyOutputs][:3]
	if _, _, err := Read(s, pairs); !corrupt.Is(err) {
		t.Errorf("cut output ends: %v, want corruption", err)
	}
}

// TestRefused: a manifest cut anywhere, or with bytes past its end, is
// corruption; one of a version this code does not know says so.
func TestRefused(t *testing.T) {
	b := sample.AppendBinary(nil)
	for i := range len(b) {
		if _, err := Decode(b[:i]); !corrupt.Is(err) {
			t.Fatalf("cut to %d bytes: %v, want corruption", i, err)
		}
	}
	if _, err := Decode(append(b, 0)); !corrupt.Is(err) {
		t.Errorf("a byte past the end: %v", err)
	}
	b[0] = 9
	if _, err := Decode(b); !corrupt.Is(err) || !strings.Contains(err.Error(), "version 9") {
		t.Errorf("version 9: %v", err)
	}
}

// TestVersion1: a manifest of version 1, of the same layout, reads as the
// version written now.
func TestVersion1(t *testing.T) {
	b := sample.AppendBinary(nil)
	if b[0] != version {
		t.Fatalf("written as version %d, not %d", b[0], version)
	}
	b[0] = 1
	if m, err := Decode(b); err != nil || !reflect.DeepEqual(m, sample) {
		t.Fatalf("version 1: %+v, %v; want %+v", m, err, sample)
	}
}

// FuzzDecode: any bytes decode to an error or to a manifest that encodes
// to bytes decoding to the same; never a panic.
func FuzzDecode(f *testing.F) {
	f.Add(sample.AppendBinary(nil))
	f.Add((&Manifest{}).AppendBinary(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !corrupt.Is(err) {
				t.Fatalf("%x: %v is not marked as corruption", b, err)
			}
			return
		}
		again, err := Decode(m.AppendBinary(nil))
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("%x decodes to %+v, which encodes to %x: %+v, %v", b, m, m.AppendBinary(nil), again, err)
		}
	})
}
