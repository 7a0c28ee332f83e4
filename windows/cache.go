package windows

import (
	"errors"
	"fmt"
	"hash/maphash"
	"iter"
	"maps"
	"slices"
	"unsafe"

	"github.com/riskstream/riskstream/rules"

	"github.com/riskstream/riskstream/internal/prefetch"
)

// Backend stores encoded slot state outside memory. state.DB is the real
// one; MemBackend is its in-memory twin for tests. The key and value
// passed in are only valid during the call: a Backend copies what it keeps.
type Backend interface {
	// Get returns the value stored under key; it is valid until the next
	// call on the Backend.
	Get(key []byte) (value []byte, found bool, err error)
	// GetSorted calls fn with the value stored under each of keys, which
	// are in increasing order, or found false; the value is valid only
	// during the call. It is what Get would return for each, read the way
	// a Backend reads a sorted run of keys best.
	GetSorted(keys [][]byte, fn func(i int, value []byte, found bool) error) error
	// Set stores value under key; the Backend may batch writes, but a Get
	// must see them.
	Set(key, value []byte) error
	// Delete removes key.
	Delete(key []byte) error
	// Seek calls fn with the keys stored from start on, and their values,
	// in key order, until fn returns false or an error; they are valid
	// only during the call, and fn may Delete the key. It may read what was committed before
	// the last writes: a restored operator pages in the timer entries
	// stored before it started with it (stored.go).
	Seek(start []byte, fn func(key, value []byte) (bool, error)) error
}

// cache is the write-back cache of decoded slots in front of the cold
// store (and through it the Backend): a slot is encoded and written when
// evicted or flushed, not per event.
// Eviction is CLOCK (second chance): an access only sets the slot's
// referenced bit, which matters with hundreds of thousands of slots, where
// the pointer updates of an LRU list cost a cache miss each.
type cache struct {
	// Slots are found through the cold store's indexes (stateIndex), one
	// per rule or heatmap, by a 128-bit hash of their key rather than the
	// key itself: comparing keys would cost a cache miss on the key's
	// bytes per lookup. The index tells states apart by 95 bits of it
	// (stateEntry): two keys of a run collide with probability n²/2⁹⁶
	// (below 1e-10 for a billion keys), and the seeds are random
	// per process, so no input can be crafted to collide. A heatmap keyed
	// by api has a handful of keys whose index stays in the CPU cache,
	// however many users the other rules track. So the hash leaves the
	// spec out.
	seeds [2]maphash.Seed
	ring  []*slot // every cached slot; s.ringIdx is its position
	hand  int
	cap   int
	// heavy is what cached slots weigh beyond one slot each (weigh), in
	// slots: the cache holds len(ring)+heavy of its cap.
	heavy int
	cold  *coldStore
	specs []*spec
	buf   []byte
	addrs []uintptr // prefetchVictims' buffer
	// writing holds the loads prefetchChanged gathered, which
	// writeBackSome asks for.
	writing prefetch.Queue
	// changed lists the slots that became dirty, in that order, so that a
	// flush writes them without visiting every cached slot. Entries of
	// slots written back since (or dropped) are stale and skipped;
	// changedHead is where writeBackSome goes on from.
	changed     []*slot
	changedHead int
	dirty       int // slots dirty now
	// slots holds every slot the cache has made. A dropped slot is reused
	// for a new one: nothing points to it but its entry in changed, if it
	// has one, which then serves the slot's new key, and Prefetch's hints.
	slots slotTable
	// fresh holds, for one event, the state of a key the cache does not
	// admit (see load); settle then moves it to the cold store.
	fresh *slot
	// freshTimed says that the state in fresh has a pending timer, which
	// it keeps (see load).
	freshTimed bool
	// key and val are a stored key and value copied while load or
	// lookupID makes room.
	key, val []byte
}

// slotTable holds slots in chunks that never move, so that an index entry
// names a slot by a 32-bit number rather than a pointer: the indexes then
// hold no pointers, and the garbage collector never scans them. A chunk is
// a large object, page-aligned, and a slot a multiple of 64 bytes, so
// every slot starts a cache line (see slot).
type slotTable struct {
	chunks []*[slotChunk]slot
	free   []uint32 // numbers of released slots
	made   uint32
}

// slotChunk is how many slots a chunk of a slotTable holds.
const slotChunk = 256

// at returns the slot numbered n.
func (t *slotTable) at(n uint32) *slot { return &t.chunks[n/slotChunk][n%slotChunk] }

// take returns a slot no one uses, a released one if any.
func (t *slotTable) take() *slot {
	if k := len(t.free); k > 0 {
		n := t.free[k-1]
		t.free = t.free[:k-1]
		return t.at(n)
	}
	if t.made%slotChunk == 0 {
		t.chunks = append(t.chunks, new([slotChunk]slot))
	}
	s := t.at(t.made)
	s.num = t.made
	t.made++
	return s
}

// release gives s back for take to reuse.
func (t *slotTable) release(s *slot) { t.free = append(t.free, s.num) }

func newCache(capacity int, cold *coldStore, specs []*spec) *cache {
	c := &cache{
		seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		cap:   capacity,
		cold:  cold,
		specs: specs,
	}
	cold.seeds = c.seeds
	cold.slots = &c.slots
	return c
}

// setSeeds makes the cache hash keys as another cache of the same specs.
func (c *cache) setSeeds(seeds [2]maphash.Seed) { c.seeds, c.cold.seeds = seeds, seeds }

// find is probe for a state about to be used: it notes the cached slot's
// use.
func (c *cache) find(spec int, id slotID) (*slot, uint64) {
	s, loc := c.probe(spec, id)
	if s != nil {
		s.referenced = true
	}
	return s, loc
}

// cached returns the cached slot of spec with id, or nil.
func (c *cache) cached(spec int, id slotID) *slot {
	s, _ := c.probe(spec, id)
	return s
}

// probe looks spec's state with id up in its index, once for both tiers:
// it returns the cached slot, or else the location of the state's record
// in the cold store, 0 when the store holds none in memory. With millions
// of keys most states are not cached, and a probe for the cached slot
// then one for the record walked the same entries twice.
func (c *cache) probe(spec int, id slotID) (*slot, uint64) {
	e := c.cold.idx[spec].entry(id)
	switch {
	case e == nil:
		return nil, 0
	case e.cached():
		return c.slots.at(e.slotNum()), 0
	}
	return nil, e.ref() // an entry found is current (stateIndex.find)
}

// lookup returns the slot of a key held as a string (a timer's), loading it
// from the cold store or the Backend if needed; nil when it does not exist.
func (c *cache) lookup(key string) (*slot, error) {
	if len(key) < 2 || specOf(key) >= len(c.specs) {
		return nil, fmt.Errorf("windows: slot key %q names no rule", key)
	}
	id := hashSlotKey(c.seeds, key)
	s, loc := c.find(specOf(key), id)
	if s != nil {
		return s, nil
	}
	return c.load(id, key, loc, false, false)
}

// keyBytes returns key's bytes, without a copy: a slot key is only ever
// read, and Backend calls neither keep nor change the key they are given.
func keyBytes(key string) []byte { return unsafe.Slice(unsafe.StringData(key), len(key)) }

// lookupID returns the slot of spec with id if the cache or the cold store
// holds it, loading it from the cold store; nil otherwise.
func (c *cache) lookupID(spec int, id slotID) (*slot, error) {
	s, loc := c.find(spec, id)
	if s != nil {
		return s, nil
	}
	key, val, found, err := c.cold.getByID(spec, id, loc)
	if err != nil || !found {
		return nil, err
	}
	// Copied before making room, which writes to the cold store: that may
	// move the record, or spill it, to be read back from the Backend.
	c.key = append(c.key[:0], key...)
	c.val = append(c.val[:0], val...)
	if err := c.makeRoom(); err != nil {
		return nil, err
	}
	return c.decode(spec, id, c.key, c.val)
}

// adopt returns the slot of spec with id, caching it from key and val, its
// stored key and value, which the caller read from the Backend, unless the
// cache holds it already.
func (c *cache) adopt(spec int, id slotID, key, val []byte) (*slot, error) {
	if s, _ := c.find(spec, id); s != nil {
		return s, nil
	}
	if err := c.makeRoom(); err != nil {
		return nil, err
	}
	return c.decode(spec, id, key, val)
}

// decode caches the state of spec with id from its stored key and value,
// in the room makeRoom made.
func (c *cache) decode(spec int, id slotID, key, val []byte) (*slot, error) {
	s := c.newSlot(string(key), c.specs[spec])
	if err := decodeSlotInto(s, val); err != nil {
		c.slots.release(s)
		return nil, err
	}
	c.insert(id, s, true)
	return s, nil
}

// spilledOnly reports whether the slot of spec with id is neither cached
// nor in the cold store's memory but may be in the Backend, spilled
// without writing through.
func (c *cache) spilledOnly(spec int, id slotID) bool {
	return !c.cold.writeThrough && c.cold.spilled.mayHold(spec, id) &&
		c.cold.idx[spec].entry(id) == nil
}

// purgeCold runs the purge timer, due at at, of a rule's slot with id that
// the cache does not hold, straight on the cold store when it can (see
// purgeAction). It reports whether the timer is done with: the slot was
// deleted, is not stored (gone, or spilled writing through, whose key
// timer runs instead), or has another timer; if not, the caller loads it.
func (c *cache) purgeCold(sp *spec, id slotID, at, wm int64) (bool, error) {
	s, loc := c.probe(sp.index, id)
	if s != nil {
		return false, nil
	}
	key, val, found, err := c.cold.getByID(sp.index, id, loc)
	if err != nil || !found {
		return true, err
	}
	switch act, err := sp.purgeAction(val, at, wm); {
	case err != nil:
		return false, err
	case act == purgeLoad:
		return false, nil
	case act == purgeDelete:
		// Its timer is this one (purgeAction).
		return true, c.cold.del(sp.index, id, unsafe.String(unsafe.SliceData(key), len(key)), at)
	}
	return true, nil
}

// keyOf returns the key of the slot of spec with id if the cache or the
// cold store holds it (in memory or spilled by id), else "".
func (c *cache) keyOf(spec int, id slotID) (string, error) {
	s, loc := c.probe(spec, id)
	if s != nil {
		return s.key, nil
	}
	key, _, found, err := c.cold.getByID(spec, id, loc)
	if found {
		return string(key), nil
	}
	return "", err
}

// load reads the slot of key, whose hash is id and which the cache does
// not hold, from the cold store (its record at loc, which probe returned)
// or the Backend, or creates it when create is set; nil when it does not
// exist. event says that an event is to change it, and settle to end that.
func (c *cache) load(id slotID, key string, loc uint64, create, event bool) (*slot, error) {
	sp := c.specs[specOf(key)]
	val, found, err := c.cold.get(sp.index, id, key, loc)
	if err != nil {
		return nil, err
	}
	full := c.full()
	// A rule's state enters the cache only once its windows hold
	// admitAfter events before this one: with millions of keys most are
	// seen once in a while, and caching each would cost a slot, a timer
	// and an eviction for a state that is likely not to be needed again
	// before its own eviction. Until then an event changes it in the
	// fresh slot, and it goes to the cold store when the event is done
	// (TinyLFU's doorkeeper, with the cold store as the door). Writing
	// through, where that writes it to the Backend each time, a state
	// enters at once while there is room. A heatmap's key enters on its
	// first event while there is room, on its second once the cache is
	// full.
	doorkeeper := event && sp.rule != nil && (full || !c.cold.writeThrough)
	switch {
	case !found && !create:
		return nil, nil
	case !found && (full || doorkeeper):
		return c.freshSlot(id, key, sp), nil
	case found && doorkeeper:
		s := c.freshSlot(id, key, sp)
		if err := decodeSlotInto(s, val); err != nil {
			return nil, err
		}
		s.persisted = true
		if c.cold.inExpiringChain(loc) {
			// Stored without a timer: it goes back to an expiring chain,
			// with the time its windows all end by (schedule).
			s.timerAt = noTimer
		} else {
			// It has a timer (a spilled state, or one evicted from the
			// cache, or any writing through), which it keeps: it goes
			// back where that timer finds it.
			c.freshTimed = true
		}
		if s.events() < admitAfter {
			return s, nil
		}
	}
	if found && full {
		// Room first: evicting writes to the cold store, which may move
		// the value it returned.
		c.val = append(c.val[:0], val...)
		val = c.val
		if err := c.makeRoom(); err != nil {
			return nil, err
		}
	}
	s := c.newSlot(key, sp)
	if found {
		if err := decodeSlotInto(s, val); err != nil {
			c.slots.release(s)
			return nil, err
		}
	}
	c.insert(id, s, found)
	return s, nil
}

// admitAfter is how many events a rule's state must hold for its key to
// enter the cache (load): a key on its third event in its windows, such as
// an attacker, enters; one seen once before stays out.
const admitAfter = 2

// freshSlot returns the fresh slot, emptied for key (see load).
func (c *cache) freshSlot(id slotID, key string, sp *spec) *slot {
	if c.fresh == nil {
		c.fresh = &slot{}
	}
	s := c.fresh
	s.reset(key, sp)
	s.id = id
	c.freshTimed = false
	return s
}

// settle ends the event's use of s: a fresh state (see load) goes to the
// cold store.
func (c *cache) settle(s *slot) error {
	if s != c.fresh {
		c.weigh(s)
		for len(c.ring)+c.heavy > c.cap && len(c.ring) > 1 {
			if err := c.evictOne(s); err != nil {
				return err
			}
		}
		return nil
	}
	return c.writeBack(s) // load resets it for the next key
}

// untimed reports whether s is a rule's fresh state (see load) with no
// purge timer: the cold store's expiring chain frees it (coldStore.expire).
// With millions of keys most states are of keys seen once, and a timer
// each, with the read and the index removal it costs, would be most of
// what such a state costs.
func (c *cache) untimed(s *slot) bool {
	return s == c.fresh && !c.freshTimed && c.cold.expiring && s.sp.rule != nil
}

// full reports whether the cache holds as much as its cap.
func (c *cache) full() bool { return len(c.ring)+c.heavy >= c.cap }

// distinctValueBytes is what a value in a distinct rule's sets costs in
// memory, with its share of the hash sets and of the index
// (TestDistinctValueBytes measures it).
const distinctValueBytes = 96

// weigh counts s, a cached slot an event changed, at what its sets hold:
// a distinct rule's hot key may hold up to distinctCap values, thousands
// of slots' worth of memory.
func (c *cache) weigh(s *slot) {
	if s.sp.rule == nil || s.sp.agg != rules.Distinct {
		return
	}
	w := int32(distinctHeld(s) * distinctValueBytes / HotSlotBytes)
	c.heavy += int(w - s.weight)
	s.weight = w
}

// makeRoom evicts slots until there is room for one more.
func (c *cache) makeRoom() error {
	for c.full() && len(c.ring) > 0 {
		if err := c.evictOne(nil); err != nil {
			return err
		}
	}
	return nil
}

// newSlot returns an empty slot for key, reusing a dropped one if any.
func (c *cache) newSlot(key string, sp *spec) *slot {
	s := c.slots.take()
	queued := s.queued // its entry in changed serves the new key
	s.reset(key, sp)
	s.queued = queued
	return s
}

// insert caches s under id, which makeRoom made room for; persisted says
// whether the cold store or the Backend holds a copy.
func (c *cache) insert(id slotID, s *slot, persisted bool) {
	s.persisted = persisted
	s.id = id
	ref := cachedRef | uint64(s.num)
	s.coldLoc = 0
	c.cold.cachedEntries++
	if e, added := c.cold.idx[s.sp.index].add(id, ref); !added {
		if e.cached() {
			panic(fmt.Sprintf("windows: state %q cached twice", s.key))
		}
		// Its record stays in the cold store, a copy while s is clean. The
		// slot keeps its size, read while the record is still in the CPU
		// cache from loading it.
		s.coldLoc = c.cold.sized(e.ref())
		e.setRef(ref)
		if c.cold.inExpiringChain(s.coldLoc) {
			// Stored without a timer: the next change schedules one.
			s.timerAt = noTimer
		}
	}
	s.ringIdx = int32(len(c.ring))
	c.ring = append(c.ring, s)
}

// evictOne sweeps the clock hand to a slot not referenced since the last
// sweep, other than keep, and evicts it.
func (c *cache) evictOne(keep *slot) error {
	for {
		if c.hand >= len(c.ring) {
			c.hand = 0
		}
		c.prefetchVictims()
		s := c.ring[c.hand]
		if s == keep {
			c.hand++
			continue
		}
		if s.referenced {
			s.referenced = false
			c.hand++
			continue
		}
		if err := c.writeBack(s); err != nil {
			return err
		}
		c.drop(s) // writeBack of an empty slot already removed it
		return nil
	}
}

// prefetchVictims starts loading what evicting the slots ahead of the
// clock hand touches, in two stages as Operator.Prefetch: the slot
// victimAhead places ahead, and the index entry of the one half as
// far, whose slot was asked for earlier. With more states than the cache
// holds, nearly every event evicts one, a slot long out of the CPU cache
// whose entry in the index then takes the place of its record.
func (c *cache) prefetchVictims() {
	const ahead = victimAhead
	addrs := c.addrs[:0]
	if h := c.hand + ahead; h < len(c.ring) {
		addrs = append(addrs, prefetch.Addr(c.ring[h]))
	}
	if h := c.hand + ahead/2; h < len(c.ring) {
		s := c.ring[h]
		if x := &c.cold.idx[s.sp.index]; x.n >= smallIndex {
			addrs = append(addrs, x.homeAddr(s.id))
		}
	}
	prefetch.Lines(addrs)
	c.addrs = addrs
}

// victimAhead is how far ahead of the clock hand prefetchVictims loads.
const victimAhead = 8

// dropRules forgets the state of every rule, at the end of input: a rule's
// timers only purge, which nobody sees, and at an infinite watermark they
// would load each state only to delete it. Heatmaps keep theirs, to fire.
func (c *cache) dropRules() error {
	if !c.cold.writeThrough {
		c.forgetRules()
		return nil
	}
	for i := 0; i < len(c.ring); {
		if s := c.ring[i]; s.sp.rule != nil {
			if err := c.remove(s); err != nil {
				return err
			}
			continue // the last slot moved to i
		}
		i++
	}
	for _, sp := range c.specs {
		if sp != nil && sp.rule != nil {
			if err := c.cold.dropSpec(sp.index); err != nil {
				return err
			}
		}
	}
	return nil
}

// forgetRules is dropRules without a write: a store that does not write
// through is never read again once input ends but for the heatmaps'
// states, and nothing is deleted from the Backend. Each rule's index is
// emptied at once rather than entry by entry.
func (c *cache) forgetRules() {
	for i := 0; i < len(c.ring); {
		s := c.ring[i]
		if s.sp.rule == nil {
			i++
			continue
		}
		c.clean(s)
		c.cold.cachedEntries--
		c.unring(s) // the last slot moved to i
	}
	c.cold.forgetSpecs(func(spec int) bool {
		return spec < len(c.specs) && c.specs[spec] != nil && c.specs[spec].rule != nil
	})
}

// drop forgets a cached slot, moving the last ring entry into its place.
func (c *cache) drop(s *slot) {
	if s.ringIdx < 0 {
		return
	}
	x := &c.cold.idx[s.sp.index]
	if e := x.entry(s.id); e != nil && e.ref() == cachedRef|uint64(s.num) {
		if s.coldLoc != 0 && !c.cold.dead(s.coldLoc) {
			e.setRef(s.coldLoc)
		} else {
			x.remove(e)
		}
		c.cold.cachedEntries--
	}
	c.unring(s)
}

// unring takes s, a cached slot whose index entry is seen to, out of the
// ring, moving the last ring entry into its place, and releases it.
func (c *cache) unring(s *slot) {
	s.coldLoc = 0
	last := c.ring[len(c.ring)-1]
	c.ring[s.ringIdx], last.ringIdx = last, s.ringIdx
	c.ring[len(c.ring)-1] = nil
	c.ring = c.ring[:len(c.ring)-1]
	s.ringIdx = -1
	c.heavy -= int(s.weight)
	s.weight = 0
	// Nothing the slot refers to stays reachable through it until it is
	// reused.
	s.wins, s.more, s.key, s.inline[0] = nil, nil, "", win{}
	c.slots.release(s)
}

// markDirty notes that s changed since it was last written to the Backend.
func (c *cache) markDirty(s *slot) {
	if s.dirty {
		return
	}
	s.dirty = true
	c.dirty++
	if s.queued || s == c.fresh {
		return
	}
	// Drop stale entries once they are the bulk: in a replay nothing is
	// written back before the end, and dropped slots must not be kept
	// alive here.
	if len(c.changed)-c.changedHead > 2*c.dirty+1024 {
		live := c.changed[:0]
		for _, x := range c.changed[c.changedHead:] {
			if x.dirty {
				live = append(live, x)
			} else {
				x.queued = false
			}
		}
		clear(c.changed[len(live):])
		c.changed, c.changedHead = live, 0
	}
	s.queued = true
	c.changed = append(c.changed, s)
}

// clean notes that s no longer differs from the Backend.
func (c *cache) clean(s *slot) {
	if s.dirty {
		s.dirty = false
		c.dirty--
	}
}

func (c *cache) writeBack(s *slot) error {
	if !s.dirty {
		return nil
	}
	if s.empty() {
		return c.remove(s)
	}
	c.buf = encodeSlot(c.buf[:0], s)
	if err := c.cold.set(s.sp.index, s.id, s.key, c.buf, s.storedTimer, s.timerAt, c.untimed(s)); err != nil {
		return err
	}
	s.storedTimer = s.timerAt
	s.persisted = true
	c.clean(s)
	return nil
}

// remove forgets a slot whose windows are all purged.
func (c *cache) remove(s *slot) error {
	if s.persisted {
		if err := c.cold.del(s.sp.index, s.id, s.key, s.storedTimer); err != nil {
			return err
		}
		s.storedTimer = noTimer
		s.persisted = false
	}
	c.drop(s)
	c.clean(s)
	return nil
}

// flush writes back every changed slot, keeping them cached.
func (c *cache) flush() error {
	err := c.writeBackSome(len(c.changed))
	clear(c.changed)
	c.changed, c.changedHead = c.changed[:0], 0
	return err
}

// writeBackSome writes back up to n changed slots, oldest change first.
func (c *cache) writeBackSome(n int) error {
	var errs []error
	for start := c.changedHead; n > 0 && c.changedHead < len(c.changed); c.changedHead++ {
		k := c.changedHead - start
		if k%writeBackPrefetch == 0 {
			c.prefetchChanged(c.changedHead, k == 0)
		}
		c.writing.Issue(writeBackPrefetch - k%writeBackPrefetch)
		s := c.changed[c.changedHead]
		c.changed[c.changedHead] = nil
		s.queued = false
		if !s.dirty {
			continue
		}
		if err := c.writeBack(s); err != nil {
			errs = append(errs, err)
		}
		n--
	}
	return errors.Join(errs...)
}

// MemBackend is an in-memory Backend, the twin of the Pebble one in tests.
type MemBackend struct {
	m map[string][]byte
	// sorted are the keys in order for Seek; nil once a key was added or
	// removed since.
	sorted []string
}

// NewMemBackend returns an empty MemBackend.
func NewMemBackend() *MemBackend { return &MemBackend{m: make(map[string][]byte)} }

// Get implements Backend.
func (b *MemBackend) Get(key []byte) ([]byte, bool, error) {
	v, ok := b.m[string(key)]
	return v, ok, nil
}

// GetSorted implements Backend.
func (b *MemBackend) GetSorted(keys [][]byte, fn func(i int, value []byte, found bool) error) error {
	for i, k := range keys {
		v, ok := b.m[string(k)]
		if err := fn(i, v, ok); err != nil {
			return err
		}
	}
	return nil
}

// Set implements Backend.
func (b *MemBackend) Set(key, value []byte) error {
	if _, ok := b.m[string(key)]; !ok {
		b.sorted = nil
	}
	b.m[string(key)] = append([]byte(nil), value...)
	return nil
}

// Delete implements Backend.
func (b *MemBackend) Delete(key []byte) error {
	if _, ok := b.m[string(key)]; ok {
		b.sorted = nil
		delete(b.m, string(key))
	}
	return nil
}

// Seek implements Backend.
func (b *MemBackend) Seek(start []byte, fn func(key, value []byte) (bool, error)) error {
	if b.sorted == nil {
		b.sorted = slices.Sorted(maps.Keys(b.m))
	}
	keys := b.sorted // fn may write: iterate over these keys as they were
	i, _ := slices.BinarySearch(keys, string(start))
	for _, k := range keys[i:] {
		v, ok := b.m[k]
		if !ok {
			continue // deleted by fn
		}
		if more, err := fn([]byte(k), v); !more || err != nil {
			return err
		}
	}
	return nil
}

// Len is the number of keys stored.
func (b *MemBackend) Len() int { return len(b.m) }

// All yields every key stored and its value, in no order.
func (b *MemBackend) All() iter.Seq2[string, []byte] { return maps.All(b.m) }

// smallIndex is the number of keys below which a spec's state stays in the
// CPU cache anyway and Prefetch leaves it alone.
const smallIndex = 4096

// writeBackPrefetch is how many changed slots prefetchChanged gathers the
// loads of at a time.
const writeBackPrefetch = 16

// prefetchChanged gathers, at changed slot k, what writing back the slots
// after it touches, for writeBackSome to ask for over the next
// writeBackPrefetch slots (prefetch.Queue.Issue): a checkpoint
// writes back every slot changed in the interval, most of them long out
// of the CPU cache, each with its key and often its panes elsewhere in
// memory. In two stages, as Prefetch: the slots two groups ahead (their
// first three lines: the key's header is in the third), and the keys and
// out-of-line windows of the next group, which their slots, prefetched a
// group earlier, locate. first is set for the first group of a write-back,
// whose own slots nobody prefetched.
func (c *cache) prefetchChanged(k int, first bool) {
	const g = writeBackPrefetch
	q := &c.writing
	q.Reset()
	slots := func(from, to int) {
		for _, s := range c.changed[min(from, len(c.changed)):min(to, len(c.changed))] {
			p := prefetch.Addr(s)
			q.Add(p)
			q.Add(p + 64)
			q.Add(p + 128)
		}
	}
	if first {
		slots(k, k+2*g)
	}
	slots(k+2*g, k+3*g)
	for _, s := range c.changed[min(k+g, len(c.changed)):min(k+2*g, len(c.changed))] {
		q.Add(prefetch.Addr(unsafe.StringData(s.key)))
		if len(s.wins) > 0 && &s.wins[0] != &s.inline[0] {
			q.Add(prefetch.Addr(&s.wins[0]))
		}
	}
}

// addCandidate gathers what a probe of x for id reads after the index
// line the prefetching asked for earlier: the two lines of the cached
// slot that an event touches (see slot), which it returns; the record of
// a state the cache does not hold; or, where the probe run goes on past
// that line, the next line of the index.
func (c *cache) addCandidate(q *prefetch.Queue, x *stateIndex, id slotID) *slot {
	e, more := x.candidate(id)
	switch {
	case more != 0:
		q.Add(more)
	case e == nil:
	case e.cached():
		s := c.slots.at(e.slotNum())
		q.Add(prefetch.Addr(s))
		q.Add(prefetch.Addr(s) + 64)
		return s
	default:
		c.cold.addRecord(q, e.ref(), x.recordBytes())
	}
	return nil
}

// addRecord gathers the lines of the record at loc, which is about size
// bytes: records follow each other at multiples of 8 bytes, so many of
// them straddle two lines. Of a larger record only the first two lines
// are asked for. Nothing for a dead location (a candidate entry may be
// one).
func (c *coldStore) addRecord(q *prefetch.Queue, loc uint64, size int) {
	if c.dead(loc) {
		return
	}
	addr := prefetch.Addr(&c.chunks[locSeq(loc)-c.firstSeq].b[locOff(loc)])
	q.Add(addr)
	if addr%64+uintptr(size) > 64 {
		q.Add(addr + 64)
	}
}
