package windows

import "math/bits"

// slotIndex finds one spec's cached slots by id. It is open addressing with
// linear probing over a flat array, because a lookup is the engine's most
// frequent memory access: with hundreds of thousands of keys a Go map costs
// about three dependent cache misses per lookup (directory, table, group),
// while here a lookup touches one line of the array, then the slot itself.
type slotIndex struct {
	entries []indexEntry
	n       int
	shift   uint // 64 - log2(len(entries)): the home of a tag is its top bits
}

// indexEntry is one place of the array; tag 0 marks it empty.
type indexEntry struct {
	tag uint64 // id[1] with the low bit set, so never 0
	s   *slot
}

// maxLoad is the fill (in 1/8) past which the array doubles: linear probing
// stays within a cache line or two below it.
const maxLoad = 6

func tagOf(id slotID) uint64 { return id[1] | 1 }

func (x *slotIndex) home(tag uint64) uint64 { return tag >> x.shift }

func (x *slotIndex) next(i uint64) uint64 { return (i + 1) & uint64(len(x.entries)-1) }

// get returns the slot with id, or nil. The full 128-bit id is compared on
// the slot, which the caller is about to touch anyway.
func (x *slotIndex) get(id slotID) *slot {
	if x.n == 0 {
		return nil
	}
	tag := tagOf(id)
	for i := x.home(tag); ; i = x.next(i) {
		e := &x.entries[i]
		if e.tag == tag && e.s.id == id {
			return e.s
		}
		if e.tag == 0 {
			return nil
		}
	}
}

// candidate returns the slot that is probably the one with id, or nil: the
// first whose tag matches. Unlike get it does not touch the slot to compare
// the whole id, which is what Prefetch needs.
func (x *slotIndex) candidate(id slotID) *slot {
	if x.n == 0 {
		return nil
	}
	tag := tagOf(id)
	for i := x.home(tag); ; i = x.next(i) {
		e := &x.entries[i]
		if e.tag == tag || e.tag == 0 {
			return e.s
		}
	}
}

// put adds s under s.id, which must not be present.
func (x *slotIndex) put(s *slot) {
	if (x.n+1)*8 > len(x.entries)*maxLoad {
		x.grow()
	}
	x.insert(tagOf(s.id), s)
	x.n++
}

func (x *slotIndex) insert(tag uint64, s *slot) {
	i := x.home(tag)
	for x.entries[i].tag != 0 {
		i = x.next(i)
	}
	x.entries[i] = indexEntry{tag: tag, s: s}
}

func (x *slotIndex) grow() {
	old := x.entries
	size := max(2*len(old), 64)
	x.entries = make([]indexEntry, size)
	// A large array is fresh memory from the OS. Rehashing would read each
	// page before writing it: the read maps the shared zero page, and the
	// write then copies it and flushes the TLB of every core by interrupt.
	// Writing zeros first costs one fault per page instead of two, and no
	// interrupts.
	clear(x.entries)
	x.shift = uint(64 - bits.TrailingZeros(uint(size)))
	for _, e := range old {
		if e.tag != 0 {
			x.insert(e.tag, e.s)
		}
	}
}

// remove deletes the entry of s. Later entries of the probe run shift back
// into the hole (no tombstones), so lookups never probe past stale places.
func (x *slotIndex) remove(s *slot) {
	if x.n == 0 {
		return
	}
	tag := tagOf(s.id)
	i := x.home(tag)
	for x.entries[i].s != s {
		if x.entries[i].tag == 0 {
			return
		}
		i = x.next(i)
	}
	x.n--
	closeHole(x.entries, i, func(e *indexEntry) bool { return e.tag == 0 },
		func(e *indexEntry) uint64 { return x.home(e.tag) })
}

// closeHole empties place i of a linear-probing array (its length a power
// of two) without a tombstone: each later entry of the probe run moves back
// into the hole when its home is not in the cyclic range (hole, entry],
// since the hole then lies on its probe path, and the hole moves to where
// it was. free tells a free place, home an entry's home.
func closeHole[E any](entries []E, i uint64, free func(*E) bool, home func(*E) uint64) {
	mask := uint64(len(entries) - 1)
	for j := (i + 1) & mask; !free(&entries[j]); j = (j + 1) & mask {
		if (j-home(&entries[j]))&mask >= (j-i)&mask {
			entries[i] = entries[j]
			i = j
		}
	}
	var empty E
	entries[i] = empty
}
