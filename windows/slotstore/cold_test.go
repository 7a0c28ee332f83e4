package slotstore

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/riskstream/riskstream/windows/slot"
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
	c := NewCold(backend, 2, budget, writeThrough)
	c.seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	spilledTimers := map[string]int64{}
	c.OnSpill = func(key []byte, at int64) { spilledTimers[string(key)] = at }
	want := map[string][]byte{}
	keyOf := func(i int) string { return fmt.Sprintf("\x00%c%d\x00", byte(i%2), i) }
	for step := range 20000 {
		if step == 10000 {
			c.Renumber(RenumberAt - 3)
		}
		key := keyOf(r.IntN(3000))
		id := slot.HashKey(c.seeds, key)
		if r.IntN(4) == 0 {
			if err := c.Del(slot.SpecOf(key), id, key, slot.NoTimer); err != nil {
				t.Fatal(err)
			}
			delete(want, key)
			continue
		}
		// A state with a timer, of a size from a few bytes to a few KB.
		s := slot.New(key, &slot.Spec{})
		s.TimerAt = r.Int64N(1000)
		val := slot.Encode(nil, s)
		val = append(val, make([]byte, r.IntN(3)*r.IntN(2000))...)
		if err := c.Set(slot.SpecOf(key), id, key, val, slot.NoTimer, slot.NoTimer, false); err != nil {
			t.Fatal(err)
		}
		want[key] = val
	}
	held := 0
	for i := range 3000 {
		key := keyOf(i)
		id := slot.HashKey(c.seeds, key)
		val, found, err := c.get(slot.SpecOf(key), id, key, c.Loc(slot.SpecOf(key), id))
		if err != nil {
			t.Fatal(err)
		}
		w, ok := want[key]
		if found != ok || string(val) != string(w) {
			t.Fatalf("%q: found %v (%d bytes), want %v (%d bytes)", key, found, len(val), ok, len(w))
		}
		if c.Loc(slot.SpecOf(key), id) != 0 {
			held++
		} else if ok && writeThrough {
			// Spilled: the Backend has it, and its timer was handed over.
			if at, err := slot.EncodedTimer(w); err != nil || spilledTimers[key] != at {
				t.Fatalf("%q spilled with timer %d, want %d", key, spilledTimers[key], at)
			}
		}
	}
	if c.FirstSeq >= RenumberAt-3 {
		t.Fatalf("the chunks were not numbered again: the first is %d", c.FirstSeq)
	}
	live := 0
	for _, ch := range c.Chunks {
		live += ch.live
	}
	if live != c.Live {
		t.Fatalf("live bytes %d, chunks say %d", c.Live, live)
	}
	if c.Bytes() > max(budget, 0)+2*c.ChunkBytes+8<<10 {
		t.Fatalf("the store takes %d bytes, over its budget of %d", c.Bytes(), budget)
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
	if f.mayHold(0, slot.ID{1, 2}) {
		t.Fatal("an empty filter holds an id")
	}
	r := rand.New(rand.NewPCG(7, 8))
	ids := make([]slot.ID, 300000)
	for i := range ids {
		ids[i] = slot.ID{r.Uint64(), r.Uint64()}
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
		if f.mayHold(0, slot.ID{r.Uint64(), r.Uint64()}) {
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

// TestRenumberDropsFreedChunks: numbering the chunks again gives the ones
// that hold records consecutive numbers, dropping the chunks expire freed
// between them, and every current state is then found at its record, in
// the rule's index and in a cached slot, while the expired ones are gone;
// the store goes on appending to the chains it appended to.
func TestRenumberDropsFreedChunks(t *testing.T) {
	c := NewCold(NewMemBackend(), 2, 1<<20, false) // 64 KiB chunks
	c.slots = &slotTable{}
	c.seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	rng := rand.New(rand.NewPCG(8, 9))
	type state struct {
		spec    int
		id      slot.ID
		val     string
		expires int64 // noTimer in the main chain
	}
	states := map[string]state{}
	write := func(phase int) {
		for i := range 400 {
			spec, expires := 1, int64(slot.NoTimer) // a quarter in the main chain
			if i%4 != 0 {
				spec, expires = 0, int64(phase)
			}
			key := fmt.Sprintf("\x00%c%d-%d\x00", byte(spec), phase, i)
			id := slot.HashKey(c.seeds, key)
			val := strings.Repeat(string(rune('a'+i%26)), 50+rng.IntN(150))
			if err := c.Set(spec, id, key, []byte(val), slot.NoTimer, expires, expires != slot.NoTimer); err != nil {
				t.Fatal(err)
			}
			states[key] = state{spec, id, val, expires}
		}
	}
	// A main-chain state the cache holds keeps its record's location.
	cachedKey := "\x00\x01cached\x00"
	cachedID := slot.HashKey(c.seeds, cachedKey)
	if err := c.Set(1, cachedID, cachedKey, []byte("cached"), slot.NoTimer, slot.NoTimer, false); err != nil {
		t.Fatal(err)
	}
	s := c.slots.take()
	s.ID, s.Key = cachedID, cachedKey
	s.ColdLoc = c.swapLoc(c.Idx[1].Entry(cachedID), cachedRef|uint64(s.Num))
	check := func(when string, wm int64) {
		t.Helper()
		gone := 0
		for key, st := range states {
			loc := c.Loc(st.spec, st.id)
			if loc == 0 && st.expires <= wm {
				gone++ // its chunk expired; one with later states stays
				continue
			}
			if loc == 0 {
				t.Fatalf("%s: %q is not found", when, key)
			}
			if k, v, _ := c.Record(loc); string(k) != key || string(v) != st.val {
				t.Fatalf("%s: %q's record holds %q", when, key, k)
			}
		}
		if k, _, _ := c.Record(s.ColdLoc); string(k) != cachedKey {
			t.Fatalf("%s: the cached slot's record holds %q", when, k)
		}
		if wm > 0 && gone == 0 {
			t.Fatalf("%s: no state expired", when)
		}
		if err := c.CheckLive(); err != nil {
			t.Error(err)
		}
	}
	for phase := range 10 {
		write(phase)
	}
	check("written", -1)
	const wm = 6
	c.Expire(wm)
	held := 0
	for _, ch := range c.Chunks {
		if ch.Bytes != nil {
			held++
		}
	}
	if held == len(c.Chunks) || c.Chunks[0].Bytes == nil {
		t.Fatalf("%d of %d chunks hold records: want freed ones after the first", held, len(c.Chunks))
	}
	check("expired", wm)
	c.Renumber(1)
	if c.FirstSeq != 1 || len(c.Chunks) != held {
		t.Fatalf("numbered again: %d chunks from %d, want the %d that hold records from 1", len(c.Chunks), c.FirstSeq, held)
	}
	check("numbered again", wm)
	for chain, seq := range c.open {
		if seq != 0 && (seq < c.FirstSeq || c.Chunks[seq-c.FirstSeq].chain != chain) {
			t.Fatalf("chain %d appends to chunk %d, of chain %d", chain, seq, c.Chunks[seq-c.FirstSeq].chain)
		}
	}
	write(10)
	check("appended after", wm)
}

// TestForgetSpecs: forgetting the rules' states at the end of input
// empties their indexes and keeps the heatmap's states, cached or not,
// each found with its ref; the store's count of current bytes is then the
// heatmap's records', and the chunks that held only rules' records are
// freed. Rules' records go to the main chain and to expiring chains; the
// sizes of records are in the locations cached slots keep, not in index
// entries; one heatmap record is larger than a chunk.
func TestForgetSpecs(t *testing.T) {
	c := NewCold(NewMemBackend(), 3, 1<<16, false) // 4 KiB chunks
	c.slots = &slotTable{}
	rng := rand.New(rand.NewPCG(8, 9))
	const heatmap = 1 // specs 0 and 2 are rules
	kept := map[slot.ID]uint64{}
	for i := range 3000 {
		spec := rng.IntN(3)
		id := slot.ID{rng.Uint64(), rng.Uint64()}
		key := []byte{byte(spec), 0, 'k'}
		val := make([]byte, 10+rng.IntN(40))
		if spec == heatmap && i == 1500 {
			val = make([]byte, 0x10000)
		}
		chain, expires := 0, int64(slot.NoTimer)
		if spec != heatmap && rng.IntN(2) == 0 {
			chain, expires = 1+spec, int64(i)
		}
		loc := c.Append(id, key, val, chain, expires)
		ref := loc
		if spec == heatmap && rng.IntN(4) == 0 {
			s := c.slots.take()
			s.ID, s.ColdLoc = id, loc
			ref = cachedRef | uint64(s.Num)
			c.CachedEntries++
		}
		c.Idx[spec].add(id, ref)
		if spec == heatmap {
			kept[id] = ref
		}
	}
	before := len(c.Chunks)
	c.forgetSpecs(func(spec int) bool { return spec != heatmap })
	if c.Idx[0].N != 0 || c.Idx[2].N != 0 {
		t.Fatalf("the rules' indexes hold %d and %d states", c.Idx[0].N, c.Idx[2].N)
	}
	for id, ref := range kept {
		if e := c.Idx[heatmap].Entry(id); e == nil || e.Ref() != ref&refMask {
			t.Fatalf("heatmap state %x: entry %v, want ref %x", id, e, ref)
		}
	}
	if err := c.CheckLive(); err != nil {
		t.Error(err)
	}
	freed, bytes := 0, 0
	for i := range c.Chunks {
		if ch := &c.Chunks[i]; ch.Bytes == nil {
			freed++
		} else if bytes += len(ch.Bytes); ch.live == 0 {
			t.Errorf("chunk %d holds no current record but was kept", i)
		}
	}
	if bytes != c.used {
		t.Errorf("the store counts %d bytes used, its chunks hold %d", c.used, bytes)
	}
	if freed+before-len(c.Chunks) == 0 {
		t.Fatal("no chunk was freed")
	}
}
