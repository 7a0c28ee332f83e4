package windows

import "math"

// Watermark bounds. A watermark of MinWatermark means no event was seen yet;
// MaxWatermark is the end of input, when every window fires.
const (
	MinWatermark int64 = math.MinInt64
	MaxWatermark int64 = math.MaxInt64
)

// safeLimit keeps watermark arithmetic away from overflow: event times lie
// within ±2^53 ms and durations within 100 years (~2^42 ms), so a watermark
// clamped to ±2^62 orders the same against every window bound.
const safeLimit = int64(1) << 62

// clampWM maps a watermark into the range where window arithmetic is safe.
func clampWM(wm int64) int64 {
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

// ceilTo returns the smallest multiple of m (> 0) that is >= t.
func ceilTo(t, m int64) int64 { return -floorTo(-t, m) }

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
