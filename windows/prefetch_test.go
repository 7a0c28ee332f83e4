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
