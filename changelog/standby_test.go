package changelog

import (
	"slices"
	"testing"
)

// TestStandbysOf: every partition has its replicas on other members than
// its owner, spread evenly, and a dead member's partitions have standby
// copies on every other member.
func TestStandbysOf(t *testing.T) {
	assigned := map[string][]int{"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}, "c": {8, 9, 10, 11}}
	copies := map[int][]string{}
	for m := range assigned {
		for _, p := range StandbysOf(assigned, m, 1) {
			if slices.Contains(assigned[m], p) {
				t.Errorf("%s keeps a standby copy of its own partition %d", m, p)
			}
			copies[p] = append(copies[p], m)
		}
	}
	for p := range 12 {
		if len(copies[p]) != 1 {
			t.Errorf("partition %d has standby copies on %v, want one", p, copies[p])
		}
	}
	// a's partitions are warm on b and c, two each.
	on := map[string]int{}
	for _, p := range assigned["a"] {
		on[copies[p][0]]++
	}
	if on["b"] != 2 || on["c"] != 2 {
		t.Errorf("a's partitions are warm on %v, want two on b and two on c", on)
	}
	if got := StandbysOf(map[string][]int{"a": {0, 1}}, "a", 1); len(got) != 0 {
		t.Errorf("a member alone keeps standby copies %v", got)
	}
	if got := StandbysOf(assigned, "a", 2); len(got) != 8 {
		t.Errorf("with 2 replicas a keeps %d standby copies, want the 8 partitions of b and c", len(got))
	}
}
