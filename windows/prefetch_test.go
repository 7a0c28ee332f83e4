package windows

import (
	"testing"
	"unsafe"
)

// TestAppendLinesWithin: every address handed to the prefetch lies within
// the array it was taken from. The addresses sit in a slice the garbage
// collector scans, which stops the program on one that points past an
// object, into memory it may have freed.
func TestAppendLinesWithin(t *testing.T) {
	for n := 1; n <= 12; n++ {
		xs := make([]coldEntry, n)
		bytes := unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), n*int(unsafe.Sizeof(xs[0])))
		for i := range n {
			addrs := appendLines(nil, xs, uint64(i))
			for _, p := range addrs {
				off := int(uintptr(p) - uintptr(unsafe.Pointer(&bytes[0])))
				if uintptr(p) < uintptr(unsafe.Pointer(&bytes[0])) || off >= len(bytes) {
					t.Fatalf("%d entries, entry %d: address at byte %d of %d", n, i, off, len(bytes))
				}
			}
			// The next line is asked for whenever some of the array lies
			// 64 bytes on.
			entry := i * int(unsafe.Sizeof(xs[0]))
			if want := 1 + min(1, max(0, len(bytes)-entry-64)); len(addrs) != want {
				t.Fatalf("%d entries, entry %d: %d addresses, want %d", n, i, len(addrs), want)
			}
		}
	}
}
