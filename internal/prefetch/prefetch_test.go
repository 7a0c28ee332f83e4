package prefetch

import (
	"testing"
	"unsafe"
)

// TestLinesNeverFaults: callers pass addresses they have not checked (a
// candidate slot, an entry past a stale index); a prefetch of any address,
// nil included, must be harmless.
func TestLinesNeverFaults(t *testing.T) {
	var x [4]uint64
	Lines(nil)
	Lines([]unsafe.Pointer{nil, unsafe.Pointer(&x[0]), unsafe.Add(unsafe.Pointer(&x[0]), 1<<40)})
	if x != [4]uint64{} {
		t.Fatal("a prefetch wrote memory")
	}
}
