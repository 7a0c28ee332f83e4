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
// window, and a count rule's running counts give it from two panes.
func TestBestWindowBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	shapes := [][2]int64{{60, 1}, {10, 5}, {10, 4}, {6, 4}, {5, 5}, {9, 3}}
	inOrder := 0        // trials where no pane lies past the first window
	runningInOrder := 0 // of them, those with running counts
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
		// Half the count trials keep running counts, from a base that
		// purges would have left.
		if sp.agg == rules.Count && r.IntN(2) == 0 {
			sp.running = true
			c := r.Int64N(100)
			for i := range panes {
				c += panes[i].n
				panes[i].end = c
			}
		}
		first, last, ordered := eventWindows(r, sp, panes)
		if ordered {
			inOrder++
			if sp.running {
				runningInOrder++
			}
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
	sp := &spec{wtype: rules.Sliding, size: 10, slide: 2, pane: 2, agg: rules.Count, running: true}
	sp.paneDiv, sp.slideDiv = newDivisor(sp.pane), newDivisor(sp.slide)
	frontInserts, purged := 0, 0
	for trial := range 2000 {
		s := newSlot("k", sp)
		var now int64
		for step := range 60 {
			switch op := r.IntN(10); {
			case op < 7: // an event, mostly in the newest pane
				start := sp.paneDiv.floor(now - r.Int64N(3)*r.Int64N(8))
				if len(s.wins) > 0 && start < s.wins[0].start {
					frontInserts++
				}
				p := s.paneAt(start)
				p.n++
				s.counted(p)
				s.added(sp.paneCleanup(start))
			case op < 8:
				now += r.Int64N(6)
			case op < 9:
				n := len(s.wins)
				s.purge(now - r.Int64N(sp.size))
				purged += n - len(s.wins)
			default:
				got, err := decodeSlot("k", sp, encodeSlot(nil, s))
				if err != nil {
					t.Fatal(err)
				}
				s = got
			}
			for i := 1; i < len(s.wins); i++ {
				if d := s.wins[i].end - s.wins[i-1].end; d != s.wins[i].n {
					t.Fatalf("trial %d step %d: running counts of panes %d and %d differ by %d, pane %d counts %d: %+v",
						trial, step, i-1, i, d, i, s.wins[i].n, s.wins)
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
		sp := &spec{wtype: rules.Sliding, size: shape[0], slide: shape[1], agg: aggs[r.IntN(len(aggs))],
			rule: &rules.Rule{Threshold: float64(r.IntN(8))}}
		sp.pane = gcd(sp.size, sp.slide)
		sp.paneDiv, sp.slideDiv = newDivisor(sp.pane), newDivisor(sp.slide)
		sp.minEvents = int64(r.IntN(4))
		var panes []win
		start := (r.Int64N(20) - 10) * sp.pane
		for range 1 + r.IntN(12) {
			n := 1 + r.Int64N(3)
			sum := float64(r.IntN(10)) // avg: a sum; min, max: the extreme
			if sp.agg == rules.Ratio {
				sum = float64(r.Int64N(n + 1))
			}
			panes = append(panes, win{start: start, acc: acc{n: n, sum: sum}})
			start += (1 + r.Int64N(3)) * sp.pane
		}
		first, last, ordered := eventWindows(r, sp, panes)
		if ordered {
			inOrder++
		}
		wantStart, want := first, math.Inf(-1)
		for ws := first; ws <= last; ws += sp.slide {
			var n int64
			var sum float64
			ext := math.NaN()
			for _, p := range panes {
				if p.start >= ws && p.start < ws+sp.size {
					n += p.n
					sum += p.sum
					switch {
					case math.IsNaN(ext):
						ext = p.sum
					case sp.agg == rules.Min:
						ext = min(ext, p.sum)
					default:
						ext = max(ext, p.sum)
					}
				}
			}
			v := ext
			if sp.agg == rules.Avg || sp.agg == rules.Ratio {
				v = sum / float64(n)
			}
			if v > want && n >= sp.minEvents {
				wantStart, want = ws, v
			}
		}
		gotStart, got := op.bestWindow(sp, nil, panes, first, last)
		if want > sp.rule.Threshold {
			decided++
			if got != want || gotStart != wantStart {
				t.Fatalf("trial %d, %d/%d %v min_events %d, windows %d..%d of %+v: best %v at %d, want %v at %d",
					trial, sp.size, sp.slide, sp.agg, sp.minEvents, first, last, panes, got, gotStart, want, wantStart)
			}
		} else if got > sp.rule.Threshold {
			t.Fatalf("trial %d, %d/%d %v: %v at %d exceeds %v, no window does (%+v)", trial, sp.size, sp.slide, sp.agg, got, gotStart, sp.rule.Threshold, panes)
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
func eventWindows(r *rand.Rand, sp *spec, panes []win) (first, last int64, inOrder bool) {
	at := r.IntN(len(panes))
	if r.IntN(2) == 0 {
		at = len(panes) - 1
	}
	t := panes[at].start + r.Int64N(sp.pane)
	first, last = sp.firstStart(t), sp.lastStart(t)
	return first, last, panes[len(panes)-1].start < first+sp.size
}
