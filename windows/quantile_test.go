package windows

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows/slot"
)

// TestQuantileFastPathsMatchMerge: the best window of a quantile rule's
// in-order windows, read from a slot's table of its older panes or from
// the bins of a cold key's few values, is the window and value the merge
// of their sketches gives, to the bit, as the
// latest pane grows, older panes take late values, new panes begin and
// the windows swept change; with zero and negative values, and latest
// values beyond the table, the merge answers.
func TestQuantileFastPathsMatchMerge(t *testing.T) {
	defer func() { noTops = false }()
	r := rand.New(rand.NewPCG(37, 1))
	value := func() float64 {
		switch r.IntN(200) {
		case 0:
			return 0
		case 1:
			return -r.Float64() * 10
		case 2:
			return 1e6 * r.Float64() // far beyond the rest
		}
		return math.Exp(r.NormFloat64()*1.5 + 3)
	}
	qs := []float64{0, 0.5, 0.9, 0.95, 0.99, 0.999, 1}
	fast, merged, few := 0, 0, 0
	for trial := range 300 {
		op := &Operator{quantile: heatmap.New(0)}
		sp := &slot.Spec{Agg: rules.Quantile, Q: qs[r.IntN(len(qs))], Index: r.IntN(4)}
		// As the operator adds an event's value, so that a table follows
		// the latest pane one value at a time.
		add := func(p *slot.Win, v float64) { op.addTo(sp, &p.Acc, math.Float64bits(v), false) }
		s := &slot.Slot{ID: slot.ID{r.Uint64(), r.Uint64()}}
		noZeros := r.IntN(3) > 0
		val := func() float64 {
			for {
				if v := value(); !noZeros || v > 0 {
					return v
				}
			}
		}
		// A hot key's panes, or a cold key's few values.
		perPane, panesN := 40, 70
		if trial%2 == 1 {
			perPane, panesN = 3, 20
		}
		var panes []slot.Win
		for i := range 1 + r.IntN(panesN) {
			p := slot.Win{Start: int64(i) * 1000}
			for range 1 + r.IntN(perPane) {
				add(&p, val())
			}
			panes = append(panes, p)
		}
		for step := range 200 {
			newPane := 2
			if trial%2 == 1 {
				newPane = 50
			}
			switch x := r.IntN(100); {
			case x < newPane: // a new pane, the first one leaving
				panes = append(panes[1:], slot.Win{Start: panes[len(panes)-1].Start + 1000})
				add(&panes[len(panes)-1], val())
			case x < newPane+3: // a late value into an older pane
				add(&panes[r.IntN(len(panes))], val())
			default:
				add(&panes[len(panes)-1], val())
			}
			// The windows the sweep left in: suffixes (an event in the
			// latest pane) or, for an event in an older pane, windows of
			// a fixed number of panes, the later ones up to the latest;
			// some ruled out.
			var ws []sweptWindow
			width := len(panes)
			if step%3 == 2 {
				width = 1 + r.IntN(len(panes))
			}
			for lo := range panes {
				if r.IntN(8) > 0 || lo == 0 && step%2 == 0 {
					ws = append(ws, sweptWindow{start: panes[lo].Start - 500, lo: lo, hi: min(lo+width, len(panes))})
				}
			}
			if len(ws) == 0 {
				continue
			}
			first := ws[0].start
			noTops = true
			op.windows = append(op.windows[:0], ws...)
			wantStart, want := op.bestQuantile(sp, s, panes, first)
			noTops = false
			op.windows = append(op.windows[:0], ws...)
			gotStart, got := op.bestQuantile(sp, s, panes, first)
			if got != want || gotStart != wantStart {
				t.Fatalf("trial %d step %d, q %v, %d panes (latest %d values): %v at %d, the merge gives %v at %d",
					trial, step, sp.Q, len(panes), panes[len(panes)-1].N, got, gotStart, want, wantStart)
			}
			if len(op.windows) != 0 {
				t.Fatalf("op.windows not emptied: %d", len(op.windows))
			}
			if _, _, ok := op.bestQuantileFew(sp, panes, append(op.windows[:0], ws...), first); ok {
				few++
			}
			if h := panes[len(panes)-1].Heatmap(); h != nil && h.Count >= topsMinLatest {
				if _, _, ok := op.bestQuantileTops(sp, s, panes, append(op.windows[:0], ws...), first); ok {
					fast++
				} else {
					merged++
				}
			}
		}
	}
	if fast < 5_000 || merged < 500 || few < 5_000 {
		t.Fatalf("%d answers from tables, %d merged, %d from few values: the test needs each", fast, merged, few)
	}
	t.Logf("%d answers from tables, %d merged, %d from few values", fast, merged, few)
}

// TestRememberedWindowsMatchMerge: a hot key's in-order decisions read
// from its table over the windows remembered from the event before
// (bestRemembered), where every window passed the screen, are the
// decisions of the pass and the merge of the sketches, output for output,
// with thresholds every window exceeds, some do and none does, min_events
// that turns the memory off, and late events into older panes.
func TestRememberedWindowsMatchMerge(t *testing.T) {
	defer func() { noTops = false }()
	r := rand.New(rand.NewPCG(41, 2))
	windows := []string{
		"{type: sliding, size: 200ms, slide: 10ms}",
		"{type: sliding, size: 120ms, slide: 20ms}",
		"{type: sliding, size: 60ms, slide: 6ms}",
	}
	remembered, trials := 0, 24
	if testing.Short() {
		trials = 8
	}
	for trial := range trials {
		text := fmt.Sprintf(`
rules:
  - {name: q, key: [k], window: %s, aggregate: "quantile:v:%v", threshold: %v, min_events: %d, action: deny}
`, windows[r.IntN(len(windows))], []float64{0.99, 0.9, 0.5}[r.IntN(3)], []float64{0, 0, 40, 300}[r.IntN(4)], []int{0, 0, 1, 50}[r.IntN(4)])
		var lines [][]byte
		ts := int64(r.IntN(1000))
		for i := range 4000 {
			if r.IntN(16) == 0 {
				ts++
			}
			at := ts
			if r.IntN(40) == 0 {
				at -= int64(r.IntN(40)) // into an older pane, some late
			}
			v := 1 + int(math.Exp(r.NormFloat64()*1.2+3))
			lines = append(lines, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"k":%d,"v":%d}`, i, at, r.IntN(2), v))
		}
		noTops = true
		want, _ := runWatermarked(t, text, 0, lines)
		noTops = false
		got, op := runWatermarked(t, text, 0, lines)
		if d := firstDifference(got, want); d != "" {
			t.Fatalf("trial %d, rules %s: %s (from tables, merged)", trial, text, d)
		}
		remembered += op.rememberedAnswers
	}
	if remembered < trials*300 {
		t.Fatalf("%d decisions from remembered windows in %d trials: the test needs more", remembered, trials)
	}
	t.Logf("%d decisions from remembered windows", remembered)
}
