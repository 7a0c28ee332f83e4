package windows

import (
	"fmt"
	"testing"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// TestReloadDropsState: a reload that removes one rule and changes another
// frees what memory held of their state, cached and cold, keeps the kept
// rule's slots as they were, and runs the dropped states' pending timers
// harmlessly.
func TestReloadDropsState(t *testing.T) {
	const text = `
rules:
  - {name: kept, key: [user], window: {type: tumbling, size: 1m}, aggregate: count, threshold: 5, action: deny}
  - {name: removed, key: [user], window: {type: tumbling, size: 1m}, aggregate: count, threshold: 5, action: deny}
  - {name: changed, key: [user], window: {type: tumbling, size: 1m}, aggregate: count, threshold: 5, action: deny}
`
	// Few cached slots: most states are in the cold store.
	op, dec := newTestOperatorWith(t, text, slotstore.NewMemBackend(), discardOutput{}, Options{CacheSlots: 64, WriteThrough: true})
	add := func(dec *event.Decoder, users int) {
		for i := range users {
			processLine(t, op, dec, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"u%d"}`, i, 1000+i, i))
		}
	}
	add(dec, 1000)
	held := func(id int) int { return op.cache.Cold.Idx[id].N }
	if held(0) != 1000 || held(1) != 1000 || held(2) != 1000 {
		t.Fatalf("states held before the reload: %d, %d, %d", held(0), held(1), held(2))
	}
	live := op.cache.Cold.Live
	cfg, schema := parseTestRules(t, `
rules:
  - {name: changed, key: [user], window: {type: tumbling, size: 2m}, aggregate: count, threshold: 5, action: deny}
  - {name: kept, key: [user], window: {type: tumbling, size: 1m}, aggregate: count, threshold: 9, action: review}
`)
	if err := op.Reload(cfg, schema, []int{3, 0}); err != nil {
		t.Fatal(err)
	}
	if c := op.cache; len(c.Ring) == 0 || c.Cold.CachedEntries != len(c.Ring) {
		t.Fatalf("after the reload: %d entries counted as cached, %d slots cached", c.Cold.CachedEntries, len(c.Ring))
	}
	if held(0) != 1000 || held(1) != 0 || held(2) != 0 || held(3) != 0 || op.cache.Cold.Live >= live {
		t.Fatalf("states held after the reload: kept %d, removed %d, changed %d then %d; cold bytes %d, were %d",
			held(0), held(1), held(2), held(3), op.cache.Cold.Live, live)
	}
	if op.specs[0].Rule.Threshold != 9 || op.specs[0].Pos != 1 || op.specs[1] != nil || op.specs[3].Pos != 0 {
		t.Fatalf("specs after the reload: %+v", op.specs)
	}
	add(event.NewDecoder(schema), 10) // keyed by the new rules
	if held(0) != 1000 || held(3) != 10 {
		t.Fatalf("after 10 more events: kept %d, changed %d", held(0), held(3))
	}
	if err := op.AdvanceWatermark(watermark.Max - 1); err != nil {
		t.Fatalf("the timers of dropped states: %v", err)
	}
}

// TestReloadReusesRetiredID: a rule may take the state id of one a reload
// dropped, once the dropped rule's stored states are deleted; its timers
// still queued then purge nothing of the new rule's states, which still go
// when their windows are over.
func TestReloadReusesRetiredID(t *testing.T) {
	const keep = "  - {name: keep, key: [user], window: {type: tumbling, size: 10s}, aggregate: count, threshold: 100, action: deny}\n"
	b := slotstore.NewMemBackend()
	out := &lastValues{values: map[string]float64{}}
	op, dec := newTestOperatorWith(t, "rules:\n"+keep+
		"  - {name: old, key: [user], window: {type: tumbling, size: 10s}, aggregate: count, threshold: 100, action: deny}\n",
		b, out, Options{WriteThrough: true})
	process := func(dec *event.Decoder, i int, ts int64) {
		t.Helper()
		processLine(t, op, dec, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"u%d"}`, i, ts, i%10))
	}
	for i := range 100 {
		process(dec, i, 1_000_000+int64(i)) // old's purges are due at 1,009,999
	}
	if _, err := op.Checkpoint(nil); err != nil {
		t.Fatal(err)
	}
	cfg, schema := parseTestRules(t, "rules:\n"+keep)
	if err := op.Reload(cfg, schema, []int{0}); err != nil {
		t.Fatal(err)
	}
	for after, done, err := []byte(nil), false, error(nil); !done; {
		if after, _, done, err = op.DeleteRetiredSome(1, after, 100); err != nil {
			t.Fatal(err)
		}
	}
	cfg, schema = parseTestRules(t, "rules:\n"+keep+
		"  - {name: new, key: [user], window: {type: tumbling, size: 1m}, aggregate: count, threshold: 1, action: deny}\n")
	if err := op.Reload(cfg, schema, []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	dec = event.NewDecoder(schema)
	for i := range 10 {
		process(dec, 100+i, 1_005_000)
	}
	// old's timers are still queued, now naming new's id: the case.
	oldTimers := 0
	for at, b := range op.timers.byTime {
		for _, blk := range b.blocks {
			for _, e := range blk {
				if e.spec == 1 && at <= 1_015_000 {
					oldTimers++
				}
			}
		}
	}
	if oldTimers == 0 {
		t.Fatal("no timer of the dropped rule is queued before the watermark passes it")
	}
	if err := op.AdvanceWatermark(1_015_000); err != nil { // old's timers run
		t.Fatal(err)
	}
	for i := range 10 {
		process(dec, 110+i, 1_016_000)
	}
	for u := range 10 {
		if v := out.values[fmt.Sprintf("new \"u%d\"\x00", u)]; v != 2 {
			t.Errorf("new's count for u%d: %v, want 2: the first event's state was purged", u, v)
		}
	}
	// And every state goes once its windows are over.
	if err := op.AdvanceWatermark(2_000_000); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Checkpoint(nil); err != nil {
		t.Fatal(err)
	}
	if n := b.Len(); n != 0 {
		t.Errorf("%d keys stored once every window is over, want none", n)
	}
}

// lastValues keeps the value of each rule and key's last decision.
type lastValues struct{ values map[string]float64 }

func (o *lastValues) Decision(d *Decision)   { o.values[d.Rule.Name+" "+d.Key] = d.Value }
func (o *lastValues) Heatmap(*HeatmapWindow) {}
