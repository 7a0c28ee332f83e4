package parallel

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestDo: every index is called once, all before Do returns, the calls
// overlap (each waits for the others to start), and n = 0 calls nothing.
func TestDo(t *testing.T) {
	Do(0, func(int) { t.Fatal("called with n = 0") })
	const n = 4
	var calls [n]atomic.Int32
	var started, alone atomic.Int32
	Do(n, func(i int) {
		calls[i].Add(1)
		started.Add(1)
		for deadline := time.Now().Add(10 * time.Second); started.Load() < n; {
			if time.Now().After(deadline) {
				alone.Add(1) // the others never started beside it
				return
			}
			runtime.Gosched()
		}
	})
	if alone.Load() > 0 {
		t.Errorf("%d calls waited 10 s for the others to start: not run at once", alone.Load())
	}
	for i := range calls {
		if got := calls[i].Load(); got != 1 {
			t.Errorf("index %d called %d times", i, got)
		}
	}
}
