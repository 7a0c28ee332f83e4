package prefetch

import "testing"

// TestLinesNeverFaults: callers pass addresses they have not checked (a
// candidate slot, an entry past a stale index); a prefetch of any address,
// nil included, must be harmless.
func TestLinesNeverFaults(t *testing.T) {
	var x [4]uint64
	Lines(nil)
	Lines([]uintptr{0, Addr(&x[0]), Addr(&x[0]) + 1<<40, ^uintptr(0)})
	if x != [4]uint64{} {
		t.Fatal("a prefetch wrote memory")
	}
}
