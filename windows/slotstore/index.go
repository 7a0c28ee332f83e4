package slotstore

import (
	"math/bits"
	"unsafe"

	"github.com/riskstream/riskstream/internal/prefetch"
	"github.com/riskstream/riskstream/windows/slot"
)

// stateIndex finds one spec's states in memory by slot id: the cached slot
// of a state the cache holds, else the location of its record in the cold
// store. One index for both tiers, because with millions of keys every
// probe of an index is a cache miss, and most lookups are of keys the
// cache does not hold: a lookup of such a key, or a purge of a cold
// state, touches one line of this array where an index per tier took two.
//
// It is open addressing with linear probing over a flat array, because a
// lookup is the engine's most frequent memory access: with hundreds of
// thousands of keys a Go map costs about three dependent cache misses per
// lookup (directory, table, group). A probe run keeps its entries in the
// order of their tags, whose top bits are their homes (Robin Hood order):
// a lookup of an absent id, most of them with millions of keys, stops at
// the first entry that would follow it rather than at the run's end, and
// entries can be moved in bulk, a run at a time, without probing (sweep,
// grow). Deletion shifts later entries of the probe run back (closeHole):
// no tombstones, so lookups never probe past stale places, except the
// entries of states that went with their chunk of the cold store
// (Cold.expire), which stay until a sweep, at the latest when the
// array would next double.
type stateIndex struct {
	Entries []stateEntry
	N       int  // used places, dead ones included
	shift   uint // 64 - log2(len(entries)): the home of an id is its tag's top bits
	// store holds the first word of each entry's slot id, which the entry
	// does not (see stateEntry), in the cached slot or the record: the
	// cold store the index belongs to, which sets it (a zero stateIndex
	// cannot find a state).
	store *Cold
	spec  int
	// swept is the store's count of the spec's expired chunks when sweep
	// last ran: if it has not changed since, no entry is dead.
	swept int
	// recordSum is eight times a running mean of the size of the spec's
	// records as they are written (Cold.SetLoc): a location in an
	// entry has no size, and the prefetching asks for a record's second
	// line when a record of the mean size would reach it (RecordBytes).
	recordSum int
	// last is what the latest lookup (entry) found, while no entry was
	// added or moved since: the event that probed a state the cache does
	// not hold then writes it back (add) without probing again.
	last lastProbe
}

// RecordBytes is the mean size of the spec's records, lately.
func (x *stateIndex) RecordBytes() int { return x.recordSum / 8 }

// lastProbe is the place where entry found id's entry, or the free place
// that ended its probe run.
type lastProbe struct {
	id           slot.ID
	place        uint64
	found, valid bool
}

// stateEntry is one place of the array: a ref in its low 32 bits and the
// top bit, and a tag in the 31 bits between. The tag is the top bits of
// the second word of the state's slot id, whose own top bits are its home.
// ref is 0 for a free place, the number of the cached slot (in the
// cache's slotTable) with cachedRef set, or else the location of the cold
// store's record without its size (see packLoc); a cached slot keeps the
// location of its record itself (slot.ColdLoc). Numbers, not pointers:
// the garbage collector never scans the array.
//
// An entry holds 31 bits of the 128-bit id: 8 bytes a place, eight to a
// cache line, and with millions of keys the array's size is what its
// probes and its growth cost. A lookup whose tag matches checks the first
// word of the id where the state is (Cold.firstWord): in the cached
// slot, or at the head of the record, the line a lookup that finds its
// state reads next anyway. So a state is known by 95 bits of its id (see
// cache.seeds). A lookup of an absent id, most of them with millions of
// keys, reads only the array, unless a state in its probe run shares its
// tag: one with the same home does one time in 2^(31-log2(places)), about
// one in 500 with 4M places. (The tag holds the home of an array of up
// to 2^31 places: 16 GiB, four times what a cold store may take,
// maxColdBytes.)
type stateEntry uint64

// cachedRef marks a stateEntry's ref as a slot number: packLoc never sets
// the top bit.
const cachedRef = 1 << 63

// refMask is the bits of an entry that are its ref; tagBits of the rest,
// from bit 32 on, are its tag.
const (
	refMask = cachedRef | 1<<32 - 1
	tagBits = 31
	tagMask = 1<<tagBits - 1
)

// tagOf is the tag of the entry of a state with id.
func tagOf(id slot.ID) uint64 { return id[1] >> (64 - tagBits) }

func (e *stateEntry) Ref() uint64 { return uint64(*e) & refMask }

func (e *stateEntry) tag() uint64 { return uint64(*e) >> 32 & tagMask }

// setRef sets e's ref to ref, a slot number with cachedRef or a location
// (whose size, if it has one, the entry leaves out: see packLoc).
func (e *stateEntry) setRef(ref uint64) { *e = stateEntry(uint64(*e)&^refMask | ref&refMask) }

// stateEntryBytes is what an entry costs, for the budget.
const stateEntryBytes = 8

// clearPiece is how many entries resize zeros at a time: 64 KiB.
const clearPiece = 4096

// clearEntries zeros es. Not inlined, so that a call to it is where a
// goroutine can be stopped.
//
//go:noinline
func clearEntries(es []stateEntry) { clear(es) }

// maxLoad is the fill (in 1/8) past which the array doubles: one half. Probe
// runs grow quickly with the fill (with linear probing, an insert walks
// about (1 + 1/(1-fill)^2)/2 places, 2.5 at one half full but 8.5 at three
// quarters), over lines of entries, each a cache miss the prefetching does
// not cover; and rankBase needs a run to take at most half the array. The
// budget counts the larger array (Cold.indexBytes).
const maxLoad = 4

func (e *stateEntry) Cached() bool { return *e&cachedRef != 0 }

func (e *stateEntry) SlotNum() uint32 { return uint32(*e) }

func (x *stateIndex) home(tag uint64) uint64 { return tag >> x.shift }

func (x *stateIndex) next(i uint64) uint64 { return (i + 1) & uint64(len(x.Entries)-1) }

// HomeAddr is the address of the place a lookup of id reads first, for
// prefetching.
func (x *stateIndex) HomeAddr(id slot.ID) uintptr {
	return prefetch.Addr(&x.Entries[x.home(tagOf(id))])
}

// find returns the place of id's entry and true, or, when id has none,
// the place where its entry belongs (add puts it there) and false. The
// loop is candidate's, with the first word checked: written out, because
// find is the engine's most frequent memory access, and a loop shared
// through a helper made it slower (BENCHMARKS.md,
// BenchmarkStateIndexProbe).
func (x *stateIndex) find(id slot.ID) (uint64, bool) {
	tag := tagOf(id)
	i := x.home(tag)
	base := x.rankBase(i)
	for at := (tag - base) & tagMask; ; i = x.next(i) {
		e := &x.Entries[i]
		if e.Ref() == 0 {
			return i, false
		}
		if other := (e.tag() - base) & tagMask; other > at {
			return i, false
		} else if other == at && x.store.holds(e, id[0]) {
			return i, true
		}
	}
}

// rankBase is the tag from which a probe from home ranks the tags of the
// entries it meets, and of the id it looks for, subtracting it modulo
// 2^tagBits: in their run's order, even where the run wraps around the
// end of the array. Half the array back from home: a run holds at most
// half the array's places (maxLoad), so the homes of the entries a probe
// meets lie less than half the array before or after home.
func (x *stateIndex) rankBase(home uint64) uint64 {
	return (home + 1 - uint64(len(x.Entries))/2) << x.shift
}

// Entry returns id's entry, or nil, noting where it looked (last), which
// add then takes instead of probing again.
func (x *stateIndex) Entry(id slot.ID) *stateEntry {
	if x.N == 0 {
		return nil
	}
	i, ok := x.find(id)
	x.last = lastProbe{id: id, place: i, found: ok, valid: true}
	if ok {
		return &x.Entries[i]
	}
	return nil
}

// candidate returns the first entry whose tag is id's, or nil, without
// checking the rest of the id: for prefetching, which must not wait for
// the line that check reads, and for which a wrong guess only loads a
// line for nothing. It reads only the line of id's home, which the
// prefetching asked for earlier: where the probe run goes on past that
// line, it returns nil and the address of the next line, for the caller
// to ask for, rather than wait for a line nobody asked for.
func (x *stateIndex) candidate(id slot.ID) (*stateEntry, uintptr) {
	if x.N == 0 {
		return nil, 0
	}
	tag := tagOf(id)
	i := x.home(tag)
	base := x.rankBase(i)
	for at := (tag - base) & tagMask; ; {
		e := &x.Entries[i]
		if e.Ref() == 0 {
			return nil, 0
		}
		if other := (e.tag() - base) & tagMask; other > at {
			return nil, 0
		} else if other == at {
			return e, 0
		}
		i = x.next(i)
		if next := prefetch.Addr(&x.Entries[i]); next%64 == 0 {
			return nil, next
		}
	}
}

// add returns id's entry, adding one if absent with ref, which must not
// be 0; it reports whether it added it.
func (x *stateIndex) add(id slot.ID, ref uint64) (*stateEntry, bool) {
	if (x.N+1)*8 > len(x.Entries)*maxLoad {
		if x.swept != x.store.Expired[x.spec] {
			x.sweep()
		}
		// Swept, the array doubles only if more than three eighths full,
		// so that a sweep frees room for an eighth more at least.
		if (x.N+1)*8*4 > len(x.Entries)*maxLoad*3 {
			x.grow()
		}
	}
	var i uint64
	var ok bool
	if x.last.valid && x.last.id == id {
		i, ok = x.last.place, x.last.found
	} else {
		i, ok = x.find(id)
	}
	if !ok {
		x.N++
		x.insertAt(i, stateEntry(tagOf(id)<<32|ref&refMask))
		x.last.valid = false
	}
	return &x.Entries[i], !ok
}

// insertAt puts e at place i, where its tag orders it, moving the entries
// from i to the end of the run on by one.
func (x *stateIndex) insertAt(i uint64, e stateEntry) {
	for {
		old := x.Entries[i]
		x.Entries[i] = e
		if old.Ref() == 0 {
			return
		}
		e, i = old, x.next(i)
	}
}

// place returns where an entry with tag goes: after those of its run
// that its tag follows.
func (x *stateIndex) place(tag uint64) uint64 {
	i := x.home(tag)
	base := x.rankBase(i)
	for at := (tag - base) & tagMask; ; i = x.next(i) {
		if e := &x.Entries[i]; e.Ref() == 0 || (e.tag()-base)&tagMask > at {
			return i
		}
	}
}

// remove deletes the entry at e, one of x's.
func (x *stateIndex) remove(e *stateEntry) {
	i := uint64((uintptr(unsafe.Pointer(e)) - uintptr(unsafe.Pointer(&x.Entries[0]))) / unsafe.Sizeof(*e))
	x.N--
	x.closeHole(i)
	// An index that spilling or purging emptied gives its memory back.
	if x.N*8 < len(x.Entries) && len(x.Entries) > 64 {
		x.resize(len(x.Entries) / 2)
	}
}

// Reset empties x.
func (x *stateIndex) Reset() {
	x.store.indexAlloc -= len(x.Entries) * stateEntryBytes
	*x = stateIndex{store: x.store, spec: x.spec}
}

// rebuild drops the entries whose ref was set to 0 without removing them:
// resize places only the others, in an array sized for them.
func (x *stateIndex) rebuild() {
	n := x.Held()
	if n == 0 {
		x.Reset()
		return
	}
	size := 64
	for n*8 > size*maxLoad {
		size *= 2
	}
	x.N = n
	x.resize(size)
}

// Held is how many states x holds: its used places but the dead ones.
func (x *stateIndex) Held() int {
	n := 0
	for i := range x.Entries {
		if e := &x.Entries[i]; e.Ref() != 0 && x.store.current(e) {
			n++
		}
	}
	return n
}

// sweep removes the dead entries, those of records whose chunk expired
// (Cold.expire), in one pass over the array (moveRuns).
func (x *stateIndex) sweep() {
	x.swept = x.store.Expired[x.spec]
	x.last.valid = false
	if x.N > 0 {
		x.N = x.moveRuns(x.Entries)
	}
}

// moveRuns moves the current entries of src, an index array in run order,
// to x.entries: to src itself (sweep), or to an empty array twice its
// size (grow). It goes once around src, from after a free place, where no
// probe run goes on, and moves each entry to the first place from its
// home that is not yet filled: the entries come in run order, so every
// place between an entry's home and its new place holds an entry that
// precedes it. It returns how many it moved. It is written without
// branches, because whether a place is free, dead or current is a coin
// toss the CPU would guess wrong half the time.
func (x *stateIndex) moveRuns(src []stateEntry) int {
	chunks := x.store.chunkBits()
	srcMask := uint64(len(src) - 1)
	start := uint64(0)
	// An empty place: no probe run goes past it, where one whose ref was
	// set to 0 may lie inside a run until rebuild.
	for src[start] != 0 {
		start++
	}
	start++
	// The places of x.entries from dstStart on, around the array, in the
	// order of src's from start: twice as many if x.entries is twice as
	// large, where an entry's home is one of the two places that its home
	// in src becomes.
	dstMask := uint64(len(x.Entries) - 1)
	dstStart := start * uint64(len(x.Entries)/len(src)) & dstMask
	inPlace := &src[0] == &x.Entries[0]
	filled, moved := uint64(0), uint64(0)
	for k := range uint64(len(src)) {
		i := (start + k) & srcMask
		v := uint64(src[i])
		if inPlace {
			src[i] = 0
		}
		ref := v & refMask
		used := (ref | -ref) >> 63
		seq := LocSeq(v)
		keep := used & (v>>63 | chunks[seq>>6]>>(seq&63)) & 1
		home := (x.home(v>>32&tagMask) - dstStart) & dstMask
		ahead := int64(home) - int64(filled)
		ahead &^= ahead >> 63 // 0 if home is filled already
		at := filled + uint64(ahead)*keep
		x.Entries[(dstStart+at)&dstMask] = stateEntry(v & -keep)
		filled = at + keep
		moved += keep
	}
	return int(moved)
}

func (x *stateIndex) grow() { x.resize(max(2*len(x.Entries), 64)) }

func (x *stateIndex) resize(size int) {
	old := x.Entries
	x.Entries = make([]stateEntry, size)
	x.store.indexAlloc += (size - len(old)) * stateEntryBytes
	// A large array is fresh memory from the OS. Rehashing would read each
	// page before writing it: the read maps the shared zero page, and the
	// write then copies it and flushes the TLB of every core by interrupt.
	// Writing zeros first costs one fault per page instead of two, and no
	// interrupts. A piece at a time, each in a call of its own: the runtime
	// cannot stop a goroutine inside a clear, only at a call, and the
	// garbage collector's thread would spin waiting for the whole array's
	// page faults.
	for i := 0; i < size; i += clearPiece {
		clearEntries(x.Entries[i:min(i+clearPiece, size)])
	}
	x.shift = uint(tagBits - bits.TrailingZeros(uint(size)))
	x.last.valid = false
	x.swept = x.store.Expired[x.spec]
	if len(old) > 0 && size == 2*len(old) {
		x.N = x.moveRuns(old)
		return
	}
	// Smaller: a run of old may wrap onto the start of another in the
	// new array, which moveRuns does not see to.
	n := 0
	for i := range old {
		if e := old[i]; e.Ref() != 0 && x.store.current(&e) {
			x.insertAt(x.place(e.tag()), e)
			n++
		}
	}
	x.N = n
}

// closeHole empties place i without a tombstone: the later entries of the
// probe run move back by one, up to the first that is at its home (run
// order puts those after it at their homes or after).
func (x *stateIndex) closeHole(i uint64) {
	x.last.valid = false
	for j := x.next(i); ; i, j = j, x.next(j) {
		e := x.Entries[j]
		if e.Ref() == 0 || x.home(e.tag()) == j {
			break
		}
		x.Entries[i] = e
	}
	x.Entries[i] = 0
}
