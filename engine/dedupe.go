package engine

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
	"github.com/riskstream/riskstream/windows"
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
// A job that checkpoints stores each id as it is remembered, under its
// generation (idKey), in the state store the checkpoint commits: a
// restart knows the ids its checkpoint covers, and a rotation deletes the
// forgotten generation's.
type dedupe struct {
	horizon int64
	// gen is the generation of cur, the watermark divided by the horizon
	// (preWatermark before the first watermark), prevGen prev's.
	gen, prevGen int64
	cur, prev    idSet
	store        windows.Backend // nil: nothing stored (replay)
	digest       *xxhash.Digest
	key          []byte
	// duplicates counts the events dropped.
	duplicates int64
}

// preWatermark is the generation of the ids taken before the first
// watermark (with several partitions, until each has had an event).
const preWatermark = math.MinInt64

// idPrefix starts the keys of remembered ids in the store: the spec id
// 0xfffe, which no rule or heatmap has, below the timer entries' 0xffff
// (docs/format/state.md).
var idPrefix = []byte{0xff, 0xfe}

// newDedupe returns the deduplication of horizon ms, nil for none; store,
// if not nil, keeps the ids.
func newDedupe(horizon int64, store windows.Backend) *dedupe {
	if horizon <= 0 {
		return nil
	}
	return &dedupe{horizon: horizon, gen: preWatermark, prevGen: preWatermark, store: store, digest: xxhash.New()}
}

// seen reports whether the event whose id is id was taken within the
// horizon before the watermark wm, and remembers it if not.
func (d *dedupe) seen(id []byte, wm int64) (bool, error) {
	if err := d.advance(wm); err != nil {
		return false, err
	}
	h := d.hash(id)
	if d.cur.has(h) || d.prev.has(h) {
		d.duplicates++
		return true, nil
	}
	d.cur.add(h)
	if d.store != nil {
		if err := d.store.Set(d.idKey(d.gen, h), nil); err != nil {
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
	if wm != windows.MinWatermark {
		g = floorDiv(wm, d.horizon)
	}
	if g == d.gen {
		return nil
	}
	if d.gen == preWatermark {
		// The ids taken before the first watermark count as taken at it.
		if d.store != nil {
			for _, h := range d.cur.slots {
				if h == ([2]uint64{}) {
					continue
				}
				if err := d.store.Delete(d.idKey(preWatermark, h)); err != nil {
					return fmt.Errorf("engine: remember an event id: %w", err)
				}
				if err := d.store.Set(d.idKey(g, h), nil); err != nil {
					return fmt.Errorf("engine: remember an event id: %w", err)
				}
			}
		}
		d.prevGen, d.gen = g-1, g
		return nil
	}
	if err := d.forget(d.prevGen, &d.prev); err != nil {
		return err
	}
	if d.gen != preWatermark && g > d.gen+1 {
		// Every id of cur was taken a horizon or more before wm.
		if err := d.forget(d.gen, &d.cur); err != nil {
			return err
		}
	}
	d.prev, d.cur = d.cur, d.prev
	d.prevGen, d.gen = d.gen, g
	return nil
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
func (d *dedupe) forgetAll() error {
	if err := d.forget(d.prevGen, &d.prev); err != nil {
		return err
	}
	return d.forget(d.gen, &d.cur)
}

// forget deletes the stored ids of s, generation gen, and empties s. The
// ids are deleted one by one from s's own list, not by a scan of the
// store, which does not see the writes not yet committed.
func (d *dedupe) forget(gen int64, s *idSet) error {
	if d.store != nil && s.len() > 0 {
		for _, h := range s.slots {
			if h == ([2]uint64{}) {
				continue
			}
			if err := d.store.Delete(d.idKey(gen, h)); err != nil {
				return fmt.Errorf("engine: forget event ids: %w", err)
			}
		}
	}
	s.reset()
	return nil
}

// hash is id's 128-bit hash: two ids of a horizon collide with probability
// n²/2¹²⁹, and a collision drops an event.
func (d *dedupe) hash(id []byte) [2]uint64 {
	d.digest.ResetWithSeed(0)
	d.digest.Write(id)
	a := d.digest.Sum64()
	d.digest.ResetWithSeed(0x9e3779b97f4a7c15)
	d.digest.Write(id)
	return key([2]uint64{a, d.digest.Sum64()})
}

// idKey is the store key of id hash h of generation gen.
func (d *dedupe) idKey(gen int64, h [2]uint64) []byte {
	k := append(d.key[:0], idPrefix...)
	k = binary.BigEndian.AppendUint64(k, uint64(gen))
	k = binary.BigEndian.AppendUint64(k, h[0])
	k = binary.BigEndian.AppendUint64(k, h[1])
	d.key = k
	return k
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
// but not committed, are deleted. Without b (a checkpoint of a job that
// did not deduplicate) it starts afresh, deleting any ids stored.
func (d *dedupe) restore(b []byte) error {
	if b == nil {
		b = newDedupe(d.horizon, nil).appendBinary(nil)
	}
	var v [3]int64
	for i := range v {
		x, k := binary.Varint(b)
		if k <= 0 {
			return fmt.Errorf("engine: checkpoint dedupe: corrupt")
		}
		v[i], b = x, b[k:]
	}
	if len(b) != 0 {
		return fmt.Errorf("engine: checkpoint dedupe: corrupt")
	}
	d.gen, d.prevGen, d.duplicates = v[0], v[1], v[2]
	d.cur.reset()
	d.prev.reset()
	if d.store == nil {
		return nil
	}
	err := d.store.Seek(idPrefix, func(k, _ []byte) (bool, error) {
		if len(k) != idKeyLen || string(k[:len(idPrefix)]) != string(idPrefix) {
			return false, nil
		}
		h := [2]uint64{binary.BigEndian.Uint64(k[10:]), binary.BigEndian.Uint64(k[18:])}
		switch gen := int64(binary.BigEndian.Uint64(k[2:])); gen {
		case d.gen:
			d.cur.add(h)
		case d.prevGen:
			d.prev.add(h)
		default:
			return true, d.store.Delete(k)
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("engine: restore event ids: %w", err)
	}
	return nil
}

// idSet is a set of 128-bit hashes (key), open addressing with linear
// probing: a Go map of them cost twice the memory.
type idSet struct {
	slots [][2]uint64 // {0, 0} is empty
	n     int
}

func (s *idSet) len() int { return s.n }

// reset empties s, keeping its memory.
func (s *idSet) reset() {
	clear(s.slots)
	s.n = 0
}

// key makes h a key of an idSet, where {0, 0} marks an empty slot.
func key(h [2]uint64) [2]uint64 {
	if h == ([2]uint64{}) {
		h[1] = 1
	}
	return h
}

func (s *idSet) has(h [2]uint64) bool {
	if s.n == 0 {
		return false
	}
	mask := uint64(len(s.slots) - 1)
	for i := h[0] & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case h:
			return true
		case [2]uint64{}:
			return false
		}
	}
}

// add adds h, which s does not hold.
func (s *idSet) add(h [2]uint64) {
	if 2*(s.n+1) > len(s.slots) {
		s.grow()
	}
	s.put(h)
	s.n++
}

func (s *idSet) put(h [2]uint64) {
	mask := uint64(len(s.slots) - 1)
	i := h[0] & mask
	for s.slots[i] != ([2]uint64{}) {
		i = (i + 1) & mask
	}
	s.slots[i] = h
}

// grow doubles s's slots, at most half full.
func (s *idSet) grow() {
	old := s.slots
	s.slots = make([][2]uint64, max(1024, 2*len(old)))
	for _, h := range old {
		if h != ([2]uint64{}) {
			s.put(h)
		}
	}
}
