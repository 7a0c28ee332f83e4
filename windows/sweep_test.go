package windows

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/riskstream/riskstream/rules"
)

// TestBestWindowBruteForce checks the sweeps that pick a decision's window
// against summing the panes of every window start in turn, for count and
// sum (negative amounts included, so that a pane leaving the window can
// raise it), min_events, and panes as wide as the slide or narrower; with
// events in order too, where the count and sum sweep stops at the first
// window.
func TestBestWindowBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	shapes := [][2]int64{{60, 1}, {10, 5}, {10, 4}, {6, 4}, {5, 5}, {9, 3}}
	inOrder := 0 // trials where no pane lies past the first window
	for trial := range 20_000 {
		shape := shapes[r.IntN(len(shapes))]
		sp := &spec{wtype: rules.Sliding, size: shape[0], slide: shape[1], agg: rules.Count}
		sp.pane = gcd(sp.size, sp.slide)
		sp.paneDiv, sp.slideDiv = newDivisor(sp.pane), newDivisor(sp.slide)
		if r.IntN(2) == 0 {
			sp.agg = rules.Sum
		}
		sp.minEvents = int64(r.IntN(4))
		// Panes at random pane starts, sorted, about a window's worth.
		// Half the trials have no negative amount, half have t in the
		// newest pane, as when events come in order.
		var panes []win
		start := (r.Int64N(20) - 10) * sp.pane
		lowest := -10
		if r.IntN(2) == 0 {
			lowest = 0
		}
		for range 1 + r.IntN(12) {
			n := 1 + r.Int64N(3)
			panes = append(panes, win{start: start, acc: acc{n: n, sum: float64(lowest + r.IntN(11-lowest))}})
			start += (1 + r.Int64N(4)) * sp.pane
		}
		// The windows containing a time t within the panes' span.
		at := r.IntN(len(panes))
		if r.IntN(2) == 0 {
			at = len(panes) - 1
		}
		t0 := panes[at].start + r.Int64N(sp.pane)
		first, last := sp.firstStart(t0), sp.lastStart(t0)
		if panes[len(panes)-1].start < first+sp.size {
			inOrder++
		}
		wantStart, want := first, math.Inf(-1)
		for ws := first; ws <= last; ws += sp.slide {
			var n int64
			var sum float64
			for _, p := range panes {
				if p.start >= ws && p.start < ws+sp.size {
					n += p.n
					sum += p.sum
				}
			}
			v := sum
			if sp.agg == rules.Count {
				v = float64(n)
			}
			if v > want && n >= sp.minEvents {
				wantStart, want = ws, v
			}
		}
		gotStart, got := bestAdditive(sp, panes, first, last)
		if got != want || gotStart != wantStart {
			t.Fatalf("trial %d, %d/%d %v min_events %d, windows %d..%d of %+v: best %d at %d, want %d at %d",
				trial, sp.size, sp.slide, sp.agg, sp.minEvents, first, last, panes, int64(got), gotStart, int64(want), wantStart)
		}
	}
	if inOrder < 5_000 || inOrder > 15_000 {
		t.Fatalf("%d of 20000 trials have no pane past the first window: the stop there and the whole sweep both need trials", inOrder)
	}
}
