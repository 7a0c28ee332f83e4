package slotstore

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
	"unsafe"

	"github.com/riskstream/riskstream/internal/prefetch"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows/slot"
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
const maxColdBytes = RenumberAt / 4 * maxColdChunk

// Cold keeps the encoded state of slots evicted from the cache (the
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
// evicted longest ago first, under a key made of their id (SpillKey), so
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
// one that is spilled gets one then (OnExpiringSpill).
//
// In write-through mode (the live job, whose checkpoints must find every
// state in the Backend under its slot key, and whose restarts rebuild the
// ids with new seeds) each record is also written to the Backend when it
// is stored, and spilling only forgets it; a state forgotten with a timer
// pending is reported to OnSpill, for a timer that finds it by key.
type Cold struct {
	Backend      Backend
	WriteThrough bool
	seeds        [2]maphash.Seed
	budget       int // bytes the chunks and indexes may take
	ChunkBytes   int
	// Outside is memory the store's budget must leave to others (pending
	// timers); it is read at each reclaim.
	Outside func() int

	Idx []stateIndex // per spec; shared with the cache (see stateIndex)
	// slots are the cache's, which the indexes' entries of cached states
	// name; CachedEntries counts those entries.
	slots         *slotTable
	CachedEntries int
	// Chunks[0] is the oldest; chunk seq FirstSeq+i is chunks[i].
	Chunks   []coldChunk
	FirstSeq uint64
	spare    [][]byte // emptied chunks of the standard size
	// Alloc is the bytes of the chunks, used those written to, live those
	// of current records.
	Alloc, used, Live int
	// indexAlloc is the bytes of the index arrays, cached states' entries
	// included.
	indexAlloc int
	// Spilled may hold the ids of states that are in the Backend but not in
	// the store, spilled ones. While it is empty, a key the store does not
	// hold costs no Backend read.
	Spilled idFilter
	// Restored is set when the Backend held states before the store
	// started (a restore): any key may then be there.
	Restored bool
	OnSpill  func(key []byte, at int64)
	Spills   int64 // records written to the Backend by spilling
	// expiring says whether states may be stored without a purge timer,
	// in an expiring chain: not when writing through, where each state's
	// copy in the Backend needs its delete.
	expiring bool
	// open is the sequence number of the chunk each chain appends to (0:
	// none yet).
	open []uint64
	// nextExpiry is at most the earliest expires of an expiring chunk.
	nextExpiry int64
	// Expired counts, per spec, the chunks of its expiring chain that
	// expire freed: an index whose sweep saw fewer has dead entries to
	// sweep (stateIndex.sweep).
	Expired []int
	// OnExpiringSpill gives a timer to a state of an expiring chain that
	// reclaim spills: in the Backend it needs one to go.
	OnExpiringSpill func(spec int, id slot.ID, at int64)
	val, key        []byte
	timerKey        []byte
	seqBits         [1 << locSeqBits / 64]uint64 // chunkBits'
}

type coldChunk struct {
	Bytes []byte // nil once expired (see expire)
	live  int    // bytes of current records
	// chain is what the chunk is appended to: 0 the store's main chain,
	// whose states have purge timers, 1+spec the expiring chain of a
	// rule's states that have none.
	chain int
	// expires is, in an expiring chain, the latest time at which a
	// record's state can go as a whole; NoTimer in the main chain.
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
// sequence numbers stay below 2^locSeqBits (see RenumberAt).
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

// LocSeq is the number of the chunk a location is in.
func LocSeq(loc uint64) uint64 { return loc >> locOffBits & (1<<locSeqBits - 1) }

// LocOff is the offset of a location in its chunk, in bytes.
func LocOff(loc uint64) int { return int(loc&(1<<locOffBits-1)) << 3 }

// LocSize is the size a location holds, 0 for one from an index entry.
func LocSize(loc uint64) int { return int(loc >> 32) }

// sized returns loc, of a current record, with the record's size, read
// from the record if loc lacks it.
func (c *Cold) sized(loc uint64) uint64 {
	return packLoc(LocSeq(loc), LocOff(loc), c.recordSize(loc))
}

// sameRecord reports whether two locations, with or without a size,
// name the same record.
func sameRecord(a, b uint64) bool { return uint32(a) == uint32(b) }

// NewCold returns an empty cold store over backend for specs state ids,
// within budget bytes; writeThrough writes each record to backend as well.
func NewCold(backend Backend, specs int, budget int, writeThrough bool) *Cold {
	c := &Cold{
		Backend:      backend,
		WriteThrough: writeThrough,
		budget:       min(budget, maxColdBytes),
		ChunkBytes:   min(maxColdChunk, 1<<max(bits.Len(uint(budget/16))-1, 12)),
		FirstSeq:     1,
		expiring:     !writeThrough,
		open:         []uint64{0},
		nextExpiry:   slot.NoTimer,
	}
	c.AddIndexes(specs)
	return c
}

// Record returns the key and value of the record at loc and its size.
func (c *Cold) Record(loc uint64) (key, val []byte, size int) {
	b := c.Chunks[LocSeq(loc)-c.FirstSeq].Bytes[LocOff(loc)+8:]
	kl, n := binary.Uvarint(b)
	key = b[n : n+int(kl)]
	b = b[n+int(kl):]
	vl, m := binary.Uvarint(b)
	val = b[m : m+int(vl)]
	return key, val, alignRecord(8 + n + int(kl) + m + int(vl))
}

// holds reports whether e, a used place whose tag matched, holds a state
// whose slot id has w as its first word.
func (c *Cold) holds(e *stateEntry, w uint64) bool { return c.current(e) && c.firstWord(e) == w }

// firstWord returns the first word of the slot id of e's state, a current
// one, which the index entry does not hold: from the cached slot, or from
// the head of the record (append).
func (c *Cold) firstWord(e *stateEntry) uint64 {
	if e.Cached() {
		return c.slots.At(e.SlotNum()).ID[0]
	}
	loc := e.Ref()
	return binary.LittleEndian.Uint64(c.Chunks[LocSeq(loc)-c.FirstSeq].Bytes[LocOff(loc):])
}

// dead reports whether loc is in a chunk expire freed: its record's state
// went with the chunk.
func (c *Cold) dead(loc uint64) bool {
	i := LocSeq(loc) - c.FirstSeq
	return i >= uint64(len(c.Chunks)) || c.Chunks[i].Bytes == nil
}

// inExpiringChain reports whether the record at loc, a current one or 0
// (none), is in an expiring chain: its state has no purge timer.
func (c *Cold) inExpiringChain(loc uint64) bool {
	return loc != 0 && c.Chunks[LocSeq(loc)-c.FirstSeq].chain != 0
}

// chunkBits returns a bit for each chunk sequence number, set for the
// chunks not freed: a location names a current record, or one of a
// cached state, exactly when dead reports false for it.
func (c *Cold) chunkBits() *[1 << locSeqBits / 64]uint64 {
	clear(c.seqBits[:])
	for i := range c.Chunks {
		if c.Chunks[i].Bytes != nil {
			seq := c.FirstSeq + uint64(i)
			c.seqBits[seq>>6] |= 1 << (seq & 63)
		}
	}
	return &c.seqBits
}

// current reports whether e, a used place, holds a state: it is cached, or
// its record was not expired.
func (c *Cold) current(e *stateEntry) bool { return e.Cached() || !c.dead(e.Ref()) }

// AddIndexes adds the indexes of n more specs.
func (c *Cold) AddIndexes(n int) {
	for range n {
		c.Idx = append(c.Idx, stateIndex{store: c, spec: len(c.Idx)})
		c.open = append(c.open, 0)
		c.Expired = append(c.Expired, 0)
	}
}

// Bytes is the memory the store takes: its chunks and index arrays.
func (c *Cold) Bytes() int { return c.Alloc + c.indexBytes() }

// indexBytes is the memory of the index arrays' share of the cold store's
// states: the entries of cached slots are the cache's (HotSlotBytes).
func (c *Cold) indexBytes() int {
	n := 0
	for i := range c.Idx {
		n += c.Idx[i].N
	}
	if n == 0 {
		return c.indexAlloc
	}
	return c.indexAlloc - c.indexAlloc*min(c.CachedEntries, n)/n
}

// get returns the stored value of key, whose spec is spec and hash id, and
// whose record in memory is at loc (0: none there); it is valid until the
// next call on the store.
func (c *Cold) get(spec int, id slot.ID, key string, loc uint64) ([]byte, bool, error) {
	if !c.WriteThrough || loc != 0 {
		_, val, found, err := c.GetByID(spec, id, loc)
		return val, found, err
	}
	if !c.Restored && !c.Spilled.mayHold(spec, id) {
		return nil, false, nil
	}
	val, found, err := c.Backend.Get(keyBytes(key))
	if err != nil {
		return nil, false, fmt.Errorf("windows: load state: %w", err)
	}
	return val, found, nil
}

// GetByID returns the key and value of a state the store holds, in memory
// (its record at loc, which the caller's probe of the index found; 0 for
// none there) or, unless it writes through, spilled; found is false for
// one it does not. They are valid until the next call on the store.
func (c *Cold) GetByID(spec int, id slot.ID, loc uint64) (key, val []byte, found bool, err error) {
	if loc != 0 {
		key, val, _ = c.Record(loc)
		return key, val, true, nil
	}
	if c.WriteThrough || !c.Spilled.mayHold(spec, id) {
		return nil, nil, false, nil // a state spilled in write-through has a key timer
	}
	b, found, err := c.Backend.Get(c.SpillKey(spec, id))
	if err != nil {
		return nil, nil, false, fmt.Errorf("windows: load state: %w", err)
	}
	if !found {
		return nil, nil, false, nil
	}
	key, val, err = SplitSpilled(b)
	return key, val, err == nil, err
}

// SplitSpilled splits the Backend value of a spilled state into its slot
// key and slot value.
func SplitSpilled(b []byte) (key, val []byte, err error) {
	kl, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < kl {
		return nil, nil, fmt.Errorf("windows: spilled state: %w", slot.ErrCorrupt)
	}
	return b[n : n+int(kl)], b[n+int(kl):], nil
}

// SpillKeyLen is the length of a SpillKey.
const SpillKeyLen = 2 + 1 + 16

// SpillKey is the Backend key of a state spilled without writing through
// (docs/format/state.md "Memory"): its spec, 0xff, which no key
// attribute's text starts with, and its id, so that its timer, which knows
// only the id, finds it. Such a store is never restored, so the ids' seeds
// need not outlive the process. The key is valid until the next call.
func (c *Cold) SpillKey(spec int, id slot.ID) []byte {
	c.key = append(c.key[:0], byte(spec>>8), byte(spec), 0xff)
	c.key = binary.BigEndian.AppendUint64(c.key, id[0])
	c.key = binary.BigEndian.AppendUint64(c.key, id[1])
	return c.key
}

// Set stores val as the state of key; writing through, it moves the
// state's timer entry from the time old to at (stored.go). untimed says
// that the state has no purge timer: its record goes to its rule's
// expiring chain, which frees it once the watermark reaches at.
func (c *Cold) Set(spec int, id slot.ID, key string, val []byte, old, at int64, untimed bool) error {
	if c.WriteThrough {
		if err := c.Backend.Set(keyBytes(key), val); err != nil {
			return fmt.Errorf("windows: write state: %w", err)
		}
		if err := c.storeTimer(key, old, at); err != nil {
			return err
		}
	}
	if c.FirstSeq+uint64(len(c.Chunks)) >= RenumberAt {
		c.Renumber(1)
	}
	chain, expires := 0, slot.NoTimer
	if untimed {
		chain, expires = 1+spec, at
	}
	c.Forget(c.SetLoc(spec, id, c.Append(id, keyBytes(key), val, chain, expires)))
	return c.reclaim()
}

// RenumberAt is the chunk sequence number at which set numbers the chunks
// from 1 again: half of packLoc's 2^locSeqBits, so that the chunks reclaim
// may add after a set never reach it. Numbered again, the chunks that hold
// records take no more than a quarter of it (maxColdBytes), however many
// were freed between them: a store that appends 1 MiB chunks gets there
// after at least 12 GiB of records.
const RenumberAt = 1 << (locSeqBits - 1)

// Renumber gives the oldest chunk sequence number first, and the other
// chunks that hold records the numbers after it, in order, dropping the
// freed ones between them (expire frees chunks anywhere), and rewrites
// every location that names them.
func (c *Cold) Renumber(first uint64) {
	seqs := make([]uint64, len(c.Chunks)) // new numbers by old place; 0 for a freed chunk
	next := first
	for i := range c.Chunks {
		if c.Chunks[i].Bytes != nil {
			seqs[i] = next
			next++
		}
	}
	shift := func(loc uint64) uint64 { return packLoc(seqs[LocSeq(loc)-c.FirstSeq], LocOff(loc), LocSize(loc)) }
	for i := range c.Idx {
		x := &c.Idx[i]
		x.sweep() // a dead location's chunk has no new number
		for j := range x.Entries {
			e := &x.Entries[j]
			switch {
			case e.Ref() == 0:
			case e.Cached():
				if s := c.slots.At(e.SlotNum()); s.ColdLoc != 0 {
					if c.dead(s.ColdLoc) {
						s.ColdLoc = 0
					} else {
						s.ColdLoc = shift(s.ColdLoc)
					}
				}
			default:
				e.setRef(shift(e.Ref()))
			}
		}
	}
	for chain, seq := range c.open {
		if seq != 0 {
			c.open[chain] = seqs[seq-c.FirstSeq]
		}
	}
	kept := c.Chunks[:0]
	for _, ch := range c.Chunks {
		if ch.Bytes != nil {
			kept = append(kept, ch)
		}
	}
	clear(c.Chunks[len(kept):])
	c.Chunks = kept
	c.FirstSeq = first
}

// Append writes the record of the state with id at the end of the newest
// chunk and returns its location. A record is the first word of id (for
// the index, which holds only part of the second: see stateEntry), then
// the key and the value, each with its uvarint length, then up to 7 bytes
// to the next multiple of 8, which its size counts.
func (c *Cold) Append(id slot.ID, key, val []byte, chain int, expires int64) uint64 {
	size := 7 + 8 + 2*binary.MaxVarintLen32 + len(key) + len(val)
	last := int(c.open[chain] - c.FirstSeq)
	if c.open[chain] == 0 || len(c.Chunks[last].Bytes)+size > cap(c.Chunks[last].Bytes) {
		var b []byte
		if n := len(c.spare); n > 0 && size <= c.ChunkBytes {
			b, c.spare = c.spare[n-1], c.spare[:n-1] // counted in alloc
		} else {
			b = make([]byte, 0, max(c.ChunkBytes, size))
			c.Alloc += cap(b)
		}
		expiresAt := int64(slot.NoTimer)
		if chain != 0 {
			expiresAt = watermark.Min
		}
		c.Chunks = append(c.Chunks, coldChunk{Bytes: b, chain: chain, expires: expiresAt})
		last = len(c.Chunks) - 1
		c.open[chain] = c.FirstSeq + uint64(last)
	}
	ch := &c.Chunks[last]
	if chain != 0 {
		ch.expires = max(ch.expires, expires)
		c.nextExpiry = min(c.nextExpiry, ch.expires)
	}
	off := len(ch.Bytes)
	ch.Bytes = binary.LittleEndian.AppendUint64(ch.Bytes, id[0])
	ch.Bytes = binary.AppendUvarint(ch.Bytes, uint64(len(key)))
	ch.Bytes = append(ch.Bytes, key...)
	ch.Bytes = binary.AppendUvarint(ch.Bytes, uint64(len(val)))
	ch.Bytes = append(ch.Bytes, val...)
	ch.Bytes = ch.Bytes[:alignRecord(len(ch.Bytes))] // the padding is never read
	size = len(ch.Bytes) - off
	// The chunk's lines ahead are long out of the CPU cache (a spare
	// chunk, or memory new to the process), and a store to a line that is
	// not there holds up the stores after it: asked for a few records
	// ahead, the line is there when a record is written to it.
	if ahead := len(ch.Bytes) + appendAhead; ahead < cap(ch.Bytes) {
		prefetch.Lines([]uintptr{prefetch.Addr(&ch.Bytes[:cap(ch.Bytes)][ahead])})
	}
	ch.live += size
	c.Live += size
	c.used += size
	return packLoc(c.FirstSeq+uint64(last), off, size)
}

// alignRecord rounds a record's size up to a multiple of 8, which it
// takes in its chunk (packLoc).
func alignRecord(size int) int { return (size + 7) &^ 7 }

// appendAhead is how far past its end append asks for a chunk's line.
const appendAhead = 256

// Forget notes that the record at loc (0: none) is no longer current.
func (c *Cold) Forget(loc uint64) {
	if loc == 0 || c.dead(loc) {
		return
	}
	size := c.recordSize(loc)
	c.Chunks[LocSeq(loc)-c.FirstSeq].live -= size
	c.Live -= size
}

// recordSize is the size of the record at loc, which loc holds unless it
// comes from an index entry, or is maxLocSize bytes or more.
func (c *Cold) recordSize(loc uint64) int {
	if size := LocSize(loc); size != 0 && size < maxLocSize {
		return size
	}
	_, _, size := c.Record(loc)
	return size
}

// Del removes the state of key; writing through, with its timer entry
// at timer.
func (c *Cold) Del(spec int, id slot.ID, key string, timer int64) error {
	c.Forget(c.removeLoc(spec, id))
	var err error
	switch {
	case c.WriteThrough:
		if err = c.Backend.Delete(keyBytes(key)); err == nil {
			err = c.storeTimer(key, timer, slot.NoTimer)
		}
	case c.Spilled.mayHold(spec, id):
		err = c.Backend.Delete(c.SpillKey(spec, id))
	}
	if err != nil {
		return fmt.Errorf("windows: delete state: %w", err)
	}
	return nil
}

// DeleteTimerOf deletes the timer entry of the stored state val of key,
// in write-through mode.
func (c *Cold) DeleteTimerOf(key, val []byte) error {
	at, err := slot.EncodedTimer(val)
	if err != nil {
		return fmt.Errorf("windows: state of %q: %w", key, err)
	}
	return c.storeTimer(unsafe.String(unsafe.SliceData(key), len(key)), at, slot.NoTimer)
}

// dropSpec removes every state of spec, writing through: from memory, and
// with its timer entry from the Backend.
func (c *Cold) dropSpec(spec int) error {
	x := &c.Idx[spec]
	for i := range x.Entries {
		e := &x.Entries[i]
		loc := c.EntryLoc(e)
		if loc == 0 {
			continue
		}
		key, val, _ := c.Record(loc)
		err := c.Backend.Delete(key)
		if err == nil {
			err = c.DeleteTimerOf(key, val)
		}
		if err != nil {
			return fmt.Errorf("windows: delete state: %w", err)
		}
		c.Forget(c.swapLoc(e, 0))
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
func (c *Cold) forgetSpecs(rule func(spec int) bool) {
	for spec := range c.Idx {
		if rule(spec) {
			c.Idx[spec].Reset()
		}
	}
	for i := range c.Chunks {
		c.Chunks[i].live = 0
	}
	c.Live = 0
	for spec := range c.Idx {
		x := &c.Idx[spec]
		for i := range x.Entries {
			if e := &x.Entries[i]; e.Ref() != 0 {
				if loc := c.EntryLoc(e); loc != 0 {
					size := c.recordSize(loc)
					c.Chunks[LocSeq(loc)-c.FirstSeq].live += size
					c.Live += size
				}
			}
		}
	}
	for i := range c.Chunks {
		if ch := &c.Chunks[i]; ch.Bytes != nil && ch.live == 0 {
			c.free(i)
		}
	}
	c.dropFreed()
}

// EntryLoc is the location of the record of e's state, 0 for none.
func (c *Cold) EntryLoc(e *stateEntry) uint64 {
	loc := e.Ref()
	if e.Cached() {
		loc = c.slots.At(e.SlotNum()).ColdLoc
	}
	if loc == 0 || c.dead(loc) {
		return 0
	}
	return loc
}

// Loc is the location of the record of spec's state with id, 0 for none.
func (c *Cold) Loc(spec int, id slot.ID) uint64 {
	if e := c.Idx[spec].Entry(id); e != nil {
		return c.EntryLoc(e)
	}
	return 0
}

// swapLoc sets the location of the record of e's state to loc (0: none)
// where it is kept, in the cached slot or in the entry itself, and returns
// the old one. An entry whose own location it sets to 0 is a free place
// from then on: its index must remove or rebuild it away.
func (c *Cold) swapLoc(e *stateEntry, loc uint64) uint64 {
	if e.Cached() {
		s := c.slots.At(e.SlotNum())
		old := s.ColdLoc
		s.ColdLoc = loc
		return old
	}
	old := e.Ref()
	e.setRef(loc)
	return old
}

// SetLoc points spec's state with id at the record at loc, just appended,
// and returns the location of its old record (0 when it had none).
func (c *Cold) SetLoc(spec int, id slot.ID, loc uint64) uint64 {
	x := &c.Idx[spec]
	x.recordSum += LocSize(loc) - x.recordSum/8
	if e, added := x.add(id, loc); !added {
		return c.swapLoc(e, loc)
	}
	return 0
}

// removeLoc forgets the record of spec's state with id and returns its
// location (0 when it had none). The entry of a cached state stays.
func (c *Cold) removeLoc(spec int, id slot.ID) uint64 {
	x := &c.Idx[spec]
	e := x.Entry(id)
	if e == nil {
		return 0
	}
	cached := e.Cached()
	old := c.swapLoc(e, 0)
	if !cached {
		x.remove(e)
	}
	return old
}

// reclaim frees the oldest chunks while the store is over its budget.
func (c *Cold) reclaim() error {
	for moved := 0; len(c.Chunks) > 1; {
		budget := c.budget
		if c.Outside != nil {
			budget -= c.Outside()
		}
		// indexAlloc is at least indexBytes, which sums the indexes'
		// states: most calls end here.
		if c.Alloc+c.indexAlloc <= budget || c.Bytes() <= budget {
			return nil
		}
		// Moving records saves the Backend a write and a read, but only
		// while a quarter of the budget is records replaced or removed,
		// which compacting frees, and it brings the store well under its
		// budget; and once round the chunks at most.
		move := c.used-c.Live >= budget/4 && c.Live+c.indexBytes()+2*c.ChunkBytes <= budget*3/4 &&
			moved < len(c.Chunks)
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
func (c *Cold) reclaimOldest(move bool) error {
	ch := c.Chunks[0]
	seq := c.FirstSeq
	if c.open[ch.chain] == seq {
		c.open[ch.chain] = 0 // append must not take the chunk being emptied
	}
	for off := 0; off < len(ch.Bytes); {
		key, val, size := c.Record(packLoc(seq, off, 0))
		loc := packLoc(seq, off, size)
		off += size
		spec := slot.SpecOf(key)
		id := slot.HashKey(c.seeds, unsafe.String(unsafe.SliceData(key), len(key)))
		if !sameRecord(c.Loc(spec, id), loc) {
			continue // replaced or removed since
		}
		if move {
			// The record is copied before its chunk can be reused: append
			// never takes the chunk being emptied, which is not spare yet.
			c.SetLoc(spec, id, c.Append(id, key, val, ch.chain, ch.expires))
			continue
		}
		if ch.chain != 0 && c.OnExpiringSpill != nil {
			at, err := slot.EncodedTimer(val)
			if err != nil {
				return fmt.Errorf("windows: state of %q: %w", key, err)
			}
			c.OnExpiringSpill(spec, id, at)
		}
		c.Spilled.add(spec, id)
		if !c.WriteThrough {
			c.val = binary.AppendUvarint(c.val[:0], uint64(len(key)))
			c.val = append(append(c.val, key...), val...)
			if err := c.Backend.Set(c.SpillKey(spec, id), c.val); err != nil {
				return fmt.Errorf("windows: spill state: %w", err)
			}
			c.Spills++
		} else if c.OnSpill != nil {
			at, err := slot.EncodedTimer(val)
			if err != nil {
				return fmt.Errorf("windows: state of %q: %w", key, err)
			}
			if at != slot.NoTimer {
				c.OnSpill(key, at)
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
func (c *Cold) free(i int) {
	ch := &c.Chunks[i]
	if seq := c.FirstSeq + uint64(i); c.open[ch.chain] == seq {
		c.open[ch.chain] = 0
	}
	c.Live -= ch.live
	c.used -= len(ch.Bytes)
	// Two spare chunks are enough to refill from; the rest go back.
	if cap(ch.Bytes) == c.ChunkBytes && len(c.spare) < 2 {
		c.spare = append(c.spare, ch.Bytes[:0])
	} else {
		c.Alloc -= cap(ch.Bytes)
	}
	*ch = coldChunk{}
}

// dropFreed drops the emptied chunks at the front: a location names a
// chunk by its sequence number, so those after an emptied one stay.
func (c *Cold) dropFreed() {
	for len(c.Chunks) > 0 && c.Chunks[0].Bytes == nil {
		c.Chunks = c.Chunks[1:]
		c.FirstSeq++
	}
}

// Expire frees the chunks of expiring chains whose every state the
// watermark wm wholly purged: the states of the current records there go
// without a timer, a read or an index removal each; their index entries
// are dead from then on, and the indexes' sweeps drop them.
func (c *Cold) Expire(wm int64) {
	if wm < c.nextExpiry {
		return
	}
	next := int64(slot.NoTimer)
	for i := range c.Chunks {
		switch ch := &c.Chunks[i]; {
		case ch.Bytes == nil || ch.chain == 0:
		case ch.expires > wm:
			next = min(next, ch.expires)
		default:
			c.Expired[ch.chain-1]++
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

func bloomHash(spec int, id slot.ID) (uint64, uint64) {
	return id[0] ^ uint64(spec)*0x9e3779b97f4a7c15, id[1]
}

func (f *idFilter) add(spec int, id slot.ID) {
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

func (f *idFilter) mayHold(spec int, id slot.ID) bool {
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

// Bytes is the memory the filter takes.
func (f *idFilter) Bytes() int {
	n := 0
	for i := range f.sets {
		n += len(f.sets[i].blocks) * 64
	}
	return n
}

// storeTimer replaces the timer entry of the slot with key at old with one
// at at (either NoTimer: none).
func (c *Cold) storeTimer(key string, old, at int64) error {
	if old == at {
		return nil
	}
	if old != slot.NoTimer {
		c.timerKey = slot.AppendTimerKey(c.timerKey[:0], old, key)
		if err := c.Backend.Delete(c.timerKey); err != nil {
			return fmt.Errorf("windows: delete timer: %w", err)
		}
	}
	if at != slot.NoTimer {
		c.timerKey = slot.AppendTimerKey(c.timerKey[:0], at, key)
		if err := c.Backend.Set(c.timerKey, slot.TimerValue); err != nil {
			return fmt.Errorf("windows: write timer: %w", err)
		}
	}
	return nil
}

// Records is the number of spec's states with a record in c.
func (c *Cold) Records(spec int) int {
	n := 0
	x := &c.Idx[spec]
	for i := range x.Entries {
		if x.Entries[i].Ref() != 0 && c.EntryLoc(&x.Entries[i]) != 0 {
			n++
		}
	}
	return n
}

// CheckLive returns an error unless the store's count of current bytes,
// in all and per chunk, is the size of the records its indexes and cached
// slots name, which reclaim goes by. Tests call it after changes.
func (c *Cold) CheckLive() error {
	live := make([]int, len(c.Chunks))
	all := 0
	for spec := range c.Idx {
		x := &c.Idx[spec]
		for i := range x.Entries {
			if e := &x.Entries[i]; e.Ref() != 0 {
				if loc := c.EntryLoc(e); loc != 0 {
					_, _, size := c.Record(loc)
					live[LocSeq(loc)-c.FirstSeq] += size
					all += size
				}
			}
		}
	}
	if all != c.Live {
		return fmt.Errorf("the cold store counts %d current bytes, its records %d", c.Live, all)
	}
	for i := range c.Chunks {
		if c.Chunks[i].live != live[i] {
			return fmt.Errorf("cold chunk %d counts %d current bytes, its records %d", i, c.Chunks[i].live, live[i])
		}
	}
	return nil
}
