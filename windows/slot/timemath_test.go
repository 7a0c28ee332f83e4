package slot

import (
	"math/rand/v2"
	"testing"

	"github.com/riskstream/riskstream/watermark"
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
			if got := CeilTo(c.t, c.m); got != c.ceil {
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
		c := CeilTo(ts, m)
		if c < ts || c-ts >= m || c%m != 0 {
			t.Fatalf("ceilTo(%d, %d) = %d", ts, m, c)
		}
	}
}

func TestClampWM(t *testing.T) {
	if ClampWM(watermark.Min) != -safeLimit || ClampWM(watermark.Max) != safeLimit || ClampWM(5) != 5 {
		t.Fatal("clampWM must bound only the extremes")
	}
}

// TestDivisor checks the multiplying divisor against floorTo and CeilTo: for
// every divisor up to 600 and times around 0 and the multiples of the
// divisor near 2^62, and for random divisors and times over the whole range
// where times are safe, powers of two and their neighbours included.
func TestDivisor(t *testing.T) {
	check := func(d, ts int64) {
		t.Helper()
		v := NewDivisor(d)
		if got, want := v.Floor(ts), floorTo(ts, d); got != want {
			t.Fatalf("divisor %d: floor(%d) = %d, want %d", d, ts, got, want)
		}
		if got, want := v.Ceil(ts), CeilTo(ts, d); got != want {
			t.Fatalf("divisor %d: ceil(%d) = %d, want %d", d, ts, got, want)
		}
	}
	for d := int64(1); d <= 600; d++ {
		for ts := -2 * d; ts <= 2*d; ts++ {
			check(d, ts)
		}
		top := floorTo(safeLimit, d)
		for ts := top - 2*d; ts <= top+2*d; ts++ {
			check(d, ts)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 300_000 {
		d := r.Int64N(1<<42) + 1
		if r.IntN(4) == 0 { // a power of two, or one off
			d = 1<<r.IntN(43) + r.Int64N(3) - 1
			if d < 1 {
				d = 1
			}
		}
		plus, minus := r.Int64N(safeLimit), r.Int64N(safeLimit)
		ts := plus - minus
		check(d, ts)
		check(d, ts/d*d) // on a multiple
	}
}

// BenchmarkFloor compares a division with the multiplying divisor, for a
// 1 s pane.
func BenchmarkFloor(b *testing.B) {
	ts := make([]int64, 1024)
	for i := range ts {
		ts[i] = 1732150000000 + int64(i)*977
	}
	d := []int64{1000} // not a constant, which the compiler would divide by with a multiplication too
	b.Run("division", func(b *testing.B) {
		var sum int64
		for i := range b.N {
			sum += floorTo(ts[i&1023], d[0])
		}
		sink64 = sum
	})
	b.Run("divisor", func(b *testing.B) {
		v := NewDivisor(d[0])
		var sum int64
		for i := range b.N {
			sum += v.Floor(ts[i&1023])
		}
		sink64 = sum
	})
}

var sink64 int64
