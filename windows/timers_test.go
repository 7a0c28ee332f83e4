package windows

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/riskstream/riskstream/rules"
)

// TestTimerQueueOrder runs timers by time, and rules' timers of equal time
// in the order they were set, which is what makes firing order
// deterministic.
func TestTimerQueueOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var q timerQueue
	rule := &spec{rule: &rules.Rule{}}
	type set struct {
		at  int64
		key string
	}
	var want []set
	for i := range 5000 {
		at := r.Int64N(50)
		s := newSlot(string(rune('a'+i%26))+string(rune(i)), rule)
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

// TestTimerQueueHeatmapsInKeyOrder: at a time with a heatmap's timer, the
// timers run in key order, however they were set, so that a queue rebuilt
// by Restore fires heatmap windows in the order of the queue it replaces.
func TestTimerQueueHeatmapsInKeyOrder(t *testing.T) {
	hm := &spec{hm: &rules.Heatmap{}}
	rule := &spec{rule: &rules.Rule{}}
	var q timerQueue
	for _, k := range []string{"d", "b", "e", "a", "c"} {
		q.push(7, newSlot(k, hm))
		q.push(9, newSlot(k, rule))
	}
	q.pushKey(7, "aa", false) // restored, a rule's
	var got []string
	for q.Len() > 0 {
		b := q.popBucket()
		for _, e := range b.entries {
			got = append(got, e.key)
		}
		q.recycle(b)
	}
	want := []string{"a", "aa", "b", "c", "d", "e", "d", "b", "e", "a", "c"}
	if !slices.Equal(got, want) {
		t.Fatalf("timers ran as %q, want %q", got, want)
	}
}
