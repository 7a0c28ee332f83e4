package windows

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/riskstream/riskstream/internal/race"
	"github.com/riskstream/riskstream/windows/slot"
)

// TestTimerQueueOrder runs timers by time, and timers of equal time in the
// order they were set, which is what makes firing order deterministic.
func TestTimerQueueOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var q timerQueue[string]
	type set struct {
		at  int64
		key string
	}
	var want []set
	for i := range 5000 {
		at := r.Int64N(50)
		key := string(rune('a'+i%26)) + string(rune(i))
		q.add(at, key, false)
		want = append(want, set{at, key})
	}
	slices.SortStableFunc(want, func(a, b set) int { return int(a.at - b.at) })
	var got []set
	runDue(&q, math.MaxInt64, func(at int64, key string) { got = append(got, set{at, key}) })
	if !slices.Equal(got, want) {
		t.Fatal("timers ran out of order")
	}
}

// runDue runs, in order, the timers of q due at or before now.
func runDue[E any](q *timerQueue[E], now int64, run func(at int64, e E)) {
	for q.Len() > 0 && q.next() <= now {
		b := q.popBucket()
		for _, blk := range b.blocks {
			for _, e := range blk {
				run(b.at, e)
			}
		}
		q.recycle(b)
	}
}

// TestTimerQueueInterleaved sets timers while buckets run, some at times
// that already ran (as a late event's cleanup may be), and checks every
// timer runs once, by time and then in the order set, against a sorted
// list.
func TestTimerQueueInterleaved(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var q timerQueue[int]
	type set struct {
		at int64
		i  int
	}
	var pending, got, want []set
	i := 0
	for now := int64(0); now < 2000; now++ {
		for range r.IntN(20) {
			at := now - 3 + r.Int64N(30)
			q.add(at, i, false)
			pending = append(pending, set{at, i})
			i++
		}
		runDue(&q, now, func(at int64, i int) { got = append(got, set{at, i}) })
		// What is due now, in the order the queue must give it.
		slices.SortStableFunc(pending, func(a, b set) int { return int(a.at - b.at) })
		k := 0
		for k < len(pending) && pending[k].at <= now {
			k++
		}
		want = append(want, pending[:k]...)
		pending = slices.Delete(pending, 0, k)
	}
	if len(got) != len(want) || !slices.Equal(got, want) {
		t.Fatalf("ran %d timers, want %d, or out of order", len(got), len(want))
	}
	if q.Len() != len(pending) {
		t.Fatalf("%d timers pending, want %d", q.Len(), len(pending))
	}
}

// TestTimerQueueMemory: the queue holds memory for about the timers
// pending at its peak, not for its largest bucket at every time, and in
// steady state it reuses that memory instead of allocating. Replay collects
// garbage rarely, so every allocation there is fresh memory.
func TestTimerQueueMemory(t *testing.T) {
	var q timerQueue[idTimer]
	e := idTimer{id: slot.ID{1, 2}}
	// Every time has a timer, set 20 before; every 10th also the cleanup of
	// a thousand keys, as rules' purges come in a replay.
	at, peak := int64(0), 0
	round := func() {
		for q.Len() > 0 && q.next() <= at {
			q.recycle(q.popBucket())
		}
		q.add(at+20, e, false)
		if at%10 == 0 {
			for range 1000 {
				q.add(at+10, e, false)
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

// BenchmarkTimerQueueAdd sets the timers of the key-scale rules for each
// of b.N events, 20 a millisecond: a session's 30 s after the event, a
// sliding window's pane cleanup 60 s after its second, and a day's end,
// running what the watermark (2 s behind) passes. Each op is one event.
func BenchmarkTimerQueueAdd(b *testing.B) {
	var q timerQueue[idTimer]
	const day = 86_400_000
	for i := range b.N {
		ts := int64(i / 20)
		q.add(ts+30_000, idTimer{spec: 2}, false)
		q.add((ts/1000+1)*1000+60_000, idTimer{spec: 0}, false)
		q.add(day, idTimer{spec: 1}, false)
		for q.Len() > 0 && q.next() <= ts-2000 {
			q.recycle(q.popBucket())
		}
	}
}
