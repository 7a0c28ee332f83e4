package windows

import (
	"hash/maphash"

	"github.com/riskstream/riskstream/event"
)

// SlotRef names the state one event updates for one rule or heatmap: the
// spec's position and the hash its key is found by, and carries what the
// event adds to it.
type SlotRef struct {
	spec int
	id   slotID
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
	specs []*spec
	seeds [2]maphash.Seed
	buf   []byte
}

// NewKeyer returns a Keyer for op's rules and heatmaps.
func (op *Operator) NewKeyer() *Keyer {
	return &Keyer{specs: op.specs, seeds: op.cache.seeds}
}

// Append appends to dst a SlotRef for every rule and heatmap ev matches, in
// the order of the rules file, rules before heatmaps.
func (k *Keyer) Append(dst []SlotRef, ev *event.Event) []SlotRef {
	for _, sp := range k.specs {
		if !sp.matches(ev) {
			continue
		}
		var id slotID
		if len(sp.keyAttrs) == 1 {
			id = hashKey(k.seeds, ev.Attrs[sp.keyAttrs[0]].Text) // the common case, without a copy
		} else {
			k.buf = sp.appendSlotKey(k.buf[:0], ev)
			id = hashKey(k.seeds, hashedText(k.buf))
		}
		dst = append(dst, SlotRef{spec: sp.index, id: id, val: sp.value(ev)})
	}
	return dst
}

// Shard returns which of n shards owns r's state. Rules are split by key;
// heatmaps all go to shard 0, so that the windows a watermark fires keep the
// order of a single timer queue.
func (k *Keyer) Shard(r SlotRef, n int) int {
	if n == 1 || k.specs[r.spec].hm != nil {
		return 0
	}
	return int(r.id[0] % uint64(n))
}

// hashKey is the 128-bit hash slots are found by (see cache.m): the hash
// of their key's hashedText.
func hashKey(seeds [2]maphash.Seed, text []byte) slotID {
	return slotID{maphash.Bytes(seeds[0], text), maphash.Bytes(seeds[1], text)}
}

// hashSlotKey is the hash of a whole slot key held as a string (a timer's):
// the same as hashKey's of its hashedText.
func hashSlotKey(seeds [2]maphash.Seed, key string) slotID {
	text := hashedText(key)
	return slotID{maphash.String(seeds[0], text), maphash.String(seeds[1], text)}
}

// hashedText is the part of a slot key its hash covers: the key attributes'
// texts and the 0 bytes between them, without the spec index (each spec has
// an index of its own) or the last 0 byte. A one-attribute key's is the
// attribute's text itself, which Keyer hashes without copying it.
func hashedText[K string | []byte](key K) K {
	if len(key) <= 2 {
		return key[len(key):]
	}
	return key[2 : len(key)-1]
}
