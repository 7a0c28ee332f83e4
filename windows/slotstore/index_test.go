package slotstore

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/riskstream/riskstream/internal/prefetch"
	"github.com/riskstream/riskstream/windows/slot"
)

// TestStateIndexAgainstMap runs random adds, updates and removes against a
// Go map, with lookups between them (whose place add may take). The ids
// share their top bits in few patterns, so probe runs are long and get
// holes shifted back into them; one pattern's home is the
// last place, so its runs wrap around the end of the array. Some ids share
// their tag (the top of the second word, which is all of the id an entry
// holds) with another, so lookups must tell them apart by the first word.
func TestStateIndexAgainstMap(t *testing.T) {
	wrapped, shared := 0, 0
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		// The refs name slots and records, as the cache's and the cold
		// store's do: the index reads an id's first word there.
		c := NewCold(NewMemBackend(), 1, 1<<30, false)
		c.slots = &slotTable{}
		x := &c.Idx[0]
		ref := map[slot.ID]uint64{}
		var ids []slot.ID
		newID := func() slot.ID {
			if len(ids) > 0 && rng.IntN(4) == 0 {
				return slot.ID{rng.Uint64(), ids[rng.IntN(len(ids))][1]}
			}
			// Top bits 00, 01, 10 or all ones, the rest only in the low 24.
			top := [4]uint64{0, 1 << 62, 2 << 62, 0xffff_ffff_ff00_0000}[rng.IntN(4)]
			return slot.ID{rng.Uint64(), top | rng.Uint64()>>40}
		}
		newRef := func(id slot.ID) uint64 {
			if rng.IntN(2) == 0 {
				s := c.slots.take()
				s.ID = id
				return cachedRef | uint64(s.Num)
			}
			return c.Append(id, []byte("key"), nil, 0, slot.NoTimer)
		}
		for step := 0; step < 8000; step++ {
			var id slot.ID
			if len(ids) > 0 && rng.IntN(2) == 0 {
				id = ids[rng.IntN(len(ids))]
			} else {
				id = newID()
				ids = append(ids, id)
			}
			// A lookup of an id, maybe this one, maybe steps ago: add
			// takes its place only while no entry was added or moved.
			if rng.IntN(2) == 0 {
				x.Entry(ids[rng.IntN(len(ids))])
			}
			want, held := ref[id]
			switch rng.IntN(3) {
			case 0:
				r := newRef(id)
				e, added := x.add(id, r)
				if added == held || e.tag() != tagOf(id) || e.Ref() != map[bool]uint64{true: want, false: r}[held]&refMask {
					t.Fatalf("seed %d step %d: add(%x) = %x, %v; held %v with %x", seed, step, id, e.Ref(), added, held, want)
				}
				if !held {
					ref[id] = r
				}
			case 1:
				if e := x.Entry(id); e != nil {
					e.setRef(newRef(id))
					ref[id] = e.Ref()
				}
			default:
				if e := x.Entry(id); e != nil {
					x.remove(e)
					delete(ref, id)
				}
			}
			if x.N != len(ref) {
				t.Fatalf("seed %d step %d: index holds %d, map %d", seed, step, x.N, len(ref))
			}
			if step%97 == 0 {
				tags := map[uint64]int{}
				for id, r := range ref {
					if e := x.Entry(id); e == nil || e.Ref() != r&refMask {
						t.Fatalf("seed %d step %d: %x has entry %v, want ref %x", seed, step, id, e, r)
					}
					if tags[tagOf(id)]++; tags[tagOf(id)] == 2 {
						shared++
					}
				}
				if e := x.Entry(newID()); e != nil {
					t.Fatalf("seed %d: an absent id was found", seed)
				}
				checkIndexAlloc(t, c)
				checkRunOrder(t, x)
				for i, e := range x.Entries {
					if e.Ref() != 0 && uint64(i) < x.home(e.tag()) {
						wrapped++ // its run went past the end
					}
				}
			}
		}
		// Emptied, the array gives its memory back.
		for id := range ref {
			x.remove(x.Entry(id))
		}
		if x.N != 0 || len(x.Entries) > 64 {
			t.Fatalf("seed %d: emptied index holds %d in %d places", seed, x.N, len(x.Entries))
		}
	}
	if wrapped == 0 {
		t.Fatal("no probe run wrapped around the end of the array")
	}
	if shared == 0 {
		t.Fatal("no two held ids shared a tag")
	}
}

// TestStateIndexRebuild: the entries whose ref was set to 0 in place (as
// dropSpec does) are gone after rebuild, the others are found with their
// refs, and the array is sized for what is left.
func TestStateIndexRebuild(t *testing.T) {
	c := NewCold(NewMemBackend(), 1, 1<<30, false)
	c.slots = &slotTable{}
	x := &c.Idx[0]
	rng := rand.New(rand.NewPCG(3, 4))
	kept := map[slot.ID]uint64{}
	var dropped []slot.ID
	for i := range 3000 {
		s := c.slots.take()
		s.ID = slot.ID{rng.Uint64(), rng.Uint64()}
		e, _ := x.add(s.ID, cachedRef|uint64(s.Num))
		if i%3 == 0 {
			e.setRef(0) // a free place inside a probe run, until rebuild
			dropped = append(dropped, s.ID)
			continue
		}
		kept[s.ID] = e.Ref()
	}
	x.rebuild()
	checkIndexAlloc(t, c)
	checkRunOrder(t, x)
	if x.N != len(kept) || len(x.Entries) != 4096 {
		t.Fatalf("rebuilt: %d entries in %d places, want %d in 4096", x.N, len(x.Entries), len(kept))
	}
	for id, ref := range kept {
		if e := x.Entry(id); e == nil || e.Ref() != ref {
			t.Fatalf("%x after rebuild: entry %v, want ref %x", id, e, ref)
		}
	}
	for _, id := range dropped {
		if e := x.Entry(id); e != nil {
			t.Fatalf("%x was dropped but is found after rebuild", id)
		}
	}
	// All dropped: the index is empty.
	for i := range x.Entries {
		x.Entries[i].setRef(0)
	}
	if x.rebuild(); x.N != 0 || x.Entries != nil || x.store != c {
		t.Fatalf("rebuilt with nothing left: %d entries in %d places, store kept %v", x.N, len(x.Entries), x.store == c)
	}
	checkIndexAlloc(t, c)
}

// checkRunOrder fails unless every entry of x can be reached from its
// home without passing a free place, and follows the entry before it in
// run order: a home further back, or the same home and a tag no larger.
func checkRunOrder(t *testing.T, x *stateIndex) {
	t.Helper()
	mask := uint64(len(x.Entries) - 1)
	for i := range uint64(len(x.Entries)) {
		e := x.Entries[i]
		if e.Ref() == 0 {
			continue
		}
		home := x.home(e.tag())
		for j := home; j != i; j = x.next(j) {
			if x.Entries[j].Ref() == 0 {
				t.Fatalf("the entry at %d, home %d, lies past a free place at %d", i, home, j)
			}
		}
		prev := x.Entries[(i-1)&mask]
		if prev.Ref() == 0 || home == i {
			continue
		}
		// Ranked from the home after i, the last an entry at i may have.
		if from := (i + 1) << x.shift; (prev.tag()-from)&tagMask > (e.tag()-from)&tagMask {
			t.Fatalf("the entry at %d, tag %x, follows one with tag %x", i, e.tag(), prev.tag())
		}
	}
}

// checkIndexAlloc fails unless the cold store's count of its index
// arrays' bytes, which its budget check takes for theirs (reclaim), is
// what they are.
func checkIndexAlloc(t *testing.T, c *Cold) {
	t.Helper()
	want := 0
	for i := range c.Idx {
		want += len(c.Idx[i].Entries) * stateEntryBytes
	}
	if c.indexAlloc != want {
		t.Fatalf("indexAlloc is %d, the index arrays take %d bytes", c.indexAlloc, want)
	}
}

// TestStateIndexCandidate: candidate reads only the line of an id's home.
// It returns the first entry of the run with the id's tag, if that line
// holds it; nil if the run ends in that line, or reaches in it the place
// the id would take (the id is absent); and else the address of the next
// line, where the run goes on. An index of places half full has runs of
// every length, and many cross a line; a sixteenth of the ids have their
// home in the last line, whose run goes on at the first.
func TestStateIndexCandidate(t *testing.T) {
	c := NewCold(NewMemBackend(), 1, 1<<30, false)
	x := &c.Idx[0]
	rng := rand.New(rand.NewPCG(5, 6))
	lastTags := uint64(0)
	newID := func() slot.ID {
		id := slot.ID{rng.Uint64(), rng.Uint64()}
		if rng.IntN(16) == 0 {
			// The top 13 bits set: a home in the last line of up to
			// 2^16 places. The tags below them differ, so that no two
			// ids share one.
			lastTags++
			id[1] = 0xfff8<<48 | lastTags<<(64-tagBits) | id[1]&(1<<(64-tagBits)-1)
		}
		return id
	}
	var held []slot.ID
	for x.N < 30000 {
		id := newID()
		x.add(id, c.Append(id, nil, nil, 0, slot.NoTimer))
		held = append(held, id)
	}
	lineOf := func(i uint64) uintptr { return prefetch.Addr(&x.Entries[i]) &^ 63 }
	lastLine := lineOf(uint64(len(x.Entries) - 1))
	found, absent, more, wrapped := 0, 0, 0, 0
	for k := range 20000 {
		id := newID()
		if k%2 == 0 {
			id = held[rng.IntN(len(held))]
		}
		place, ok := x.find(id)
		home := x.home(tagOf(id))
		e, next := x.candidate(id)
		switch {
		case lineOf(place) == lineOf(home):
			// The run ends, or reaches the id or its place, in the home line.
			if ok != (e != nil) || next != 0 || ok && e != &x.Entries[place] {
				t.Fatalf("%x: candidate %v, %x; the home line holds the run's end at %d (found %v)", id, e, next, place, ok)
			}
			if ok {
				found++
			} else {
				absent++
			}
		default:
			want := lineOf(home) + 64
			if lineOf(home) == lastLine {
				want = prefetch.Addr(&x.Entries[0]) // the run wraps
				wrapped++
			}
			if e != nil || next != want {
				t.Fatalf("%x: candidate %v, %x; the run goes on past the home line, to %x", id, e, next, want)
			}
			more++
		}
	}
	if found == 0 || absent == 0 || more == 0 || wrapped == 0 {
		t.Fatalf("%d found, %d absent, %d runs past the home line, %d of them wrapping: want each", found, absent, more, wrapped)
	}
}

// BenchmarkStateIndexProbe looks up ids, half of them held, in an index
// that fits the CPU's caches and in one of 1.6M entries (32 MiB), as at 10M
// keys, with and without their index lines asked for a group of lookups
// ahead, a share before each lookup, as Prefetch's are (BENCHMARKS.md
// "State at key scale"). The lookup of a held id also reads the head of its
// record, where the first word of its id is (stateEntry): a line of its
// own, which the engine reads next anyway.
func BenchmarkStateIndexProbe(b *testing.B) {
	for _, n := range []int{20_000, 1_600_000} {
		c := NewCold(NewMemBackend(), 1, 1<<30, false)
		x := &c.Idx[0]
		rng := rand.New(rand.NewPCG(1, 2))
		newID := func() slot.ID { return slot.ID{rng.Uint64(), rng.Uint64()} }
		held := make([]slot.ID, 0, n)
		for x.N < n {
			id := newID()
			x.add(id, c.Append(id, nil, nil, 0, slot.NoTimer))
			held = append(held, id)
		}
		ids := make([]slot.ID, 1<<20)
		for i := range ids {
			ids[i] = newID()
			if i%2 == 1 {
				ids[i] = held[rng.IntN(len(held))]
			}
		}
		for _, ahead := range []bool{false, true} {
			b.Run(fmt.Sprintf("entries=%d/prefetched=%v", n, ahead), func(b *testing.B) {
				const group = 16
				var q prefetch.Queue
				found, k := 0, 0
				for b.Loop() {
					if ahead {
						if k%group == 0 {
							q.Reset()
							for _, id := range ids[k+group : k+2*group] {
								q.Add(x.HomeAddr(id))
							}
						}
						q.Issue(group - k%group)
					}
					if x.Entry(ids[k]) != nil {
						found++
					}
					if k++; k+2*group > len(ids) {
						k = 0
					}
				}
				if found == 0 {
					b.Fatal("no id found")
				}
			})
		}
	}
}

// TestStateIndexSweep fills an index with states, a third of them cached,
// the others records in the rule's expiring chain with growing expiry
// times, and expires the chunks of those due by a random watermark: after
// sweep, the index holds exactly the current states, each found with its
// ref, and no dead entry. The ids share their top bits in few patterns,
// one of them the last place's, so the sweep meets long probe runs and one
// that wraps around the end of the array.
func TestStateIndexSweep(t *testing.T) {
	for seed := uint64(0); seed < 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		c := NewCold(NewMemBackend(), 1, 1<<16, false) // 4 KiB chunks
		c.slots = &slotTable{}
		x := &c.Idx[0]
		current := map[slot.ID]uint64{}
		var records []slot.ID
		for i := range 6000 {
			top := [4]uint64{0, 1 << 62, 2 << 62, 0xffff_ffff_ff00_0000}[rng.IntN(4)]
			id := slot.ID{rng.Uint64(), top | rng.Uint64()>>40}
			var ref uint64
			if rng.IntN(3) == 0 {
				s := c.slots.take()
				s.ID = id
				ref = cachedRef | uint64(s.Num)
			} else {
				ref = c.Append(id, []byte("key"), nil, 1, int64(i))
				records = append(records, id)
			}
			x.add(id, ref)
			current[id] = ref
		}
		c.Expire(int64(1000 + rng.IntN(4000)))
		var dead []slot.ID
		for _, id := range records {
			if e := stateEntry(current[id] & refMask); !c.current(&e) {
				dead = append(dead, id)
				delete(current, id)
			}
		}
		if len(dead) == 0 {
			t.Fatalf("seed %d: no chunk expired", seed)
		}
		wrapped := false
		for i, e := range x.Entries {
			wrapped = wrapped || e.Ref() != 0 && uint64(i) < x.home(e.tag())
		}
		if !wrapped {
			t.Fatalf("seed %d: no probe run wraps around the end of the array", seed)
		}
		x.sweep()
		checkRunOrder(t, x)
		if x.N != len(current) {
			t.Fatalf("seed %d: %d entries after the sweep, %d states current", seed, x.N, len(current))
		}
		used := 0
		for i := range x.Entries {
			if e := &x.Entries[i]; e.Ref() != 0 {
				used++
				if !c.current(e) {
					t.Fatalf("seed %d: a dead entry is left at %d", seed, i)
				}
			}
		}
		if used != x.N {
			t.Fatalf("seed %d: %d places used, n is %d", seed, used, x.N)
		}
		for id, ref := range current {
			if e := x.Entry(id); e == nil || e.Ref() != ref&refMask {
				t.Fatalf("seed %d: %x after the sweep: entry %v, want ref %x", seed, id, e, ref)
			}
		}
		for _, id := range dead {
			if e := x.Entry(id); e != nil {
				t.Fatalf("seed %d: %x expired but is found after the sweep", seed, id)
			}
		}
	}
}
