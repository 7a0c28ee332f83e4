package windows

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows/slot"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// TestDistinctIndexMatchesSweep: a distinct rule decides the same with its
// slots' indexes (DistinctIndex) as with the sweep that merges the panes'
// sets, on random windows, lateness and min_events, over hot and cold keys
// and events out of order, late ones and ones earlier than every pane of
// their key among them; with a cache of one slot too, where states are
// evicted and their indexes built again.
func TestDistinctIndexMatchesSweep(t *testing.T) {
	defer func(m int) { slot.DistinctIndexMin = m }(slot.DistinctIndexMin)
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
		slot.DistinctIndexMin = math.MaxInt
		want, _ := runWatermarked(t, text, slots, lines)
		slot.DistinctIndexMin = 0
		got, op := runWatermarked(t, text, slots, lines)
		if d := firstDifference(got, want); d != "" {
			t.Fatalf("trial %d, %d slots, rules %s: %s (with the index, with the sweep)", trial, slots, text, d)
		}
		used := false
		for _, s := range op.cache.Ring {
			if x := s.DistinctIndex(); x != nil {
				checkDistinctIndex(t, op, s, x)
				used = used || len(x.Latest) > 0
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
func checkDistinctIndex(t *testing.T, op *Operator, s *slot.Slot, x *slot.DistinctIndex) {
	t.Helper()
	sp := s.Spec
	live := sp.FirstLiveStart(slot.ClampWM(op.wm))
	want := map[uint64]int64{}
	for _, p := range s.Wins {
		for _, h := range p.Distinct() {
			want[h] = p.Start
		}
	}
	if len(x.Latest) != len(want) {
		t.Fatalf("the index knows %d values, the panes hold %d", len(x.Latest), len(want))
	}
	for h, l := range x.Latest {
		if want[h] != l {
			t.Fatalf("the index has %d latest in pane %d, the panes in %d", h, l, want[h])
		}
	}
	for i, c := range x.Counts {
		start := x.Base + int64(i)*sp.Slide
		if start < live {
			continue
		}
		union := map[uint64]bool{}
		for _, p := range s.Wins {
			if p.Start >= start && p.Start < start+sp.Size {
				for _, h := range p.Distinct() {
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
	op, dec := newTestOperatorWith(t, text, slotstore.NewMemBackend(), out, Options{CacheSlots: slots})
	maxTS := watermark.Min
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

// TestDistinctSampling: a distinct rule's state whose sets would hold more
// than DistinctCap values samples them (CapDistinct). After every event its
// sets hold at most the cap and only values of its level; each decision
// counts exactly the window's values its level keeps, times 2^level (so
// within a few standard deviations of the exact count), and a key whose
// values fit under the cap is counted exactly; and a cache of one slot,
// where states are evicted and decoded, decides the same, so the level
// is stored with the state.
func TestDistinctSampling(t *testing.T) {
	defer func(c int) { slot.DistinctCap = c }(slot.DistinctCap)
	slot.DistinctCap = 32
	r := rand.New(rand.NewPCG(21, 22))
	windows := []string{
		"{type: sliding, size: 200ms, slide: 10ms}",
		"{type: sliding, size: 90ms, slide: 30ms}",
		"{type: tumbling, size: 150ms}",
		"{type: session, gap: 5ms}",
	}
	trials, deepest := 12, uint8(0)
	if testing.Short() {
		trials = 4
	}
	for trial := range trials {
		text := fmt.Sprintf(`
rules:
  - {name: d, key: [k], window: %s, aggregate: distinct:v, threshold: %d, action: deny}
`, windows[trial%len(windows)], r.IntN(20))
		type ev struct {
			ts   int64
			k, v int
		}
		var evs []ev
		var lines [][]byte
		ts := int64(r.IntN(1000))
		for i := range 2000 {
			ts += int64(r.IntN(2))
			e := ev{ts - int64(r.IntN(10)), r.IntN(4) % 2, 0} // in watermark's bounds: none late
			if e.k == 0 {
				e.v = r.IntN(1 + r.IntN(20000)) // hot: past the cap
			} else {
				e.v = r.IntN(12)
			}
			evs = append(evs, e)
			lines = append(lines, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"k":%d,"v":%d}`, i, e.ts, e.k, e.v))
		}
		out := &recorder{}
		op, dec := newTestOperatorWith(t, text, slotstore.NewMemBackend(), out, Options{})
		maxTS := watermark.Min
		for i, l := range lines {
			before := len(out.lines)
			maxTS = max(maxTS, processLine(t, op, dec, l))
			for _, s := range op.cache.Ring {
				level := s.DistinctLevel()
				deepest = max(deepest, level)
				if held := slot.DistinctHeld(s); held > slot.DistinctCap {
					t.Fatalf("trial %d, event %d: key %s holds %d values, over the cap", trial, i, s.Key[2:], held)
				}
				for _, p := range s.Wins {
					for _, h := range p.Distinct() {
						if !slot.Sampled(h, level) {
							t.Fatalf("trial %d, event %d: key %s holds a value level %d drops", trial, i, s.Key[2:], level)
						}
					}
				}
			}
			if len(out.lines) > before {
				line := out.lines[before]
				key, rest, _ := strings.Cut(strings.TrimPrefix(line, "decision d "), " [")
				var start, end int64
				var got float64
				if _, err := fmt.Sscanf(rest, "%d,%d) %g", &start, &end, &got); err != nil {
					t.Fatalf("%q: %v", line, err)
				}
				var level uint8
				for _, s := range op.cache.Ring {
					if s.Key[2:] == key {
						level = s.DistinctLevel()
					}
				}
				all, kept := map[int]bool{}, map[int]bool{}
				for j := i; j >= 0 && evs[j].ts >= start-10; j-- { // ts are in order but by 10 ms
					e := evs[j]
					if fmt.Sprintf("%d\x00", e.k) == key && e.ts >= start && e.ts < end {
						all[e.v] = true
						if slot.Sampled(xxhash.Sum64String(fmt.Sprint(e.v)), level) {
							kept[e.v] = true
						}
					}
				}
				want, exact := math.Ldexp(float64(len(kept)), int(level)), float64(len(all))
				if got != want {
					t.Fatalf("trial %d, event %d, rules %s: %s, want %g: %d of the window's %d values at level %d", trial, i, text, out.lines[before], want, len(kept), len(all), level)
				}
				if dev := math.Sqrt(exact * (math.Ldexp(1, int(level)) - 1)); math.Abs(got-exact) > 5*dev {
					t.Fatalf("trial %d, event %d: counted %g for %g distinct values, over 5 standard deviations (%.1f)", trial, i, got, exact, dev)
				}
			}
			if err := op.AdvanceWatermark(maxTS - 20); err != nil {
				t.Fatal(err)
			}
		}
		evicted, _ := runWatermarked(t, text, 1, lines)
		if d := firstDifference(evicted, out.lines); d != "" {
			t.Fatalf("trial %d, rules %s: %s (one slot, all cached)", trial, text, d)
		}
	}
	t.Logf("deepest level %d", deepest)
	if deepest < 3 {
		t.Fatalf("no state sampled deeper than level %d", deepest)
	}
}

// TestDistinctValueBytes: a value in a distinct rule's sets costs at most
// DistinctValueBytes of memory, with its index and hash sets, on a hot key's
// sliding minute and on a tumbling window; and the cache weighs such a
// state at that (cache.weigh), evicting others to stay within its slots.
func TestDistinctValueBytes(t *testing.T) {
	for _, window := range []string{"{type: sliding, size: 60s, slide: 1s}", "{type: tumbling, size: 1m}", "{type: session, gap: 1s}"} {
		for _, repeat := range []int{0, 500} {
			testDistinctValueBytes(t, window, repeat)
		}
	}
}

// testDistinctValueBytes is TestDistinctValueBytes for a window whose
// events have values that come back every repeat events (0: never).
func testDistinctValueBytes(t *testing.T, window string, repeat int) {
	{
		text := fmt.Sprintf(`
rules:
  - {name: d, key: [k], window: %s, aggregate: distinct:v, threshold: 1000000, action: deny}
`, window)
		op, dec := newTestOperatorWith(t, text, slotstore.NewMemBackend(), &recorder{}, Options{CacheSlots: 64})
		var line []byte
		add := func(i, k, v int) {
			line = fmt.Appendf(line[:0], `{"id":"e%d","ts":%d,"k":%d,"v":%d}`, i, 2*i, k, v)
			processLine(t, op, dec, line)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range 30000 {
			add(i, 0, i-(i%3)*repeat)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held := slot.DistinctHeld(op.cache.Ring[0])
		perValue := float64(after.HeapAlloc-before.HeapAlloc) / float64(held)
		t.Logf("%s, values back after %d: %d values, %.1f bytes each", window, repeat, held, perValue)
		if held < 20000 || perValue > slotstore.DistinctValueBytes {
			t.Fatalf("%s: %d values held, %.1f bytes each, want at most %d", window, held, perValue, slotstore.DistinctValueBytes)
		}
		// Other keys come: the hot one, which weighs more than the whole
		// cache, leaves when they come in and comes back.
		heaviest := 0
		for i := 30000; i < 30060; i++ {
			k := 0
			if i%2 == 1 {
				k = 1 + i%7
			}
			add(i, k, i)
			weight := 0
			for _, s := range op.cache.Ring {
				weight += int(s.Weight)
			}
			if n := len(op.cache.Ring); weight != op.cache.Heavy || n > 1 && n+weight > 64 {
				t.Fatalf("%s: the cache holds %d slots weighing %d more (counted %d), over its 64", window, n, weight, op.cache.Heavy)
			}
			heaviest = max(heaviest, weight)
		}
		if heaviest == 0 {
			t.Fatalf("%s: the hot key was never weighed", window)
		}
	}
}
