package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestDedupeMatchesReference: over many ids, repeats and rotations, seen
// answers as a brute-force map of each id to the generation it was taken
// in: an id is a duplicate while the watermark's generation is at most
// one past its own.
func TestDedupeMatchesReference(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			const horizon = 1000
			d := newDedupe(horizon)
			ref := map[string]int64{}
			wm := int64(0)
			for i := range 200_000 {
				// Mostly steady, at times a jump of several horizons.
				if rng.IntN(50_000) == 0 {
					wm += 3 * horizon
				} else {
					wm += int64(rng.IntN(3))
				}
				id := fmt.Sprintf("id-%d", rng.IntN(60_000))
				got, err := d.seen(idHash([]byte(id)), wm)
				if err != nil {
					t.Fatal(err)
				}
				g := floorDiv(wm, horizon)
				taken, ok := ref[id]
				want := ok && g <= taken+1
				if !want {
					ref[id] = g
				}
				if got != want {
					t.Fatalf("event %d, id %s at watermark %d: seen %v, want %v (taken in generation %d, %v)", i, id, wm, got, want, taken, ok)
				}
			}
		})
	}
}

// TestIDTableKeepOnly: forgetting in place keeps exactly the entries of
// the tag kept, each found again, in tables whose clusters wrap around
// their end, some of them grown (past 16 entries) and still moving
// their outgrown slots.
func TestIDTableKeepOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	moving := 0
	for round := range 2000 {
		tab := idTable{slots: make([][2]uint64, 32)}
		want := map[[2]uint64]bool{} // entry (tag aside) -> kept
		n := 1 + rng.IntN(31)
		for len(want) < n {
			// Homes crowd the last slots, so that clusters wrap.
			h := [2]uint64{uint64(56+rng.IntN(8)) | uint64(rng.IntN(1<<20))<<6 | 1<<40, uint64(rng.Uint32()) << 8}
			if _, dup := want[h]; dup {
				continue
			}
			tag := rng.IntN(2)
			e := tab.find(h)
			tab.add(e, h, int64(tag))
			want[h] = tag == 1
		}
		keep := 1
		if round%10 == 0 {
			keep = noTag
		}
		if tab.old != nil {
			moving++
		}
		tab.keepOnly(keep)
		kept := 0
		for h, k := range want {
			found := *tab.find(h) != [2]uint64{}
			if k && keep != noTag {
				kept++
			}
			if found != (k && keep != noTag) {
				t.Fatalf("round %d: entry %x found %v after keepOnly(%d), kept %v", round, h, found, keep, k)
			}
		}
		if tab.n != kept {
			t.Fatalf("round %d: %d entries counted, %d kept", round, tab.n, kept)
		}
	}
	if moving < 100 {
		t.Fatalf("%d rounds forgot while a grown table moved its slots, want more", moving)
	}
}

// TestIDTableGrowsALittleAtATime: an add moves a few of the outgrown
// table's slots, never all of them, and every entry is found throughout.
func TestIDTableGrowsALittleAtATime(t *testing.T) {
	var tab idTable
	var added [][2]uint64
	for i := range 100_000 {
		h := idHash(fmt.Appendf(nil, "id-%d", i))
		e := tab.find(h)
		if *e != ([2]uint64{}) {
			t.Fatalf("id %d found before it was added", i)
		}
		before := tab.moved
		tab.add(e, h, 0)
		added = append(added, h)
		if tab.old != nil && tab.moved-before > movesPerAdd {
			t.Fatalf("add %d moved %d slots", i, tab.moved-before)
		}
		if i%997 == 0 {
			for k, h := range added {
				if *tab.find(h) == ([2]uint64{}) {
					t.Fatalf("after %d adds, id %d not found (table of %d slots, outgrown %d, moved %d)", i+1, k, len(tab.slots), len(tab.old), tab.moved)
				}
			}
		}
	}
}
