package slotstore

import (
	"errors"
	"fmt"
	"hash/maphash"
	"iter"
	"maps"
	"slices"
	"unsafe"

	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows/slot"

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

// Cache is the write-back cache of decoded slots in front of the cold
// store (and through it the Backend): a slot is encoded and written when
// evicted or flushed, not per event.
// Eviction is CLOCK (second chance): an access only sets the slot's
// referenced bit, which matters with hundreds of thousands of slots, where
// the pointer updates of an LRU list cost a cache miss each.
type Cache struct {
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
	Seeds [2]maphash.Seed
	Ring  []*slot.Slot // every cached slot; s.ringIdx is its position
	hand  int
	cap   int
	// Heavy is what cached slots weigh beyond one slot each (weigh), in
	// slots: the cache holds len(ring)+heavy of its cap.
	Heavy int
	Cold  *Cold
	Specs []*slot.Spec
	buf   []byte
	addrs []uintptr // prefetchVictims' buffer
	// writing holds the loads prefetchChanged gathered, which
	// WriteBackSome asks for.
	writing prefetch.Queue
	// Changed lists the slots that became dirty, in that order, so that a
	// flush writes them without visiting every cached slot. Entries of
	// slots written back since (or dropped) are stale and skipped;
	// ChangedHead is where WriteBackSome goes on from.
	Changed     []*slot.Slot
	ChangedHead int
	Dirty       int // slots dirty now
	// Slots holds every slot the cache has made. A dropped slot is reused
	// for a new one: nothing points to it but its entry in changed, if it
	// has one, which then serves the slot's new key, and Prefetch's hints.
	Slots slotTable
	// Fresh holds, for one event, the state of a key the cache does not
	// admit (see load); settle then moves it to the cold store.
	Fresh *slot.Slot
	// freshTimed says that the state in fresh has a pending timer, which
	// it keeps (see load).
	freshTimed bool
	// key and val are a stored key and value copied while load or
	// LookupID makes room.
	key, val []byte
}

// slotTable holds slots in chunks that never move, so that an index entry
// names a slot by a 32-bit number rather than a pointer: the indexes then
// hold no pointers, and the garbage collector never scans them. A chunk is
// a large object, page-aligned, and a slot a multiple of 64 bytes, so
// every slot starts a cache line (see slot).
type slotTable struct {
	chunks []*[slotChunk]slot.Slot
	Free   []uint32 // numbers of released slots
	Made   uint32
}

// slotChunk is how many slots a chunk of a slotTable holds.
const slotChunk = 256

// At returns the slot numbered n.
func (t *slotTable) At(n uint32) *slot.Slot { return &t.chunks[n/slotChunk][n%slotChunk] }

// take returns a slot no one uses, a released one if any.
func (t *slotTable) take() *slot.Slot {
	if k := len(t.Free); k > 0 {
		n := t.Free[k-1]
		t.Free = t.Free[:k-1]
		return t.At(n)
	}
	if t.Made%slotChunk == 0 {
		t.chunks = append(t.chunks, new([slotChunk]slot.Slot))
	}
	s := t.At(t.Made)
	s.Num = t.Made
	t.Made++
	return s
}

// release gives s back for take to reuse.
func (t *slotTable) release(s *slot.Slot) { t.Free = append(t.Free, s.Num) }

// NewCache returns an empty cache of capacity slots in front of cold, for
// the rules and heatmaps specs (by state id).
func NewCache(capacity int, cold *Cold, specs []*slot.Spec) *Cache {
	c := &Cache{
		Seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		cap:   capacity,
		Cold:  cold,
		Specs: specs,
	}
	cold.seeds = c.Seeds
	cold.slots = &c.Slots
	return c
}

// SetSeeds makes the cache hash keys as another cache of the same specs.
func (c *Cache) SetSeeds(seeds [2]maphash.Seed) { c.Seeds, c.Cold.seeds = seeds, seeds }

// Find is probe for a state about to be used: it notes the cached slot's
// use.
func (c *Cache) Find(spec int, id slot.ID) (*slot.Slot, uint64) {
	s, loc := c.probe(spec, id)
	if s != nil {
		s.Referenced = true
	}
	return s, loc
}

// Cached returns the cached slot of spec with id, or nil.
func (c *Cache) Cached(spec int, id slot.ID) *slot.Slot {
	s, _ := c.probe(spec, id)
	return s
}

// probe looks spec's state with id up in its index, once for both tiers:
// it returns the cached slot, or else the location of the state's record
// in the cold store, 0 when the store holds none in memory. With millions
// of keys most states are not cached, and a probe for the cached slot
// then one for the record walked the same entries twice.
func (c *Cache) probe(spec int, id slot.ID) (*slot.Slot, uint64) {
	e := c.Cold.Idx[spec].Entry(id)
	switch {
	case e == nil:
		return nil, 0
	case e.Cached():
		return c.Slots.At(e.SlotNum()), 0
	}
	return nil, e.Ref() // an entry found is current (stateIndex.find)
}

// Lookup returns the slot of a key held as a string (a timer's), loading it
// from the cold store or the Backend if needed; nil when it does not exist.
func (c *Cache) Lookup(key string) (*slot.Slot, error) {
	if len(key) < 2 || slot.SpecOf(key) >= len(c.Specs) {
		return nil, fmt.Errorf("windows: slot key %q names no rule", key)
	}
	id := slot.HashKey(c.Seeds, key)
	s, loc := c.Find(slot.SpecOf(key), id)
	if s != nil {
		return s, nil
	}
	return c.Load(id, key, loc, false, false)
}

// keyBytes returns key's bytes, without a copy: a slot key is only ever
// read, and Backend calls neither keep nor change the key they are given.
func keyBytes(key string) []byte { return unsafe.Slice(unsafe.StringData(key), len(key)) }

// LookupID returns the slot of spec with id if the cache or the cold store
// holds it, loading it from the cold store; nil otherwise.
func (c *Cache) LookupID(spec int, id slot.ID) (*slot.Slot, error) {
	s, loc := c.Find(spec, id)
	if s != nil {
		return s, nil
	}
	key, val, found, err := c.Cold.GetByID(spec, id, loc)
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

// Adopt returns the slot of spec with id, caching it from key and val, its
// stored key and value, which the caller read from the Backend, unless the
// cache holds it already.
func (c *Cache) Adopt(spec int, id slot.ID, key, val []byte) (*slot.Slot, error) {
	if s, _ := c.Find(spec, id); s != nil {
		return s, nil
	}
	if err := c.makeRoom(); err != nil {
		return nil, err
	}
	return c.decode(spec, id, key, val)
}

// decode caches the state of spec with id from its stored key and value,
// in the room makeRoom made.
func (c *Cache) decode(spec int, id slot.ID, key, val []byte) (*slot.Slot, error) {
	s := c.NewSlot(string(key), c.Specs[spec])
	if err := slot.DecodeInto(s, val); err != nil {
		c.Slots.release(s)
		return nil, err
	}
	c.Insert(id, s, true)
	return s, nil
}

// SpilledOnly reports whether the slot of spec with id is neither cached
// nor in the cold store's memory but may be in the Backend, spilled
// without writing through.
func (c *Cache) SpilledOnly(spec int, id slot.ID) bool {
	return !c.Cold.WriteThrough && c.Cold.Spilled.mayHold(spec, id) &&
		c.Cold.Idx[spec].Entry(id) == nil
}

// PurgeCold runs the purge timer, due at at, of a rule's slot with id that
// the cache does not hold, straight on the cold store when it can (see
// PurgeAction). It reports whether the timer is done with: the slot was
// deleted, is not stored (gone, or spilled writing through, whose key
// timer runs instead), or has another timer; if not, the caller loads it.
func (c *Cache) PurgeCold(sp *slot.Spec, id slot.ID, at, wm int64) (bool, error) {
	s, loc := c.probe(sp.Index, id)
	if s != nil {
		return false, nil
	}
	key, val, found, err := c.Cold.GetByID(sp.Index, id, loc)
	if err != nil || !found {
		return true, err
	}
	switch act, err := sp.PurgeAction(val, at, wm); {
	case err != nil:
		return false, err
	case act == slot.PurgeLoad:
		return false, nil
	case act == slot.PurgeDelete:
		// Its timer is this one (PurgeAction).
		return true, c.Cold.Del(sp.Index, id, unsafe.String(unsafe.SliceData(key), len(key)), at)
	}
	return true, nil
}

// KeyOf returns the key of the slot of spec with id if the cache or the
// cold store holds it (in memory or spilled by id), else "".
func (c *Cache) KeyOf(spec int, id slot.ID) (string, error) {
	s, loc := c.probe(spec, id)
	if s != nil {
		return s.Key, nil
	}
	key, _, found, err := c.Cold.GetByID(spec, id, loc)
	if found {
		return string(key), nil
	}
	return "", err
}

// Load reads the slot of key, whose hash is id and which the cache does
// not hold, from the cold store (its record at loc, which probe returned)
// or the Backend, or creates it when create is set; nil when it does not
// exist. event says that an event is to change it, and settle to end that.
func (c *Cache) Load(id slot.ID, key string, loc uint64, create, event bool) (*slot.Slot, error) {
	sp := c.Specs[slot.SpecOf(key)]
	val, found, err := c.Cold.get(sp.Index, id, key, loc)
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
	doorkeeper := event && sp.Rule != nil && (full || !c.Cold.WriteThrough)
	switch {
	case !found && !create:
		return nil, nil
	case !found && (full || doorkeeper):
		return c.freshSlot(id, key, sp), nil
	case found && doorkeeper:
		s := c.freshSlot(id, key, sp)
		if err := slot.DecodeInto(s, val); err != nil {
			return nil, err
		}
		s.Persisted = true
		if c.Cold.inExpiringChain(loc) {
			// Stored without a timer: it goes back to an expiring chain,
			// with the time its windows all end by (schedule).
			s.TimerAt = slot.NoTimer
		} else {
			// It has a timer (a spilled state, or one evicted from the
			// cache, or any writing through), which it keeps: it goes
			// back where that timer finds it.
			c.freshTimed = true
		}
		if s.Events() < admitAfter {
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
	s := c.NewSlot(key, sp)
	if found {
		if err := slot.DecodeInto(s, val); err != nil {
			c.Slots.release(s)
			return nil, err
		}
	}
	c.Insert(id, s, found)
	return s, nil
}

// admitAfter is how many events a rule's state must hold for its key to
// enter the cache (load): a key on its third event in its windows, such as
// an attacker, enters; one seen once before stays out.
const admitAfter = 2

// freshSlot returns the fresh slot, emptied for key (see load).
func (c *Cache) freshSlot(id slot.ID, key string, sp *slot.Spec) *slot.Slot {
	if c.Fresh == nil {
		c.Fresh = &slot.Slot{}
	}
	s := c.Fresh
	s.Reset(key, sp)
	s.ID = id
	c.freshTimed = false
	return s
}

// Settle ends the event's use of s: a fresh state (see load) goes to the
// cold store.
func (c *Cache) Settle(s *slot.Slot) error {
	if s != c.Fresh {
		c.weigh(s)
		for len(c.Ring)+c.Heavy > c.cap && len(c.Ring) > 1 {
			if err := c.evictOne(s); err != nil {
				return err
			}
		}
		return nil
	}
	return c.writeBack(s) // load resets it for the next key
}

// Untimed reports whether s is a rule's fresh state (see load) with no
// purge timer: the cold store's expiring chain frees it (Cold.expire).
// With millions of keys most states are of keys seen once, and a timer
// each, with the read and the index removal it costs, would be most of
// what such a state costs.
func (c *Cache) Untimed(s *slot.Slot) bool {
	return s == c.Fresh && !c.freshTimed && c.Cold.expiring && s.Spec.Rule != nil
}

// full reports whether the cache holds as much as its cap.
func (c *Cache) full() bool { return len(c.Ring)+c.Heavy >= c.cap }

// DistinctValueBytes is what a value in a distinct rule's sets costs in
// memory, with its share of the hash sets and of the index
// (TestDistinctValueBytes measures it).
const DistinctValueBytes = 96

// weigh counts s, a cached slot an event changed, at what its sets hold:
// a distinct rule's hot key may hold up to DistinctCap values, thousands
// of slots' worth of memory.
func (c *Cache) weigh(s *slot.Slot) {
	if s.Spec.Rule == nil || s.Spec.Agg != rules.Distinct {
		return
	}
	w := int32(slot.DistinctHeld(s) * DistinctValueBytes / slot.HotSlotBytes)
	c.Heavy += int(w - s.Weight)
	s.Weight = w
}

// makeRoom evicts slots until there is room for one more.
func (c *Cache) makeRoom() error {
	for c.full() && len(c.Ring) > 0 {
		if err := c.evictOne(nil); err != nil {
			return err
		}
	}
	return nil
}

// NewSlot returns an empty slot for key, reusing a dropped one if any.
func (c *Cache) NewSlot(key string, sp *slot.Spec) *slot.Slot {
	s := c.Slots.take()
	queued := s.Queued // its entry in changed serves the new key
	s.Reset(key, sp)
	s.Queued = queued
	return s
}

// Insert caches s under id, which makeRoom made room for; persisted says
// whether the cold store or the Backend holds a copy.
func (c *Cache) Insert(id slot.ID, s *slot.Slot, persisted bool) {
	s.Persisted = persisted
	s.ID = id
	ref := cachedRef | uint64(s.Num)
	s.ColdLoc = 0
	c.Cold.CachedEntries++
	if e, added := c.Cold.Idx[s.Spec.Index].add(id, ref); !added {
		if e.Cached() {
			panic(fmt.Sprintf("windows: state %q cached twice", s.Key))
		}
		// Its record stays in the cold store, a copy while s is clean. The
		// slot keeps its size, read while the record is still in the CPU
		// cache from loading it.
		s.ColdLoc = c.Cold.sized(e.Ref())
		e.setRef(ref)
		if c.Cold.inExpiringChain(s.ColdLoc) {
			// Stored without a timer: the next change schedules one.
			s.TimerAt = slot.NoTimer
		}
	}
	s.RingIdx = int32(len(c.Ring))
	c.Ring = append(c.Ring, s)
}

// evictOne sweeps the clock hand to a slot not referenced since the last
// sweep, other than keep, and evicts it.
func (c *Cache) evictOne(keep *slot.Slot) error {
	for {
		if c.hand >= len(c.Ring) {
			c.hand = 0
		}
		c.prefetchVictims()
		s := c.Ring[c.hand]
		if s == keep {
			c.hand++
			continue
		}
		if s.Referenced {
			s.Referenced = false
			c.hand++
			continue
		}
		if err := c.writeBack(s); err != nil {
			return err
		}
		c.Drop(s) // writeBack of an empty slot already removed it
		return nil
	}
}

// prefetchVictims starts loading what evicting the slots ahead of the
// clock hand touches, in two stages as Operator.Prefetch: the slot
// victimAhead places ahead, and the index entry of the one half as
// far, whose slot was asked for earlier. With more states than the cache
// holds, nearly every event evicts one, a slot long out of the CPU cache
// whose entry in the index then takes the place of its record.
func (c *Cache) prefetchVictims() {
	const ahead = victimAhead
	addrs := c.addrs[:0]
	if h := c.hand + ahead; h < len(c.Ring) {
		addrs = append(addrs, prefetch.Addr(c.Ring[h]))
	}
	if h := c.hand + ahead/2; h < len(c.Ring) {
		s := c.Ring[h]
		if x := &c.Cold.Idx[s.Spec.Index]; x.N >= SmallIndex {
			addrs = append(addrs, x.HomeAddr(s.ID))
		}
	}
	prefetch.Lines(addrs)
	c.addrs = addrs
}

// victimAhead is how far ahead of the clock hand prefetchVictims loads.
const victimAhead = 8

// DropRules forgets the state of every rule, at the end of input: a rule's
// timers only purge, which nobody sees, and at an infinite watermark they
// would load each state only to delete it. Heatmaps keep theirs, to fire.
func (c *Cache) DropRules() error {
	if !c.Cold.WriteThrough {
		c.forgetRules()
		return nil
	}
	for i := 0; i < len(c.Ring); {
		if s := c.Ring[i]; s.Spec.Rule != nil {
			if err := c.Remove(s); err != nil {
				return err
			}
			continue // the last slot moved to i
		}
		i++
	}
	for _, sp := range c.Specs {
		if sp != nil && sp.Rule != nil {
			if err := c.Cold.dropSpec(sp.Index); err != nil {
				return err
			}
		}
	}
	return nil
}

// forgetRules is DropRules without a write: a store that does not write
// through is never read again once input ends but for the heatmaps'
// states, and nothing is deleted from the Backend. Each rule's index is
// emptied at once rather than entry by entry.
func (c *Cache) forgetRules() {
	for i := 0; i < len(c.Ring); {
		s := c.Ring[i]
		if s.Spec.Rule == nil {
			i++
			continue
		}
		c.Clean(s)
		c.Cold.CachedEntries--
		c.unring(s) // the last slot moved to i
	}
	c.Cold.forgetSpecs(func(spec int) bool {
		return spec < len(c.Specs) && c.Specs[spec] != nil && c.Specs[spec].Rule != nil
	})
}

// Drop forgets a cached slot, moving the last ring entry into its place.
func (c *Cache) Drop(s *slot.Slot) {
	if s.RingIdx < 0 {
		return
	}
	x := &c.Cold.Idx[s.Spec.Index]
	if e := x.Entry(s.ID); e != nil && e.Ref() == cachedRef|uint64(s.Num) {
		if s.ColdLoc != 0 && !c.Cold.dead(s.ColdLoc) {
			e.setRef(s.ColdLoc)
		} else {
			x.remove(e)
		}
		c.Cold.CachedEntries--
	}
	c.unring(s)
}

// unring takes s, a cached slot whose index entry is seen to, out of the
// ring, moving the last ring entry into its place, and releases it.
func (c *Cache) unring(s *slot.Slot) {
	s.ColdLoc = 0
	last := c.Ring[len(c.Ring)-1]
	c.Ring[s.RingIdx], last.RingIdx = last, s.RingIdx
	c.Ring[len(c.Ring)-1] = nil
	c.Ring = c.Ring[:len(c.Ring)-1]
	s.RingIdx = -1
	c.Heavy -= int(s.Weight)
	s.Weight = 0
	// Nothing the slot refers to stays reachable through it until it is
	// reused.
	s.Wins, s.More, s.Key, s.Inline[0] = nil, nil, "", slot.Win{}
	c.Slots.release(s)
}

// MarkDirty notes that s changed since it was last written to the Backend.
func (c *Cache) MarkDirty(s *slot.Slot) {
	if s.Dirty {
		return
	}
	s.Dirty = true
	c.Dirty++
	if s.Queued || s == c.Fresh {
		return
	}
	// Drop stale entries once they are the bulk: in a replay nothing is
	// written back before the end, and dropped slots must not be kept
	// alive here.
	if len(c.Changed)-c.ChangedHead > 2*c.Dirty+1024 {
		live := c.Changed[:0]
		for _, x := range c.Changed[c.ChangedHead:] {
			if x.Dirty {
				live = append(live, x)
			} else {
				x.Queued = false
			}
		}
		clear(c.Changed[len(live):])
		c.Changed, c.ChangedHead = live, 0
	}
	s.Queued = true
	c.Changed = append(c.Changed, s)
}

// Clean notes that s no longer differs from the Backend.
func (c *Cache) Clean(s *slot.Slot) {
	if s.Dirty {
		s.Dirty = false
		c.Dirty--
	}
}

func (c *Cache) writeBack(s *slot.Slot) error {
	if !s.Dirty {
		return nil
	}
	if s.Empty() {
		return c.Remove(s)
	}
	c.buf = slot.Encode(c.buf[:0], s)
	if err := c.Cold.Set(s.Spec.Index, s.ID, s.Key, c.buf, s.StoredTimer, s.TimerAt, c.Untimed(s)); err != nil {
		return err
	}
	s.StoredTimer = s.TimerAt
	s.Persisted = true
	c.Clean(s)
	return nil
}

// Remove forgets a slot whose windows are all purged.
func (c *Cache) Remove(s *slot.Slot) error {
	if s.Persisted {
		if err := c.Cold.Del(s.Spec.Index, s.ID, s.Key, s.StoredTimer); err != nil {
			return err
		}
		s.StoredTimer = slot.NoTimer
		s.Persisted = false
	}
	c.Drop(s)
	c.Clean(s)
	return nil
}

// Flush writes back every changed slot, keeping them cached.
func (c *Cache) Flush() error {
	err := c.WriteBackSome(len(c.Changed))
	clear(c.Changed)
	c.Changed, c.ChangedHead = c.Changed[:0], 0
	return err
}

// WriteBackSome writes back up to n changed slots, oldest change first.
func (c *Cache) WriteBackSome(n int) error {
	var errs []error
	for start := c.ChangedHead; n > 0 && c.ChangedHead < len(c.Changed); c.ChangedHead++ {
		k := c.ChangedHead - start
		if k%writeBackPrefetch == 0 {
			c.prefetchChanged(c.ChangedHead, k == 0)
		}
		c.writing.Issue(writeBackPrefetch - k%writeBackPrefetch)
		s := c.Changed[c.ChangedHead]
		c.Changed[c.ChangedHead] = nil
		s.Queued = false
		if !s.Dirty {
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

// SmallIndex is the number of keys below which a spec's state stays in the
// CPU cache anyway and Prefetch leaves it alone.
const SmallIndex = 4096

// writeBackPrefetch is how many changed slots prefetchChanged gathers the
// loads of at a time.
const writeBackPrefetch = 16

// prefetchChanged gathers, at changed slot k, what writing back the slots
// after it touches, for WriteBackSome to ask for over the next
// writeBackPrefetch slots (prefetch.Queue.Issue): a checkpoint
// writes back every slot changed in the interval, most of them long out
// of the CPU cache, each with its key and often its panes elsewhere in
// memory. In two stages, as Prefetch: the slots two groups ahead (their
// first three lines: the key's header is in the third), and the keys and
// out-of-line windows of the next group, which their slots, prefetched a
// group earlier, locate. first is set for the first group of a write-back,
// whose own slots nobody prefetched.
func (c *Cache) prefetchChanged(k int, first bool) {
	const g = writeBackPrefetch
	q := &c.writing
	q.Reset()
	slots := func(from, to int) {
		for _, s := range c.Changed[min(from, len(c.Changed)):min(to, len(c.Changed))] {
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
	for _, s := range c.Changed[min(k+g, len(c.Changed)):min(k+2*g, len(c.Changed))] {
		q.Add(prefetch.Addr(unsafe.StringData(s.Key)))
		if len(s.Wins) > 0 && &s.Wins[0] != &s.Inline[0] {
			q.Add(prefetch.Addr(&s.Wins[0]))
		}
	}
}

// AddCandidate gathers what a probe of x for id reads after the index
// line the prefetching asked for earlier: the two lines of the cached
// slot that an event touches (see slot), which it returns; the record of
// a state the cache does not hold; or, where the probe run goes on past
// that line, the next line of the index.
func (c *Cache) AddCandidate(q *prefetch.Queue, x *stateIndex, id slot.ID) *slot.Slot {
	e, more := x.candidate(id)
	switch {
	case more != 0:
		q.Add(more)
	case e == nil:
	case e.Cached():
		s := c.Slots.At(e.SlotNum())
		q.Add(prefetch.Addr(s))
		q.Add(prefetch.Addr(s) + 64)
		return s
	default:
		c.Cold.AddRecord(q, e.Ref(), x.RecordBytes())
	}
	return nil
}

// AddRecord gathers the lines of the record at loc, which is about size
// bytes: records follow each other at multiples of 8 bytes, so many of
// them straddle two lines. Of a larger record only the first two lines
// are asked for. Nothing for a dead location (a candidate entry may be
// one).
func (c *Cold) AddRecord(q *prefetch.Queue, loc uint64, size int) {
	if c.dead(loc) {
		return
	}
	addr := prefetch.Addr(&c.Chunks[LocSeq(loc)-c.FirstSeq].Bytes[LocOff(loc)])
	q.Add(addr)
	if addr%64+uintptr(size) > 64 {
		q.Add(addr + 64)
	}
}

// SetSpecs gives the cache the operator's specs after a reload, which may
// have added some: each new one gets its index. Specs are never removed.
func (c *Cache) SetSpecs(specs []*slot.Spec) {
	c.Cold.AddIndexes(len(specs) - len(c.Specs))
	c.Specs = specs
}

// Forget drops the states of the specs with ids from the cache and the
// cold store, leaving the Backend's copies. They are found through their
// specs' indexes, not the whole ring: a reload that restarts one rule
// touches only that rule's slots.
func (c *Cache) Forget(ids []int) {
	var doomed []*slot.Slot
	for _, id := range ids {
		x := &c.Cold.Idx[id]
		for i := range x.Entries {
			e := &x.Entries[i]
			c.Cold.Forget(c.Cold.EntryLoc(e))
			if e.Cached() {
				doomed = append(doomed, c.Slots.At(e.SlotNum()))
			}
		}
		x.Reset() // then Drop has nothing to take out of it
	}
	c.Cold.CachedEntries -= len(doomed)
	for _, s := range doomed {
		c.Drop(s)
		c.Clean(s)
	}
}

// Changes is the number of changed slots waiting to be written back.
func (c *Cache) Changes() int { return len(c.Changed) - c.ChangedHead }

// Len is the number of slots cached.
func (c *Cache) Len() int { return len(c.Ring) }
