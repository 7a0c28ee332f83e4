package windows

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTimerQueueOrder runs timers by time, and timers of equal time in the
// order they were set, which is what makes firing order deterministic.
func TestTimerQueueOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var q timerQueue
	type set struct {
		at  int64
		key string
	}
	var want []set
	for i := range 5000 {
		at := r.Int64N(50)
		s := newSlot(string(rune('a'+i%26))+string(rune(i)), nil)
		q.push(at, s)
		want = append(want, set{at, s.key})
	}
	slices.SortStableFunc(want, func(a, b set) int { return int(a.at - b.at) })
	var got []set
	for q.Len() > 0 {
		b := q.popBucket()
		for _, e := range b.entries {
			got = append(got, set{b.at, e.key})
		}
		q.recycle(b)
	}
	if !slices.Equal(got, want) {
		t.Fatal("timers ran out of order")
	}
}
