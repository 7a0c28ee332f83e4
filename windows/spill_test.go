package windows

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows/slot"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// TestOperatorWithinBudget runs many more keys than a small budget holds
// through an operator: the cold store and the timers stay within the
// budget (the rest goes to the Backend), the cache reuses dropped slots
// without listing one twice among the changed ones, and every state comes
// back from wherever it went.
func TestOperatorWithinBudget(t *testing.T) {
	backend := slotstore.NewMemBackend()
	out := &countingOutput{}
	const budget = 4 << 20
	op, dec := newTestOperatorWith(t, `
rules:
  - {name: day, key: [user], window: {type: tumbling, size: 24h}, aggregate: count, threshold: 1, action: review}
`, backend, out, Options{MemoryBytes: budget, CacheSlots: 256})
	const keys = 90_000
	for i := range 2 * keys {
		before := len(op.cache.Changed)
		processLine(t, op, dec, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"u%d"}`, i, 1_000_000+i, i%keys))
		if i%5000 == 0 {
			listed := map[*slot.Slot]bool{}
			for _, s := range op.cache.Changed[op.cache.ChangedHead:] {
				if listed[s] {
					t.Fatalf("event %d: a slot is listed twice among the changed ones", i)
				}
				listed[s] = true
			}
			// When the event listed a slot, MarkDirty had just dropped
			// stale entries if they were the bulk: the list is within
			// that bound, unless duplicates kept it from shrinking.
			if n := len(op.cache.Changed) - op.cache.ChangedHead; n > 2*op.cache.Dirty+1024+1 && n > before {
				t.Fatalf("event %d: %d changed slots listed for %d dirty", i, n, op.cache.Dirty)
			}
		}
	}
	c := op.cache.Cold
	if got, limit := c.Bytes()+c.Outside(), budget; got > limit {
		t.Errorf("the cold store and timers take %d bytes, over the budget of %d", got, limit)
	}
	t.Logf("cold store %d bytes (%d states), timers and filter %d bytes, %d states spilled", c.Bytes(), c.Records(0), c.Outside(), backend.Len())
	if backend.Len() == 0 || c.Spills == 0 {
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
	backend := &readCountingBackend{MemBackend: slotstore.NewMemBackend()}
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
	if op.cache.Cold.Spills == 0 || sortedFound == 0 || cap(op.spilledVals) == 0 {
		t.Fatalf("no spilled state was loaded by its purge timer (%d spilled, %d read by timers)", op.cache.Cold.Spills, sortedFound)
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
	*slotstore.MemBackend
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
`, slotstore.NewMemBackend(), out, Options{CacheSlots: 64})
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
	if len(c.Ring) != 0 || c.Cold.Records(0) != 64 || c.Dirty != 0 {
		t.Fatalf("%d states cached, %d in the cold store, %d dirty; want the 64 in the cold store, none dirty", len(c.Ring), c.Cold.Records(0), c.Dirty)
	}
	for i := range 128 {
		process(64+i, fmt.Sprintf("u%d", i%64))
	}
	if len(c.Ring) != 64 {
		t.Fatalf("%d states cached after each key's third event, want the 64", len(c.Ring))
	}
	dirty := c.Dirty
	process(200, "new")
	id := slot.HashKey(c.Seeds, "\x00\x00\"new\"\x00")
	if len(c.Ring) != 64 || c.Cached(0, id) != nil || c.Cold.Loc(0, id) == 0 || c.Dirty != dirty {
		t.Fatalf("after a new key: %d cached, cached itself %v, in the cold store %v, %d dirty (were %d); want 64, no, yes, as many",
			len(c.Ring), c.Cached(0, id) != nil, c.Cold.Loc(0, id) != 0, c.Dirty, dirty)
	}
	process(201, "new")
	if len(c.Ring) != 64 || c.Cached(0, id) != nil || c.Dirty != dirty {
		t.Fatalf("the key back with one event before: %d cached, cached itself %v, %d dirty (were %d); want 64, no, as many",
			len(c.Ring), c.Cached(0, id) != nil, c.Dirty, dirty)
	}
	var stored slot.Slot
	stored.Reset("", op.specs[0])
	if _, val, _ := c.Cold.Record(c.Cold.Loc(0, id)); slot.DecodeInto(&stored, val) != nil || stored.Events() != 2 {
		t.Fatalf("the key back with one event before: %d events in its stored state, want 2", stored.Events())
	}
	process(202, "new")
	s := c.Cached(0, id)
	if s == nil || len(c.Ring) != 64 || len(s.Wins) != 1 || s.Wins[0].N != 3 {
		t.Fatalf("the key's third event: cached %v with %d cached, want it cached, holding the three events, in place of another", s != nil, len(c.Ring))
	}
	// Its record stays, a copy, whose size the slot keeps (so that its
	// replacement need not read it), and numbering the chunks again moves
	// the location the slot keeps.
	c.Cold.Renumber(slotstore.RenumberAt - 3)
	if key, _, size := c.Cold.Record(s.ColdLoc); s.ColdLoc == 0 || string(key) != s.Key || slotstore.LocSize(s.ColdLoc) != size {
		t.Fatalf("the slot's record after the chunks were numbered again: %q of %d bytes, want %q of %d", key, slotstore.LocSize(s.ColdLoc), s.Key, size)
	}
	// The evicted slot was reused for it, and the index counts the cached
	// entries, which the cold store's budget leaves to the cache.
	if c.Slots.Made != 64 || c.Cold.CachedEntries != 64 {
		t.Fatalf("%d slots made, %d entries counted as cached; want 64 and 64", c.Slots.Made, c.Cold.CachedEntries)
	}
	// Purged, every slot goes back to the table, keeping nothing alive.
	if err := op.AdvanceWatermark(watermark.Max - 1); err != nil {
		t.Fatal(err)
	}
	if len(c.Ring) != 0 || len(c.Slots.Free) != 64 || c.Cold.CachedEntries != 0 || c.Cold.Idx[0].Held() != 0 {
		t.Fatalf("after the purge: %d cached, %d slots free, %d entries counted as cached, %d held in the index",
			len(c.Ring), len(c.Slots.Free), c.Cold.CachedEntries, c.Cold.Idx[0].Held())
	}
	for _, n := range c.Slots.Free {
		if s := c.Slots.At(n); s.Key != "" || s.Wins != nil {
			t.Fatalf("released slot %d keeps key %q and %d windows", n, s.Key, len(s.Wins))
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
`, slotstore.NewMemBackend(), discardOutput{}, Options{CacheSlots: 64})
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
	var ids []slot.ID
	var keys []string
	for i := range 6 {
		ids = append(ids, slot.ID{uint64(i + 1), tag})
		keys = append(keys, fmt.Sprintf("\x00\x00\"u%d\"\x00", i))
		if i%2 == 0 {
			s := slot.New(keys[i], c.Specs[0])
			s.TimerAt = int64(i)
			if err := c.Cold.Set(0, ids[i], keys[i], slot.Encode(nil, s), slot.NoTimer, slot.NoTimer, false); err != nil {
				t.Fatal(err)
			}
			continue
		}
		c.Insert(ids[i], c.NewSlot(keys[i], c.Specs[0]), false)
	}
	gone := map[int]bool{}
	check := func(when string) {
		t.Helper()
		for i, id := range ids {
			cached := c.Cached(0, id)
			key, _, stored, err := c.Cold.GetByID(0, id, c.Cold.Loc(0, id))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case gone[i]:
				if cached != nil || stored {
					t.Fatalf("%s: state %d is gone, but found (cached %v, stored %v)", when, i, cached != nil, stored)
				}
			case i%2 == 1:
				if cached == nil || cached.Key != keys[i] {
					t.Fatalf("%s: state %d not found cached as itself: %v", when, i, cached)
				}
			default:
				if cached != nil || !stored || string(key) != keys[i] {
					t.Fatalf("%s: state %d: cached %v, stored %v with key %q; want stored as itself", when, i, cached != nil, stored, key)
				}
			}
		}
		if e := c.Cold.Idx[0].Entry(slot.ID{99, tag}); e != nil {
			t.Fatalf("%s: an absent id with the tag found entry %v", when, e)
		}
	}
	check("stored")
	if err := c.Cold.Del(0, ids[0], keys[0], slot.NoTimer); err != nil {
		t.Fatal(err)
	}
	gone[0] = true
	check("the first cold state deleted")
	c.Drop(c.Cached(0, ids[3]))
	gone[3] = true
	check("a cached state dropped")
	if n := c.Cold.Idx[0].N; n != 4 {
		t.Fatalf("the index holds %d entries, want 4", n)
	}
}
