package windows

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestDistinctIndexMatchesSweep: a distinct rule decides the same with its
// slots' indexes (distinctIndex) as with the sweep that merges the panes'
// sets, on random windows, lateness and min_events, over hot and cold keys
// and events out of order, late ones and ones earlier than every pane of
// their key among them; with a cache of one slot too, where states are
// evicted and their indexes built again.
func TestDistinctIndexMatchesSweep(t *testing.T) {
	defer func(m int) { distinctIndexMin = m }(distinctIndexMin)
	r := rand.New(rand.NewPCG(11, 12))
	windows := []string{
		"{type: sliding, size: 60ms, slide: 10ms}",
		"{type: sliding, size: 50ms, slide: 20ms}",
		"{type: sliding, size: 30ms, slide: 40ms}",
		"{type: sliding, size: 100ms, slide: 7ms}",
		"{type: tumbling, size: 25ms}",
	}
	indexed, trials := 0, 300
	if testing.Short() { // as under the race detector in CI
		trials = 60
	}
	for trial := range trials {
		text := fmt.Sprintf(`
watermark: {allowed_lateness: %dms}
rules:
  - {name: d, key: [k], window: %s, aggregate: distinct:v, threshold: %d, min_events: %d, action: deny}
`, r.IntN(3)*15, windows[r.IntN(len(windows))], r.IntN(8), r.IntN(4))
		keys, values := 1+r.IntN(4), 2+r.IntN(40)
		var lines [][]byte
		ts := int64(r.IntN(1000)) - 500
		for i := range 400 {
			ts += int64(r.IntN(4))
			at := ts - int64(r.IntN(3)*r.IntN(30)) // some out of order, a few late
			lines = append(lines, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"k":%d,"v":%d}`, i, at, r.IntN(keys), r.IntN(values)))
		}
		slots := []int{0, 1}[r.IntN(2)]
		distinctIndexMin = math.MaxInt
		want, _ := runWatermarked(t, text, slots, lines)
		distinctIndexMin = 0
		got, op := runWatermarked(t, text, slots, lines)
		if d := firstDifference(got, want); d != "" {
			t.Fatalf("trial %d, %d slots, rules %s: %s (with the index, with the sweep)", trial, slots, text, d)
		}
		used := false
		for _, s := range op.cache.ring {
			if x := s.distinctIndex(); x != nil {
				checkDistinctIndex(t, op, s, x)
				used = used || len(x.latest) > 0
			}
		}
		if used {
			indexed++
		}
	}
	if indexed < trials/3 {
		t.Fatalf("only %d of %d trials ended with an index in use", indexed, trials)
	}
}

// checkDistinctIndex checks x, the index of s, one of op's slots, against
// s's panes: latest names each value's latest pane and nothing else, and
// every window counted that is not purged holds as many distinct values as
// its panes' sets.
func checkDistinctIndex(t *testing.T, op *Operator, s *slot, x *distinctIndex) {
	t.Helper()
	sp := s.sp
	live := sp.firstLiveStart(clampWM(op.wm))
	want := map[uint64]int64{}
	for _, p := range s.wins {
		for _, h := range p.distinct() {
			want[h] = p.start
		}
	}
	if len(x.latest) != len(want) {
		t.Fatalf("the index knows %d values, the panes hold %d", len(x.latest), len(want))
	}
	for h, l := range x.latest {
		if want[h] != l {
			t.Fatalf("the index has %d latest in pane %d, the panes in %d", h, l, want[h])
		}
	}
	for i, c := range x.counts {
		start := x.base + int64(i)*sp.slide
		if start < live {
			continue
		}
		union := map[uint64]bool{}
		for _, p := range s.wins {
			if p.start >= start && p.start < start+sp.size {
				for _, h := range p.distinct() {
					union[h] = true
				}
			}
		}
		if int(c) != len(union) {
			t.Fatalf("window at %d: the index counts %d distinct values, its panes hold %d", start, c, len(union))
		}
	}
}

// runWatermarked has an operator of the rules file text, with a cache of
// slots slots, process lines, the watermark 20 ms behind the largest ts
// after each, and returns its outputs and the operator.
func runWatermarked(t *testing.T, text string, slots int, lines [][]byte) ([]string, *Operator) {
	t.Helper()
	out := &recorder{}
	op, dec := newTestOperatorWith(t, text, NewMemBackend(), out, Options{CacheSlots: slots})
	maxTS := MinWatermark
	for _, l := range lines {
		maxTS = max(maxTS, processLine(t, op, dec, l))
		if err := op.AdvanceWatermark(maxTS - 20); err != nil {
			t.Fatal(err)
		}
	}
	return out.lines, op
}

// firstDifference describes where got and want first differ, "" when they
// do not.
func firstDifference(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("output %d is %q, and %q", i, got[i], want[i])
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d outputs, and %d", len(got), len(want))
	}
	return ""
}
