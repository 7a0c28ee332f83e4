package windows

import (
	"encoding/binary"
	"hash/maphash"
	"math"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/windows/slot"
)

// SlotRef names the state one event updates for one rule or heatmap: the
// spec's position, the hash its key is found by and where the key is, and
// carries what the event adds to it.
type SlotRef struct {
	spec int32
	// key is where the Keyer appended the slot's key to its keys: a
	// uvarint length, then the key. The operator reads it only to create
	// the slot, from those keys, written in order by the keying core,
	// rather than from the event's attributes and record, three lines
	// scattered over that core's memory.
	key uint32
	id  slot.ID
	// val is what the event adds to the spec's aggregate: a summed or
	// measured number's bits, or a distinct value's hash. It is taken from
	// the event while the event is in the decoding core's cache, so that
	// the operator, often on another core, reads it from the refs, which
	// it reads in order anyway, instead of from the event.
	val uint64
}

// Keyer finds the rules and heatmaps an event matches and hashes the
// event's key for each: Flink's keyBy, the part of assigning an event that
// needs none of the operator's state. A pipeline may key events on another
// goroutine than the operator's, each goroutine with a Keyer of its own from
// Operator.NewKeyer, and hand the SlotRefs to ProcessElement.
type Keyer struct {
	specs []*slot.Spec // in file order
	byID  []*slot.Spec // by state id
	seeds [2]maphash.Seed
}

// NewKeyer returns a Keyer for op's rules and heatmaps. A Reload of op
// needs new Keyers.
func (op *Operator) NewKeyer() *Keyer {
	return &Keyer{specs: op.ordered, byID: op.specs, seeds: op.cache.Seeds}
}

// Append appends to dst a SlotRef for every rule and heatmap ev matches, in
// the order of the rules file, rules before heatmaps, and to keys their
// slot keys, which ProcessElement is given with the refs.
func (k *Keyer) Append(dst []SlotRef, keys []byte, ev *event.Event) ([]SlotRef, []byte) {
	for _, sp := range k.specs {
		if !sp.Matches(ev) {
			continue
		}
		at := len(keys)
		if at > math.MaxUint32 {
			panic("windows: more than 4 GiB of keys for one batch of refs")
		}
		// The length goes first: one byte, set once the key is there,
		// unless the key is 128 bytes or longer.
		keys = append(keys, 0)
		start := at + 1
		keys = sp.AppendSlotKey(keys, ev)
		if n := len(keys) - start; n < 0x80 {
			keys[at] = byte(n)
		} else {
			var lenBuf [binary.MaxVarintLen64]byte
			w := binary.PutUvarint(lenBuf[:], uint64(n))
			keys = append(keys, lenBuf[:w-1]...)
			copy(keys[at+w:], keys[start:start+n])
			copy(keys[at:], lenBuf[:w])
			start = at + w
		}
		id := slot.HashText(k.seeds, slot.HashedText(keys[start:]))
		dst = append(dst, SlotRef{spec: int32(sp.Index), key: uint32(at), id: id, val: sp.Value(ev)})
	}
	return dst, keys
}

// slotKey returns r's slot key in keys, the keys its Keyer appended it to.
func (r *SlotRef) slotKey(keys []byte) []byte {
	n, w := binary.Uvarint(keys[r.key:])
	start := int(r.key) + w
	return keys[start : start+int(n)]
}

// Shard returns which of n shards owns r's state. Rules are split by key;
// heatmaps all go to shard 0, so that the windows a watermark fires keep the
// order of a single timer queue.
func (k *Keyer) Shard(r SlotRef, n int) int { return shardOf(k.byID[r.spec], r.id, n) }

// shardOf returns which of n shards owns the state of sp with id (see
// Keyer.Shard).
func shardOf(sp *slot.Spec, id slot.ID, n int) int {
	if n <= 1 || sp.Heatmap != nil {
		return 0
	}
	return int(id[0] % uint64(n))
}
