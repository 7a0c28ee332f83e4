package windows

import (
	"math/bits"
	"slices"

	"github.com/riskstream/riskstream/windows/slot"
)

// timerBucket holds the timers due at one time, in the order they were set.
// They are kept in blocks of 8, 16, … up to 512 entries rather than one
// slice: a slice grown by doubling leaves its old arrays behind, and in a
// replay (which collects garbage rarely) that was fresh memory many times
// the timers' peak (BENCHMARKS.md). Blocks go back to the queue's free
// lists when the bucket has run, and the next buckets take them.
type timerBucket[E any] struct {
	at     int64
	blocks [][]E // all full but the last
	// keyed is set when a heatmap's timer is among the entries: the
	// operator then runs the timers due at that time in key order.
	keyed bool
}

// Timer blocks come in sizes 8<<class for class 0 to maxTimerClass.
const (
	minTimerBlock = 8
	maxTimerClass = 6 // 512 entries, 12 KiB
)

// idTimer asks for the onTimer of the slot of a spec with an id: one in the
// cache or the cold store. It holds no pointer, so that the queue, which has
// an entry for nearly every state, costs the garbage collector nothing to
// scan, and no evicted slot is kept alive by its timer.
type idTimer struct {
	id   slot.ID
	spec int32
}

// A keyTimer (a slot key) asks for the onTimer of a slot that only the
// Backend may hold: restored from a checkpoint, or spilled by the cold
// store, which the id alone cannot find.

// timerQueue is the operator's single ordered timer structure (Flink's
// InternalTimerService): a min-heap of the distinct times that have timers,
// each with a bucket of the timers due then. Many timers share a time (the
// cleanup of every key's pane at a second boundary), so the heap stays small
// and setting a timer is mostly an append.
//
// A bucket's timers are in the order they were set; the bucket notes
// whether a heatmap's timer is among them, for the operator to run them in
// key order then (see Operator.AdvanceWatermark).
type timerQueue[E any] struct {
	times  []int64 // min-heap
	byTime map[int64]*timerBucket[E]
	// recent are the buckets pushed to last, the latest first: an event
	// sets timers of a few rules, each mostly at the time its last event
	// set, and finding them here saves a lookup of byTime.
	recent [recentBuckets]*timerBucket[E]
	spare  []*timerBucket[E]
	free   [maxTimerClass + 1][][]E // empty blocks by class
	n      int                      // timers pending
}

// Len is the number of timers pending.
func (q *timerQueue[E]) Len() int { return q.n }

// next returns the earliest time with a timer; the queue must not be empty.
func (q *timerQueue[E]) next() int64 { return q.times[0] }

// add sets a timer e at at; keyed marks a heatmap's.
func (q *timerQueue[E]) add(at int64, e E, keyed bool) {
	b := q.bucket(at)
	k := len(b.blocks) - 1
	if k < 0 || len(b.blocks[k]) == cap(b.blocks[k]) {
		k++
		b.blocks = append(b.blocks, q.newBlock(min(k, maxTimerClass)))
	}
	b.blocks[k] = append(b.blocks[k], e)
	b.keyed = b.keyed || keyed
	q.n++
}

// recentBuckets is how many buckets a timerQueue remembers.
const recentBuckets = 4

// bucket returns the bucket of time at, made if need be, and makes it the
// most recent.
func (q *timerQueue[E]) bucket(at int64) *timerBucket[E] {
	for i, b := range &q.recent {
		if b == nil {
			break
		}
		if b.at == at {
			copy(q.recent[1:i+1], q.recent[:i])
			q.recent[0] = b
			return b
		}
	}
	if q.byTime == nil {
		q.byTime = make(map[int64]*timerBucket[E])
	}
	b := q.byTime[at]
	if b == nil {
		if n := len(q.spare); n > 0 {
			b, q.spare = q.spare[n-1], q.spare[:n-1]
		} else {
			b = &timerBucket[E]{}
		}
		b.at = at
		q.byTime[at] = b
		q.pushTime(at)
	}
	copy(q.recent[1:], q.recent[:recentBuckets-1])
	q.recent[0] = b
	return b
}

// forget drops b from the recent buckets.
func (q *timerQueue[E]) forget(b *timerBucket[E]) {
	for i, r := range &q.recent {
		if r == b {
			copy(q.recent[i:], q.recent[i+1:])
			q.recent[recentBuckets-1] = nil
			return
		}
	}
}

func (q *timerQueue[E]) newBlock(class int) []E {
	if n := len(q.free[class]); n > 0 {
		blk := q.free[class][n-1]
		q.free[class] = q.free[class][:n-1]
		return blk
	}
	return make([]E, 0, minTimerBlock<<class)
}

// popBucket removes and returns the bucket of the earliest time. The caller
// hands it back with recycle once done with its entries.
func (q *timerQueue[E]) popBucket() *timerBucket[E] {
	at := q.popTime()
	b := q.byTime[at]
	delete(q.byTime, at)
	q.forget(b)
	for _, blk := range b.blocks {
		q.n -= len(blk)
	}
	return b
}

func (q *timerQueue[E]) recycle(b *timerBucket[E]) {
	if b == nil {
		return
	}
	for _, blk := range b.blocks {
		clear(blk) // the keys may go
		class := bits.TrailingZeros(uint(cap(blk) / minTimerBlock))
		q.free[class] = append(q.free[class], blk[:0])
	}
	clear(b.blocks)
	b.blocks, b.keyed = b.blocks[:0], false
	q.spare = append(q.spare, b)
}

// removeLatest removes the buckets due last, whole, until at most keep
// timers are left, calling fn with each timer removed; it returns how many
// it removed.
func (q *timerQueue[E]) removeLatest(keep int, fn func(at int64, e E) error) (int, error) {
	times := slices.Clone(q.times)
	slices.Sort(times) // ascending: a min-heap too
	removed := 0
	for q.n > keep && len(times) > 0 {
		at := times[len(times)-1]
		times = times[:len(times)-1]
		b := q.byTime[at]
		delete(q.byTime, at)
		q.forget(b)
		for _, blk := range b.blocks {
			for _, e := range blk {
				if err := fn(at, e); err != nil {
					q.times = append(times, at) // the bucket stays, whole
					q.byTime[at] = b
					return removed, err
				}
			}
		}
		for _, blk := range b.blocks {
			q.n -= len(blk)
			removed += len(blk)
		}
		q.recycle(b)
	}
	q.times = times
	return removed, nil
}

func (q *timerQueue[E]) pushTime(at int64) {
	h := append(q.times, at)
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if h[parent] <= h[i] {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
	q.times = h
}

func (q *timerQueue[E]) popTime() int64 {
	h := q.times
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l] < h[m] {
			m = l
		}
		if r < len(h) && h[r] < h[m] {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	q.times = h
	return top
}
