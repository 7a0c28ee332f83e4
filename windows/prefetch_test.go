package windows

import (
	"testing"
	"unsafe"
)

// TestPrefetchLinesNeverFaults: Prefetch passes addresses it has not
// checked (a candidate slot, an entry past a stale index); a prefetch of
// any address, nil included, must be harmless.
func TestPrefetchLinesNeverFaults(t *testing.T) {
	var x [4]uint64
	prefetchLines(nil)
	prefetchLines([]unsafe.Pointer{nil, unsafe.Pointer(&x[0]), unsafe.Add(unsafe.Pointer(&x[0]), 1<<40)})
	if x != [4]uint64{} {
		t.Fatal("a prefetch wrote memory")
	}
}

// TestAppendLinesWithin: every address handed to the prefetch lies within
// the array it was taken from. The addresses sit in a slice the garbage
// collector scans, which stops the program on one that points past an
// object, into memory it may have freed.
func TestAppendLinesWithin(t *testing.T) {
	for n := 1; n <= 12; n++ {
		xs := make([]coldEntry, n)
		first := uintptr(unsafe.Pointer(&xs[0]))
		last := uintptr(unsafe.Pointer(&xs[n-1]))
		for i := range n {
			addrs := appendLines(nil, xs, uint64(i))
			for _, p := range addrs {
				if a := uintptr(p); a < first || a > last {
					t.Fatalf("%d entries, entry %d: address %#x outside [%#x, %#x]", n, i, a, first, last)
				}
			}
			// The next line is asked for whenever the array reaches it.
			if want := 1 + b2i(uintptr(unsafe.Pointer(&xs[i]))+64 <= last); len(addrs) != want {
				t.Fatalf("%d entries, entry %d: %d addresses, want %d", n, i, len(addrs), want)
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
