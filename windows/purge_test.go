package windows

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/riskstream/riskstream/event"
)

// TestPurgeGrain: a rule's state is purged by a timer rounded up to its
// purge grain (the window's size or gap, 1 to 10 s): kept until then, and
// gone once the watermark reaches it.
func TestPurgeGrain(t *testing.T) {
	op, dec := newTestOperator(t, `
rules:
  - {name: sliding, key: [user], window: {type: sliding, size: 60s, slide: 1s}, aggregate: count, threshold: 5, action: deny}
  - {name: short, key: [user], window: {type: tumbling, size: 500ms}, aggregate: count, threshold: 5, action: deny}
  - {name: session, key: [user], window: {type: session, gap: 30s}, aggregate: count, threshold: 5, action: deny}
`)
	for i, want := range []int64{10_000, 1_000, 10_000} {
		if g := op.specs[i].purgeGrain; g != want {
			t.Errorf("%s: purge grain %d ms, want %d", op.specs[i].name(), g, want)
		}
	}
	processLine(t, op, dec, []byte(`{"id":"e1","ts":103500,"user":"u"}`))
	// Cleanup times: the last sliding window [103000, 163000) at 162999,
	// the tumbling [103500, 104000) at 103999, the session [103500, 133500)
	// at 133499; rounded up to the grains.
	purgedAt := []int64{170_000, 104_000, 140_000}
	for _, wm := range []int64{103_999, 104_000, 139_999, 140_000, 169_999, 170_000} {
		if err := op.AdvanceWatermark(wm); err != nil {
			t.Fatal(err)
		}
		for i, at := range purgedAt {
			if held, want := op.cache.cold.idx[i].n, map[bool]int{true: 0, false: 1}[wm >= at]; held != want {
				t.Errorf("watermark %d: %s holds %d states, want %d", wm, op.specs[i].name(), held, want)
			}
		}
	}
}

// BenchmarkPurge measures the timers that purge a rule's state, per key:
// 300,000 keys of a sliding minute, each with events in a few panes, purged
// by one watermark. With that many keys each timer's slot, panes and index
// entry are out of the CPU cache.
func BenchmarkPurge(b *testing.B) {
	const keys = 300_000
	op, dec := newTestOperator(b, `
rules:
  - {name: sliding, key: [user], window: {type: sliding, size: 60s, slide: 1s}, aggregate: count, threshold: 1000, action: deny}
`)
	r := rand.New(rand.NewPCG(1, 2))
	var lines [][]byte
	for i := range 4 * keys {
		lines = append(lines, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"u%d"}`, i, 600_000+r.Int64N(10_000), r.IntN(keys)))
	}
	keyer := op.NewKeyer()
	var ev event.Event
	var refs []SlotRef
	var keyBuf []byte
	wm := int64(0)
	for b.Loop() {
		b.StopTimer()
		wm += 1_000_000 // past every window of the round before
		for _, l := range lines {
			if err := dec.Decode(l, &ev); err != nil {
				b.Fatal(err)
			}
			ev.TS += wm
			refs, keyBuf = keyer.Append(refs[:0], keyBuf[:0], &ev)
			if _, err := op.ProcessElement(refs, keyBuf, ev.TS, false); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if err := op.AdvanceWatermark(wm + 900_000); err != nil {
			b.Fatal(err)
		}
	}
	if op.cache.cold.idx[0].n != 0 {
		b.Fatalf("%d states left", op.cache.cold.idx[0].n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*keys), "ns/key")
}
