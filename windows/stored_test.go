package windows

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows/slot"
	"github.com/riskstream/riskstream/windows/slotstore"
)

const storedTimersRules = `
watermark: {allowed_lateness: 3s}
rules:
  - {name: sliding, key: [user], window: {type: sliding, size: 20s, slide: 1s}, aggregate: count, threshold: 3, action: deny}
  - {name: session, key: [device], window: {type: session, gap: 5s}, aggregate: count, threshold: 3, action: review}
heatmaps:
  - {name: lat, key: [api], field: latency_ms, window: {type: tumbling, size: 2s}, buckets: [10, 100]}
  - {name: lat-session, key: [user], field: latency_ms, window: {type: session, gap: 3s}, buckets: [10, 100]}
`

// checkTimerEntries fails unless the Backend's timer entries are exactly
// one for each stored slot with a pending timer, at that timer's time.
func checkTimerEntries(t *testing.T, b *slotstore.MemBackend, when string) {
	t.Helper()
	want, got := map[string]bool{}, map[string]bool{}
	for k, v := range b.All() {
		if slot.SpecOf(k) == slot.TimerSpec {
			got[k] = true
			continue
		}
		at, err := slot.EncodedTimer(v)
		if err != nil {
			t.Fatalf("%s: slot %q: %v", when, k, err)
		}
		if at != slot.NoTimer {
			want[string(slot.AppendTimerKey(nil, at, k))] = true
		}
	}
	if !maps.Equal(got, want) {
		extra, missing := 0, 0
		for k := range got {
			if !want[k] {
				extra++
			}
		}
		for k := range want {
			if !got[k] {
				missing++
			}
		}
		t.Fatalf("%s: %d timer entries, want %d: %d not of a stored slot's timer, %d missing", when, len(got), len(want), extra, missing)
	}
}

// recorder keeps every output as text, in order. A decision's event is
// where it is in that order: the operator does not name it (Decision).
type recorder struct{ lines []string }

func (r *recorder) Decision(d *Decision) {
	r.lines = append(r.lines, fmt.Sprintf("decision %s %s [%d,%d) %g", d.Rule.Name, d.Key, d.Start, d.End, d.Value))
}

func (r *recorder) Heatmap(h *HeatmapWindow) {
	r.lines = append(r.lines, fmt.Sprintf("heatmap %s %s [%d,%d) rev %d n %d", h.Heatmap.Name, h.Key, h.Start, h.End, h.Revision, h.Acc.Count))
}

// TestStoredTimers: in write-through mode the Backend holds exactly one
// timer entry per stored slot with a pending timer, through evictions,
// spills, firings, purges, checkpoints and restores; an operator restored
// at any checkpoint and paging its timers in from those entries makes the
// same outputs as one that never stopped; and once every window has
// expired no entry is left.
func TestStoredTimers(t *testing.T) {
	// Small caches: states go through the cold store, where purges delete
	// them without decoding, and with a small budget are spilled
	// (forgotten, in write-through mode) all the time.
	for _, memory := range []int64{16 << 10, 4 << 20} {
		t.Run(fmt.Sprintf("memory=%d", memory), func(t *testing.T) {
			testStoredTimers(t, Options{WriteThrough: true, CacheSlots: 16, MemoryBytes: memory})
		})
	}
}

func testStoredTimers(t *testing.T, opts Options) {
	lines, ts := timerTestInput(3000)
	run := func(b *slotstore.MemBackend, out *recorder, from, to int, checkpoint []byte) []byte {
		t.Helper()
		op, dec := newTestOperatorWith(t, storedTimersRules, b, out, opts)
		if checkpoint != nil {
			if err := op.Restore(checkpoint); err != nil {
				t.Fatal(err)
			}
		}
		drive(t, op, dec, lines[from:to])
		cp, err := op.Checkpoint(nil)
		if err != nil {
			t.Fatal(err)
		}
		return cp
	}

	var whole recorder
	wholeB := slotstore.NewMemBackend()
	run(wholeB, &whole, 0, len(lines), nil)
	checkTimerEntries(t, wholeB, "uninterrupted")
	if d, h := countPrefix(whole.lines, "decision"), countPrefix(whole.lines, "heatmap"); d < 100 || h < 100 {
		t.Fatalf("%d decisions and %d heatmap windows: too few to test with", d, h)
	}

	cuts := []int{0, 700, 701, 1500, 2999, len(lines)}
	var parts recorder
	b := slotstore.NewMemBackend()
	var cp []byte
	for i := 1; i < len(cuts); i++ {
		cp = run(b, &parts, cuts[i-1], cuts[i], cp)
		checkTimerEntries(t, b, fmt.Sprintf("checkpoint at %d", cuts[i]))
	}
	if !slices.Equal(parts.lines, whole.lines) {
		t.Fatalf("restored at %v: %d outputs, uninterrupted: %d; they differ", cuts[1:len(cuts)-1], len(parts.lines), len(whole.lines))
	}

	// The watermark past every window: every state and entry goes, paged
	// in by a restored operator.
	op, _ := newTestOperatorWith(t, storedTimersRules, b, &parts, opts)
	if err := op.Restore(cp); err != nil {
		t.Fatal(err)
	}
	if err := op.AdvanceWatermark(ts + 1_000_000); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Checkpoint(nil); err != nil {
		t.Fatal(err)
	}
	if n := b.Len(); n != 0 {
		t.Fatalf("%d keys left in the Backend once every window expired", n)
	}
}

// TestRestorePagesTimers: a restore reads no state, and the timers of a
// restored Backend are paged in as the watermark reaches them, a page at a
// time when many are due at once.
func TestRestorePagesTimers(t *testing.T) {
	const users = 3 * timerPage // due at one time: three pages
	b := &seekCounter{MemBackend: slotstore.NewMemBackend()}
	op, dec := newTestOperatorWith(t, `
rules:
  - {name: count, key: [user], window: {type: tumbling, size: 10s}, aggregate: count, threshold: 1000, action: deny}
`, b, discardOutput{}, Options{WriteThrough: true, CacheSlots: 64, MemoryBytes: 64 << 10})
	for i := range users {
		processLine(t, op, dec, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"u%d"}`, i, 10_000+i%5000, i))
	}
	cp, err := op.Checkpoint(nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := b.Len(); n != 2*users {
		t.Fatalf("%d keys stored, want %d states and as many timers", n, 2*users)
	}

	op, _ = newTestOperatorWith(t, `
rules:
  - {name: count, key: [user], window: {type: tumbling, size: 10s}, aggregate: count, threshold: 1000, action: deny}
`, b, discardOutput{}, Options{WriteThrough: true, CacheSlots: 64, MemoryBytes: 64 << 10})
	if err := op.Restore(cp); err != nil {
		t.Fatal(err)
	}
	if op.keyTimers.Len() != 0 || len(op.cache.Ring) != 0 || op.stored.next != 20_000 {
		t.Fatalf("restored: %d key timers, %d slots cached, next stored timer at %d; want none, none, 20000",
			op.keyTimers.Len(), len(op.cache.Ring), op.stored.next)
	}
	if err := op.AdvanceWatermark(19_999); err != nil {
		t.Fatal(err)
	}
	if n := b.Len(); n != 2*users {
		t.Fatalf("before the timers are due: %d keys, want %d", n, 2*users)
	}
	seeks := b.seeks
	if err := op.AdvanceWatermark(20_000); err != nil {
		t.Fatal(err)
	}
	if n := b.seeks - seeks; n != 3 {
		t.Fatalf("the timers were read in %d seeks, want 3 pages", n)
	}
	if n, left := b.Len(), op.keyTimers.Len(); n != 0 || left != 0 || op.stored.next != slot.NoTimer {
		t.Fatalf("after the timers: %d keys stored, %d key timers, next stored timer %d; want 0, 0, none", n, left, op.stored.next)
	}
}

func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if len(l) >= len(prefix) && l[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

// seekCounter counts the Seeks of a MemBackend.
type seekCounter struct {
	*slotstore.MemBackend
	seeks int
}

func (b *seekCounter) Seek(start []byte, fn func(key, value []byte) (bool, error)) error {
	b.seeks++
	return b.MemBackend.Seek(start, fn)
}

// timerTestInput returns n events, mostly in order, of a few hundred users
// and devices and four APIs, some late, and the largest ts.
func timerTestInput(n int) ([][]byte, int64) {
	r := rand.New(rand.NewPCG(7, 9))
	var lines [][]byte
	ts := int64(1_000_000)
	for i := range n {
		ts += r.Int64N(40)
		late := int64(0)
		if r.IntN(10) == 0 {
			late = r.Int64N(6000) // some late, some within allowed lateness
		}
		lines = append(lines, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"u%d","device":"d%d","api":"/a%d","latency_ms":%d}`,
			i, ts-late, r.IntN(300), r.IntN(200), r.IntN(4), r.IntN(200)))
	}
	return lines, ts
}

// processLine decodes line with dec and has op process its event at its
// time, keyed as a pipeline's keying stage would (by the operator's rules
// of now), and returns its time. The key bytes are overwritten once the
// event is done, as a pipeline reuses its buffer: a key the operator kept
// without copying it (see Operator.slotOf) then shows in its state and
// outputs.
func processLine(t *testing.T, op *Operator, dec *event.Decoder, line []byte) int64 {
	t.Helper()
	var ev event.Event
	if err := dec.Decode(line, &ev); err != nil {
		t.Fatal(err)
	}
	refs, keys := op.NewKeyer().Append(nil, nil, &ev)
	if _, err := op.ProcessElement(refs, keys, ev.TS, false); err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		keys[i] = '#'
	}
	return ev.TS
}

// drive feeds op the events of lines, the watermark a second behind the
// largest ts after each.
func drive(t *testing.T, op *Operator, dec *event.Decoder, lines [][]byte) {
	t.Helper()
	maxTS := watermark.Min
	for _, l := range lines {
		maxTS = max(maxTS, processLine(t, op, dec, l))
		if err := op.AdvanceWatermark(maxTS - 1000); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSpilledTimers: an operator whose timer queue outgrows its budget
// moves its latest timers to the Backend and pages them back in when due,
// with the same outputs, in the same order, as one whose queue fits, to
// the end of the input; then no timer of a heatmap is left stored.
func TestSpilledTimers(t *testing.T) {
	lines, _ := timerTestInput(3000)
	run := func(timerBudget int) (*recorder, *Operator, *slotstore.MemBackend) {
		out, b := &recorder{}, slotstore.NewMemBackend()
		// States go through the cold store and are spilled too.
		op, dec := newTestOperatorWith(t, storedTimersRules, b, out, Options{CacheSlots: 16, MemoryBytes: 16 << 10})
		if timerBudget > 0 {
			op.timerBudget = timerBudget
		}
		drive(t, op, dec, lines)
		if err := op.AdvanceWatermark(watermark.Max); err != nil {
			t.Fatal(err)
		}
		return out, op, b
	}
	fits, op, _ := run(1 << 30)
	if op.TimersSpilled() != 0 {
		t.Fatalf("%d timers spilled with room for all", op.TimersSpilled())
	}
	spills, op, b := run(40 * idTimerBytes)
	if op.TimersSpilled() < 500 {
		t.Fatalf("only %d timers spilled", op.TimersSpilled())
	}
	if !slices.Equal(spills.lines, fits.lines) {
		n := 0
		for n < min(len(spills.lines), len(fits.lines)) && spills.lines[n] == fits.lines[n] {
			n++
		}
		t.Fatalf("%d outputs with the timers spilled, %d without; they differ from output %d", len(spills.lines), len(fits.lines), n)
	}
	for k := range b.All() {
		if at, key, ok := slot.SplitTimerKey([]byte(k)); ok && op.specs[slot.SpecOf(key)].Heatmap != nil {
			t.Fatalf("a heatmap's timer at %d is still stored after the end", at)
		}
	}
}

// TestRetiredTimers: once a rule is gone, DeleteRetiredSome, 7 states at a
// time, deletes its stored
// states and their timer entries, and a restored operator whose watermark
// passes every window leaves nothing stored.
func TestRetiredTimers(t *testing.T) {
	const both = `
rules:
  - {name: users, key: [user], window: {type: tumbling, size: 10s}, aggregate: count, threshold: 100, action: deny}
  - {name: devices, key: [device], window: {type: tumbling, size: 10s}, aggregate: count, threshold: 100, action: deny}
`
	const one = `
rules:
  - {name: users, key: [user], window: {type: tumbling, size: 10s}, aggregate: count, threshold: 100, action: deny}
`
	b := slotstore.NewMemBackend()
	opts := Options{WriteThrough: true}
	op, dec := newTestOperatorWith(t, both, b, discardOutput{}, opts)
	lines, ts := timerTestInput(500)
	drive(t, op, dec, lines)
	cp, err := op.Checkpoint(nil)
	if err != nil {
		t.Fatal(err)
	}
	devices := func() (states, timers int) {
		for k := range b.All() {
			if at, key, ok := slot.SplitTimerKey([]byte(k)); ok && at > 0 && slot.SpecOf(key) == 1 {
				timers++
			} else if !ok && slot.SpecOf(k) == 1 {
				states++
			}
		}
		return states, timers
	}
	if s, tm := devices(); s == 0 || s != tm {
		t.Fatalf("devices' states and timers stored: %d and %d, want as many, not none", s, tm)
	}

	cfg, schema := parseTestRules(t, one)
	op, _ = newTestOperatorWith(t, both, b, discardOutput{}, opts)
	if err := op.Reload(cfg, schema, []int{0}); err != nil {
		t.Fatal(err)
	}
	if err := op.Restore(cp); err != nil {
		t.Fatal(err)
	}
	for after, done := []byte(nil), false; !done; {
		if after, _, done, err = op.DeleteRetiredSome(1, after, 7); err != nil {
			t.Fatal(err)
		}
	}
	if s, tm := devices(); s != 0 || tm != 0 {
		t.Fatalf("after DeleteRetiredSome: %d devices' states and %d timers stored, want none", s, tm)
	}
	if err := op.AdvanceWatermark(ts + 100_000); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Checkpoint(nil); err != nil {
		t.Fatal(err)
	}
	if n := b.Len(); n != 0 {
		t.Fatalf("%d keys stored once every window expired, want none", n)
	}
}

// TestRetiredSpilled: an operator that does not write through keeps in
// the Backend only the states its memory spilled, without timer entries;
// DeleteRetiredSome deletes those of a rule gone too.
func TestRetiredSpilled(t *testing.T) {
	const both = `
rules:
  - {name: users, key: [user], window: {type: tumbling, size: 10s}, aggregate: count, threshold: 100, action: deny}
  - {name: devices, key: [device], window: {type: tumbling, size: 10s}, aggregate: count, threshold: 100, action: deny}
`
	b := slotstore.NewMemBackend()
	op, dec := newTestOperatorWith(t, both, b, discardOutput{}, Options{CacheSlots: 16, MemoryBytes: 8 << 10})
	lines, _ := timerTestInput(2000)
	drive(t, op, dec, lines)
	spilled := func() int {
		n := 0
		for k := range b.All() {
			if len(k) == slotstore.SpillKeyLen && slot.SpecOf(k) == 1 && k[2] == 0xff {
				n++
			}
		}
		return n
	}
	if spilled() == 0 {
		t.Fatal("no state of devices spilled: the test needs some")
	}
	cfg, schema := parseTestRules(t, `
rules:
  - {name: users, key: [user], window: {type: tumbling, size: 10s}, aggregate: count, threshold: 100, action: deny}
`)
	if err := op.Reload(cfg, schema, []int{0}); err != nil {
		t.Fatal(err)
	}
	for after, done, err := []byte(nil), false, error(nil); !done; {
		if after, _, done, err = op.DeleteRetiredSome(1, after, 7); err != nil {
			t.Fatal(err)
		}
	}
	if n := spilled(); n != 0 {
		t.Fatalf("%d spilled states of devices left after DeleteRetiredSome", n)
	}
}
