package windows

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/riskstream/riskstream/internal/prefetch"
)

// TestStateIndexAgainstMap runs random adds, updates and removes against a
// Go map. The ids share their top bits in few patterns, so probe runs are
// long and get holes shifted back into them; one pattern's home is the
// last place, so its runs wrap around the end of the array.
func TestStateIndexAgainstMap(t *testing.T) {
	wrapped := 0
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		var x stateIndex
		ref := map[slotID]uint64{}
		var ids []slotID
		newID := func() slotID {
			// Top bits 00, 01, 10 or all ones, the rest only in the low 24.
			top := [4]uint64{0, 1 << 62, 2 << 62, 0xffff_ffff_ff00_0000}[rng.IntN(4)]
			return slotID{rng.Uint64(), top | rng.Uint64()>>40}
		}
		newRef := func() uint64 {
			if rng.IntN(2) == 0 {
				return cachedRef | uint64(rng.Uint32())
			}
			return rng.Uint64()>>1 | 1
		}
		for step := 0; step < 8000; step++ {
			var id slotID
			if len(ids) > 0 && rng.IntN(2) == 0 {
				id = ids[rng.IntN(len(ids))]
			} else {
				id = newID()
				ids = append(ids, id)
			}
			want, held := ref[id]
			switch rng.IntN(3) {
			case 0:
				r := newRef()
				e, added := x.add(id, r)
				if added == held || e.id != id || e.ref != map[bool]uint64{true: want, false: r}[held] {
					t.Fatalf("seed %d step %d: add(%x) = %x, %v; held %v with %x", seed, step, id, e.ref, added, held, want)
				}
				if !held {
					ref[id] = r
				}
			case 1:
				if e := x.entry(id); e != nil {
					e.ref = newRef()
					ref[id] = e.ref
				}
			default:
				if e := x.entry(id); e != nil {
					x.remove(e)
					delete(ref, id)
				}
			}
			if x.n != len(ref) {
				t.Fatalf("seed %d step %d: index holds %d, map %d", seed, step, x.n, len(ref))
			}
			if step%97 == 0 {
				for id, r := range ref {
					if e := x.entry(id); e == nil || e.ref != r {
						t.Fatalf("seed %d step %d: %x has entry %v, want ref %x", seed, step, id, e, r)
					}
				}
				if e := x.entry(newID()); e != nil {
					t.Fatalf("seed %d: an absent id was found", seed)
				}
				for i, e := range x.entries {
					if e.ref != 0 && uint64(i) < x.home(e.id) {
						wrapped++ // its run went past the end
					}
				}
			}
		}
		// Emptied, the array gives its memory back.
		for id := range ref {
			x.remove(x.entry(id))
		}
		if x.n != 0 || len(x.entries) > 64 {
			t.Fatalf("seed %d: emptied index holds %d in %d places", seed, x.n, len(x.entries))
		}
	}
	if wrapped == 0 {
		t.Fatal("no probe run wrapped around the end of the array")
	}
}

// BenchmarkStateIndexProbe looks up ids, half of them held, in an index
// that fits the CPU's caches and in one of 1.6M entries (96 MiB), as at 10M
// keys, with and without their lines asked for a group of lookups ahead,
// a share before each lookup, as Prefetch's are (BENCHMARKS.md "State at
// key scale").
func BenchmarkStateIndexProbe(b *testing.B) {
	for _, n := range []int{20_000, 1_600_000} {
		var x stateIndex
		rng := rand.New(rand.NewPCG(1, 2))
		for x.n < n {
			x.add(slotID{rng.Uint64(), rng.Uint64()}, 1)
		}
		ids := make([]slotID, 1<<20)
		for i := range ids {
			ids[i] = slotID{rng.Uint64(), rng.Uint64()}
			if i%2 == 1 {
				j := rng.IntN(len(x.entries))
				for x.entries[j].ref == 0 {
					j = rng.IntN(len(x.entries))
				}
				ids[i] = x.entries[j].id
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
								q.Add(prefetch.Addr(&x.entries[x.home(id)]))
							}
						}
						q.Issue(group - k%group)
					}
					if x.entry(ids[k]) != nil {
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
