package windows

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
	"unsafe"

	"github.com/riskstream/riskstream/internal/prefetch"
	"github.com/riskstream/riskstream/watermark"
)

// maxColdChunk is the largest size of the chunks the cold store appends
// records to: a sixteenth of its budget up to that, so that reclaiming one
// frees a small part of it. A record larger than a chunk gets a chunk of
// its own.
const maxColdChunk = 1 << 20

// maxColdBytes is the most a cold store's budget may be: a quarter of the
// chunk numbers a location has room for (packLoc), in chunks of the
// largest size, so that the chunks holding records always leave most
// numbers free (renumber). Over it, states go to the Backend.
const maxColdBytes = renumberAt / 4 * maxColdChunk

// coldStore keeps the encoded state of slots evicted from the cache (the
// cold tier), in memory while it fits a byte budget, and in the Backend
// beyond it. Records are appended to large byte chunks that hold no
// pointers, which the garbage collector never scans, and found through
// one open-addressing index per spec that holds none either: a state
// there costs its encoded size, its key, a word of its id and an index
// entry, not the hundreds of bytes of a decoded slot and its objects
// (docs/format/state.md "Memory").
//
// Chunks are kept in the order they were filled. When the store is over
// its budget it reclaims the oldest chunk: records still current there
// move to the newest chunk while compacting brings the store well under
// its budget, and otherwise go to the Backend (spilled), the states
// evicted longest ago first, under a key made of their id (spillKey), so
// that the timer queue, which finds states by id, finds them there too.
//
// A rule's state the cache has not admitted (seen once or twice, as most
// are with millions of keys) needs no purge timer: the cache stores it
// (cache.untimed) in its rule's expiring chain of chunks, each of which
// notes the latest time at which a state it holds can go as a whole. Once
// the watermark reaches that, expire frees the chunk: every state still
// current there goes at once, without a timer, a read or an index removal
// each. Their index entries are then dead (dead), which lookups pass over
// and the indexes' sweeps drop (stateIndex.sweep). A state of such a chain
// that comes back into the cache gets a timer when it next changes, and
// one that is spilled gets one then (onExpiringSpill).
//
// In write-through mode (the live job, whose checkpoints must find every
// state in the Backend under its slot key, and whose restarts rebuild the
// ids with new seeds) each record is also written to the Backend when it
// is stored, and spilling only forgets it; a state forgotten with a timer
// pending is reported to onSpill, for a timer that finds it by key.
type coldStore struct {
	backend      Backend
	writeThrough bool
	seeds        [2]maphash.Seed
	budget       int // bytes the chunks and indexes may take
	chunkBytes   int
	// outside is memory the store's budget must leave to others (pending
	// timers); it is read at each reclaim.
	outside func() int

	idx []stateIndex // per spec; shared with the cache (see stateIndex)
	// slots are the cache's, which the indexes' entries of cached states
	// name; cachedEntries counts those entries.
	slots         *slotTable
	cachedEntries int
	// chunks[0] is the oldest; chunk seq firstSeq+i is chunks[i].
	chunks   []coldChunk
	firstSeq uint64
	spare    [][]byte // emptied chunks of the standard size
	// alloc is the bytes of the chunks, used those written to, live those
	// of current records.
	alloc, used, live int
	// indexAlloc is the bytes of the index arrays, cached states' entries
	// included.
	indexAlloc int
	// spilled may hold the ids of states that are in the Backend but not in
	// the store, spilled ones. While it is empty, a key the store does not
	// hold costs no Backend read.
	spilled idFilter
	// restored is set when the Backend held states before the store
	// started (a restore): any key may then be there.
	restored bool
	onSpill  func(key []byte, at int64)
	spills   int64 // records written to the Backend by spilling
	// expiring says whether states may be stored without a purge timer,
	// in an expiring chain: not when writing through, where each state's
	// copy in the Backend needs its delete.
	expiring bool
	// open is the sequence number of the chunk each chain appends to (0:
	// none yet).
	open []uint64
	// nextExpiry is at most the earliest expires of an expiring chunk.
	nextExpiry int64
	// expired counts, per spec, the chunks of its expiring chain that
	// expire freed: an index whose sweep saw fewer has dead entries to
	// sweep (stateIndex.sweep).
	expired []int
	// onExpiringSpill gives a timer to a state of an expiring chain that
	// reclaim spills: in the Backend it needs one to go.
	onExpiringSpill func(spec int, id slotID, at int64)
	val, key        []byte
	timerKey        []byte
	seqBits         [1 << locSeqBits / 64]uint64 // chunkBits'
}

type coldChunk struct {
	b    []byte // nil once expired (see expire)
	live int    // bytes of current records
	// chain is what the chunk is appended to: 0 the store's main chain,
	// whose states have purge timers, 1+spec the expiring chain of a
	// rule's states that have none.
	chain int
	// expires is, in an expiring chain, the latest time at which a
	// record's state can go as a whole; noTimer in the main chain.
	expires int64
}

// packLoc is a record's location: the sequence number of its chunk and its
// offset there in 8-byte units (records start at a multiple of 8, below
// maxColdChunk: a larger record is alone in its chunk), in the low 32
// bits, which an index entry holds; and above them its size, which the
// entry leaves out (0 there: the size is read from the record), so that
// replacing a record whose location a cached slot keeps updates the
// accounting without reading the old one, long out of the CPU cache. The
// top bit stays clear, for cachedRef: sizes are capped at maxLocSize, and
// sequence numbers stay below 2^locSeqBits (see renumberAt).
func packLoc(seq uint64, off, size int) uint64 {
	return uint64(min(size, maxLocSize))<<32 | seq<<locOffBits | uint64(off>>3)
}

// The bits of a location's low 32: the chunk's sequence number above the
// offset in 8-byte units.
const (
	locOffBits = 17 // maxColdChunk / 8
	locSeqBits = 32 - locOffBits
)

// maxLocSize is the largest size a location holds: a record of this size
// or more is read for its size (recordSize).
const maxLocSize = 1<<31 - 1

func locSeq(loc uint64) uint64 { return loc >> locOffBits & (1<<locSeqBits - 1) }

func locOff(loc uint64) int { return int(loc&(1<<locOffBits-1)) << 3 }

// locSize is the size a location holds, 0 for one from an index entry.
func locSize(loc uint64) int { return int(loc >> 32) }

// sized returns loc, of a current record, with the record's size, read
// from the record if loc lacks it.
func (c *coldStore) sized(loc uint64) uint64 {
	return packLoc(locSeq(loc), locOff(loc), c.recordSize(loc))
}

// sameRecord reports whether two locations, with or without a size,
// name the same record.
func sameRecord(a, b uint64) bool { return uint32(a) == uint32(b) }

func newColdStore(backend Backend, specs int, budget int, writeThrough bool) *coldStore {
	c := &coldStore{
		backend:      backend,
		writeThrough: writeThrough,
		budget:       min(budget, maxColdBytes),
		chunkBytes:   min(maxColdChunk, 1<<max(bits.Len(uint(budget/16))-1, 12)),
		firstSeq:     1,
		expiring:     !writeThrough,
		open:         []uint64{0},
		nextExpiry:   noTimer,
	}
	c.addIndexes(specs)
	return c
}

// record returns the key and value of the record at loc and its size.
func (c *coldStore) record(loc uint64) (key, val []byte, size int) {
	b := c.chunks[locSeq(loc)-c.firstSeq].b[locOff(loc)+8:]
	kl, n := binary.Uvarint(b)
	key = b[n : n+int(kl)]
	b = b[n+int(kl):]
	vl, m := binary.Uvarint(b)
	val = b[m : m+int(vl)]
	return key, val, alignRecord(8 + n + int(kl) + m + int(vl))
}

// holds reports whether e, a used place whose tag matched, holds a state
// whose slot id has w as its first word.
func (c *coldStore) holds(e *stateEntry, w uint64) bool { return c.current(e) && c.firstWord(e) == w }

// firstWord returns the first word of the slot id of e's state, a current
// one, which the index entry does not hold: from the cached slot, or from
// the head of the record (append).
func (c *coldStore) firstWord(e *stateEntry) uint64 {
	if e.cached() {
		return c.slots.at(e.slotNum()).id[0]
	}
	loc := e.ref()
	return binary.LittleEndian.Uint64(c.chunks[locSeq(loc)-c.firstSeq].b[locOff(loc):])
}

// dead reports whether loc is in a chunk expire freed: its record's state
// went with the chunk.
func (c *coldStore) dead(loc uint64) bool {
	i := locSeq(loc) - c.firstSeq
	return i >= uint64(len(c.chunks)) || c.chunks[i].b == nil
}

// inExpiringChain reports whether the record at loc, a current one or 0
// (none), is in an expiring chain: its state has no purge timer.
func (c *coldStore) inExpiringChain(loc uint64) bool {
	return loc != 0 && c.chunks[locSeq(loc)-c.firstSeq].chain != 0
}

// chunkBits returns a bit for each chunk sequence number, set for the
// chunks not freed: a location names a current record, or one of a
// cached state, exactly when dead reports false for it.
func (c *coldStore) chunkBits() *[1 << locSeqBits / 64]uint64 {
	clear(c.seqBits[:])
	for i := range c.chunks {
		if c.chunks[i].b != nil {
			seq := c.firstSeq + uint64(i)
			c.seqBits[seq>>6] |= 1 << (seq & 63)
		}
	}
	return &c.seqBits
}

// current reports whether e, a used place, holds a state: it is cached, or
// its record was not expired.
func (c *coldStore) current(e *stateEntry) bool { return e.cached() || !c.dead(e.ref()) }

// addIndexes adds the indexes of n more specs.
func (c *coldStore) addIndexes(n int) {
	for range n {
		c.idx = append(c.idx, stateIndex{store: c, spec: len(c.idx)})
		c.open = append(c.open, 0)
		c.expired = append(c.expired, 0)
	}
}

// bytes is the memory the store takes: its chunks and index arrays.
func (c *coldStore) bytes() int { return c.alloc + c.indexBytes() }

// indexBytes is the memory of the index arrays' share of the cold store's
// states: the entries of cached slots are the cache's (HotSlotBytes).
func (c *coldStore) indexBytes() int {
	n := 0
	for i := range c.idx {
		n += c.idx[i].n
	}
	if n == 0 {
		return c.indexAlloc
	}
	return c.indexAlloc - c.indexAlloc*min(c.cachedEntries, n)/n
}

// get returns the stored value of key, whose spec is spec and hash id, and
// whose record in memory is at loc (0: none there); it is valid until the
// next call on the store.
func (c *coldStore) get(spec int, id slotID, key string, loc uint64) ([]byte, bool, error) {
	if !c.writeThrough || loc != 0 {
		_, val, found, err := c.getByID(spec, id, loc)
		return val, found, err
	}
	if !c.restored && !c.spilled.mayHold(spec, id) {
		return nil, false, nil
	}
	val, found, err := c.backend.Get(keyBytes(key))
	if err != nil {
		return nil, false, fmt.Errorf("windows: load state: %w", err)
	}
	return val, found, nil
}

// getByID returns the key and value of a state the store holds, in memory
// (its record at loc, which the caller's probe of the index found; 0 for
// none there) or, unless it writes through, spilled; found is false for
// one it does not. They are valid until the next call on the store.
func (c *coldStore) getByID(spec int, id slotID, loc uint64) (key, val []byte, found bool, err error) {
	if loc != 0 {
		key, val, _ = c.record(loc)
		return key, val, true, nil
	}
	if c.writeThrough || !c.spilled.mayHold(spec, id) {
		return nil, nil, false, nil // a state spilled in write-through has a key timer
	}
	b, found, err := c.backend.Get(c.spillKey(spec, id))
	if err != nil {
		return nil, nil, false, fmt.Errorf("windows: load state: %w", err)
	}
	if !found {
		return nil, nil, false, nil
	}
	key, val, err = splitSpilled(b)
	return key, val, err == nil, err
}

// splitSpilled splits the Backend value of a spilled state into its slot
// key and slot value.
func splitSpilled(b []byte) (key, val []byte, err error) {
	kl, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < kl {
		return nil, nil, fmt.Errorf("windows: spilled state: %w", errCorrupt)
	}
	return b[n : n+int(kl)], b[n+int(kl):], nil
}

// spillKeyLen is the length of a spillKey.
const spillKeyLen = 2 + 1 + 16

// spillKey is the Backend key of a state spilled without writing through
// (docs/format/state.md "Memory"): its spec, 0xff, which no key
// attribute's text starts with, and its id, so that its timer, which knows
// only the id, finds it. Such a store is never restored, so the ids' seeds
// need not outlive the process. The key is valid until the next call.
func (c *coldStore) spillKey(spec int, id slotID) []byte {
	c.key = append(c.key[:0], byte(spec>>8), byte(spec), 0xff)
	c.key = binary.BigEndian.AppendUint64(c.key, id[0])
	c.key = binary.BigEndian.AppendUint64(c.key, id[1])
	return c.key
}

// set stores val as the state of key; writing through, it moves the
// state's timer entry from the time old to at (stored.go). untimed says
// that the state has no purge timer: its record goes to its rule's
// expiring chain, which frees it once the watermark reaches at.
func (c *coldStore) set(spec int, id slotID, key string, val []byte, old, at int64, untimed bool) error {
	if c.writeThrough {
		if err := c.backend.Set(keyBytes(key), val); err != nil {
			return fmt.Errorf("windows: write state: %w", err)
		}
		if err := c.storeTimer(key, old, at); err != nil {
			return err
		}
	}
	if c.firstSeq+uint64(len(c.chunks)) >= renumberAt {
		c.renumber(1)
	}
	chain, expires := 0, noTimer
	if untimed {
		chain, expires = 1+spec, at
	}
	c.forget(c.setLoc(spec, id, c.append(id, keyBytes(key), val, chain, expires)))
	return c.reclaim()
}

// renumberAt is the chunk sequence number at which set numbers the chunks
// from 1 again: half of packLoc's 2^locSeqBits, so that the chunks reclaim
// may add after a set never reach it. Numbered again, the chunks that hold
// records take no more than a quarter of it (maxColdBytes), however many
// were freed between them: a store that appends 1 MiB chunks gets there
// after at least 12 GiB of records.
const renumberAt = 1 << (locSeqBits - 1)

// renumber gives the oldest chunk sequence number first, and the other
// chunks that hold records the numbers after it, in order, dropping the
// freed ones between them (expire frees chunks anywhere), and rewrites
// every location that names them.
func (c *coldStore) renumber(first uint64) {
	seqs := make([]uint64, len(c.chunks)) // new numbers by old place; 0 for a freed chunk
	next := first
	for i := range c.chunks {
		if c.chunks[i].b != nil {
			seqs[i] = next
			next++
		}
	}
	shift := func(loc uint64) uint64 { return packLoc(seqs[locSeq(loc)-c.firstSeq], locOff(loc), locSize(loc)) }
	for i := range c.idx {
		x := &c.idx[i]
		x.sweep() // a dead location's chunk has no new number
		for j := range x.entries {
			e := &x.entries[j]
			switch {
			case e.ref() == 0:
			case e.cached():
				if s := c.slots.at(e.slotNum()); s.coldLoc != 0 {
					if c.dead(s.coldLoc) {
						s.coldLoc = 0
					} else {
						s.coldLoc = shift(s.coldLoc)
					}
				}
			default:
				e.setRef(shift(e.ref()))
			}
		}
	}
	for chain, seq := range c.open {
		if seq != 0 {
			c.open[chain] = seqs[seq-c.firstSeq]
		}
	}
	kept := c.chunks[:0]
	for _, ch := range c.chunks {
		if ch.b != nil {
			kept = append(kept, ch)
		}
	}
	clear(c.chunks[len(kept):])
	c.chunks = kept
	c.firstSeq = first
}

// append writes the record of the state with id at the end of the newest
// chunk and returns its location. A record is the first word of id (for
// the index, which holds only part of the second: see stateEntry), then
// the key and the value, each with its uvarint length, then up to 7 bytes
// to the next multiple of 8, which its size counts.
func (c *coldStore) append(id slotID, key, val []byte, chain int, expires int64) uint64 {
	size := 7 + 8 + 2*binary.MaxVarintLen32 + len(key) + len(val)
	last := int(c.open[chain] - c.firstSeq)
	if c.open[chain] == 0 || len(c.chunks[last].b)+size > cap(c.chunks[last].b) {
		var b []byte
		if n := len(c.spare); n > 0 && size <= c.chunkBytes {
			b, c.spare = c.spare[n-1], c.spare[:n-1] // counted in alloc
		} else {
			b = make([]byte, 0, max(c.chunkBytes, size))
			c.alloc += cap(b)
		}
		expiresAt := int64(noTimer)
		if chain != 0 {
			expiresAt = watermark.Min
		}
		c.chunks = append(c.chunks, coldChunk{b: b, chain: chain, expires: expiresAt})
		last = len(c.chunks) - 1
		c.open[chain] = c.firstSeq + uint64(last)
	}
	ch := &c.chunks[last]
	if chain != 0 {
		ch.expires = max(ch.expires, expires)
		c.nextExpiry = min(c.nextExpiry, ch.expires)
	}
	off := len(ch.b)
	ch.b = binary.LittleEndian.AppendUint64(ch.b, id[0])
	ch.b = binary.AppendUvarint(ch.b, uint64(len(key)))
	ch.b = append(ch.b, key...)
	ch.b = binary.AppendUvarint(ch.b, uint64(len(val)))
	ch.b = append(ch.b, val...)
	ch.b = ch.b[:alignRecord(len(ch.b))] // the padding is never read
	size = len(ch.b) - off
	// The chunk's lines ahead are long out of the CPU cache (a spare
	// chunk, or memory new to the process), and a store to a line that is
	// not there holds up the stores after it: asked for a few records
	// ahead, the line is there when a record is written to it.
	if ahead := len(ch.b) + appendAhead; ahead < cap(ch.b) {
		prefetch.Lines([]uintptr{prefetch.Addr(&ch.b[:cap(ch.b)][ahead])})
	}
	ch.live += size
	c.live += size
	c.used += size
	return packLoc(c.firstSeq+uint64(last), off, size)
}

// alignRecord rounds a record's size up to a multiple of 8, which it
// takes in its chunk (packLoc).
func alignRecord(size int) int { return (size + 7) &^ 7 }

// appendAhead is how far past its end append asks for a chunk's line.
const appendAhead = 256

// forget notes that the record at loc (0: none) is no longer current.
func (c *coldStore) forget(loc uint64) {
	if loc == 0 || c.dead(loc) {
		return
	}
	size := c.recordSize(loc)
	c.chunks[locSeq(loc)-c.firstSeq].live -= size
	c.live -= size
}

// recordSize is the size of the record at loc, which loc holds unless it
// comes from an index entry, or is maxLocSize bytes or more.
func (c *coldStore) recordSize(loc uint64) int {
	if size := locSize(loc); size != 0 && size < maxLocSize {
		return size
	}
	_, _, size := c.record(loc)
	return size
}

// del removes the state of key; writing through, with its timer entry
// at timer.
func (c *coldStore) del(spec int, id slotID, key string, timer int64) error {
	c.forget(c.removeLoc(spec, id))
	var err error
	switch {
	case c.writeThrough:
		if err = c.backend.Delete(keyBytes(key)); err == nil {
			err = c.storeTimer(key, timer, noTimer)
		}
	case c.spilled.mayHold(spec, id):
		err = c.backend.Delete(c.spillKey(spec, id))
	}
	if err != nil {
		return fmt.Errorf("windows: delete state: %w", err)
	}
	return nil
}

// deleteTimerOf deletes the timer entry of the stored state val of key,
// in write-through mode.
func (c *coldStore) deleteTimerOf(key, val []byte) error {
	at, err := slotTimer(val)
	if err != nil {
		return fmt.Errorf("windows: state of %q: %w", key, err)
	}
	return c.storeTimer(unsafe.String(unsafe.SliceData(key), len(key)), at, noTimer)
}

// dropSpec removes every state of spec, writing through: from memory, and
// with its timer entry from the Backend.
func (c *coldStore) dropSpec(spec int) error {
	x := &c.idx[spec]
	for i := range x.entries {
		e := &x.entries[i]
		loc := c.entryLoc(e)
		if loc == 0 {
			continue
		}
		key, val, _ := c.record(loc)
		err := c.backend.Delete(key)
		if err == nil {
			err = c.deleteTimerOf(key, val)
		}
		if err != nil {
			return fmt.Errorf("windows: delete state: %w", err)
		}
		c.forget(c.swapLoc(e, 0))
	}
	x.rebuild() // cached slots of spec, if any, keep their entries
	return nil
}

// forgetSpecs forgets every state of the specs that rule reports, that
// the store holds in memory, leaving any spilled copy in the Backend: the
// cache has dropped their cached slots already. Their indexes are emptied
// without a look at their entries, which at the end of input are millions:
// what stays current, the other specs' records (the heatmaps'), is
// counted again instead, and the chunks left without a current record are
// freed.
func (c *coldStore) forgetSpecs(rule func(spec int) bool) {
	for spec := range c.idx {
		if rule(spec) {
			c.idx[spec].reset()
		}
	}
	for i := range c.chunks {
		c.chunks[i].live = 0
	}
	c.live = 0
	for spec := range c.idx {
		x := &c.idx[spec]
		for i := range x.entries {
			if e := &x.entries[i]; e.ref() != 0 {
				if loc := c.entryLoc(e); loc != 0 {
					size := c.recordSize(loc)
					c.chunks[locSeq(loc)-c.firstSeq].live += size
					c.live += size
				}
			}
		}
	}
	for i := range c.chunks {
		if ch := &c.chunks[i]; ch.b != nil && ch.live == 0 {
			c.free(i)
		}
	}
	c.dropFreed()
}

// entryLoc is the location of the record of e's state, 0 for none.
func (c *coldStore) entryLoc(e *stateEntry) uint64 {
	loc := e.ref()
	if e.cached() {
		loc = c.slots.at(e.slotNum()).coldLoc
	}
	if loc == 0 || c.dead(loc) {
		return 0
	}
	return loc
}

// loc is the location of the record of spec's state with id, 0 for none.
func (c *coldStore) loc(spec int, id slotID) uint64 {
	if e := c.idx[spec].entry(id); e != nil {
		return c.entryLoc(e)
	}
	return 0
}

// swapLoc sets the location of the record of e's state to loc (0: none)
// where it is kept, in the cached slot or in the entry itself, and returns
// the old one. An entry whose own location it sets to 0 is a free place
// from then on: its index must remove or rebuild it away.
func (c *coldStore) swapLoc(e *stateEntry, loc uint64) uint64 {
	if e.cached() {
		s := c.slots.at(e.slotNum())
		old := s.coldLoc
		s.coldLoc = loc
		return old
	}
	old := e.ref()
	e.setRef(loc)
	return old
}

// setLoc points spec's state with id at the record at loc, just appended,
// and returns the location of its old record (0 when it had none).
func (c *coldStore) setLoc(spec int, id slotID, loc uint64) uint64 {
	x := &c.idx[spec]
	x.recordSum += locSize(loc) - x.recordSum/8
	if e, added := x.add(id, loc); !added {
		return c.swapLoc(e, loc)
	}
	return 0
}

// removeLoc forgets the record of spec's state with id and returns its
// location (0 when it had none). The entry of a cached state stays.
func (c *coldStore) removeLoc(spec int, id slotID) uint64 {
	x := &c.idx[spec]
	e := x.entry(id)
	if e == nil {
		return 0
	}
	cached := e.cached()
	old := c.swapLoc(e, 0)
	if !cached {
		x.remove(e)
	}
	return old
}

// reclaim frees the oldest chunks while the store is over its budget.
func (c *coldStore) reclaim() error {
	for moved := 0; len(c.chunks) > 1; {
		budget := c.budget
		if c.outside != nil {
			budget -= c.outside()
		}
		// indexAlloc is at least indexBytes, which sums the indexes'
		// states: most calls end here.
		if c.alloc+c.indexAlloc <= budget || c.bytes() <= budget {
			return nil
		}
		// Moving records saves the Backend a write and a read, but only
		// while a quarter of the budget is records replaced or removed,
		// which compacting frees, and it brings the store well under its
		// budget; and once round the chunks at most.
		move := c.used-c.live >= budget/4 && c.live+c.indexBytes()+2*c.chunkBytes <= budget*3/4 &&
			moved < len(c.chunks)
		if move {
			moved++
		}
		if err := c.reclaimOldest(move); err != nil {
			return err
		}
	}
	return nil
}

// reclaimOldest empties the oldest chunk, moving its current records to
// the newest chunk, or spilling them to the Backend when move is false.
func (c *coldStore) reclaimOldest(move bool) error {
	ch := c.chunks[0]
	seq := c.firstSeq
	if c.open[ch.chain] == seq {
		c.open[ch.chain] = 0 // append must not take the chunk being emptied
	}
	for off := 0; off < len(ch.b); {
		key, val, size := c.record(packLoc(seq, off, 0))
		loc := packLoc(seq, off, size)
		off += size
		spec := specOf(key)
		id := hashSlotKey(c.seeds, unsafe.String(unsafe.SliceData(key), len(key)))
		if !sameRecord(c.loc(spec, id), loc) {
			continue // replaced or removed since
		}
		if move {
			// The record is copied before its chunk can be reused: append
			// never takes the chunk being emptied, which is not spare yet.
			c.setLoc(spec, id, c.append(id, key, val, ch.chain, ch.expires))
			continue
		}
		if ch.chain != 0 && c.onExpiringSpill != nil {
			at, err := slotTimer(val)
			if err != nil {
				return fmt.Errorf("windows: state of %q: %w", key, err)
			}
			c.onExpiringSpill(spec, id, at)
		}
		c.spilled.add(spec, id)
		if !c.writeThrough {
			c.val = binary.AppendUvarint(c.val[:0], uint64(len(key)))
			c.val = append(append(c.val, key...), val...)
			if err := c.backend.Set(c.spillKey(spec, id), c.val); err != nil {
				return fmt.Errorf("windows: spill state: %w", err)
			}
			c.spills++
		} else if c.onSpill != nil {
			at, err := slotTimer(val)
			if err != nil {
				return fmt.Errorf("windows: state of %q: %w", key, err)
			}
			if at != noTimer {
				c.onSpill(key, at)
			}
		}
		c.removeLoc(spec, id)
	}
	c.free(0)
	c.dropFreed()
	return nil
}

// free empties chunk i, whose records are all moved, spilled or expired;
// dropFreed then drops it if it is at the front.
func (c *coldStore) free(i int) {
	ch := &c.chunks[i]
	if seq := c.firstSeq + uint64(i); c.open[ch.chain] == seq {
		c.open[ch.chain] = 0
	}
	c.live -= ch.live
	c.used -= len(ch.b)
	// Two spare chunks are enough to refill from; the rest go back.
	if cap(ch.b) == c.chunkBytes && len(c.spare) < 2 {
		c.spare = append(c.spare, ch.b[:0])
	} else {
		c.alloc -= cap(ch.b)
	}
	*ch = coldChunk{}
}

// dropFreed drops the emptied chunks at the front: a location names a
// chunk by its sequence number, so those after an emptied one stay.
func (c *coldStore) dropFreed() {
	for len(c.chunks) > 0 && c.chunks[0].b == nil {
		c.chunks = c.chunks[1:]
		c.firstSeq++
	}
}

// expire frees the chunks of expiring chains whose every state the
// watermark wm wholly purged: the states of the current records there go
// without a timer, a read or an index removal each; their index entries
// are dead from then on, and the indexes' sweeps drop them.
func (c *coldStore) expire(wm int64) {
	if wm < c.nextExpiry {
		return
	}
	next := int64(noTimer)
	for i := range c.chunks {
		switch ch := &c.chunks[i]; {
		case ch.b == nil || ch.chain == 0:
		case ch.expires > wm:
			next = min(next, ch.expires)
		default:
			c.expired[ch.chain-1]++
			c.free(i)
		}
	}
	c.dropFreed()
	c.nextExpiry = next
}

// idFilter is a Bloom filter of (spec, slot id) pairs: it answers whether
// a state may be in the Backend without a Backend read. It grows by adding
// a filter four times the size of the last when that one is full, and never
// forgets: an id whose state was deleted since costs a Backend read that
// finds nothing. Each lookup touches one 64-byte block per filter.
type idFilter struct {
	sets []bloomSet
}

type bloomSet struct {
	blocks [][8]uint64
	n, cap int
}

// bloomBitsPerKey gives a false-positive rate of a few per thousand per
// set (blocked, 7 probes): a false positive costs a Backend read.
const bloomBitsPerKey = 16

func bloomHash(spec int, id slotID) (uint64, uint64) {
	return id[0] ^ uint64(spec)*0x9e3779b97f4a7c15, id[1]
}

func (f *idFilter) add(spec int, id slotID) {
	n := len(f.sets)
	if n == 0 || f.sets[n-1].n >= f.sets[n-1].cap {
		c := 1 << 16
		if n > 0 {
			c = 4 * f.sets[n-1].cap // few sets: a lookup misses in each
		}
		f.sets = append(f.sets, bloomSet{blocks: make([][8]uint64, c*bloomBitsPerKey/512), cap: c})
		n++
	}
	s := &f.sets[n-1]
	h1, h2 := bloomHash(spec, id)
	blk := &s.blocks[h1%uint64(len(s.blocks))]
	for k := 0; k < 7; k++ {
		bit := h2 >> (9 * k) & 511
		blk[bit>>6] |= 1 << (bit & 63)
	}
	s.n++
}

// empty reports whether no id was added.
func (f *idFilter) empty() bool { return len(f.sets) == 0 }

func (f *idFilter) mayHold(spec int, id slotID) bool {
	if f.empty() {
		return false
	}
	h1, h2 := bloomHash(spec, id)
next:
	for i := range f.sets {
		s := &f.sets[i]
		blk := &s.blocks[h1%uint64(len(s.blocks))]
		for k := 0; k < 7; k++ {
			bit := h2 >> (9 * k) & 511
			if blk[bit>>6]&(1<<(bit&63)) == 0 {
				continue next
			}
		}
		return true
	}
	return false
}

// bytes is the memory the filter takes.
func (f *idFilter) bytes() int {
	n := 0
	for i := range f.sets {
		n += len(f.sets[i].blocks) * 64
	}
	return n
}

// storeTimer replaces the timer entry of the slot with key at old with one
// at at (either noTimer: none).
func (c *coldStore) storeTimer(key string, old, at int64) error {
	if old == at {
		return nil
	}
	if old != noTimer {
		c.timerKey = appendTimerKey(c.timerKey[:0], old, key)
		if err := c.backend.Delete(c.timerKey); err != nil {
			return fmt.Errorf("windows: delete timer: %w", err)
		}
	}
	if at != noTimer {
		c.timerKey = appendTimerKey(c.timerKey[:0], at, key)
		if err := c.backend.Set(c.timerKey, timerValue); err != nil {
			return fmt.Errorf("windows: write timer: %w", err)
		}
	}
	return nil
}
