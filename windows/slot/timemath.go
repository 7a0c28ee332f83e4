package slot

import (
	"math/bits"
)

// safeLimit keeps watermark arithmetic away from overflow: event times lie
// within ±2^53 ms and durations within 100 years (~2^42 ms), so a watermark
// clamped to ±2^62 orders the same against every window bound.
const safeLimit = int64(1) << 62

// ClampWM maps a watermark into the range where window arithmetic is safe.
func ClampWM(wm int64) int64 {
	return min(max(wm, -safeLimit), safeLimit)
}

// floorTo returns the largest multiple of m (> 0) that is <= t. It rounds
// toward negative infinity, so windows align for negative timestamps too
// (Go's % truncates toward zero). One division: it is on the hot path.
func floorTo(t, m int64) int64 {
	r := t % m
	if r < 0 {
		r += m
	}
	return t - r
}

// CeilTo returns the smallest multiple of m (> 0) that is >= t.
func CeilTo(t, m int64) int64 { return -floorTo(-t, m) }

// divisor rounds times to multiples of a window's pane or slide with a
// multiplication instead of a 64-bit division, which costs tens of cycles
// on a hot path. It is Granlund and Montgomery's method for
// dividends below 2^63 (Division by Invariant Integers using
// Multiplication, 1994, theorem 4.2): with l = ceil(log2 d) and
// magic = ceil(2^(63+l) / d), t / d = (t * magic) >> (63+l) for every
// 0 <= t < 2^63. Negative times take the division.
type divisor struct {
	d     int64
	magic uint64 // 0 when d is 1
	shift uint   // l - 1: the product's high word is shifted by it
}

// NewDivisor returns the divisor of d (> 0).
func NewDivisor(d int64) divisor {
	if d <= 0 {
		panic("windows: divisor must be positive")
	}
	if d == 1 {
		return divisor{d: 1}
	}
	l := uint(bits.Len64(uint64(d - 1)))
	// 2^(63+l) is 2^(l-1) << 64, and 2^(l-1) < d, as Div64 requires.
	q, r := bits.Div64(1<<(l-1), 0, uint64(d))
	if r != 0 {
		q++
	}
	return divisor{d: d, magic: q, shift: l - 1}
}

// Floor is floorTo(t, d).
func (v divisor) Floor(t int64) int64 {
	if t < 0 || v.magic == 0 {
		return floorTo(t, v.d)
	}
	hi, _ := bits.Mul64(uint64(t), v.magic)
	return int64(hi>>v.shift) * v.d
}

// Ceil is CeilTo(t, d).
func (v divisor) Ceil(t int64) int64 {
	if t <= 0 || v.magic == 0 {
		return CeilTo(t, v.d)
	}
	return v.Floor(t-1) + v.d
}

// GCD is the greatest common divisor of a and b.
func GCD(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
