package memory

import (
	"testing"

	"github.com/riskstream/riskstream/state"
)

// TestNewPlan: every budget from the smallest accepted up is shared
// without going over it, an eighth kept for what is in flight; a budget
// below Min, or too small for its stores, is refused.
func TestNewPlan(t *testing.T) {
	if _, err := NewPlan(Min-1, 1); err == nil {
		t.Fatalf("a budget under Min is accepted")
	}
	if _, err := NewPlan(Min, 16); err == nil {
		t.Fatalf("Min shared by 16 stores is accepted")
	}
	for _, c := range []struct {
		budget int64
		stores int
	}{{Min, 1}, {Min, 2}, {256 << 20, 2}, {Default, 1}, {Default, 8}, {16 << 30, 4}} {
		p, err := NewPlan(c.budget, c.stores)
		if err != nil {
			t.Fatalf("%d MiB, %d stores: %v", c.budget>>20, c.stores, err)
		}
		used := p.State + int64(c.stores)*(p.PebbleCache+state.MemtableBytes)
		if used > c.budget-c.budget/8 {
			t.Errorf("%d MiB, %d stores: %d MiB planned, over seven eighths", c.budget>>20, c.stores, used>>20)
		}
		if p.State < Min/2 || p.BatchBytes < 1<<20 || p.Chunk > MaxChunk || p.Chunk < 64<<10 {
			t.Errorf("%d MiB, %d stores: %+v", c.budget>>20, c.stores, p)
		}
		if int64(p.Chunk)*512 > c.budget && p.Chunk > 64<<10 {
			t.Errorf("%d MiB: chunks of %d KiB, more than 1/512 of the budget", c.budget>>20, p.Chunk>>10)
		}
	}
}
