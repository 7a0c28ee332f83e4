package windows

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestInOrderScreenMatchesPass: avg, ratio and quantile rules decide the
// same when their slots remember the screen of in-order events
// (InOrderScreen) as when every event makes a pass over the panes, on
// random windows, thresholds near the values, min_events, a key or two
// with many events each, events mostly in order but some not, and late
// ones; with a cache of one slot too, where states are evicted.
func TestInOrderScreenMatchesPass(t *testing.T) {
	defer func(m int) { inOrderScreenMin = m }(inOrderScreenMin)
	r := rand.New(rand.NewPCG(15, 16))
	windows := []string{
		"{type: sliding, size: 200ms, slide: 10ms}",
		"{type: sliding, size: 100ms, slide: 20ms}",
		"{type: sliding, size: 90ms, slide: 4ms}",
		"{type: sliding, size: 300ms, slide: 30ms}",
		"{type: sliding, size: 12ms, slide: 8ms}",  // panes narrower than the slide: a pane may
		"{type: sliding, size: 40ms, slide: 12ms}", // come and another go with the same first window
	}
	aggs := []string{`"avg:v"`, "ratio, match: {v: [1, 2, 3]}", `"quantile:v:0.9"`, `"quantile:v:0.5"`, `"quantile:v:1"`}
	screened, trials := 0, 200
	if testing.Short() { // as under the race detector in CI
		trials = 40
	}
	for trial := range trials {
		agg := aggs[r.IntN(len(aggs))]
		threshold := []float64{3.5, 5, 6, 0.3, 0.5, 0}[r.IntN(6)]
		text := fmt.Sprintf(`
rules:
  - {name: q, key: [k], window: %s, aggregate: %s, threshold: %v, min_events: %d, action: deny}
`, windows[r.IntN(len(windows))], agg, threshold, r.IntN(3)*5)
		keys := 1 + r.IntN(2)
		var lines [][]byte
		ts := int64(r.IntN(1000))
		high := 3 + r.IntN(8) // values 0..high: sometimes over the threshold
		for i := range 600 {
			ts += int64(r.IntN(3))
			at := ts
			if r.IntN(10) == 0 {
				at -= int64(r.IntN(60)) // out of order, some late
			}
			lines = append(lines, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"k":%d,"v":%d}`, i, at, r.IntN(keys), r.IntN(high)))
		}
		slots := []int{0, 1}[r.IntN(2)]
		inOrderScreenMin = math.MaxInt
		want, _ := runWatermarked(t, text, slots, lines)
		inOrderScreenMin = 0
		got, op := runWatermarked(t, text, slots, lines)
		if d := firstDifference(got, want); d != "" {
			t.Fatalf("trial %d, %d slots, rules %s: %s (with the screen, without)", trial, slots, text, d)
		}
		for _, s := range op.cache.Ring {
			if s.More != nil && s.More.InOrder.Panes > 0 {
				screened++
				break
			}
		}
	}
	if screened < trials/4 {
		t.Fatalf("only %d of %d trials ended with a slot's screen remembered", screened, trials)
	}
}
