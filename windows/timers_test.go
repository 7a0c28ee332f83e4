package windows

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/riskstream/riskstream/internal/race"
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
		for _, e := range entriesOf(b) {
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
		for _, e := range entriesOf(b) {
			got = append(got, e.key)
		}
		q.recycle(b)
	}
	want := []string{"a", "aa", "b", "c", "d", "e", "d", "b", "e", "a", "c"}
	if !slices.Equal(got, want) {
		t.Fatalf("timers ran as %q, want %q", got, want)
	}
}

func entriesOf(b *timerBucket) []timerEntry {
	var all []timerEntry
	for _, blk := range b.blocks {
		all = append(all, blk...)
	}
	return all
}

// TestTimerQueueHeatmapsInKeyOrderAcrossBlocks sorts a bucket of many
// blocks as one.
func TestTimerQueueHeatmapsInKeyOrderAcrossBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	hm := &spec{hm: &rules.Heatmap{}}
	var q timerQueue
	var want []string
	for i := range 3000 {
		k := fmt.Sprintf("k%05d", r.IntN(100000))
		want = append(want, k)
		q.push(int64(i%2), newSlot(k, hm))
	}
	var got []string
	for q.Len() > 0 {
		b := q.popBucket()
		for _, e := range entriesOf(b) {
			got = append(got, e.key)
		}
		if !slices.IsSorted(got[len(got)-len(entriesOf(b)):]) {
			t.Fatalf("bucket at %d ran out of key order", b.at)
		}
		q.recycle(b)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatal("the timers that ran are not the timers set")
	}
}

// TestTimerQueueMemory: the queue holds memory for about the timers
// pending at its peak, not for its largest bucket at every time, and in
// steady state it reuses that memory instead of allocating. Replay collects
// garbage rarely, so every allocation there is fresh memory.
func TestTimerQueueMemory(t *testing.T) {
	rule := &spec{rule: &rules.Rule{}}
	s := newSlot("k", rule)
	var q timerQueue
	// Every time has a timer, set 20 before; every 10th also the cleanup of
	// a thousand keys, as rules' purges come in a replay.
	at, peak := int64(0), 0
	round := func() {
		for q.Len() > 0 && q.next() <= at {
			q.recycle(q.popBucket())
		}
		q.push(at+20, s)
		if at%10 == 0 {
			for range 1000 {
				q.push(at+10, s)
			}
		}
		peak = max(peak, q.Len())
		at++
	}
	for range 100 {
		round()
	}
	held := 0
	for _, b := range q.byTime {
		for _, blk := range b.blocks {
			held += cap(blk)
		}
	}
	for _, free := range q.free {
		for _, blk := range free {
			held += cap(blk)
		}
	}
	if limit := 2*peak + minTimerBlock*(len(q.byTime)+len(q.spare)); held > limit {
		t.Errorf("the queue holds room for %d timers; %d were pending at most", held, peak)
	}
	if race.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	if n := testing.AllocsPerRun(100, round); n > 0 {
		t.Errorf("a round of timers allocated %.2f times", n)
	}
}
