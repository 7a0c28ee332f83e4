package state

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortWrites: the radix sort orders writes as a stable sort by key
// bytes does, for keys that share long prefixes, are shorter than the
// 16-byte prefix (or differ only by trailing zero bytes), or repeat.
func TestSortWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var tmp []sortKey
	for round := range 200 {
		n := rng.IntN(300)
		keys := make([][]byte, n)
		for i := range keys {
			switch rng.IntN(5) {
			case 0: // a short key, maybe ending in zero bytes
				keys[i] = bytes.Repeat([]byte{byte(rng.IntN(3))}, rng.IntN(4))
			case 1: // a repeat
				if i > 0 {
					keys[i] = keys[rng.IntN(i)]
					continue
				}
				fallthrough
			case 2: // a shared run, then random bytes, about the 16th byte
				keys[i] = bytes.Repeat([]byte{'x'}, 12+rng.IntN(6))
				for range rng.IntN(6) {
					keys[i] = append(keys[i], byte(rng.IntN(3))*127)
				}
			default: // a slot-like key with a long shared prefix
				keys[i] = fmt.Appendf(nil, "s\x00%c\"user-%d\"\x00", byte(rng.IntN(3)), rng.IntN(10_000_000))
			}
		}
		sorted := make([]sortKey, n)
		for i, k := range keys {
			sorted[i] = newSortKey(k, i)
		}
		tmp = sortWrites(sorted, tmp, func(op int) []byte { return keys[op] })

		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		slices.SortStableFunc(want, func(a, b int) int { return bytes.Compare(keys[a], keys[b]) })
		for i := range want {
			if sorted[i].op != want[i] {
				t.Fatalf("round %d: position %d has write %d (%q), want %d (%q)",
					round, i, sorted[i].op, keys[sorted[i].op], want[i], keys[want[i]])
			}
		}
	}
}
