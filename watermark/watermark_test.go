package watermark

import (
	"testing"
)

func TestGenerator(t *testing.T) {
	g := NewGenerator(2000)
	if g.Current() != Min {
		t.Fatal("a generator without events must be at Min")
	}
	for _, c := range []struct{ ts, want int64 }{
		{10_000, 7_999}, {9_000, 7_999}, {12_000, 9_999}, {-50_000, 9_999},
	} {
		g.OnEvent(c.ts)
		if got := g.Current(); got != c.want {
			t.Fatalf("after %d: %d, want %d", c.ts, got, c.want)
		}
	}
}

// TestCombinedIdleness: the minimum over partitions that are not idle; an
// idle partition stops holding the watermark back, and the watermark never
// goes back when it wakes up behind.
func TestCombinedIdleness(t *testing.T) {
	c := NewCombined(0, 10_000)
	c.AddPartition(0, 0)
	c.AddPartition(1, 0)
	steps := []struct {
		name            string
		part            int32
		ts, now, wantWM int64
		tick            bool
	}{
		{"p0 alone is held back by silent p1", 0, 5_000, 1_000, Min, false},
		{"both have data", 1, 3_000, 2_000, 2_999, false},
		{"p0 runs ahead", 0, 20_000, 5_000, 2_999, false},
		{"p1 idle after 10s of silence", 0, 0, 12_000, 19_999, true},
		{"p1 wakes up behind: no going back", 1, 4_000, 13_000, 19_999, false},
		{"p1 catches up past p0", 1, 30_000, 14_000, 19_999, false},
		{"p0 advances", 0, 40_000, 15_000, 29_999, false},
	}
	for _, s := range steps {
		var got int64
		if s.tick {
			got = c.Advance(s.now)
		} else {
			got = c.OnEvent(s.part, s.ts, s.now)
		}
		if got != s.wantWM {
			t.Fatalf("%s: watermark %d, want %d", s.name, got, s.wantWM)
		}
	}
	if !c.Idle(0, 40_000) || c.Idle(1, 14_500) {
		t.Fatal("Idle disagrees with the timeout")
	}
	if c.Partition(1) != 29_999 || c.Finish() != Max || c.Current() != Max {
		t.Fatal("partition watermark or Finish wrong")
	}
}

// TestAllIdle: when every partition is idle the watermark stays put.
func TestAllIdle(t *testing.T) {
	c := NewCombined(0, 100)
	c.OnEvent(0, 1_000, 0)
	if got := c.Advance(1_000); got != 999 {
		t.Fatalf("watermark %d, want 999", got)
	}
}

func TestCombinedAbsorb(t *testing.T) {
	a, b := NewCombined(10, 1000), NewCombined(10, 1000)
	a.OnEvent(0, 500, 0)
	b.OnEvent(1, 200, 0)
	b.OnEvent(0, 900, 0) // a partition both have: a's stays
	a.Absorb(b)
	if a.Partition(0) != 489 || a.Partition(1) != 189 {
		t.Errorf("partition watermarks %d, %d; want 489, 189", a.Partition(0), a.Partition(1))
	}
	if a.Current() != 189 {
		t.Errorf("watermark %d, want 189: the slower partition's", a.Current())
	}
	// The absorbed partition holds the watermark back as one of a's own.
	if wm := a.OnEvent(0, 2000, 1); wm != 189 {
		t.Errorf("after partition 0 moves on: %d, want 189", wm)
	}
	if wm := a.OnEvent(1, 1500, 2); wm != 1489 {
		t.Errorf("after partition 1 moves on: %d, want 1489", wm)
	}
}
