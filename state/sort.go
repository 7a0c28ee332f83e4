package state

import (
	"bytes"
	"encoding/binary"
	"slices"
)

// sortKey is a pending write with 16 bytes of its key, from an offset, as
// two big-endian numbers (zero-padded), and how many bytes of the key are
// left from that offset (17 for more than 16): together they order keys as
// their bytes do, a shorter key first where the padding ties it with a
// longer one, and a tie means the bytes after them decide.
type sortKey struct {
	hi, lo uint64
	op     int32 // the write's number, below 2³¹: batchOf refuses more
	rest   uint8
	// overwritten is set by sortWrites when a later write of the same key
	// follows.
	overwritten bool
}

func newSortKey(key []byte, op int) sortKey {
	k := sortKey{op: int32(op)}
	k.load(key, 0)
	return k
}

// load sets k's bytes to those of key from off.
func (k *sortKey) load(key []byte, off int) {
	var b [16]byte
	key = key[min(off, len(key)):]
	copy(b[:], key)
	k.hi, k.lo = binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	k.rest = uint8(min(len(key), 17))
}

// digit returns radix digit d of k: 0 to 15 are its bytes, 16 its rest,
// the least significant.
func (k *sortKey) digit(d int) byte {
	switch {
	case d < 8:
		return byte(k.hi >> (56 - 8*d))
	case d < 16:
		return byte(k.lo >> (56 - 8*(d-8)))
	}
	return k.rest
}

func (k *sortKey) ties(o *sortKey) bool { return k.hi == o.hi && k.lo == o.lo && k.rest == o.rest }

// smallRun is the length below which a run of keys is sorted by comparing
// them: a radix pass costs a pass over its 17 tables of counts.
const smallRun = 32

// sortWrites sorts keys by their keys' bytes, and writes of the same key
// in the order given, marking all but the last of those overwritten; key
// returns the key of a write. keys must have been made by newSortKey. tmp
// is scratch space of any length, returned grown for the next call.
//
// It is a least-significant-digit radix sort of 16 bytes of the keys at a
// time, which skips the bytes all keys share (the key prefix, the rule
// index). Keys that tie on those go on with their next 16 bytes: a
// checkpoint's timer entries share their first 16 bytes by the thousand
// (the same time, the same rule), and comparing them pair by pair was a
// fifth of the live job's CPU, each comparison a cache miss on two keys.
func sortWrites(keys, tmp []sortKey, key func(op int) []byte) []sortKey {
	return sortFrom(keys, tmp, key, 0)
}

// sortFrom sorts keys, whose sortKeys hold their bytes from off on, as
// sortWrites.
func sortFrom(keys, tmp []sortKey, key func(op int) []byte, off int) []sortKey {
	n := len(keys)
	if n < 2 {
		return tmp
	}
	if n < smallRun {
		// Stable: equal keys stay in write order.
		slices.SortStableFunc(keys, func(a, b sortKey) int {
			return bytes.Compare(key(int(a.op))[off:], key(int(b.op))[off:])
		})
		for i := range n - 1 {
			keys[i].overwritten = bytes.Equal(key(int(keys[i].op))[off:], key(int(keys[i+1].op))[off:])
		}
		return tmp
	}
	var counts [17][256]int
	for i := range keys {
		for d := range 17 {
			counts[d][keys[i].digit(d)]++
		}
	}
	tmp = slices.Grow(tmp[:0], n)[:n]
	src, dst := keys, tmp
	for d := 16; d >= 0; d-- {
		c := &counts[d]
		if c[src[0].digit(d)] == n {
			continue // every key has this digit
		}
		sum := 0
		for v := range c {
			c[v], sum = sum, sum+c[v]
		}
		for i := range src {
			v := src[i].digit(d)
			dst[c[v]] = src[i]
			c[v]++
		}
		src, dst = dst, src
	}
	if &src[0] != &keys[0] {
		copy(keys, src)
	}
	// The passes are stable, so a run of ties is in write order. Keys
	// that tie with bytes left go on with the next 16; those without are
	// equal.
	for i := 0; i < n; {
		j := i + 1
		for j < n && keys[j].ties(&keys[i]) {
			j++
		}
		switch run := keys[i:j]; {
		case len(run) == 1:
		case run[0].rest > 16:
			for k := range run {
				run[k].load(key(int(run[k].op)), off+16)
			}
			tmp = sortFrom(run, tmp, key, off+16)
		default:
			for k := range run[:len(run)-1] {
				run[k].overwritten = true
			}
		}
		i = j
	}
	return tmp
}
