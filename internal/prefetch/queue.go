package prefetch

// Queue holds the loads a stage of prefetching gathered for a group of
// events (or timers), to be issued a share before each one of the group
// it runs ahead of, rather than all at once. A core keeps only a few dozen
// misses in flight: a burst of hundreds of prefetch instructions, which a
// group of 16 events with a few states each asks for, overflows that, and
// what does not fit arrives no sooner than unasked (BENCHMARKS.md,
// BenchmarkQueue).
type Queue struct {
	addrs []uintptr
	next  int // addrs[:next] are issued
}

// Reset empties q of what it had gathered, issued or not: a prefetch is a
// hint, and a new group's loads replace the last one's.
func (q *Queue) Reset() { q.addrs, q.next = q.addrs[:0], 0 }

// Add gathers the line at addr.
func (q *Queue) Add(addr uintptr) { q.addrs = append(q.addrs, addr) }

// Gathered returns the lines q holds, issued or not.
func (q *Queue) Gathered() []uintptr { return q.addrs }

// Issue asks for an equal share of the lines gathered and not yet issued,
// before each of the left steps of the group still to come: all of them
// when left is 1 (or less).
func (q *Queue) Issue(left int) {
	rest := len(q.addrs) - q.next
	if rest == 0 {
		return
	}
	n := rest
	if left > 1 {
		n = (rest + left - 1) / left
	}
	Lines(q.addrs[q.next : q.next+n])
	q.next += n
}
