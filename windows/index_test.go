package windows

import (
	"math/rand/v2"
	"testing"
)

// TestSlotIndexAgainstMap runs random puts and removes against a Go map.
// The ids share their top bits in few patterns, so probe runs are long,
// wrap around the end of the array and get holes shifted back into them.
func TestSlotIndexAgainstMap(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		var x slotIndex
		ref := map[slotID]*slot{}
		var live []*slot
		for step := 0; step < 5000; step++ {
			if len(live) > 0 && rng.IntN(3) == 0 {
				k := rng.IntN(len(live))
				s := live[k]
				live[k] = live[len(live)-1]
				live = live[:len(live)-1]
				x.remove(s)
				delete(ref, s.id)
			} else {
				id := slotID{rng.Uint64(), uint64(rng.IntN(4))<<62 | rng.Uint64()>>40}
				if _, dup := ref[id]; dup {
					continue
				}
				s := &slot{id: id}
				x.put(s)
				ref[id] = s
				live = append(live, s)
			}
			if x.n != len(ref) {
				t.Fatalf("seed %d step %d: index holds %d, map %d", seed, step, x.n, len(ref))
			}
			if step%97 == 0 {
				for id, s := range ref {
					if got := x.get(id); got != s {
						t.Fatalf("seed %d step %d: get(%x) = %p, want %p", seed, step, id, got, s)
					}
					// Only 24 bits of a tag vary here, so the candidate
					// may be another slot of the same tag.
					if got := x.candidate(id); got == nil || tagOf(got.id) != tagOf(id) {
						t.Fatalf("seed %d step %d: candidate(%x) = %p, not a slot of its tag", seed, step, id, got)
					}
				}
				if got := x.get(slotID{rng.Uint64(), rng.Uint64()}); got != nil {
					t.Fatalf("seed %d: an absent id was found", seed)
				}
			}
		}
	}
}
