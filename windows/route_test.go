package windows

import (
	"hash/fnv"
	"testing"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/windows/slot"
)

// Route must give every process the same partition for a key: it is the
// FNV-1a hash of the key's text, whatever the Keyer's random seeds.
func TestRouteIsStable(t *testing.T) {
	cfg, schema := parseTestRules(t, `
rules:
  - {name: by-user, key: [user], window: {type: tumbling, size: 1s}, aggregate: count, threshold: 1, action: deny}
  - {name: by-pair, key: [channel, merchant], window: {type: session, gap: 1s}, aggregate: count, threshold: 1, action: deny}
`)
	k1, err1 := NewKeyer(cfg, schema)
	k2, err2 := NewKeyer(cfg, schema)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	dec := event.NewDecoder(schema)
	for _, text := range []string{
		`{"id":"a","ts":1,"user":"u42","channel":"alipay","merchant":"m7"}`,
		`{"id":"b","ts":1,"user":7,"channel":"card","merchant":"m1"}`,
	} {
		var ev event.Event
		if err := dec.Decode([]byte(text), &ev); err != nil {
			t.Fatal(err)
		}
		refs1, keys1 := k1.Append(nil, nil, &ev)
		refs2, keys2 := k2.Append(nil, nil, &ev)
		if len(refs1) != 2 {
			t.Fatalf("%s: %d refs, want 2", text, len(refs1))
		}
		for i := range refs1 {
			h := fnv.New64a()
			h.Write(slot.HashedText(refs1[i].slotKey(keys1)))
			for _, n := range []int{1, 2, 7, 12} {
				want := int(h.Sum64() % uint64(n))
				if got := k1.Route(refs1[i], keys1, n); got != want {
					t.Errorf("%s ref %d: Route(%d) = %d, want %d", text, i, n, got, want)
				}
				if got := k2.Route(refs2[i], keys2, n); got != want {
					t.Errorf("%s ref %d: another Keyer's Route(%d) = %d, want %d", text, i, n, got, want)
				}
			}
		}
	}
}
