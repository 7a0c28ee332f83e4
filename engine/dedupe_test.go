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
// their end.
func TestIDTableKeepOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 2000 {
		tab := idTable{slots: make([][2]uint64, 64)}
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
}
