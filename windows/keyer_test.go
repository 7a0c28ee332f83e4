package windows

import (
	"fmt"
	"strings"
	"testing"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows/slot"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// TestKeyerKeys: the keys Append writes beside the refs read back as the
// slot keys, for keys of one and two attributes, short and longer than a
// one-byte length, and the refs' hashes are those of the keys.
func TestKeyerKeys(t *testing.T) {
	op, dec := newTestOperator(t, `
rules:
  - name: one
    key: [user]
    window: {type: tumbling, size: 1m}
    aggregate: count
    threshold: 5
    action: deny
  - name: two
    key: [user, device]
    window: {type: session, gap: 30s}
    aggregate: count
    threshold: 5
    action: deny
`)
	k := op.NewKeyer()
	var (
		refs []SlotRef
		keys []byte
		want []string
	)
	for _, n := range []int{0, 1, 60, 124, 125, 126, 127, 128, 200, 20000} {
		user, device := strings.Repeat("u", n), fmt.Sprint("d", n)
		var ev event.Event
		rec := fmt.Appendf(nil, `{"id":"e%d","ts":1,"user":%q,"device":%q}`, n, user, device)
		if err := dec.Decode(rec, &ev); err != nil {
			t.Fatal(err)
		}
		refs, keys = k.Append(refs, keys, &ev)
		want = append(want, "\x00\x00\""+user+"\"\x00", "\x00\x01\""+user+"\"\x00\""+device+"\"\x00")
	}
	if len(refs) != len(want) {
		t.Fatalf("%d refs, want %d", len(refs), len(want))
	}
	for i := range refs {
		key := string(refs[i].slotKey(keys))
		if key != want[i] {
			t.Fatalf("ref %d: key %q, want %q", i, key, want[i])
		}
		if id := slot.HashKey(op.cache.Seeds, key); id != refs[i].id {
			t.Fatalf("ref %d: id %x, the key's hash is %x", i, refs[i].id, id)
		}
	}
}

// newTestOperator returns an operator of the rules file text, over a
// MemBackend and discarding its outputs, and a decoder of its events.
func newTestOperator(t testing.TB, text string) (*Operator, *event.Decoder) {
	t.Helper()
	return newTestOperatorWith(t, text, slotstore.NewMemBackend(), discardOutput{}, Options{})
}

func newTestOperatorWith(t testing.TB, text string, backend slotstore.Backend, out Output, opts Options) (*Operator, *event.Decoder) {
	t.Helper()
	cfg, schema := parseTestRules(t, text)
	op, err := New(cfg, schema, backend, out, opts)
	if err != nil {
		t.Fatal(err)
	}
	return op, event.NewDecoder(schema)
}

type discardOutput struct{}

func (discardOutput) Decision(*Decision)     {}
func (discardOutput) Heatmap(*HeatmapWindow) {}

// parseTestRules parses a rules file's text and builds the schema of its
// events.
func parseTestRules(t testing.TB, text string) (*rules.Config, *event.Schema) {
	t.Helper()
	cfg, err := rules.Parse("rules.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	schema, err := event.NewSchema(Fields(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return cfg, schema
}
