package windows

import (
	"math/bits"
	"slices"
	"strings"
)

// timerBucket holds the timers due at one time, in the order they were set.
// They are kept in blocks of 8, 16, … up to 512 entries rather than one
// slice: a slice grown by doubling leaves its old arrays behind, and in a
// replay (which collects garbage rarely) that was fresh memory many times
// the timers' peak (BENCHMARKS.md). Blocks go back to the queue's free
// lists when the bucket has run, and the next buckets take them.
type timerBucket struct {
	at     int64
	blocks [][]timerEntry // all full but the last
	// keyed is set when a heatmap's timer is among the entries: they then
	// run in key order (see timerQueue).
	keyed bool
}

// Timer blocks come in sizes 8<<class for class 0 to maxTimerClass.
const (
	minTimerBlock = 8
	maxTimerClass = 6 // 512 entries, 12 KiB
)

// timerEntry asks for a slot's onTimer. The slot pointer saves a cache
// lookup when the slot is still cached; the key finds it otherwise.
type timerEntry struct {
	key string
	s   *slot
}

// timerQueue is the operator's single ordered timer structure (Flink's
// InternalTimerService): a min-heap of the distinct times that have timers,
// each with a bucket of the timers due then. Many timers share a time (the
// cleanup of every key's pane at a second boundary), so the heap stays small
// and setting a timer is mostly an append.
//
// Timers due at the same time run in the order they were set, except that
// when a heatmap's timer is among them they run in key order: heatmap
// windows fired at one time are then emitted in the same order whether or
// not the queue was rebuilt from the slots by Restore, which keeps no set
// order. Rules' timers only purge, so their order shows in no output, and
// sorting their large buckets would be wasted work.
type timerQueue struct {
	times  []int64 // min-heap
	byTime map[int64]*timerBucket
	last   *timerBucket // the bucket pushed to last: consecutive timers often share it
	spare  []*timerBucket
	free   [maxTimerClass + 1][][]timerEntry // empty blocks by class
	n      int                               // timers pending
	sorted []timerEntry                      // popBucket's buffer
}

// Len is the number of timers pending.
func (q *timerQueue) Len() int { return q.n }

// next returns the earliest time with a timer; the queue must not be empty.
func (q *timerQueue) next() int64 { return q.times[0] }

func (q *timerQueue) push(at int64, s *slot) {
	q.add(at, timerEntry{key: s.key, s: s}, s.sp.hm != nil)
}

// pushKey sets a timer for a slot that is not loaded (restoring a
// checkpoint), a heatmap's if keyed: it is looked up by key when due.
func (q *timerQueue) pushKey(at int64, key string, keyed bool) {
	q.add(at, timerEntry{key: key}, keyed)
}

func (q *timerQueue) add(at int64, e timerEntry, keyed bool) {
	b := q.last
	if b == nil || b.at != at {
		if q.byTime == nil {
			q.byTime = make(map[int64]*timerBucket)
		}
		if b = q.byTime[at]; b == nil {
			if n := len(q.spare); n > 0 {
				b, q.spare = q.spare[n-1], q.spare[:n-1]
			} else {
				b = &timerBucket{}
			}
			b.at = at
			q.byTime[at] = b
			q.pushTime(at)
		}
		q.last = b
	}
	k := len(b.blocks) - 1
	if k < 0 || len(b.blocks[k]) == cap(b.blocks[k]) {
		k++
		b.blocks = append(b.blocks, q.newBlock(min(k, maxTimerClass)))
	}
	b.blocks[k] = append(b.blocks[k], e)
	b.keyed = b.keyed || keyed
	q.n++
}

func (q *timerQueue) newBlock(class int) []timerEntry {
	if n := len(q.free[class]); n > 0 {
		blk := q.free[class][n-1]
		q.free[class] = q.free[class][:n-1]
		return blk
	}
	return make([]timerEntry, 0, minTimerBlock<<class)
}

// popBucket removes and returns the bucket of the earliest time. The caller
// hands it back with recycle once done with its entries.
func (q *timerQueue) popBucket() *timerBucket {
	at := q.popTime()
	b := q.byTime[at]
	delete(q.byTime, at)
	if q.last == b {
		q.last = nil
	}
	for _, blk := range b.blocks {
		q.n -= len(blk)
	}
	if b.keyed {
		q.sorted = q.sorted[:0]
		for _, blk := range b.blocks {
			q.sorted = append(q.sorted, blk...)
		}
		slices.SortStableFunc(q.sorted, func(x, y timerEntry) int { return strings.Compare(x.key, y.key) })
		rest := q.sorted
		for _, blk := range b.blocks {
			rest = rest[copy(blk, rest):]
		}
		clear(q.sorted)
	}
	return b
}

func (q *timerQueue) recycle(b *timerBucket) {
	for _, blk := range b.blocks {
		clear(blk) // the keys and slots may go
		class := bits.TrailingZeros(uint(cap(blk) / minTimerBlock))
		q.free[class] = append(q.free[class], blk[:0])
	}
	clear(b.blocks)
	b.blocks, b.keyed = b.blocks[:0], false
	q.spare = append(q.spare, b)
}

func (q *timerQueue) pushTime(at int64) {
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

func (q *timerQueue) popTime() int64 {
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
