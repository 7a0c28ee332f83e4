package engine

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"testing"
)

// TestIDLogTake: the ids taken come out of Take as blobs of at most
// IDBlobBytes (and one entry), cut between entries, each once; a Take not
// written comes out again with what came since, one written does not, and
// a generation forgotten before its blobs were written is not written.
func TestIDLogTake(t *testing.T) {
	l := NewIDLog()
	value := binary.AppendVarint(binary.AppendVarint(nil, 3), 1<<40)
	set := func(gen int64, n int, from uint64) {
		for i := range uint64(n) {
			l.add(gen, [2]uint64{from + i + 1, (from + i) << 8}, value)
		}
	}
	count := func(blobs []IDBlob) map[int64]int {
		n := map[int64]int{}
		for _, b := range blobs {
			if len(b.Entries) > IDBlobBytes+16+1+len(value) {
				t.Errorf("a blob of %d bytes", len(b.Entries))
			}
			if err := l.eachEntry(b.Entries, func(h [2]uint64, v []byte) {
				if string(v) != string(value) {
					t.Errorf("id %v with value %x", h, v)
				}
				n[b.Gen]++
			}); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	set(7, 60_000, 0)
	set(8, 10, 1_000_000)
	blobs, forgotten, _ := l.Take()
	if n := count(blobs); n[7] != 60_000 || n[8] != 10 || len(blobs) < 3 || len(forgotten) != 0 {
		t.Fatalf("first take: %v ids in %d blobs, forgotten %v", n, len(blobs), forgotten)
	}
	l.Done(false)
	set(8, 5, 2_000_000)
	l.Forget(7)
	blobs, forgotten, _ = l.Take()
	if n := count(blobs); n[7] != 0 || n[8] != 15 || len(forgotten) != 1 || forgotten[0] != 7 {
		t.Fatalf("after a take not written: %v ids, forgotten %v", n, forgotten)
	}
	l.Done(true)
	blobs, forgotten, _ = l.Take()
	if n := count(blobs); len(n) != 0 || len(forgotten) != 0 {
		t.Fatalf("after a take written: %v ids, forgotten %v", n, forgotten)
	}
	l.Done(true)
	if err := l.Load(9, []byte{1, 2, 3}); err == nil {
		t.Error("a cut blob loaded")
	}
}

// FuzzIDLogLoad: a blob of the router's ids topic loads or fails on any
// bytes, and what loads, written again, loads as the same entries.
func FuzzIDLogLoad(f *testing.F) {
	f.Add(appendIDEntry(appendIDEntry(nil, [2]uint64{1, 2 << 8}, []byte{6, 8}), [2]uint64{3, 4 << 8}, nil))
	f.Add([]byte{1, 2, 3})
	// entries loads b into an IDLog and returns what a restore is shown,
	// written again.
	entries := func(t *testing.T, b []byte) ([]byte, error) {
		l := NewIDLog()
		if err := l.Load(5, b); err != nil {
			return nil, err
		}
		var out []byte
		err := l.restore(func(gen int64, h [2]uint64, v []byte) bool {
			if gen != 5 {
				t.Fatalf("shown an id of generation %d", gen)
			}
			out = appendIDEntry(out, h, v)
			return true
		})
		return out, err
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		once, err := entries(t, b)
		if err != nil {
			return
		}
		twice, err := entries(t, once)
		if err != nil || string(twice) != string(once) {
			t.Fatalf("%x loads as %x, which loads as %x (%v)", b, once, twice, err)
		}
	})
}

// TestIDBlobKeysNext: a checkpoint deletes the blobs of the generations
// forgotten, every blob when a restore rewrote them, and always those of
// the generation before the first watermark; the keys it started from
// stay as they were, for a write that fails.
func TestIDBlobKeysNext(t *testing.T) {
	keys := IDBlobKeys[string]{1: {"a", "b"}, 2: {"c"}, PreWatermark: {"p"}}
	n := 0
	name := func(b IDBlob) string { n++; return fmt.Sprintf("%d/%d", b.Gen, n) }
	blobs := []IDBlob{{Gen: 2}, {Gen: 3}, {Gen: PreWatermark}}
	deleted, written, next := keys.Next(blobs, []int64{1}, false, name)
	if want := []string{"a", "b", "p"}; !slices.Equal(deleted, want) {
		t.Errorf("deleted %q, want %q", deleted, want)
	}
	if want := []string{"2/1", "3/2", fmt.Sprintf("%d/3", PreWatermark)}; !slices.Equal(written, want) {
		t.Errorf("written %q, want %q", written, want)
	}
	want := IDBlobKeys[string]{2: {"c", "2/1"}, 3: {"3/2"}, PreWatermark: {written[2]}}
	if !maps.EqualFunc(next, want, slices.Equal) {
		t.Errorf("next %v, want %v", next, want)
	}
	if len(keys) != 3 || len(keys[1]) != 2 || len(keys[2]) != 1 {
		t.Errorf("the keys started from changed: %v", keys)
	}
	deleted, _, next = next.Next(nil, nil, true, name)
	if want := []string{written[2], "c", "2/1", "3/2"}; !slices.Equal(deleted, want) || len(next) != 0 {
		t.Errorf("after a restore: deleted %q, left %v; want %q, none", deleted, next, want)
	}
}
