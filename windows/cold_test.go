package windows

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/watermark"
)

// TestColdStoreMatchesMap drives a cold store with random sets and
// deletes, under budgets from one that holds everything to one that
// spills nearly everything, and checks every state against a map: what
// the store returns, whether from memory or the Backend, is the last value
// set. It also checks the accounting the budget relies on. Halfway, the
// chunks are numbered just below where set numbers them from 1 again, so
// that it does.
func TestColdStoreMatchesMap(t *testing.T) {
	for _, budget := range []int{1 << 30, 64 << 10, 0} {
		for _, writeThrough := range []bool{false, true} {
			t.Run(fmt.Sprintf("budget %d, write-through %v", budget, writeThrough), func(t *testing.T) {
				checkColdStore(t, budget, writeThrough)
			})
		}
	}
}

func checkColdStore(t *testing.T, budget int, writeThrough bool) {
	r := rand.New(rand.NewPCG(1, uint64(budget)))
	backend := NewMemBackend()
	c := newColdStore(backend, 2, budget, writeThrough)
	c.seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	spilledTimers := map[string]int64{}
	c.onSpill = func(key []byte, at int64) { spilledTimers[string(key)] = at }
	want := map[string][]byte{}
	keyOf := func(i int) string { return fmt.Sprintf("\x00%c%d\x00", byte(i%2), i) }
	for step := range 20000 {
		if step == 10000 {
			c.renumber(renumberAt - 3)
		}
		key := keyOf(r.IntN(3000))
		id := hashSlotKey(c.seeds, key)
		if r.IntN(4) == 0 {
			if err := c.del(specOf(key), id, key, noTimer); err != nil {
				t.Fatal(err)
			}
			delete(want, key)
			continue
		}
		// A state with a timer, of a size from a few bytes to a few KB.
		s := newSlot(key, &spec{})
		s.timerAt = r.Int64N(1000)
		val := encodeSlot(nil, s)
		val = append(val, make([]byte, r.IntN(3)*r.IntN(2000))...)
		if err := c.set(specOf(key), id, key, val, noTimer, noTimer, false); err != nil {
			t.Fatal(err)
		}
		want[key] = val
	}
	held := 0
	for i := range 3000 {
		key := keyOf(i)
		id := hashSlotKey(c.seeds, key)
		val, found, err := c.get(specOf(key), id, key, c.loc(specOf(key), id))
		if err != nil {
			t.Fatal(err)
		}
		w, ok := want[key]
		if found != ok || string(val) != string(w) {
			t.Fatalf("%q: found %v (%d bytes), want %v (%d bytes)", key, found, len(val), ok, len(w))
		}
		if c.loc(specOf(key), id) != 0 {
			held++
		} else if ok && writeThrough {
			// Spilled: the Backend has it, and its timer was handed over.
			if at, err := slotTimer(w); err != nil || spilledTimers[key] != at {
				t.Fatalf("%q spilled with timer %d, want %d", key, spilledTimers[key], at)
			}
		}
	}
	if c.firstSeq >= renumberAt-3 {
		t.Fatalf("the chunks were not numbered again: the first is %d", c.firstSeq)
	}
	live := 0
	for _, ch := range c.chunks {
		live += ch.live
	}
	if live != c.live {
		t.Fatalf("live bytes %d, chunks say %d", c.live, live)
	}
	if c.bytes() > max(budget, 0)+2*c.chunkBytes+8<<10 {
		t.Fatalf("the store takes %d bytes, over its budget of %d", c.bytes(), budget)
	}
	switch {
	case budget >= 1<<30 && held != len(want):
		t.Fatalf("a store within budget holds %d of %d states", held, len(want))
	case budget < 1<<30 && (held == len(want) || held == 0):
		t.Fatalf("a store over budget holds %d of %d states: it should hold some and spill the rest", held, len(want))
	}
	if !writeThrough && len(spilledTimers) != 0 {
		t.Fatalf("%d timers handed over: a store that does not write through finds spilled states by id", len(spilledTimers))
	}
	if writeThrough && backend.Len() != len(want) {
		t.Fatalf("write-through: the Backend holds %d states, want %d", backend.Len(), len(want))
	}
	if !writeThrough && budget >= 1<<30 && backend.Len() != 0 {
		t.Fatalf("a store within budget wrote %d states to the Backend", backend.Len())
	}
}

// TestIDFilter: the filter holds every id added, grows past its first
// size, and answers no for nearly every other.
func TestIDFilter(t *testing.T) {
	var f idFilter
	if f.mayHold(0, slotID{1, 2}) {
		t.Fatal("an empty filter holds an id")
	}
	r := rand.New(rand.NewPCG(7, 8))
	ids := make([]slotID, 300000)
	for i := range ids {
		ids[i] = slotID{r.Uint64(), r.Uint64()}
		f.add(i%3, ids[i])
	}
	for i, id := range ids {
		if !f.mayHold(i%3, id) {
			t.Fatalf("id %d added but not held", i)
		}
	}
	false_ := 0
	const n = 100000
	for range n {
		if f.mayHold(0, slotID{r.Uint64(), r.Uint64()}) {
			false_++
		}
	}
	if rate := float64(false_) / n; rate > 0.06 {
		t.Fatalf("false positives: %.3f", rate)
	}
	if len(f.sets) < 2 {
		t.Fatalf("the filter did not grow: %d sets", len(f.sets))
	}
}

// TestOperatorWithinBudget runs many more keys than a small budget holds
// through an operator: the cold store and the timers stay within the
// budget (the rest goes to the Backend), the cache reuses dropped slots
// without listing one twice among the changed ones, and every state comes
// back from wherever it went.
func TestOperatorWithinBudget(t *testing.T) {
	backend := NewMemBackend()
	out := &countingOutput{}
	const budget = 4 << 20
	op, dec := newTestOperatorWith(t, `
rules:
  - {name: day, key: [user], window: {type: tumbling, size: 24h}, aggregate: count, threshold: 1, action: review}
`, backend, out, Options{MemoryBytes: budget, CacheSlots: 256})
	const keys = 90_000
	for i := range 2 * keys {
		before := len(op.cache.changed)
		processLine(t, op, dec, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"u%d"}`, i, 1_000_000+i, i%keys))
		if i%5000 == 0 {
			listed := map[*slot]bool{}
			for _, s := range op.cache.changed[op.cache.changedHead:] {
				if listed[s] {
					t.Fatalf("event %d: a slot is listed twice among the changed ones", i)
				}
				listed[s] = true
			}
			// When the event listed a slot, markDirty had just dropped
			// stale entries if they were the bulk: the list is within
			// that bound, unless duplicates kept it from shrinking.
			if n := len(op.cache.changed) - op.cache.changedHead; n > 2*op.cache.dirty+1024+1 && n > before {
				t.Fatalf("event %d: %d changed slots listed for %d dirty", i, n, op.cache.dirty)
			}
		}
	}
	c := op.cache.cold
	if got, limit := c.bytes()+c.outside(), budget; got > limit {
		t.Errorf("the cold store and timers take %d bytes, over the budget of %d", got, limit)
	}
	t.Logf("cold store %d bytes (%d states), timers and filter %d bytes, %d states spilled", c.bytes(), c.records(0), c.outside(), backend.Len())
	if backend.Len() == 0 || c.spills == 0 {
		t.Errorf("%d keys in a %d-byte budget spilled nothing", keys, budget)
	}
	// Every key was seen twice: the second time its state, wherever it
	// was, held the first event, and the count of 2 went over 1.
	if out.decisions != keys {
		t.Errorf("%d decisions, want one per key: %d", out.decisions, keys)
	}
}

// TestSpilledPurgeReadsOnce: a purge timer of a spilled state that still
// has windows to keep (a session its key extended after the timer was set)
// reads the state from the Backend once, in the sorted read of its timer
// bucket, and loads it from that: the session then goes on, and the key's
// third event in it makes a decision.
func TestSpilledPurgeReadsOnce(t *testing.T) {
	backend := &readCountingBackend{MemBackend: NewMemBackend()}
	out := &countingOutput{}
	op, dec := newTestOperatorWith(t, `
rules:
  - {name: visits, key: [user], window: {type: session, gap: 30s}, aggregate: count, threshold: 2, action: review}
`, backend, out, Options{MemoryBytes: 1 << 20, CacheSlots: 64})
	const keys = 25_000
	const base = 1_000_000_000
	// Each user's first event, a second 20 s later that extends the
	// session past the purge timer the first set, and a third 40 s after
	// the first, which the session still holds: in time order, the timers
	// of the first events are due among the third ones.
	var lines [][]byte
	for i := range keys {
		for _, after := range []int{0, 20_000, 40_000} {
			lines = append(lines, fmt.Appendf(nil, `{"id":"e%d-%d","ts":%d,"user":"u%d"}`, i, after, base+after+i, i))
		}
	}
	slices.SortFunc(lines, func(a, b []byte) int { return cmp.Compare(lineTS(t, dec, a), lineTS(t, dec, b)) })
	maxTS := watermark.Min
	timerGets, sortedFound := 0, 0
	for _, l := range lines {
		maxTS = max(maxTS, processLine(t, op, dec, l))
		gets, found := backend.gets, backend.sortedFound
		if err := op.AdvanceWatermark(maxTS - 1000); err != nil {
			t.Fatal(err)
		}
		timerGets += backend.gets - gets
		sortedFound += backend.sortedFound - found
	}
	if op.cache.cold.spills == 0 || sortedFound == 0 || cap(op.spilledVals) == 0 {
		t.Fatalf("no spilled state was loaded by its purge timer (%d spilled, %d read by timers)", op.cache.cold.spills, sortedFound)
	}
	if timerGets != 0 {
		t.Errorf("the purge timers read %d spilled states sorted, and read %d again", sortedFound, timerGets)
	}
	if out.decisions != keys {
		t.Errorf("%d decisions, want one per key (its third event in one session): %d", out.decisions, keys)
	}
}

// lineTS is the ts of an event line.
func lineTS(t *testing.T, dec *event.Decoder, line []byte) int64 {
	var ev event.Event
	if err := dec.Decode(line, &ev); err != nil {
		t.Fatal(err)
	}
	return ev.TS
}

// readCountingBackend counts a MemBackend's point reads, and the values its
// sorted reads found.
type readCountingBackend struct {
	*MemBackend
	gets, sortedFound int
}

func (b *readCountingBackend) Get(key []byte) ([]byte, bool, error) {
	b.gets++
	return b.MemBackend.Get(key)
}

func (b *readCountingBackend) GetSorted(keys [][]byte, fn func(i int, value []byte, found bool) error) error {
	return b.MemBackend.GetSorted(keys, func(i int, value []byte, found bool) error {
		if found {
			b.sortedFound++
		}
		return fn(i, value, found)
	})
}

type countingOutput struct{ decisions int }

func (o *countingOutput) Decision(*Decision)     { o.decisions++ }
func (o *countingOutput) Heatmap(*HeatmapWindow) {}

// keysOutput keeps the key of every decision as the operator gave it.
type keysOutput struct{ keys []string }

func (o *keysOutput) Decision(d *Decision)   { o.keys = append(o.keys, d.Key) }
func (o *keysOutput) Heatmap(*HeatmapWindow) {}

// TestFreshKeyOutlivesTheEvent: the key of a state first seen while the
// cache is full is borrowed from the event's key buffer (Operator.slotOf);
// a decision made on it keeps a copy, which later events, reusing the
// buffer, do not change.
func TestFreshKeyOutlivesTheEvent(t *testing.T) {
	out := &keysOutput{}
	op, dec := newTestOperatorWith(t, `
rules:
  - {name: any, key: [user], window: {type: tumbling, size: 24h}, aggregate: count, threshold: 0, action: review}
`, NewMemBackend(), out, Options{CacheSlots: 64})
	keyer := op.NewKeyer()
	var (
		ev   event.Event
		refs []SlotRef
		keys []byte
	)
	for i := range 200 {
		if err := dec.Decode(fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"u%03d"}`, i, 1_000_000+i, i), &ev); err != nil {
			t.Fatal(err)
		}
		refs, keys = keyer.Append(refs[:0], keys[:0], &ev)
		if _, err := op.ProcessElement(refs, keys, ev.TS, false); err != nil {
			t.Fatal(err)
		}
	}
	if len(out.keys) != 200 {
		t.Fatalf("%d decisions, want 200", len(out.keys))
	}
	for i, k := range out.keys {
		if want := fmt.Sprintf("\"u%03d\"\x00", i); k != want {
			t.Fatalf("decision %d has key %q, want %q", i, k, want)
		}
	}
}

// TestNewKeysWhileFull: a rule's state enters the cache on the third event
// of its windows (admitAfter); before that it goes to the cold store, and
// a key first seen evicts nothing. Once the cache is full, a key's third
// event evicts another state.
func TestNewKeysWhileFull(t *testing.T) {
	op, dec := newDayCountOperator(t)
	c := op.cache
	process := func(i int, user string) {
		t.Helper()
		processLine(t, op, dec, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":%q}`, i, 1_000_000+i, user))
	}
	for i := range 64 {
		process(i, fmt.Sprintf("u%d", i))
	}
	if len(c.ring) != 0 || c.cold.records(0) != 64 || c.dirty != 0 {
		t.Fatalf("%d states cached, %d in the cold store, %d dirty; want the 64 in the cold store, none dirty", len(c.ring), c.cold.records(0), c.dirty)
	}
	for i := range 128 {
		process(64+i, fmt.Sprintf("u%d", i%64))
	}
	if len(c.ring) != 64 {
		t.Fatalf("%d states cached after each key's third event, want the 64", len(c.ring))
	}
	dirty := c.dirty
	process(200, "new")
	id := hashSlotKey(c.seeds, "\x00\x00\"new\"\x00")
	if len(c.ring) != 64 || c.cached(0, id) != nil || c.cold.loc(0, id) == 0 || c.dirty != dirty {
		t.Fatalf("after a new key: %d cached, cached itself %v, in the cold store %v, %d dirty (were %d); want 64, no, yes, as many",
			len(c.ring), c.cached(0, id) != nil, c.cold.loc(0, id) != 0, c.dirty, dirty)
	}
	process(201, "new")
	if len(c.ring) != 64 || c.cached(0, id) != nil || c.dirty != dirty {
		t.Fatalf("the key back with one event before: %d cached, cached itself %v, %d dirty (were %d); want 64, no, as many",
			len(c.ring), c.cached(0, id) != nil, c.dirty, dirty)
	}
	var stored slot
	stored.reset("", op.specs[0])
	if _, val, _ := c.cold.record(c.cold.loc(0, id)); decodeSlotInto(&stored, val) != nil || stored.events() != 2 {
		t.Fatalf("the key back with one event before: %d events in its stored state, want 2", stored.events())
	}
	process(202, "new")
	s := c.cached(0, id)
	if s == nil || len(c.ring) != 64 || len(s.wins) != 1 || s.wins[0].n != 3 {
		t.Fatalf("the key's third event: cached %v with %d cached, want it cached, holding the three events, in place of another", s != nil, len(c.ring))
	}
	// Its record stays, a copy, whose size the slot keeps (so that its
	// replacement need not read it), and numbering the chunks again moves
	// the location the slot keeps.
	c.cold.renumber(renumberAt - 3)
	if key, _, size := c.cold.record(s.coldLoc); s.coldLoc == 0 || string(key) != s.key || locSize(s.coldLoc) != size {
		t.Fatalf("the slot's record after the chunks were numbered again: %q of %d bytes, want %q of %d", key, locSize(s.coldLoc), s.key, size)
	}
	// The evicted slot was reused for it, and the index counts the cached
	// entries, which the cold store's budget leaves to the cache.
	if c.slots.made != 64 || c.cold.cachedEntries != 64 {
		t.Fatalf("%d slots made, %d entries counted as cached; want 64 and 64", c.slots.made, c.cold.cachedEntries)
	}
	// Purged, every slot goes back to the table, keeping nothing alive.
	if err := op.AdvanceWatermark(watermark.Max - 1); err != nil {
		t.Fatal(err)
	}
	if len(c.ring) != 0 || len(c.slots.free) != 64 || c.cold.cachedEntries != 0 || c.cold.idx[0].held() != 0 {
		t.Fatalf("after the purge: %d cached, %d slots free, %d entries counted as cached, %d held in the index",
			len(c.ring), len(c.slots.free), c.cold.cachedEntries, c.cold.idx[0].held())
	}
	for _, n := range c.slots.free {
		if s := c.slots.at(n); s.key != "" || s.wins != nil {
			t.Fatalf("released slot %d keeps key %q and %d windows", n, s.key, len(s.wins))
		}
	}
}

// newDayCountOperator returns an operator of one rule, a 24 h count per
// user, whose cache holds 64 slots.
func newDayCountOperator(t *testing.T) (*Operator, *event.Decoder) {
	t.Helper()
	return newTestOperatorWith(t, `
rules:
  - {name: day, key: [user], window: {type: tumbling, size: 24h}, aggregate: count, threshold: 1, action: review}
`, NewMemBackend(), discardOutput{}, Options{CacheSlots: 64})
}

// records is the number of spec's states with a record in c.
func (c *coldStore) records(spec int) int {
	n := 0
	x := &c.idx[spec]
	for i := range x.entries {
		if x.entries[i].ref() != 0 && c.entryLoc(&x.entries[i]) != 0 {
			n++
		}
	}
	return n
}

// TestStatesSharingATag stores states whose ids share the second word, all
// an index entry holds of an id (stateEntry), some cached and some in the
// cold store, and checks that each is found, deleted and dropped as
// itself: the index tells them apart by the first word, which it reads
// from the cached slot or the head of the record.
func TestStatesSharingATag(t *testing.T) {
	op, _ := newDayCountOperator(t)
	c := op.cache
	// Made-up ids, not their keys' hashes: the store must not reclaim a
	// chunk, which finds its records' states by hashing their keys. It
	// holds a few records of its 1 GiB default budget.
	const tag = 0x5bd1_e995_0000_0042
	var ids []slotID
	var keys []string
	for i := range 6 {
		ids = append(ids, slotID{uint64(i + 1), tag})
		keys = append(keys, fmt.Sprintf("\x00\x00\"u%d\"\x00", i))
		if i%2 == 0 {
			s := newSlot(keys[i], c.specs[0])
			s.timerAt = int64(i)
			if err := c.cold.set(0, ids[i], keys[i], encodeSlot(nil, s), noTimer, noTimer, false); err != nil {
				t.Fatal(err)
			}
			continue
		}
		c.insert(ids[i], c.newSlot(keys[i], c.specs[0]), false)
	}
	gone := map[int]bool{}
	check := func(when string) {
		t.Helper()
		for i, id := range ids {
			cached := c.cached(0, id)
			key, _, stored, err := c.cold.getByID(0, id, c.cold.loc(0, id))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case gone[i]:
				if cached != nil || stored {
					t.Fatalf("%s: state %d is gone, but found (cached %v, stored %v)", when, i, cached != nil, stored)
				}
			case i%2 == 1:
				if cached == nil || cached.key != keys[i] {
					t.Fatalf("%s: state %d not found cached as itself: %v", when, i, cached)
				}
			default:
				if cached != nil || !stored || string(key) != keys[i] {
					t.Fatalf("%s: state %d: cached %v, stored %v with key %q; want stored as itself", when, i, cached != nil, stored, key)
				}
			}
		}
		if e := c.cold.idx[0].entry(slotID{99, tag}); e != nil {
			t.Fatalf("%s: an absent id with the tag found entry %v", when, e)
		}
	}
	check("stored")
	if err := c.cold.del(0, ids[0], keys[0], noTimer); err != nil {
		t.Fatal(err)
	}
	gone[0] = true
	check("the first cold state deleted")
	c.drop(c.cached(0, ids[3]))
	gone[3] = true
	check("a cached state dropped")
	if n := c.cold.idx[0].n; n != 4 {
		t.Fatalf("the index holds %d entries, want 4", n)
	}
}

// TestRenumberDropsFreedChunks: numbering the chunks again gives the ones
// that hold records consecutive numbers, dropping the chunks expire freed
// between them, and every current state is then found at its record, in
// the rule's index and in a cached slot, while the expired ones are gone;
// the store goes on appending to the chains it appended to.
func TestRenumberDropsFreedChunks(t *testing.T) {
	c := newColdStore(NewMemBackend(), 2, 1<<20, false) // 64 KiB chunks
	c.slots = &slotTable{}
	c.seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	rng := rand.New(rand.NewPCG(8, 9))
	type state struct {
		spec    int
		id      slotID
		val     string
		expires int64 // noTimer in the main chain
	}
	states := map[string]state{}
	write := func(phase int) {
		for i := range 400 {
			spec, expires := 1, int64(noTimer) // a quarter in the main chain
			if i%4 != 0 {
				spec, expires = 0, int64(phase)
			}
			key := fmt.Sprintf("\x00%c%d-%d\x00", byte(spec), phase, i)
			id := hashSlotKey(c.seeds, key)
			val := strings.Repeat(string(rune('a'+i%26)), 50+rng.IntN(150))
			if err := c.set(spec, id, key, []byte(val), noTimer, expires, expires != noTimer); err != nil {
				t.Fatal(err)
			}
			states[key] = state{spec, id, val, expires}
		}
	}
	// A main-chain state the cache holds keeps its record's location.
	cachedKey := "\x00\x01cached\x00"
	cachedID := hashSlotKey(c.seeds, cachedKey)
	if err := c.set(1, cachedID, cachedKey, []byte("cached"), noTimer, noTimer, false); err != nil {
		t.Fatal(err)
	}
	s := c.slots.take()
	s.id, s.key = cachedID, cachedKey
	s.coldLoc = c.swapLoc(c.idx[1].entry(cachedID), cachedRef|uint64(s.num))
	check := func(when string, wm int64) {
		t.Helper()
		gone := 0
		for key, st := range states {
			loc := c.loc(st.spec, st.id)
			if loc == 0 && st.expires <= wm {
				gone++ // its chunk expired; one with later states stays
				continue
			}
			if loc == 0 {
				t.Fatalf("%s: %q is not found", when, key)
			}
			if k, v, _ := c.record(loc); string(k) != key || string(v) != st.val {
				t.Fatalf("%s: %q's record holds %q", when, key, k)
			}
		}
		if k, _, _ := c.record(s.coldLoc); string(k) != cachedKey {
			t.Fatalf("%s: the cached slot's record holds %q", when, k)
		}
		if wm > 0 && gone == 0 {
			t.Fatalf("%s: no state expired", when)
		}
		checkLiveBytes(t, c)
	}
	for phase := range 10 {
		write(phase)
	}
	check("written", -1)
	const wm = 6
	c.expire(wm)
	held := 0
	for _, ch := range c.chunks {
		if ch.b != nil {
			held++
		}
	}
	if held == len(c.chunks) || c.chunks[0].b == nil {
		t.Fatalf("%d of %d chunks hold records: want freed ones after the first", held, len(c.chunks))
	}
	check("expired", wm)
	c.renumber(1)
	if c.firstSeq != 1 || len(c.chunks) != held {
		t.Fatalf("numbered again: %d chunks from %d, want the %d that hold records from 1", len(c.chunks), c.firstSeq, held)
	}
	check("numbered again", wm)
	for chain, seq := range c.open {
		if seq != 0 && (seq < c.firstSeq || c.chunks[seq-c.firstSeq].chain != chain) {
			t.Fatalf("chain %d appends to chunk %d, of chain %d", chain, seq, c.chunks[seq-c.firstSeq].chain)
		}
	}
	write(10)
	check("appended after", wm)
}

// checkLiveBytes fails unless the cold store's count of current bytes,
// in all and per chunk, is the size of the records its indexes and cached
// slots name, which reclaim goes by.
func checkLiveBytes(t *testing.T, c *coldStore) {
	t.Helper()
	live := make([]int, len(c.chunks))
	all := 0
	for spec := range c.idx {
		x := &c.idx[spec]
		for i := range x.entries {
			if e := &x.entries[i]; e.ref() != 0 {
				if loc := c.entryLoc(e); loc != 0 {
					_, _, size := c.record(loc)
					live[locSeq(loc)-c.firstSeq] += size
					all += size
				}
			}
		}
	}
	if all != c.live {
		t.Errorf("the store counts %d current bytes, its records %d", c.live, all)
	}
	for i := range c.chunks {
		if c.chunks[i].live != live[i] {
			t.Errorf("chunk %d counts %d current bytes, its records %d", i, c.chunks[i].live, live[i])
		}
	}
}

// TestForgetSpecs: forgetting the rules' states at the end of input
// empties their indexes and keeps the heatmap's states, cached or not,
// each found with its ref; the store's count of current bytes is then the
// heatmap's records', and the chunks that held only rules' records are
// freed. Rules' records go to the main chain and to expiring chains; the
// sizes of records are in the locations cached slots keep, not in index
// entries; one heatmap record is larger than a chunk.
func TestForgetSpecs(t *testing.T) {
	c := newColdStore(NewMemBackend(), 3, 1<<16, false) // 4 KiB chunks
	c.slots = &slotTable{}
	rng := rand.New(rand.NewPCG(8, 9))
	const heatmap = 1 // specs 0 and 2 are rules
	kept := map[slotID]uint64{}
	for i := range 3000 {
		spec := rng.IntN(3)
		id := slotID{rng.Uint64(), rng.Uint64()}
		key := []byte{byte(spec), 0, 'k'}
		val := make([]byte, 10+rng.IntN(40))
		if spec == heatmap && i == 1500 {
			val = make([]byte, 0x10000)
		}
		chain, expires := 0, int64(noTimer)
		if spec != heatmap && rng.IntN(2) == 0 {
			chain, expires = 1+spec, int64(i)
		}
		loc := c.append(id, key, val, chain, expires)
		ref := loc
		if spec == heatmap && rng.IntN(4) == 0 {
			s := c.slots.take()
			s.id, s.coldLoc = id, loc
			ref = cachedRef | uint64(s.num)
			c.cachedEntries++
		}
		c.idx[spec].add(id, ref)
		if spec == heatmap {
			kept[id] = ref
		}
	}
	before := len(c.chunks)
	c.forgetSpecs(func(spec int) bool { return spec != heatmap })
	if c.idx[0].n != 0 || c.idx[2].n != 0 {
		t.Fatalf("the rules' indexes hold %d and %d states", c.idx[0].n, c.idx[2].n)
	}
	for id, ref := range kept {
		if e := c.idx[heatmap].entry(id); e == nil || e.ref() != ref&refMask {
			t.Fatalf("heatmap state %x: entry %v, want ref %x", id, e, ref)
		}
	}
	checkLiveBytes(t, c)
	freed, bytes := 0, 0
	for i := range c.chunks {
		if ch := &c.chunks[i]; ch.b == nil {
			freed++
		} else if bytes += len(ch.b); ch.live == 0 {
			t.Errorf("chunk %d holds no current record but was kept", i)
		}
	}
	if bytes != c.used {
		t.Errorf("the store counts %d bytes used, its chunks hold %d", c.used, bytes)
	}
	if freed+before-len(c.chunks) == 0 {
		t.Fatal("no chunk was freed")
	}
}
