package engine

import (
	"encoding/binary"
	"fmt"
	"math"

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
// generation, in an IDLog, which its checkpoints write out (to the
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

// idPrefix starts the key under which earlier versions stored each id in
// the state store (parseIDKey), which a restore reads once: the spec id
// 0xfffe, which no rule or heatmap has, below the timer entries' 0xffff
// (docs/format/state.md).
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
func (d *dedupe) seen(h [2]uint64, wm int64) bool {
	d.advance(wm)
	e, found := d.ids.find(h)
	if found {
		d.duplicates++
		return true
	}
	d.ids.add(e, h, d.gen)
	if d.store != nil {
		d.store.add(d.gen, h, d.value)
	}
	return false
}

// advance moves the generations on to watermark wm: the ids of generations
// before the one before wm's are forgotten. Generations are fixed spans of
// the watermark, so that when this runs (at an event, at a checkpoint)
// does not change what is remembered.
func (d *dedupe) advance(wm int64) {
	g := int64(preWatermark)
	if wm != watermark.Min {
		g = floorDiv(wm, d.horizon)
	}
	if g == d.gen {
		return
	}
	if d.gen == preWatermark {
		// The ids taken before the first watermark count as taken at it.
		d.ids.settle()
		for i, e := range d.ids.slots { // no rotation yet: none is stale
			if e == ([2]uint64{}) {
				continue
			}
			h := [2]uint64{e[0], e[1] &^ 0xff}
			if d.store != nil {
				d.store.movePre(h, g)
			}
			d.ids.slots[i][1] = h[1] | uint64(byte(g))
		}
		d.prevGen, d.gen = g-1, g
		d.ids.remember(d.gen, d.prevGen)
		return
	}
	// At g, the ids of gen are still remembered if g follows it; every
	// other was taken a horizon or more before wm.
	if d.store != nil {
		d.store.Forget(d.prevGen)
		if g != d.gen+1 {
			d.store.Forget(d.gen)
		}
	}
	if g == d.gen+1 {
		d.ids.rotate(g)
	} else {
		d.ids.reset(g, g-1)
	}
	d.prevGen, d.gen = g-1, g
}

// floorDiv is a/b rounded down.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// forgetAll forgets every id remembered.
func (d *dedupe) forgetAll() {
	if d.store != nil {
		d.store.Forget(d.prevGen)
		d.store.Forget(d.gen)
	}
	d.ids.reset(d.gen, d.prevGen)
}

// parseIDKey splits the key of an id stored one per key: idPrefix, the
// generation, the id's hash.
func parseIDKey(k []byte) (gen int64, h [2]uint64, ok bool) {
	if len(k) != idKeyLen || string(k[:len(idPrefix)]) != string(idPrefix) {
		return 0, h, false
	}
	return int64(binary.BigEndian.Uint64(k[2:])), [2]uint64{binary.BigEndian.Uint64(k[10:]), binary.BigEndian.Uint64(k[18:])}, true
}

// idKeyLen is the length of the key of an id stored one per key.
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
// but not committed, are forgotten, and so are those keep rejects. Without
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
	d.ids.reset(d.gen, d.prevGen)
	if d.store == nil {
		return nil
	}
	err := d.store.restore(func(gen int64, h [2]uint64, v []byte) bool {
		if gen != d.gen && gen != d.prevGen || d.keep != nil && !d.keep(v) {
			return false
		}
		if e, found := d.ids.find(h); !found {
			d.ids.add(e, h, gen)
		}
		return true
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
// Nothing in it is done all at once, for a record's sake:
//   - A table grows a little at a time: the slots of the table it outgrew
//     (old) move to the new one a few at each id added, and lookups look
//     in both meanwhile. Moving half a million entries at once held the
//     job's loop for tens of milliseconds.
//   - A rotation only changes which tags are remembered (live): an entry
//     of another tag is stale, a lookup takes it for absent, and a sweep
//     removes the stale entries a few slots at each id added. A pass over
//     a table of a million slots took 17 ms.
type idTable struct {
	slots [][2]uint64
	// n counts the entries in slots and old, stale ones until they are
	// swept.
	n int
	// old is the table outgrown, whose slots from moved on are still to
	// move; nil when none is. Its slots are left as they are, so that
	// its lookups still work: an entry moved is found in slots first.
	old   [][2]uint64
	moved int
	// live are the tags of the generations remembered.
	live [2]byte
	// swept is the next slot the sweep looks at, and toSweep how many it
	// has left to look at; 0 when no sweep is under way.
	swept, toSweep int
}

// stepsPerAdd is how many slots of an outgrown table move, and how many
// slots the sweep looks at, at each add: with more than 2, a move is done
// before the new table is half full, and with 8, at a steady rate, a
// sweep is done before the next rotation (a table has at most 4 slots per
// id of the two generations), which otherwise finishes it at once.
const stepsPerAdd = 8

// remember makes gen and prev the generations whose entries are live.
func (t *idTable) remember(gen, prev int64) { t.live = [2]byte{byte(gen), byte(prev)} }

// isLive reports whether e, not empty, is of a generation remembered.
func (t *idTable) isLive(e [2]uint64) bool {
	return byte(e[1]) == t.live[0] || byte(e[1]) == t.live[1]
}

// find returns the slot of h (tags aside) and whether it is live. When it
// is not, the slot is where add puts h: empty, or h's stale entry. A slot
// of the outgrown table it returns is only to be read.
func (t *idTable) find(h [2]uint64) (*[2]uint64, bool) {
	if len(t.slots) == 0 {
		t.slots = make([][2]uint64, 1024)
	}
	e := probe(t.slots, h)
	if *e != ([2]uint64{}) {
		return e, t.isLive(*e)
	}
	if t.old != nil {
		if o := probe(t.old, h); *o != ([2]uint64{}) && t.isLive(*o) {
			return o, true
		}
	}
	return e, false
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

// add puts h, of generation gen, in e, the slot find returned for it; it
// moves some of an outgrown table's slots or sweeps some slots, and grows
// the table past half full.
func (t *idTable) add(e *[2]uint64, h [2]uint64, gen int64) {
	taken := *e != ([2]uint64{}) // h's stale entry
	*e = [2]uint64{h[0], h[1] | uint64(byte(gen))}
	if taken {
		return
	}
	switch {
	case t.old != nil:
		t.move(stepsPerAdd)
	case t.toSweep > 0:
		t.sweep(stepsPerAdd)
	}
	if t.n++; 2*t.n > len(t.slots) {
		t.grow(2 * len(t.slots))
	}
}

// grow starts laying the table out again over size slots. The move
// leaves the stale entries behind, so a sweep under way ends.
func (t *idTable) grow(size int) {
	if t.old != nil { // not with more than 2 steps an add
		t.move(len(t.old))
	}
	t.old, t.moved = t.slots, 0
	t.slots = make([][2]uint64, size)
	t.toSweep = 0
}

// move moves up to k of the outgrown table's slots, but stale entries.
func (t *idTable) move(k int) {
	end := min(t.moved+k, len(t.old))
	for _, e := range t.old[t.moved:end] {
		switch {
		case e == ([2]uint64{}):
		case t.isLive(e):
			*probe(t.slots, e) = e
		default:
			t.n--
		}
	}
	if t.moved = end; t.moved == len(t.old) {
		t.old = nil
	}
}

// settle ends what moves and sweeps are under way, so that every entry
// is in slots and live.
func (t *idTable) settle() {
	if t.old != nil {
		t.move(len(t.old))
	}
	t.sweep(t.toSweep)
}

// rotate makes gen the generation of the entries added from now on: those
// of the generation before it stay live, and the others, stale, are swept
// as entries are added. What a sweep under way had left to look at, it
// looks at first: after it, only one generation's entries are stale, and a
// tag comes back only 256 generations later.
func (t *idTable) rotate(gen int64) {
	t.settle()
	t.remember(gen, gen-1)
	if t.n == 0 {
		return
	}
	// From after an empty slot (a table at most half full has one), so
	// that no cluster the sweep starts in runs on from slots it will look
	// at last.
	t.swept = 0
	for t.slots[t.swept] != ([2]uint64{}) {
		t.swept++
	}
	t.toSweep = len(t.slots)
}

// sweep looks at up to k slots, removing the stale entries.
func (t *idTable) sweep(k int) {
	mask := len(t.slots) - 1
	for ; k > 0 && t.toSweep > 0; k-- {
		i := t.swept & mask
		if e := t.slots[i]; e != ([2]uint64{}) && !t.isLive(e) {
			t.remove(i)
			t.n--
			continue // the slot now holds what followed it, if anything
		}
		t.swept++
		t.toSweep--
	}
}

// remove empties slot i and moves back the entries after it in its
// cluster that a lookup would no longer find (Knuth's algorithm R):
// entries only move back, into slots the sweep has yet to look at or
// looks at again.
func (t *idTable) remove(i int) {
	mask := len(t.slots) - 1
	for {
		t.slots[i] = [2]uint64{}
		j := i
		for {
			j = (j + 1) & mask
			e := t.slots[j]
			if e == ([2]uint64{}) {
				return
			}
			// e stays unless its home is cyclically outside (i, j].
			home := int(e[0]) & mask
			if i <= j && (home <= i || home > j) || i > j && home <= i && home > j {
				t.slots[i] = e
				i = j
				break
			}
		}
	}
}

// reset forgets every entry, and makes gen and prev the generations of
// those added from now on.
func (t *idTable) reset(gen, prev int64) {
	clear(t.slots)
	t.n, t.old, t.toSweep = 0, nil, 0
	t.remember(gen, prev)
}

// slotAddr is the address of the slot a lookup of h probes first, for a
// prefetch.
func (t *idTable) slotAddr(h [2]uint64) uintptr {
	if len(t.slots) == 0 {
		return 0
	}
	return prefetch.Addr(&t.slots[h[0]&uint64(len(t.slots)-1)])
}
