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
				got := d.seen(idHash([]byte(id)), wm)
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

// TestIDTableRotate: after a rotation, exactly the entries of the
// generation before stay found, while the sweep removes the others a few
// slots at a time, in tables whose clusters wrap around their end, some
// of them grown (past 16 entries) and still moving their outgrown slots;
// an id of a stale entry is added again in its slot. Once swept, the
// table counts the live entries only.
func TestIDTableRotate(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	moving := 0
	for round := range 2000 {
		tab := idTable{slots: make([][2]uint64, 32)}
		tab.remember(1, 0)
		tag := map[[2]uint64]int64{} // entry (tag aside) -> generation
		hash := func() [2]uint64 {
			for {
				// Homes crowd the last slots, so that clusters wrap.
				h := [2]uint64{uint64(56+rng.IntN(8)) | uint64(rng.IntN(1<<20))<<6 | 1<<40, uint64(rng.Uint32()) << 8}
				if _, dup := tag[h]; !dup {
					return h
				}
			}
		}
		add := func(h [2]uint64, gen int64) {
			e, found := tab.find(h)
			if found {
				t.Fatalf("round %d: %x found before it was added", round, h)
			}
			tab.add(e, h, gen)
			tag[h] = gen
		}
		for range 1 + rng.IntN(24) {
			add(hash(), int64(rng.IntN(2)))
		}
		if tab.old != nil {
			moving++
		}
		tab.rotate(2)
		check := func(when string) {
			live := 0
			for h, g := range tag {
				_, found := tab.find(h)
				if found != (g >= 1) {
					t.Fatalf("round %d, %s: entry %x of generation %d found %v", round, when, h, g, found)
				}
				if found {
					live++
				}
			}
			if tab.toSweep == 0 && tab.old == nil && tab.n != live {
				t.Fatalf("round %d, %s: %d entries counted, %d live", round, when, tab.n, live)
			}
		}
		check("after the rotation")
		for k := range 1 + rng.IntN(8) {
			var stale [][2]uint64
			for h, g := range tag {
				if g == 0 {
					stale = append(stale, h)
				}
			}
			if len(stale) > 0 && rng.IntN(3) == 0 {
				add(stale[rng.IntN(len(stale))], 2) // sent again after it was forgotten
			} else if len(tag) < 30 {
				add(hash(), 2)
			}
			check(fmt.Sprintf("after add %d", k))
		}
		tab.settle()
		check("swept")
	}
	if moving < 100 {
		t.Fatalf("%d rounds rotated while a grown table moved its slots, want more", moving)
	}
}

// TestIDTableGrowsALittleAtATime: an add moves a few of the outgrown
// table's slots, never all of them, and every entry is found throughout.
func TestIDTableGrowsALittleAtATime(t *testing.T) {
	var tab idTable
	var added [][2]uint64
	for i := range 100_000 {
		h := idHash(fmt.Appendf(nil, "id-%d", i))
		e, found := tab.find(h)
		if found {
			t.Fatalf("id %d found before it was added", i)
		}
		before := tab.moved
		tab.add(e, h, 0)
		added = append(added, h)
		if tab.old != nil && tab.moved-before > stepsPerAdd {
			t.Fatalf("add %d moved %d slots", i, tab.moved-before)
		}
		if i%997 == 0 {
			for k, h := range added {
				if _, found := tab.find(h); !found {
					t.Fatalf("after %d adds, id %d not found (table of %d slots, outgrown %d, moved %d)", i+1, k, len(tab.slots), len(tab.old), tab.moved)
				}
			}
		}
	}
}
