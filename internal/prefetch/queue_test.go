package prefetch

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestQueueIssuesEveryLineOnce: issued before each step of a group, with
// the steps left counted down to 1, a Queue asks for every line it
// gathered, in order, spread as evenly as the counts allow.
func TestQueueIssuesEveryLineOnce(t *testing.T) {
	for _, lines := range []int{0, 1, 7, 16, 17, 100} {
		for _, steps := range []int{1, 4, 16} {
			var q Queue
			q.Reset()
			for i := range lines {
				q.Add(uintptr(i))
			}
			most := 0
			for left := steps; left >= 1; left-- {
				before := q.next
				q.Issue(left)
				most = max(most, q.next-before)
			}
			if q.next != lines {
				t.Fatalf("%d lines over %d steps: %d issued", lines, steps, q.next)
			}
			if want := (lines + steps - 1) / steps; most > want {
				t.Fatalf("%d lines over %d steps: %d at once, want at most %d", lines, steps, most, want)
			}
		}
		// Steps left at 0 or below, as at 1: whatever is left, at once.
		var q Queue
		for i := range lines {
			q.Add(uintptr(i))
		}
		if q.Issue(0); q.next != lines {
			t.Fatalf("%d lines, 0 steps left: %d issued", lines, q.next)
		}
	}
}

// BenchmarkQueue reads random lines of a 96 MiB array, one after the
// other, as events reach their states at 10M keys: groups of 16 reads of
// a given number of lines each, each group's lines asked for a group
// ahead.
// "burst" asks for the next group's lines at once at the start of a
// group, as one prefetch stage did; "spread" asks for them a share before
// each read through a Queue; "none" does not ask.
func BenchmarkQueue(b *testing.B) {
	const group = 16
	lines := make([]uint64, 96<<20/8)
	// Written, so that its pages are memory of their own rather than the
	// one page of zeros an untouched allocation reads.
	for i := range lines {
		lines[i] = 0
	}
	rng := rand.New(rand.NewPCG(1, 2))
	at := make([]int, 1<<20)
	for i := range at {
		at[i] = rng.IntN(len(lines)/8) * 8
	}
	for _, perRead := range []int{1, 4, 8} {
		for _, mode := range []string{"none", "burst", "spread"} {
			b.Run(fmt.Sprintf("lines=%d/%s", perRead, mode), func(b *testing.B) {
				var q Queue
				var sum uint64
				k := 0 // the next read, of lines at[k*perRead:(k+1)*perRead]
				for b.Loop() {
					if k%group == 0 {
						q.Reset()
						for _, a := range at[(k+group)*perRead : (k+2*group)*perRead] {
							q.Add(Addr(&lines[a]))
						}
						if mode == "burst" {
							q.Issue(1)
						}
					}
					if mode == "spread" {
						q.Issue(group - k%group)
					}
					for _, a := range at[k*perRead : (k+1)*perRead] {
						// The array holds zeros, but the next read's
						// address depends on this one's value: one
						// read at a time, as in a chain of dependent
						// steps, so no miss hides behind another
						// without a prefetch.
						sum += lines[a+int(sum)]
					}
					if k++; (k+2*group)*perRead > len(at) {
						k = 0
					}
				}
				if sum != 0 {
					b.Fatal("the array was written")
				}
			})
		}
	}
}
