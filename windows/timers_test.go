package windows

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTimerQueueOrder pops timers by time, and timers of equal time in the
// order they were pushed, which is what makes firing order deterministic.
func TestTimerQueueOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var q timerQueue
	type pushed struct {
		at  int64
		seq int
	}
	var want []pushed
	for i := range 5000 {
		at := r.Int64N(50)
		q.push(at, "")
		want = append(want, pushed{at, i})
	}
	slices.SortStableFunc(want, func(a, b pushed) int { return int(a.at - b.at) })
	for i, w := range want {
		got := q.pop()
		if got.at != w.at || got.seq != uint64(w.seq+1) {
			t.Fatalf("pop %d = (%d, seq %d), want (%d, seq %d)", i, got.at, got.seq, w.at, w.seq+1)
		}
	}
	if q.Len() != 0 {
		t.Fatal("queue not empty")
	}
}
