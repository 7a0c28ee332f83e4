package engine

import (
	"reflect"
	"testing"

	"github.com/riskstream/riskstream/rules"
)

// TestLayoutNext: a rule keeps its state id while its definition is
// unchanged, through any number of reloads; a changed or new one takes an
// id no state has, not even retired state, which stays until
// DeleteRetired has deleted it between records; and the layout survives
// its encoding.
func TestLayoutNext(t *testing.T) {
	parse := func(rulesYAML string) *rules.Config {
		cfg, err := rules.Parse("r.yaml", []byte("rules:\n"+rulesYAML))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	rule := func(name, agg string, threshold int) string {
		return "  - {name: " + name + ", key: [user], window: {type: tumbling, size: 1s}, aggregate: " + agg +
			", threshold: " + string(rune('0'+threshold)) + ", action: deny}\n"
	}
	l := identityLayout(parse(rule("a", "count", 1) + rule("b", "count", 1) + rule("c", "count", 1)))
	steps := []struct {
		rules   string
		ids     []int
		retired []int
	}{
		// b's threshold changes, c's aggregate: b keeps 1, c moves to 3.
		{rule("a", "count", 1) + rule("b", "count", 5) + rule("c", "sum:amount", 1), []int{0, 1, 3}, []int{2}},
		// a goes, d comes before b: d takes 4, the first id never used.
		{rule("d", "count", 1) + rule("b", "count", 5) + rule("c", "sum:amount", 1), []int{4, 1, 3}, []int{0, 2}},
		// Nothing that shapes state changes.
		{rule("d", "count", 2) + rule("b", "count", 5) + rule("c", "sum:amount", 3), []int{4, 1, 3}, []int{0, 2}},
	}
	for i, s := range steps {
		next, _ := l.next(parse(s.rules))
		if !reflect.DeepEqual(next.ids(), s.ids) || !reflect.DeepEqual(next.retired, s.retired) {
			t.Fatalf("step %d: ids %v retired %v, want %v and %v", i, next.ids(), next.retired, s.ids, s.retired)
		}
		decoded, err := decodeLayout(next.appendBinary(nil))
		if err != nil || !reflect.DeepEqual(decoded, next) {
			t.Fatalf("step %d: decoded %+v, %v; want %+v", i, decoded, err, next)
		}
		l = next
	}
	if _, err := decodeLayout(l.appendBinary(nil)[:5]); err == nil {
		t.Error("a truncated layout must be refused")
	}
}
