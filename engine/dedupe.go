package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/riskstream/riskstream/internal/corrupt"
	"github.com/riskstream/riskstream/watermark"

	"github.com/cespare/xxhash/v2"
	"github.com/riskstream/riskstream/internal/prefetch"
)

// dedupe remembers the ids of the events taken, so that a record sent
// again is taken once: Kafka's producers are at least once, and a broker
// that hangs or restarts makes them send what they had in flight again
// (`produce` sent 300,014 records for 300,000 lines, and a payment counted
// twice is a decision with another value).
//
// An id is remembered from the event's arrival until the watermark has
// advanced by at least the horizon, and at most twice that: ids go into
// the generation of the watermark at their arrival (the watermark divided
// by the horizon), and the job remembers that generation and the one
// before. The horizon is in event time, as the watermark, so that live and
// replay forget an id at the same record, and a retry held up with the
// input (a hung broker holds both) is still recognised.
//
// A job that checkpoints keeps each id as it is remembered, under its
// generation (idKey), in an IDLog, which its checkpoints write out (to the
// state store, idBlobs; a distributed job's router, to a topic): a restart
// knows the ids its checkpoint covers, and a rotation forgets the
// generation's whole.
type dedupe struct {
	horizon int64
	// gen is the generation of the ids taken now, the watermark divided by
	// the horizon (preWatermark before the first watermark), prevGen the
	// one before.
	gen, prevGen int64
	ids          idTable
	store        *IDLog // nil: nothing stored (replay)
	key          []byte
	// value is stored with the next id remembered: nil in one job; a
	// distributed job's router stores where its record is (Router), and
	// keep, when set, says which stored ids a restore keeps by their
	// values.
	value []byte
	keep  func(value []byte) bool
	// duplicates counts the events dropped.
	duplicates int64
}

// preWatermark is the generation of the ids taken before the first
// watermark (with several partitions, until each has had an event).
const preWatermark = math.MinInt64

// idPrefix starts the key of a remembered id (idKey), which an IDLog
// takes, and under which earlier versions stored each id in the state
// store: the spec id 0xfffe, which no rule or heatmap has, below the timer
// entries' 0xffff (docs/format/state.md).
var idPrefix = []byte{0xff, 0xfe}

// newDedupe returns the deduplication of horizon ms, nil for none; it
// stores nothing until its store is set.
func newDedupe(horizon int64) *dedupe {
	if horizon <= 0 {
		return nil
	}
	return &dedupe{horizon: horizon, gen: preWatermark, prevGen: preWatermark}
}

// idHash is the 120-bit hash of an event id: xxhash64 and, in the top 56
// bits of the second word, FNV-1a 64. Two ids of a horizon collide with
// probability n²/2¹²¹, and a collision drops an event. The low byte of the
// second word is left for idTable's tags, and the first word is never 0
// (an empty slot).
func idHash(id []byte) [2]uint64 {
	h := [2]uint64{xxhash.Sum64(id), 14695981039346656037}
	for _, c := range id {
		h[1] = (h[1] ^ uint64(c)) * 1099511628211
	}
	h[1] &^= 0xff
	if h[0] == 0 {
		h[0] = 1
	}
	return h
}

// seen reports whether the event whose id hashes to h (idHash) was taken
// within the horizon before the watermark wm, and remembers it if not.
func (d *dedupe) seen(h [2]uint64, wm int64) (bool, error) {
	if err := d.advance(wm); err != nil {
		return false, err
	}
	// Every entry is of gen or prevGen: advance drops the others.
	e := d.ids.find(h)
	if *e != ([2]uint64{}) {
		d.duplicates++
		return true, nil
	}
	d.ids.add(e, h, d.gen)
	if d.store != nil {
		if err := d.store.Set(d.idKey(d.gen, h), d.value); err != nil {
			return false, fmt.Errorf("engine: remember an event id: %w", err)
		}
	}
	return false, nil
}

// advance moves the generations on to watermark wm: the ids of generations
// before the one before wm's are forgotten. Generations are fixed spans of
// the watermark, so that when this runs (at an event, at a checkpoint)
// does not change what is remembered.
func (d *dedupe) advance(wm int64) error {
	g := int64(preWatermark)
	if wm != watermark.Min {
		g = floorDiv(wm, d.horizon)
	}
	if g == d.gen {
		return nil
	}
	if d.gen == preWatermark {
		// The ids taken before the first watermark count as taken at it.
		d.ids.settle()
		for i, e := range d.ids.slots {
			if e == ([2]uint64{}) {
				continue
			}
			h := [2]uint64{e[0], e[1] &^ 0xff}
			if d.store != nil {
				v, _, err := d.store.Get(d.idKey(preWatermark, h))
				if err == nil {
					v = slices.Clone(v)
					err = d.store.Delete(d.idKey(preWatermark, h))
				}
				if err == nil {
					err = d.store.Set(d.idKey(g, h), v)
				}
				if err != nil {
					return fmt.Errorf("engine: remember an event id: %w", err)
				}
			}
			d.ids.slots[i][1] = h[1] | uint64(byte(g))
		}
		d.prevGen, d.gen = g-1, g
		return nil
	}
	// At g, the ids of gen are still remembered if g follows it; every
	// other was taken a horizon or more before wm.
	keep := noTag
	if g == d.gen+1 {
		keep = int(byte(d.gen))
	}
	d.drop(keep)
	d.prevGen, d.gen = g-1, g
	return nil
}

// drop forgets the ids but those whose generation's tag is keep (none
// when it is noTag), in the table and, a generation at a time, the store.
func (d *dedupe) drop(keep int) {
	if d.store != nil {
		for _, g := range [...]int64{d.prevGen, d.gen} {
			if int(byte(g)) != keep {
				d.store.Forget(g)
			}
		}
	}
	d.ids.keepOnly(keep)
}

// noTag is no generation's tag: drop(noTag) forgets every id.
const noTag = -1

// floorDiv is a/b rounded down.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// forgetAll forgets every id remembered.
func (d *dedupe) forgetAll() { d.drop(noTag) }

// idKey is the store key of id hash h of generation gen.
func (d *dedupe) idKey(gen int64, h [2]uint64) []byte {
	d.key = appendIDKey(d.key[:0], gen, h)
	return d.key
}

// appendIDKey appends the store key of id hash h of generation gen.
func appendIDKey(dst []byte, gen int64, h [2]uint64) []byte {
	dst = append(dst, idPrefix...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(gen))
	dst = binary.BigEndian.AppendUint64(dst, h[0])
	return binary.BigEndian.AppendUint64(dst, h[1])
}

// parseIDKey splits a store key of an id (appendIDKey).
func parseIDKey(k []byte) (gen int64, h [2]uint64, ok bool) {
	if len(k) != idKeyLen || string(k[:len(idPrefix)]) != string(idPrefix) {
		return 0, h, false
	}
	return int64(binary.BigEndian.Uint64(k[2:])), [2]uint64{binary.BigEndian.Uint64(k[10:]), binary.BigEndian.Uint64(k[18:])}, true
}

// idKeyLen is the length of an idKey.
const idKeyLen = 2 + 8 + 16

// appendBinary appends what a checkpoint keeps of d besides the stored
// ids: the two generations and the duplicates counted.
func (d *dedupe) appendBinary(dst []byte) []byte {
	dst = binary.AppendVarint(dst, d.gen)
	dst = binary.AppendVarint(dst, d.prevGen)
	return binary.AppendVarint(dst, d.duplicates)
}

// restore reads what appendBinary wrote and loads the stored ids of the
// two generations; others, which a forget after the checkpoint had deleted
// but not committed, are deleted, and so are those keep rejects. Without
// b (a checkpoint of a job that did not deduplicate) it starts afresh,
// deleting any ids stored.
func (d *dedupe) restore(b []byte) error {
	v := [3]int64{preWatermark, preWatermark, 0}
	if b != nil {
		for i := range v {
			x, k := binary.Varint(b)
			if k <= 0 {
				return corrupt.Errorf("engine: checkpoint dedupe: corrupt")
			}
			v[i], b = x, b[k:]
		}
		if len(b) != 0 {
			return corrupt.Errorf("engine: checkpoint dedupe: corrupt")
		}
	}
	d.gen, d.prevGen, d.duplicates = v[0], v[1], v[2]
	d.ids.keepOnly(noTag)
	if d.store == nil {
		return nil
	}
	err := d.store.Seek(idPrefix, func(k, v []byte) (bool, error) {
		gen, h, ok := parseIDKey(k)
		if !ok {
			return false, nil
		}
		if gen != d.gen && gen != d.prevGen || d.keep != nil && !d.keep(v) {
			return true, d.store.Delete(k)
		}
		if e := d.ids.find(h); *e == ([2]uint64{}) {
			d.ids.add(e, h, gen)
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("engine: restore event ids: %w", err)
	}
	return nil
}

// idTable holds the ids remembered, open addressing with linear probing
// over a power of two of slots, at most half full: each slot is an id's
// hash (idHash) with its generation's tag (the generation's low byte) in
// the low byte of the second word; {0, 0} is an empty slot. One table for
// both generations, so that a new id, the common case, costs one probe
// sequence (a cache miss with many ids), not one per generation.
//
// A table grows a little at a time: the slots of the table it outgrew
// (old) move to the new one a few at each id added, and lookups look in
// both meanwhile. Moving half a million entries at once held the job's
// loop for tens of milliseconds.
type idTable struct {
	slots [][2]uint64
	n     int
	// old is the table outgrown, whose slots from moved on are still to
	// move; nil when none is. Its slots are left as they are, so that
	// its lookups still work: an entry moved is found in slots first.
	old   [][2]uint64
	moved int
}

// movesPerAdd is how many of the outgrown table's slots move at each add:
// with more than 2, the move is done before the new table is half full.
const movesPerAdd = 4

// find returns the slot of h (tags aside), or the empty slot where it
// would go. The table must have a slot free. A slot of the outgrown table
// it returns is only to be read.
func (t *idTable) find(h [2]uint64) *[2]uint64 {
	if len(t.slots) == 0 {
		t.slots = make([][2]uint64, 1024)
	}
	e := probe(t.slots, h)
	if *e == ([2]uint64{}) && t.old != nil {
		if o := probe(t.old, h); *o != ([2]uint64{}) {
			return o
		}
	}
	return e
}

// probe returns the slot of h in slots, or the empty slot where it would
// go.
func probe(slots [][2]uint64, h [2]uint64) *[2]uint64 {
	mask := uint64(len(slots) - 1)
	for i := h[0] & mask; ; i = (i + 1) & mask {
		e := &slots[i]
		if *e == ([2]uint64{}) || e[0] == h[0] && e[1]&^0xff == h[1] {
			return e
		}
	}
}

// add puts h, of generation gen, in e, the empty slot find returned for
// it; it moves some of an outgrown table's slots, and grows the table
// past half full.
func (t *idTable) add(e *[2]uint64, h [2]uint64, gen int64) {
	*e = [2]uint64{h[0], h[1] | uint64(byte(gen))}
	if t.old != nil {
		t.move(movesPerAdd)
	}
	if t.n++; 2*t.n > len(t.slots) {
		t.grow(2 * len(t.slots))
	}
}

// grow starts laying the table out again over size slots.
func (t *idTable) grow(size int) {
	t.settle()
	t.old, t.moved = t.slots, 0
	t.slots = make([][2]uint64, size)
}

// move moves up to k of the outgrown table's slots.
func (t *idTable) move(k int) {
	end := min(t.moved+k, len(t.old))
	for _, e := range t.old[t.moved:end] {
		if e != ([2]uint64{}) {
			*probe(t.slots, e) = e
		}
	}
	if t.moved = end; t.moved == len(t.old) {
		t.old = nil
	}
}

// settle moves what is left of the outgrown table, so that every entry
// is in slots.
func (t *idTable) settle() {
	if t.old != nil {
		t.move(len(t.old))
	}
}

// slotAddr is the address of the slot a lookup of h probes first, for a
// prefetch.
func (t *idTable) slotAddr(h [2]uint64) uintptr {
	if len(t.slots) == 0 {
		return 0
	}
	return prefetch.Addr(&t.slots[h[0]&uint64(len(t.slots)-1)])
}

// keepOnly forgets the entries but those tagged keep (none when it is
// noTag), in place: one pass over the slots, starting after an empty one,
// that takes each entry out and puts those kept back where a lookup from
// their first slot finds them. Every slot between that first slot and the
// entry's own was taken when the entry went in and has been passed by
// then, so the entry lands at or before its own slot, and the lookups of
// the entries after it still find them.
func (t *idTable) keepOnly(keep int) {
	if keep == noTag || t.n == 0 {
		clear(t.slots)
		t.n, t.old = 0, nil
		return
	}
	t.settle()
	size := len(t.slots)
	mask := uint64(size - 1)
	start := 0
	for t.slots[start] != ([2]uint64{}) {
		start++ // a table at most half full has an empty slot
	}
	for k := 1; k <= size; k++ {
		j := uint64(start+k) & mask
		e := t.slots[j]
		if e == ([2]uint64{}) {
			continue
		}
		t.slots[j] = [2]uint64{}
		if int(byte(e[1])) != keep {
			t.n--
			continue
		}
		i := e[0] & mask
		for t.slots[i] != ([2]uint64{}) {
			i = (i + 1) & mask
		}
		t.slots[i] = e
	}
}
