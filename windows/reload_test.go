package windows

import (
	"fmt"
	"testing"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/rules"
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
	op, dec := newTestOperatorWith(t, text, NewMemBackend(), discardOutput{}, Options{CacheSlots: 64, WriteThrough: true})
	k := op.NewKeyer()
	add := func(k *Keyer, dec *event.Decoder, users int) {
		for i := range users {
			var ev event.Event
			if err := dec.Decode(fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"u%d"}`, i, 1000+i, i), &ev); err != nil {
				t.Fatal(err)
			}
			refs, keys := k.Append(nil, nil, &ev)
			if _, err := op.ProcessElement(&ev, refs, keys, ev.TS, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(k, dec, 1000)
	held := func(id int) int { return op.cache.m[id].n + op.cache.cold.idx[id].n }
	if held(0) != 1000 || held(1) != 1000 || held(2) != 1000 {
		t.Fatalf("states held before the reload: %d, %d, %d", held(0), held(1), held(2))
	}
	live := op.cache.cold.live
	cfg, err := rules.Parse("rules.yaml", []byte(`
rules:
  - {name: changed, key: [user], window: {type: tumbling, size: 2m}, aggregate: count, threshold: 5, action: deny}
  - {name: kept, key: [user], window: {type: tumbling, size: 1m}, aggregate: count, threshold: 9, action: review}
`))
	if err != nil {
		t.Fatal(err)
	}
	schema, err := event.NewSchema(Fields(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Reload(cfg, schema, []int{3, 0}); err != nil {
		t.Fatal(err)
	}
	if held(0) != 1000 || held(1) != 0 || held(2) != 0 || held(3) != 0 || op.cache.cold.live >= live {
		t.Fatalf("states held after the reload: kept %d, removed %d, changed %d then %d; cold bytes %d, were %d",
			held(0), held(1), held(2), held(3), op.cache.cold.live, live)
	}
	if op.specs[0].rule.Threshold != 9 || op.specs[0].pos != 1 || op.specs[1] != nil || op.specs[3].pos != 0 {
		t.Fatalf("specs after the reload: %+v", op.specs)
	}
	add(op.NewKeyer(), event.NewDecoder(schema), 10)
	// A state read back from the cold store may be counted in both.
	if held(0) < 1000 || held(3) != 10 {
		t.Fatalf("after 10 more events: kept %d, changed %d", held(0), held(3))
	}
	if err := op.AdvanceWatermark(MaxWatermark - 1); err != nil {
		t.Fatalf("the timers of dropped states: %v", err)
	}
}
