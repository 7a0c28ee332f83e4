package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortWrites: the radix sort orders writes as a stable sort by key
// bytes does, and marks those a later write of the same key follows, for keys that share long prefixes (timer entries share 16
// bytes by the thousand), are shorter than 16 bytes or than a multiple of
// 16 (or differ only by trailing zero bytes), or repeat.
func TestSortWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var tmp []sortKey
	for round := range 300 {
		n := rng.IntN(300)
		if round%10 == 0 {
			n = 2000 + rng.IntN(3000) // runs of ties longer than smallRun
		}
		keys := make([][]byte, n)
		for i := range keys {
			switch rng.IntN(7) {
			case 5: // a timer entry: one of a few times, then a slot key
				keys[i] = timerEntryLike(int64(rng.IntN(3)), rng.IntN(2), rng.IntN(100_000))
			case 6: // a shared run of 32 bytes, then maybe zero bytes
				keys[i] = append(bytes.Repeat([]byte{'y'}, 32), make([]byte, rng.IntN(3))...)
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
			if int(sorted[i].op) != want[i] {
				t.Fatalf("round %d: position %d has write %d (%q), want %d (%q)",
					round, i, sorted[i].op, keys[sorted[i].op], want[i], keys[want[i]])
			}
			later := i+1 < n && bytes.Equal(keys[want[i]], keys[want[i+1]])
			if sorted[i].overwritten != later {
				t.Fatalf("round %d: write %d (%q) marked overwritten %v, want %v",
					round, want[i], keys[want[i]], sorted[i].overwritten, later)
			}
		}
	}
}

// timerEntryLike returns a key of the layout of a timer entry
// (docs/format/state.md "Timers"): its first 16 bytes are those of every
// entry of the same rule and time.
func timerEntryLike(at int64, rule, user int) []byte {
	k := []byte{'s', 0xff, 0xff}
	k = binary.BigEndian.AppendUint64(k, uint64(at)^1<<63)
	k = append(k, 0, byte(rule))
	return fmt.Appendf(k, "\"u%d\"\x00", user)
}

// BenchmarkSortWrites sorts a checkpoint's writes as the live job's: a
// state and its timer entry for each of 100,000 keys, the entries at one
// of four times.
func BenchmarkSortWrites(b *testing.B) {
	var keys [][]byte
	for u := range 100_000 {
		keys = append(keys, fmt.Appendf([]byte{'s', 0, byte(u % 2)}, "\"u%d\"\x00", u*7919%10_000_000))
		keys = append(keys, timerEntryLike(1732150000000+int64(u%4)*1000, u%2, u*7919%10_000_000))
	}
	sorted := make([]sortKey, len(keys))
	var tmp []sortKey
	b.ReportAllocs()
	for b.Loop() {
		for i, k := range keys {
			sorted[i] = newSortKey(k, i)
		}
		tmp = sortWrites(sorted, tmp, func(op int) []byte { return keys[op] })
	}
}
