package windows

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows/slot"
)

// TestBestWindowBruteForce checks the sweeps that pick a decision's window
// against summing the panes of every window start in turn, for count and
// sum (negative amounts included, so that a pane leaving the window can
// raise it), min_events, and panes as wide as the slide or narrower; with
// events in order too, where the count and sum sweep stops at the first
// window, and a count rule's running counts give it from two panes.
func TestBestWindowBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	shapes := [][2]int64{{60, 1}, {10, 5}, {10, 4}, {6, 4}, {5, 5}, {9, 3}}
	inOrder := 0        // trials where no pane lies past the first window
	runningInOrder := 0 // of them, those with running counts
	for trial := range 20_000 {
		shape := shapes[r.IntN(len(shapes))]
		sp := &slot.Spec{WindowType: rules.Sliding, Size: shape[0], Slide: shape[1], Agg: rules.Count}
		sp.Pane = slot.GCD(sp.Size, sp.Slide)
		sp.PaneDiv, sp.SlideDiv = slot.NewDivisor(sp.Pane), slot.NewDivisor(sp.Slide)
		if r.IntN(2) == 0 {
			sp.Agg = rules.Sum
		}
		sp.MinEvents = int64(r.IntN(4))
		// Panes at random pane starts, sorted, about a window's worth.
		// Half the trials have no negative amount, half have t in the
		// newest pane, as when events come in order.
		var panes []slot.Win
		start := (r.Int64N(20) - 10) * sp.Pane
		lowest := -10
		if r.IntN(2) == 0 {
			lowest = 0
		}
		for range 1 + r.IntN(12) {
			n := 1 + r.Int64N(3)
			panes = append(panes, slot.Win{Start: start, Acc: slot.Acc{N: n, Sum: float64(lowest + r.IntN(11-lowest))}})
			start += (1 + r.Int64N(4)) * sp.Pane
		}
		// Half the count trials keep running counts, from a base that
		// purges would have left.
		if sp.Agg == rules.Count && r.IntN(2) == 0 {
			sp.Running = true
			c := r.Int64N(100)
			for i := range panes {
				c += panes[i].N
				panes[i].End = c
			}
		}
		first, last, ordered := eventWindows(r, sp, panes)
		if ordered {
			inOrder++
			if sp.Running {
				runningInOrder++
			}
		}
		wantStart, want := first, math.Inf(-1)
		for ws := first; ws <= last; ws += sp.Slide {
			var n int64
			var sum float64
			for _, p := range panes {
				if p.Start >= ws && p.Start < ws+sp.Size {
					n += p.N
					sum += p.Sum
				}
			}
			v := sum
			if sp.Agg == rules.Count {
				v = float64(n)
			}
			if v > want && n >= sp.MinEvents {
				wantStart, want = ws, v
			}
		}
		gotStart, got := bestAdditive(sp, panes, first, last)
		if got != want || gotStart != wantStart {
			t.Fatalf("trial %d, %d/%d %v min_events %d, windows %d..%d of %+v: best %d at %d, want %d at %d",
				trial, sp.Size, sp.Slide, sp.Agg, sp.MinEvents, first, last, panes, int64(got), gotStart, int64(want), wantStart)
		}
	}
	if inOrder < 5_000 || inOrder > 15_000 || runningInOrder < 1_000 {
		t.Fatalf("%d of 20000 trials have no pane past the first window, %d of them with running counts: the stop there, the running counts and the whole sweep all need trials",
			inOrder, runningInOrder)
	}
}

// TestRunningCounts: the panes of a count rule keep running counts (see
// win) through events in and out of order, panes added before the first,
// purges and a round trip through the codec, checked against their counts
// after every step.
func TestRunningCounts(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	sp := &slot.Spec{WindowType: rules.Sliding, Size: 10, Slide: 2, Pane: 2, Agg: rules.Count, Running: true}
	sp.PaneDiv, sp.SlideDiv = slot.NewDivisor(sp.Pane), slot.NewDivisor(sp.Slide)
	frontInserts, purged := 0, 0
	for trial := range 2000 {
		s := slot.New("k", sp)
		var now int64
		for step := range 60 {
			switch op := r.IntN(10); {
			case op < 7: // an event, mostly in the newest pane
				start := sp.PaneDiv.Floor(now - r.Int64N(3)*r.Int64N(8))
				if len(s.Wins) > 0 && start < s.Wins[0].Start {
					frontInserts++
				}
				p := s.PaneAt(start)
				p.N++
				s.Counted(p)
				s.Added(sp.PaneCleanup(start))
			case op < 8:
				now += r.Int64N(6)
			case op < 9:
				n := len(s.Wins)
				s.Purge(now - r.Int64N(sp.Size))
				purged += n - len(s.Wins)
			default:
				got, err := slot.Decode("k", sp, slot.Encode(nil, s))
				if err != nil {
					t.Fatal(err)
				}
				s = got
			}
			for i := 1; i < len(s.Wins); i++ {
				if d := s.Wins[i].End - s.Wins[i-1].End; d != s.Wins[i].N {
					t.Fatalf("trial %d step %d: running counts of panes %d and %d differ by %d, pane %d counts %d: %+v",
						trial, step, i-1, i, d, i, s.Wins[i].N, s.Wins)
				}
			}
		}
	}
	if frontInserts < 100 || purged < 100 {
		t.Fatalf("only %d events made a pane before the first, and %d panes were purged: the test needs more of both", frontInserts, purged)
	}
}

// TestBestWindowStatsBruteForce checks bestWindow for avg, ratio, min and
// max against computing every window start's value from its panes, on
// panes as wide as the slide or narrower, with min_events and events in
// order (where bestInOrder takes the windows as suffixes of the panes) or
// not: whenever the best window's value exceeds the threshold, the sweep
// finds that window and value (ties to the earliest); otherwise it finds
// none above the threshold.
func TestBestWindowStatsBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	shapes := [][2]int64{{60, 1}, {10, 5}, {10, 4}, {6, 4}, {5, 5}, {9, 3}, {12, 8}}
	aggs := []rules.AggregateKind{rules.Avg, rules.Ratio, rules.Min, rules.Max}
	op := &Operator{}
	decided, inOrder := 0, 0
	for trial := range 40_000 {
		shape := shapes[r.IntN(len(shapes))]
		sp := &slot.Spec{WindowType: rules.Sliding, Size: shape[0], Slide: shape[1], Agg: aggs[r.IntN(len(aggs))],
			Rule: &rules.Rule{Threshold: float64(r.IntN(8))}}
		sp.Pane = slot.GCD(sp.Size, sp.Slide)
		sp.PaneDiv, sp.SlideDiv = slot.NewDivisor(sp.Pane), slot.NewDivisor(sp.Slide)
		sp.MinEvents = int64(r.IntN(4))
		var panes []slot.Win
		start := (r.Int64N(20) - 10) * sp.Pane
		for range 1 + r.IntN(12) {
			n := 1 + r.Int64N(3)
			sum := float64(r.IntN(10)) // avg: a sum; min, max: the extreme
			if sp.Agg == rules.Ratio {
				sum = float64(r.Int64N(n + 1))
			}
			panes = append(panes, slot.Win{Start: start, Acc: slot.Acc{N: n, Sum: sum}})
			start += (1 + r.Int64N(3)) * sp.Pane
		}
		first, last, ordered := eventWindows(r, sp, panes)
		if ordered {
			inOrder++
		}
		wantStart, want := first, math.Inf(-1)
		for ws := first; ws <= last; ws += sp.Slide {
			var n int64
			var sum float64
			ext := math.NaN()
			for _, p := range panes {
				if p.Start >= ws && p.Start < ws+sp.Size {
					n += p.N
					sum += p.Sum
					switch {
					case math.IsNaN(ext):
						ext = p.Sum
					case sp.Agg == rules.Min:
						ext = min(ext, p.Sum)
					default:
						ext = max(ext, p.Sum)
					}
				}
			}
			v := ext
			if sp.Agg == rules.Avg || sp.Agg == rules.Ratio {
				v = sum / float64(n)
			}
			if v > want && n >= sp.MinEvents {
				wantStart, want = ws, v
			}
		}
		gotStart, got := op.bestWindow(sp, nil, panes, first, last)
		if want > sp.Rule.Threshold {
			decided++
			if got != want || gotStart != wantStart {
				t.Fatalf("trial %d, %d/%d %v min_events %d, windows %d..%d of %+v: best %v at %d, want %v at %d",
					trial, sp.Size, sp.Slide, sp.Agg, sp.MinEvents, first, last, panes, got, gotStart, want, wantStart)
			}
		} else if got > sp.Rule.Threshold {
			t.Fatalf("trial %d, %d/%d %v: %v at %d exceeds %v, no window does (%+v)", trial, sp.Size, sp.Slide, sp.Agg, got, gotStart, sp.Rule.Threshold, panes)
		}
	}
	if decided < 10_000 || inOrder < 10_000 {
		t.Fatalf("%d trials decided, %d in order: both need trials", decided, inOrder)
	}
}

// eventWindows returns the starts of the first and last windows of sp that
// hold a random time within panes' span, in the newest pane half the time,
// and whether every pane from the first window's on is in each of them, as
// when events come in order.
func eventWindows(r *rand.Rand, sp *slot.Spec, panes []slot.Win) (first, last int64, inOrder bool) {
	at := r.IntN(len(panes))
	if r.IntN(2) == 0 {
		at = len(panes) - 1
	}
	t := panes[at].Start + r.Int64N(sp.Pane)
	first, last = sp.FirstStart(t), sp.LastStart(t)
	return first, last, panes[len(panes)-1].Start < first+sp.Size
}
