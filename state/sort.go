package state

import (
	"bytes"
	"encoding/binary"
	"slices"
)

// sortKey is a pending write with the first 16 bytes of its key as two
// big-endian numbers (zero-padded), which order keys as their bytes do up
// to a tie.
type sortKey struct {
	hi, lo uint64
	op     int
}

func newSortKey(key []byte, op int) sortKey {
	var b [16]byte
	copy(b[:], key)
	return sortKey{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:]), op: op}
}

// byte returns byte i (0 first) of k's prefix.
func (k *sortKey) byte(i int) byte {
	if i < 8 {
		return byte(k.hi >> (56 - 8*i))
	}
	return byte(k.lo >> (56 - 8*(i-8)))
}

// sortWrites sorts keys by their keys' bytes, and writes of the same key
// in the order given; key returns the key of a write. tmp is scratch space
// of any length, returned grown for the next call.
//
// It is a least-significant-digit radix sort of the 16-byte prefixes, which
// skips the bytes all keys share (the key prefix, the rule index), then a
// comparison sort of the rare runs whose prefixes tie. Sorting a
// checkpoint's writes with comparisons was most of a commit's CPU besides
// Pebble's: the keys' first bytes are shared, so the comparisons went on
// to the keys themselves, a cache miss each.
func sortWrites(keys, tmp []sortKey, key func(op int) []byte) []sortKey {
	n := len(keys)
	if n < 2 {
		return tmp
	}
	var counts [16][256]int
	for i := range keys {
		for d := range 16 {
			counts[d][keys[i].byte(d)]++
		}
	}
	tmp = slices.Grow(tmp[:0], n)[:n]
	src, dst := keys, tmp
	for d := 15; d >= 0; d-- {
		c := &counts[d]
		if c[src[0].byte(d)] == n {
			continue // every key has this byte
		}
		sum := 0
		for v := range c {
			c[v], sum = sum, sum+c[v]
		}
		for i := range src {
			v := src[i].byte(d)
			dst[c[v]] = src[i]
			c[v]++
		}
		src, dst = dst, src
	}
	// The radix passes are stable, so a run of equal prefixes is in write
	// order; a stable sort of the run by whole key keeps it so.
	for i := 0; i < n; {
		j := i + 1
		for j < n && src[j].hi == src[i].hi && src[j].lo == src[i].lo {
			j++
		}
		if j-i > 1 {
			slices.SortStableFunc(src[i:j], func(a, b sortKey) int {
				return bytes.Compare(key(a.op), key(b.op))
			})
		}
		i = j
	}
	if &src[0] != &keys[0] {
		copy(keys, src)
		return src
	}
	return dst
}
