package heatmap

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

var bounds = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}

// TestQuantileError checks docs/outputs.md's bound: quantiles within 1% of the
// exact value at rank floor(q·(n−1)), over lognormal latencies.
func TestQuantileError(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 2, 3, 10, 1000, 100_000} {
		a := New(len(bounds))
		vals := make([]float64, n)
		for i := range vals {
			vals[i] = math.Round(math.Exp(2.5+1.2*r.NormFloat64())*10) / 10
			a.Add(vals[i], false, bounds, nil)
		}
		slices.Sort(vals)
		for _, q := range []float64{0, 0.5, 0.95, 0.99, 1} {
			exact := vals[int(q*float64(n-1))]
			got := a.Quantile(q)
			if math.Abs(got-exact) > RelativeAccuracy*math.Abs(exact)+1e-9 {
				t.Errorf("n=%d q=%v: %v, exact %v", n, q, got, exact)
			}
		}
		if a.Min != vals[0] || a.Max != vals[n-1] || a.Count != int64(n) {
			t.Errorf("n=%d: min %v max %v count %d", n, a.Min, a.Max, a.Count)
		}
	}
}

// TestBuckets: per bucket, not cumulative; v counts in (previous le, le].
func TestBuckets(t *testing.T) {
	a := New(3)
	b := []float64{1, 2, 5}
	for _, v := range []float64{-3, 0, 1, 1.0001, 2, 5, 5.5, 1e9} {
		a.Add(v, false, b, nil)
	}
	if want := []int64{3, 2, 1, 2}; !slices.Equal(a.Buckets, want) {
		t.Fatalf("buckets %v, want %v", a.Buckets, want)
	}
}

// TestMergeAndCodec: merging panes equals adding every value to one
// accumulator, and survives the state encoding.
func TestMergeAndCodec(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	whole, merged := New(len(bounds)), New(len(bounds))
	for range 20 {
		part := New(len(bounds))
		for range r.IntN(50) {
			v := r.Float64() * 300
			degraded := r.IntN(10) == 0
			part.Add(v, degraded, bounds, nil)
			whole.Add(v, degraded, bounds, nil)
		}
		dec, rest, err := Decode(part.AppendBinary(nil))
		if err != nil || len(rest) != 0 {
			t.Fatalf("decode: %v, %d bytes left", err, len(rest))
		}
		merged.Merge(dec)
	}
	if merged.Count != whole.Count || merged.Min != whole.Min || merged.Max != whole.Max ||
		merged.Degraded != whole.Degraded || !slices.Equal(merged.Buckets, whole.Buckets) {
		t.Fatalf("merged %+v, whole %+v", merged, whole)
	}
	for _, q := range []float64{0.5, 0.95, 0.99} {
		if merged.Quantile(q) != whole.Quantile(q) {
			t.Errorf("q=%v: merged %v, whole %v", q, merged.Quantile(q), whole.Quantile(q))
		}
	}
	merged.Reset()
	if merged.Count != 0 || merged.Quantile(0.5) != 0 || slices.Max(merged.Buckets) != 0 {
		t.Fatal("Reset left data")
	}
}

func TestDecodeCorrupt(t *testing.T) {
	a := New(2)
	a.Add(3, false, []float64{1, 2}, nil)
	b := a.AppendBinary(nil)
	for i := range len(b) - 1 {
		if _, _, err := Decode(b[:i]); err == nil {
			t.Fatalf("truncated to %d bytes: no error", i)
		}
	}
}

// TestSum: the sketch's sum is within 1% of the exact sum of positive
// values, merged panes included, and 0 when empty.
func TestSum(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	if got := New(len(bounds)).Sum(); got != 0 {
		t.Fatalf("empty: sum %v", got)
	}
	whole := New(len(bounds))
	var exact float64
	for range 10 {
		part := New(len(bounds))
		for range 1000 {
			v := math.Exp(2.5 + 1.2*r.NormFloat64())
			exact += v
			part.Add(v, false, bounds, nil)
		}
		whole.Merge(part)
	}
	if got := whole.Sum(); math.Abs(got-exact) > RelativeAccuracy*exact {
		t.Fatalf("sum %v, exact %v", got, exact)
	}
	a := New(len(bounds))
	for _, v := range []float64{0, 0, 10} {
		a.Add(v, false, bounds, nil)
	}
	if got := a.Sum(); math.Abs(got-10) > RelativeAccuracy*10 {
		t.Fatalf("sum of 0, 0, 10: %v", got)
	}
}

// TestSkip: Skip finds the end of an encoded accumulator where Decode
// does, and refuses it truncated.
func TestSkip(t *testing.T) {
	a := New(3)
	for _, v := range []float64{0.5, 3, 30, 3000} {
		a.Add(v, v > 100, []float64{1, 10, 100}, nil)
	}
	b := append(a.AppendBinary(nil), "after"...)
	_, want, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Skip(b); err != nil || string(got) != string(want) || string(got) != "after" {
		t.Fatalf("Skip left %q, %v; want %q", got, err, want)
	}
	for i := range len(b) - len("after") {
		if _, err := Skip(b[:i]); err == nil {
			t.Fatalf("truncated to %d bytes: no error", i)
		}
	}
}

// TestIndexMemo: an accumulator fed through a memo of sketch indexes
// encodes to the same bytes as one fed without, over values that repeat,
// more distinct values than the memo holds, and values the memo leaves to
// the sketch (zero, negative, too small or too large to index).
func TestIndexMemo(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var memo IndexMemo
	for trial := range 50 {
		with, without := New(len(bounds)), New(len(bounds))
		for range 5000 {
			var v float64
			switch r.IntN(10) {
			case 0:
				v = float64(r.IntN(30000)) / 10 // more than the memo's entries
			case 1:
				v = []float64{0, -2.5, 1e-320, 5e-324, math.MaxFloat64, 1e308, math.SmallestNonzeroFloat64}[r.IntN(7)]
			default:
				v = float64(r.IntN(300)) / 10 // repeats
			}
			with.Add(v, false, bounds, &memo)
			without.Add(v, false, bounds, nil)
		}
		if a, b := with.AppendBinary(nil), without.AppendBinary(nil); !bytes.Equal(a, b) {
			t.Fatalf("trial %d: with a memo %d bytes, without %d, or they differ", trial, len(a), len(b))
		}
	}
	free := 0
	for _, e := range memo.entries {
		if e.bits == 0 {
			free++
		}
	}
	if free > len(memo.entries)/10 {
		t.Fatalf("%d of the memo's %d entries were never used", free, len(memo.entries))
	}
}

// TestScreen checks that a Screen never rules out a window whose quantile
// exceeds the threshold, over values spread around it (zero, negative and
// values beyond the sketch's range among them), that counting per value
// (Below) and from a sketch (CountBelow) agree, and that it rules out most
// windows whose quantile is clearly below the threshold, which is what it
// is for, at thresholds a latency rule has.
func TestScreen(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var memo IndexMemo
	clearlyBelow, ruledOut := 0, 0
	trials := 10_000
	if testing.Short() { // as under the race detector in CI
		trials = 2000
	}
	for trial := range trials {
		threshold := []float64{0, 1, 10, 99.5, 100, 250, 1e-310, 1.5e308}[r.IntN(8)]
		if r.IntN(2) == 0 {
			threshold = math.Exp(r.Float64()*12 - 3)
		}
		s := NewScreen(threshold)
		a := New(len(bounds))
		var below int64
		n := 1 + r.IntN(200)
		// Values at the ends of the sketch's range in one trial in ten:
		// they make its dense stores span the whole range.
		extremes := trial%10 == 0
		for range n {
			var v float64
			switch k := r.IntN(20); {
			case k == 0:
				v = 0
			case k == 1:
				v = -r.Float64() * 10
			case k == 2 && extremes:
				v = math.MaxFloat64
			case k == 3 && extremes:
				v = 5e-324
			case k < 10:
				v = threshold * (0.97 + r.Float64()*0.06) // near the threshold's bin
			default:
				v = math.Exp(r.Float64()*12 - 3)
			}
			a.Add(v, false, bounds, &memo)
			if s.Below(v, &memo) {
				if v > threshold {
					t.Fatalf("trial %d: %v counted below threshold %v", trial, v, threshold)
				}
				below++
			}
		}
		if got := a.CountBelow(s); got != below {
			t.Fatalf("trial %d, threshold %v: CountBelow %d, Below said %d", trial, threshold, got, below)
		}
		for _, q := range []float64{0, 0.5, 0.9, 0.99, 1} {
			v := a.Quantile(q)
			may := MayExceed(q, a.Count, below)
			if v > threshold && !may {
				t.Fatalf("trial %d: p%v = %v exceeds %v, ruled out (%d of %d below)", trial, q*100, v, threshold, below, a.Count)
			}
			if v < threshold*0.95 && threshold >= 1 && threshold <= 1e6 {
				clearlyBelow++
				if !may {
					ruledOut++
				}
			}
		}
	}
	if clearlyBelow < trials/2 || ruledOut < clearlyBelow*95/100 {
		t.Fatalf("ruled out %d of %d windows whose quantile is 5%% or more below the threshold", ruledOut, clearlyBelow)
	}
}

// TestFewValues: an accumulator of few values (kept as they came, without
// a sketch) answers as one whose values are in a sketch: quantiles, sum
// and its count below a screen, and so do they both after a round trip
// through their encodings; through merges of every kind (few into few,
// past fewValues, into and from a sketch). Decoding keeps few values few,
// whether they were encoded as values or (as older states hold them) as a
// sketch.
func TestFewValues(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	value := func() float64 {
		switch r.IntN(12) {
		case 0:
			return 0
		case 1:
			return -math.Exp(r.Float64() * 5)
		case 2:
			if r.IntN(10) == 0 { // a dense store over the whole range
				return math.MaxFloat64
			}
		}
		return math.Round(math.Exp(r.Float64()*8)*10) / 10
	}
	// sketched adds vals to an accumulator made to keep a sketch from the
	// start: its first fewValues+1 values make it one, then Reset keeps it.
	sketched := func(vals []float64) *Acc {
		a := New(len(bounds))
		for range fewValues + 1 {
			a.Add(1, false, bounds, nil)
		}
		a.Reset()
		for _, v := range vals {
			a.Add(v, false, bounds, nil)
		}
		return a
	}
	same := func(trial int, what string, got, want *Acc) {
		t.Helper()
		for _, q := range []float64{0, 0.25, 0.5, 0.9, 0.99, 1} {
			if g, w := got.Quantile(q), want.Quantile(q); g != w {
				t.Fatalf("trial %d, %s: p%v = %v, with a sketch %v", trial, what, q*100, g, w)
			}
		}
		if g, w := got.Sum(), want.Sum(); g != w {
			t.Fatalf("trial %d, %s: sum %v, with a sketch %v", trial, what, g, w)
		}
		s := NewScreen(50)
		if g, w := got.CountBelow(s), want.CountBelow(s); g != w {
			t.Fatalf("trial %d, %s: %d below 50, with a sketch %d", trial, what, g, w)
		}
		if g, w := got.Quantile(0.99), want.Quantile(0.99); g != w {
			t.Fatalf("trial %d, %s: p99 %v, with a sketch %v", trial, what, g, w)
		}
	}
	decoded := func(trial int, a *Acc) *Acc {
		t.Helper()
		d, rest, err := Decode(a.AppendBinary(nil))
		if err != nil || len(rest) != 0 || d.Count <= fewValues && d.sketch != nil {
			t.Fatalf("trial %d: decoded %d values: sketch %v, %d bytes left, %v", trial, a.Count, d.sketch != nil, len(rest), err)
		}
		if after, err := Skip(a.AppendBinary([]byte{})); err != nil || len(after) != 0 {
			t.Fatalf("trial %d: Skip leaves %d bytes, %v", trial, len(after), err)
		}
		return d
	}
	few, trials := 0, 3000
	if testing.Short() { // as under the race detector in CI
		trials = 600
	}
	for trial := range trials {
		var x, y []float64
		for range 1 + r.IntN(fewValues) {
			x = append(x, value())
		}
		for range r.IntN(fewValues + 3) {
			y = append(y, value())
		}
		a, b := New(len(bounds)), New(len(bounds))
		for _, v := range x {
			a.Add(v, false, bounds, nil)
		}
		for _, v := range y {
			b.Add(v, false, bounds, nil)
		}
		if a.sketch == nil {
			few++
		}
		same(trial, "values", a, sketched(x))
		same(trial, "decoded", decoded(trial, a), decoded(trial, sketched(x)))
		all := append(slices.Clone(x), y...)
		switch r.IntN(3) {
		case 0:
			a.Merge(b)
		case 1:
			a.Merge(sketched(y))
		default:
			c := sketched(nil)
			c.Merge(a)
			c.Merge(b)
			a = c
		}
		same(trial, "merged", a, sketched(all))
		same(trial, "merged and decoded", decoded(trial, a), decoded(trial, sketched(all)))
	}
	if few < trials*8/10 {
		t.Fatalf("only %d trials kept their values without a sketch", few)
	}
}

// TestPositiveBins: an accumulator's bins, one per key in ascending order
// with its count, are the same whether it holds its few values inline or
// in a sketch, and add up to its count; the value of the bin the median
// falls in, clamped, is Quantile's. A zero or a negative value makes it
// say so.
func TestPositiveBins(t *testing.T) {
	few, big := New(0), New(0)
	values := []float64{3, 3, 7.5, 120, 0.4, 3.01, 7.5, 55}
	for _, v := range values {
		few.Add(v, false, nil, nil)
	}
	for range 20 {
		for _, v := range values {
			big.Add(v, false, nil, nil)
		}
	}
	fb, ok := few.PositiveBins(nil)
	bb, ok2 := big.PositiveBins(nil)
	if !ok || !ok2 || len(fb) != len(bb) {
		t.Fatalf("bins %v (%v) and %v (%v)", fb, ok, bb, ok2)
	}
	var n float64
	for i := range fb {
		if fb[i].Key != bb[i].Key || fb[i].Count*20 != bb[i].Count || i > 0 && fb[i].Key <= fb[i-1].Key {
			t.Fatalf("bin %d: %v inline, %v in a sketch", i, fb[i], bb[i])
		}
		n += fb[i].Count
	}
	if n != float64(few.Count) {
		t.Errorf("bins count %v values, want %d", n, few.Count)
	}
	// The median's rank, 3.5 of 0..7: the fourth value's bin.
	if v := math.Min(math.Max(BinValue(fb[2].Key), few.Min), few.Max); v != few.Quantile(0.5) {
		t.Errorf("the median's bin gives %v, Quantile %v", v, few.Quantile(0.5))
	}
	for _, bad := range []float64{0, -2} {
		a := New(0)
		a.Add(1, false, nil, nil)
		a.Add(bad, false, nil, nil)
		if _, ok := a.PositiveBins(nil); ok {
			t.Errorf("a %v taken for a positive bin", bad)
		}
		for range 20 {
			a.Add(5, false, nil, nil)
		}
		if _, ok := a.PositiveBins(nil); ok {
			t.Errorf("a %v in a sketch taken for a positive bin", bad)
		}
	}
}

// TestTopQuantileMatchesSketch: a quantile read from the highest values'
// bins an accumulator with a sketch keeps is the sketch's own, to the bit,
// as values are added, accumulators of few values and of sketches merged
// in, encodings decoded and accumulators reset; with zero and negative
// values, and values far above the rest, the sketch answers.
func TestTopQuantileMatchesSketch(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var memo IndexMemo
	value := func(odd bool) float64 {
		switch {
		case odd && r.IntN(100) == 0:
			return 0
		case odd && r.IntN(100) == 0:
			return -r.Float64() * 50
		case r.IntN(500) == 0:
			return 1e9 * r.Float64()
		}
		return math.Exp(r.NormFloat64()*1.1 + 4)
	}
	fill := func(odd bool, n int) *Acc {
		a := New(0)
		for range n {
			a.Add(value(odd), false, nil, &memo)
		}
		return a
	}
	top, sketched := 0, 0
	for trial := range 300 {
		odd := trial%3 == 0
		a := fill(odd, r.IntN(40))
		for step := range 60 {
			switch r.IntN(10) {
			case 0:
				a.Merge(fill(odd, r.IntN(12)))
			case 1:
				a.Merge(fill(odd, 13+r.IntN(200)))
			case 2:
				d, _, err := Decode(a.AppendBinary(nil))
				if err != nil {
					t.Fatal(err)
				}
				a = d
			case 3:
				if r.IntN(20) == 0 {
					a.Reset()
				}
			default:
				for range r.IntN(30) {
					a.Add(value(odd), false, nil, nil)
				}
			}
			if a.sketch == nil {
				continue
			}
			for _, q := range []float64{0, 0.5, 0.9, 0.95, 0.99, 0.995, 0.999, 1} {
				want, err := a.sketch.GetValueAtQuantile(q)
				if err != nil {
					continue // empty after a reset
				}
				want = math.Min(math.Max(want, a.Min), a.Max)
				if got := a.Quantile(q); got != want {
					t.Fatalf("trial %d step %d, q %v, %d values: %v, the sketch gives %v", trial, step, q, a.Count, got, want)
				}
				sketched++
				if _, ok := a.topQuantile(q); ok {
					top++
				}
			}
		}
	}
	if top < sketched/4 || top == sketched {
		t.Fatalf("%d of %d answers from the highest values: the test needs both kinds", top, sketched)
	}
	t.Logf("%d of %d answers from the highest values", top, sketched)
}

// TestBinSetMatchesMerge: a BinSet of accumulators, some holding their
// values inline and some in a sketch, answers every quantile it answers
// (ok) as Quantile of their merge does, answers every one when none has a
// sketch, and answers quantiles near the top with sketches among them.
func TestBinSetMatchesMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var set BinSet
	answered, withHidden := 0, 0
	for trial := range 3000 {
		set.Reset()
		merged := New(len(bounds))
		sketches := false
		positive := r.IntN(4) > 0
		for range 1 + r.IntN(6) {
			a := New(len(bounds))
			n := 1 + r.IntN(8)
			if r.IntN(3) == 0 {
				n = fewValues + 1 + r.IntN(60)
			}
			for range n {
				v := math.Round(math.Exp(r.Float64()*8)*10) / 10
				if !positive && r.IntN(8) == 0 {
					v = -v
				}
				a.Add(v, false, bounds, nil)
			}
			sketches = sketches || !a.Inline()
			if !set.Add(a) {
				if positive {
					t.Fatalf("trial %d: an accumulator of positive values refused", trial)
				}
				set.Reset()
				merged = nil
				break
			}
			merged.Merge(a)
		}
		if merged == nil {
			continue
		}
		for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
			got, ok := set.Quantile(q)
			if !ok {
				if !sketches || positive && TopQuantile(q, set.Len()) {
					t.Fatalf("trial %d: p%v of %d values unanswered (sketches %v)", trial, q*100, set.Len(), sketches)
				}
				continue
			}
			answered++
			if set.hidden > 0 {
				withHidden++
			}
			if want := merged.Quantile(q); got != want {
				t.Fatalf("trial %d: p%v = %v, the merge's %v (hidden %d)", trial, q*100, got, want, set.hidden)
			}
		}
	}
	if withHidden < 1000 {
		t.Fatalf("%d of %d answers had values hidden: the test misses the case", withHidden, answered)
	}
}

// Inline reports whether a holds its values inline, not in a sketch.
func (a *Acc) Inline() bool { return a.sketch == nil }
