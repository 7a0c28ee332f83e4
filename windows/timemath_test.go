package windows

import (
	"math/rand/v2"
	"testing"
)

func TestFloorCeil(t *testing.T) {
	cases := map[string]struct{ t, m, floor, ceil int64 }{
		"zero":          {0, 10, 0, 0},
		"positive":      {15, 10, 10, 20},
		"aligned":       {20, 10, 20, 20},
		"negative":      {-1, 10, -10, 0},
		"negative edge": {-10, 10, -10, -10},
		"negative far":  {-10001, 10000, -20000, -10000},
		"unit":          {-7, 1, -7, -7},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := floorTo(c.t, c.m); got != c.floor {
				t.Errorf("floorTo(%d, %d) = %d, want %d", c.t, c.m, got, c.floor)
			}
			if got := ceilTo(c.t, c.m); got != c.ceil {
				t.Errorf("ceilTo(%d, %d) = %d, want %d", c.t, c.m, got, c.ceil)
			}
		})
	}
}

// TestFloorProperty checks floorTo against its definition over the whole
// range of event times.
func TestFloorProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		ts := r.Int64N(2<<53) - 1<<53
		m := r.Int64N(1<<40) + 1
		f := floorTo(ts, m)
		if f > ts || ts-f >= m || f%m != 0 {
			t.Fatalf("floorTo(%d, %d) = %d", ts, m, f)
		}
		c := ceilTo(ts, m)
		if c < ts || c-ts >= m || c%m != 0 {
			t.Fatalf("ceilTo(%d, %d) = %d", ts, m, c)
		}
	}
}

func TestClampWM(t *testing.T) {
	if clampWM(MinWatermark) != -safeLimit || clampWM(MaxWatermark) != safeLimit || clampWM(5) != 5 {
		t.Fatal("clampWM must bound only the extremes")
	}
}
