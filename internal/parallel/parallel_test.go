package parallel

import (
	"sync/atomic"
	"testing"
)

// TestDo: every index is called once, all before Do returns, the calls
// overlap (each waits for the others to start), and n = 0 calls nothing.
func TestDo(t *testing.T) {
	Do(0, func(int) { t.Fatal("called with n = 0") })
	const n = 4
	var calls [n]atomic.Int32
	var started atomic.Int32
	Do(n, func(i int) {
		calls[i].Add(1)
		started.Add(1)
		for started.Load() < n {
		}
	})
	for i := range calls {
		if got := calls[i].Load(); got != 1 {
			t.Errorf("index %d called %d times", i, got)
		}
	}
}
