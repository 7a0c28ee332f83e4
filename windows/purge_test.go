package windows

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows/slot"
	"github.com/riskstream/riskstream/windows/slotstore"
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
		if g := op.specs[i].PurgeGrain; g != want {
			t.Errorf("%s: purge grain %d ms, want %d", op.specs[i].Name(), g, want)
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
			if held, want := op.cache.Cold.Idx[i].Held(), map[bool]int{true: 0, false: 1}[wm >= at]; held != want {
				t.Errorf("watermark %d: %s holds %d states, want %d", wm, op.specs[i].Name(), held, want)
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
	if op.cache.Cold.Idx[0].Held() != 0 {
		b.Fatalf("%d states left", op.cache.Cold.Idx[0].Held())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*keys), "ns/key")
}

// TestExpiringChainFreesFreshStates: the states of keys first seen while
// the cache is full get no purge timer; their records go to their rule's
// expiring chain, whose chunks the watermark frees whole once every state
// there is due, and the indexes' sweeps then reuse the places of their
// entries. A second wave of as many new keys, after the first expired,
// leaves the memory where the first left it: no chunk of the first is
// kept, and the index does not double.
func TestExpiringChainFreesFreshStates(t *testing.T) {
	const slots = 64
	op, dec := newTestOperatorWith(t, `
rules:
  - {name: session, key: [user], window: {type: session, gap: 30s}, aggregate: count, threshold: 5, action: deny}
`, slotstore.NewMemBackend(), discardOutput{}, Options{MemoryBytes: 64 << 20, CacheSlots: slots})
	c := op.cache.Cold
	const keys = 200_000
	wave := func(first, start int64) {
		t.Helper()
		for i := range int64(keys) {
			ts := start + i // a new key a millisecond, 200 s of them
			processLine(t, op, dec, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"u%d"}`, first+i, ts, first+i))
			if err := op.AdvanceWatermark(ts - 1000); err != nil {
				t.Fatal(err)
			}
			if n := op.timers.Len(); n > 2*slots {
				t.Fatalf("%d pending timers with %d cached slots: fresh states got timers", n, slots)
			}
		}
	}
	wave(0, 1_000_000)
	if c.Expired[0] == 0 {
		t.Fatal("no chunk of the expiring chain was freed while the watermark passed its states")
	}
	size := len(c.Idx[0].Entries)
	if err := op.AdvanceWatermark(1_000_000 + keys + 60_000); err != nil {
		t.Fatal(err)
	}
	if c.Live != 0 || c.Alloc > 2*c.ChunkBytes {
		t.Fatalf("after every state expired: %d bytes of records current, %d bytes of chunks held, want 0 and at most 2 spare chunks", c.Live, c.Alloc)
	}
	wave(keys, 1_000_000+keys+60_000)
	if got := len(c.Idx[0].Entries); got > size {
		t.Errorf("index of %d places after the second wave, %d after the first: the sweeps did not reuse the dead entries' places", got, size)
	}
}

// TestExpiringSpilledStatesLeave: a state of an expiring chain that the
// cold store spills, over its budget, gets a purge timer there, and leaves
// the Backend when due like any spilled state.
func TestExpiringSpilledStatesLeave(t *testing.T) {
	backend := slotstore.NewMemBackend()
	op, dec := newTestOperatorWith(t, `
rules:
  - {name: session, key: [user], window: {type: session, gap: 30s}, aggregate: count, threshold: 5, action: deny}
`, backend, discardOutput{}, Options{MemoryBytes: 1 << 20, CacheSlots: 64})
	const keys = 100_000
	for i := range int64(keys) {
		ts := 1_000_000 + i
		processLine(t, op, dec, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"u%d"}`, i, ts, i))
		if err := op.AdvanceWatermark(ts - 1000); err != nil {
			t.Fatal(err)
		}
	}
	if op.cache.Cold.Spills == 0 {
		t.Fatal("nothing spilled: the budget holds every state")
	}
	if err := op.AdvanceWatermark(1_000_000 + keys + 60_000); err != nil {
		t.Fatal(err)
	}
	if n := backend.Len(); n != 0 {
		t.Errorf("%d entries left in the Backend after every state expired (%d spilled)", n, op.cache.Cold.Spills)
	}
}

// TestEndOfInputForgetsRules: at the end of a replay's input (the largest
// watermark) every rule's state is forgotten without being read or
// written: the rules' indexes are empty, no rule's slot is cached, and the
// states left are the heatmaps', which still fire as with no state spilled.
func TestEndOfInputForgetsRules(t *testing.T) {
	lines, _ := timerTestInput(3000)
	backend := &specCountingBackend{MemBackend: slotstore.NewMemBackend()}
	out := &recorder{}
	// States go through the cold store and are spilled too.
	op, dec := newTestOperatorWith(t, storedTimersRules, backend, out, Options{CacheSlots: 16, MemoryBytes: 16 << 10})
	backend.rule = func(spec int) bool { return spec < len(op.specs) && op.specs[spec].Rule != nil }
	drive(t, op, dec, lines)
	if op.cache.Cold.Spills == 0 {
		t.Fatal("nothing spilled")
	}
	backend.reads, backend.writes = 0, 0
	if err := op.AdvanceWatermark(watermark.Max); err != nil {
		t.Fatal(err)
	}
	for _, sp := range op.specs {
		if sp.Rule != nil && op.cache.Cold.Idx[sp.Index].N != 0 {
			t.Errorf("%s: %d states left in its index", sp.Name(), op.cache.Cold.Idx[sp.Index].N)
		}
	}
	for _, s := range op.cache.Ring {
		if s.Spec.Rule != nil {
			t.Errorf("%s: state %q still cached", s.Spec.Name(), s.Key)
		}
	}
	if backend.reads != 0 || backend.writes != 0 {
		t.Errorf("the end of input read %d rules' states and wrote %d", backend.reads, backend.writes)
	}
	if err := op.cache.Cold.CheckLive(); err != nil {
		t.Error(err)
	}

	want := &recorder{}
	ref, dec := newTestOperatorWith(t, storedTimersRules, slotstore.NewMemBackend(), want, Options{})
	drive(t, ref, dec, lines)
	if err := ref.AdvanceWatermark(watermark.Max); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.lines, want.lines) {
		t.Errorf("%d outputs with a 16-slot cache and a 16 KiB budget, %d with the defaults", len(out.lines), len(want.lines))
	}
}

// specCountingBackend counts the reads and writes of a MemBackend's keys
// of states (slot keys or spill keys) of the specs rule reports.
type specCountingBackend struct {
	*slotstore.MemBackend
	rule          func(spec int) bool
	reads, writes int
}

func (b *specCountingBackend) count(key []byte, n *int) {
	if b.rule != nil && len(key) >= 2 && b.rule(slot.SpecOf(key)) {
		*n++
	}
}

func (b *specCountingBackend) Get(key []byte) ([]byte, bool, error) {
	b.count(key, &b.reads)
	return b.MemBackend.Get(key)
}

func (b *specCountingBackend) GetSorted(keys [][]byte, fn func(i int, value []byte, found bool) error) error {
	for _, k := range keys {
		b.count(k, &b.reads)
	}
	return b.MemBackend.GetSorted(keys, fn)
}

func (b *specCountingBackend) Set(key, value []byte) error {
	b.count(key, &b.writes)
	return b.MemBackend.Set(key, value)
}

func (b *specCountingBackend) Delete(key []byte) error {
	b.count(key, &b.writes)
	return b.MemBackend.Delete(key)
}

// TestKeptOutStateKeepsItsTimer: a state the cache keeps out when its key
// comes back keeps the purge timer it has (one spilled got it then), and
// goes back where that timer finds it, rather than getting a second one
// when it is spilled again: one timer a state, however often it moves.
func TestKeptOutStateKeepsItsTimer(t *testing.T) {
	op, dec := newTestOperatorWith(t, `
rules:
  - {name: session, key: [user], window: {type: session, gap: 30s}, aggregate: count, threshold: 5, action: deny}
`, slotstore.NewMemBackend(), discardOutput{}, Options{MemoryBytes: 1 << 20, CacheSlots: 64})
	const keys = 20_000
	// Each key twice, 10 s apart, the second time after most states were
	// spilled; the watermark stays behind, so that no timer runs.
	for round := range int64(2) {
		for i := range int64(keys) {
			processLine(t, op, dec, fmt.Appendf(nil, `{"id":"e%d-%d","ts":%d,"user":"u%d"}`, round, i, 1_000_000+10_000*round+i, i))
		}
	}
	if op.cache.Cold.Spills < keys {
		t.Fatalf("%d states spilled, want the first round's and more", op.cache.Cold.Spills)
	}
	if n := op.timers.Len() + int(op.TimersSpilled()); n > keys {
		t.Errorf("%d timers set for %d states", n, keys)
	}
}
