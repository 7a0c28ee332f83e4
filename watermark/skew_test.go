package watermark

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/riskstream/riskstream/rules"
)

// simSrc is one simulated source node: its clock's offset from true time and
// how its producer batches.
type simSrc struct {
	// batch is the producer's flush interval in ms; 0 sends every record at
	// once.
	batch int64
	// phase shifts the flush boundaries, so that sources do not flush
	// together.
	phase int64
	// offset is the clock's offset at true time t, both in µs.
	offset func(t int64, r *rand.Rand) int64
}

// simRec is one record as the job receives it.
type simRec struct {
	src     int
	ts, ref int64
}

var simNames = [][]byte{[]byte("gw-0"), []byte("gw-1"), []byte("gw-2"), []byte("gw-3")}

func inSync(int64, *rand.Rand) int64 { return 0 }

// step returns an offset that is 0 until from, off until to, then 0 again
// (all in ms).
func step(from, to, off int64) func(int64, *rand.Rand) int64 {
	return func(t int64, _ *rand.Rand) int64 {
		if t >= from*1_000 && t < to*1_000 {
			return off * 1_000
		}
		return 0
	}
}

// simulate sends one record per ms per source, at a random µs, for true
// times [from, to) ms: ts = t + offset(t); ref = t, or the next flush
// boundary, plus a jitter in [0, 10ms); both are then cut to whole ms, as
// records carry them. Records reach the job in reference-time order, except that each
// may be held up to 2ms more (several partitions interleaving), so reference
// times go back a little. f sees each record as it arrives.
func simulate(srcs []simSrc, from, to int64, seed uint64, f func(simRec)) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	// buckets[ms mod len] holds the records delivered at that ms; every
	// record is delivered less than 1024ms after its true time.
	var buckets [1024][]simRec
	for now := from; now < to+1024; now++ {
		if now < to {
			for i, s := range srcs {
				t := now*1_000 + rng.Int64N(1_000)
				ref := t
				if s.batch > 0 {
					ph, b := s.phase*1_000, s.batch*1_000
					ref = ph - floorDiv(-(t-ph), b)*b
				}
				ref = floorDiv(ref+rng.Int64N(10_000), 1_000)
				at := ref + rng.Int64N(3)
				b := &buckets[floorMod(at, int64(len(buckets)))]
				*b = append(*b, simRec{src: i, ts: floorDiv(t+s.offset(t, rng), 1_000), ref: ref})
			}
		}
		b := &buckets[floorMod(now, int64(len(buckets)))]
		for _, r := range *b {
			f(r)
		}
		*b = (*b)[:0]
	}
}

// run feeds a simulation to tr, checks that the window time matches the time
// domain, and returns the transitions in order.
func run(t *testing.T, tr *SkewTracker, srcs []simSrc, from, to int64, seed uint64) []Transition {
	t.Helper()
	var out []Transition
	simulate(srcs, from, to, seed, func(r simRec) {
		wt, proc, x := tr.Observe(simNames[r.src], r.ts, r.ref)
		if (proc && wt != r.ref) || (!proc && wt != r.ts) {
			t.Fatalf("window time %d, processing %v for ts %d ref %d", wt, proc, r.ts, r.ref)
		}
		if x != nil {
			out = append(out, *x)
		}
	})
	return out
}

func fourSources(batch int64, first func(int64, *rand.Rand) int64) []simSrc {
	srcs := make([]simSrc, 4)
	for i := range srcs {
		srcs[i] = simSrc{batch: batch, phase: int64(i) * 137, offset: inSync}
	}
	srcs[0].offset = first
	return srcs
}

// TestSkewDetection: a step or a drift on one source is caught within the
// latency the envelope allows, and no other source is touched.
func TestSkewDetection(t *testing.T) {
	const stepAt = 30_000
	drift := func(sign int64) func(int64, *rand.Rand) int64 {
		// 100 ppm from 5s on: 0.1ms per second. Times are whole ms, so the
		// skew reads above the 15ms threshold once it reaches 16ms, at 155s.
		return func(t int64, _ *rand.Rand) int64 { return sign * max(0, t+5_000_000) / 10_000 }
	}
	for _, c := range []struct {
		name     string
		batch    int64
		offset   func(int64, *rand.Rand) int64
		from, to int64 // when the skew exceeds the threshold, and the run's end
		maxDelay time.Duration
		earlyOK  time.Duration // how long before from a detection is right
	}{
		{"+200ms step, no batching", 0, step(stepAt, 1<<40, 200), stepAt, 35_000, time.Second, 0},
		{"+200ms step, 500ms batching", 500, step(stepAt, 1<<40, 200), stepAt, 35_000, time.Second, 0},
		// A clock that fell behind shows once the envelope forgets the last
		// records stamped before: one window, plus their delay.
		{"-40ms step, no batching", 0, step(stepAt, 1<<40, -40), stepAt, 35_000, time.Second + 10*time.Millisecond, 0},
		{"-40ms step, 500ms batching", 500, step(stepAt, 1<<40, -40), stepAt, 35_000, time.Second + 10*time.Millisecond, 0},
		{"-40ms step off a sub-window edge, 500ms batching", 500, step(stepAt+1, 1<<40, -40), stepAt + 1, 35_000, time.Second + 10*time.Millisecond, 0},
		// Times are whole milliseconds, so ts - ref is only known to ±1 ms,
		// and 1 ms of a 100 ppm drift takes 10 s: the drift is caught within
		// that resolution of crossing the threshold, either side.
		{"+100ppm drift, no batching", 0, drift(1), 155_000, 170_000, 10 * time.Second, 10_000},
		{"+100ppm drift, 500ms batching", 500, drift(1), 155_000, 170_000, 10 * time.Second, 10_000},
		{"-100ppm drift, no batching", 0, drift(-1), 155_000, 170_000, 10 * time.Second, 10_000},
		{"-100ppm drift, 500ms batching", 500, drift(-1), 155_000, 170_000, 10 * time.Second, 100_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := NewSkewTracker(SkewOptions{})
			got := run(t, tr, fourSources(c.batch, c.offset), 0, c.to, 1)
			if len(got) != 1 || got[0].Source != "gw-0" || !got[0].Degraded {
				t.Fatalf("transitions %+v, want gw-0 degraded once", got)
			}
			delay := time.Duration(got[0].At-c.from) * time.Millisecond
			t.Logf("detected %v after the skew passed the threshold (estimate %v)", delay, got[0].Skew)
			// A clock behind reads as offset - least delay, so with 500ms
			// batching it can be caught up to the jitter (10ms) early.
			early := c.earlyOK * time.Millisecond
			if delay < -early || delay > c.maxDelay {
				t.Errorf("detected after %v, want within [-%v, %v]", delay, early, c.maxDelay)
			}
		})
	}
}

// TestSkewNoFalseDegradation: in-sync clocks behind jitter and 500ms
// batching are never degraded.
func TestSkewNoFalseDegradation(t *testing.T) {
	tr := NewSkewTracker(SkewOptions{})
	srcs := fourSources(500, inSync)
	var worst time.Duration
	n := 0
	simulate(srcs, 0, 10*60_000, 2, func(r simRec) {
		if _, proc, x := tr.Observe(simNames[r.src], r.ts, r.ref); proc || x != nil {
			t.Fatalf("record %+v re-timed (transition %+v)", r, x)
		}
		if n++; n%10_000 == 0 {
			for _, s := range tr.Sources() {
				worst = max(worst, s.Skew.Abs())
			}
		}
	})
	t.Logf("10 minutes, %d records: 0 degradations, largest |estimate| %v", n, worst)
	for _, s := range tr.Sources() {
		if !s.Known || s.Transitions != 0 {
			t.Errorf("%+v", s)
		}
	}
}

// TestSkewClockBehind: a clock 20ms behind makes every record look delayed
// by 20ms or more, which the least-delayed record gives away.
func TestSkewClockBehind(t *testing.T) {
	for _, batch := range []int64{0, 500} {
		t.Run(fmt.Sprintf("batch %dms", batch), func(t *testing.T) {
			tr := NewSkewTracker(SkewOptions{})
			got := run(t, tr, fourSources(batch, func(int64, *rand.Rand) int64 { return -20_000 }), 0, 5_000, 3)
			if len(got) != 1 || got[0].Source != "gw-0" || !got[0].Degraded {
				t.Fatalf("transitions %+v, want gw-0 degraded once", got)
			}
			t.Logf("degraded at %dms with estimate %v", got[0].At, got[0].Skew)
		})
	}
}

// TestSkewRecovery: once the clock is fixed, the source recovers after
// RecoverAfter (give or take the window the envelope takes to forget) and
// its events go back to event time.
func TestSkewRecovery(t *testing.T) {
	const fixAt = 20_000
	for _, c := range []struct {
		name  string
		batch int64
		off   int64
	}{
		{"+200ms, no batching", 0, 200},
		{"+200ms, 500ms batching", 500, 200},
		{"-40ms, 500ms batching", 500, -40},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := NewSkewTracker(SkewOptions{})
			srcs := fourSources(c.batch, step(10_000, fixAt, c.off))
			got := run(t, tr, srcs, 0, 40_000, 4)
			if len(got) != 2 || !got[0].Degraded || got[1].Degraded {
				t.Fatalf("transitions %+v, want one degradation and one recovery", got)
			}
			took := time.Duration(got[1].At-fixAt) * time.Millisecond
			t.Logf("recovered %v after the fix", took)
			// The envelope forgets the skewed records within one window,
			// then the recovery clock runs for RecoverAfter.
			if took < 5*time.Second || took > 6*time.Second+10*time.Millisecond {
				t.Errorf("recovery took %v, want 5s to 6s", took)
			}
			if wt, proc, _ := tr.Observe(simNames[0], 50_000, 50_003); proc || wt != 50_000 {
				t.Errorf("after recovery: window time %d, processing %v", wt, proc)
			}
		})
	}
}

// TestSkewNoFlapping: a clock hovering at the threshold with ±2ms of noise
// changes domain at most twice in five minutes.
func TestSkewNoFlapping(t *testing.T) {
	for _, batch := range []int64{0, 500} {
		t.Run(fmt.Sprintf("batch %dms", batch), func(t *testing.T) {
			tr := NewSkewTracker(SkewOptions{})
			srcs := fourSources(batch, func(_ int64, r *rand.Rand) int64 { return 13_000 + r.Int64N(4_001) })
			srcs[1].offset = func(_ int64, r *rand.Rand) int64 { return -17_000 + r.Int64N(4_001) }
			run(t, tr, srcs, 0, 5*60_000, 5)
			for _, s := range tr.Sources() {
				t.Logf("%s: %d transitions, estimate %v", s.Source, s.Transitions, s.Skew)
				if s.Transitions > 2 {
					t.Errorf("%s flaps: %d transitions", s.Source, s.Transitions)
				}
			}
		})
	}
}

// TestSkewWarmUp: a source is judged only after MinSamples records spanning
// one Window.
func TestSkewWarmUp(t *testing.T) {
	for _, c := range []struct {
		name    string
		every   int64 // ms between records
		wantRef int64 // reference time of the degradation
	}{
		{"dense: the window is the limit", 1, 1_000},
		{"sparse: the sample count is the limit", 100, 1_500},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := NewSkewTracker(SkewOptions{})
			for ref := int64(0); ref <= 3_000; ref += c.every {
				_, proc, x := tr.Observe([]byte("a"), ref+200, ref)
				if (ref >= c.wantRef) != proc {
					t.Fatalf("ref %d: processing %v", ref, proc)
				}
				if ref == c.wantRef && (x == nil || !x.Degraded || x.Skew != 200*time.Millisecond) {
					t.Fatalf("ref %d: transition %+v", ref, x)
				}
				if s := tr.Sources()[0]; s.Known != (ref >= c.wantRef) {
					t.Fatalf("ref %d: %+v", ref, s)
				}
			}
		})
	}
}

// TestSkewGapRestartsWarmUp: after a silence longer than the window, one
// delayed record is not enough to judge by.
func TestSkewGapRestartsWarmUp(t *testing.T) {
	tr := NewSkewTracker(SkewOptions{})
	for ref := int64(0); ref < 2_000; ref++ {
		tr.Observe([]byte("a"), ref, ref)
	}
	if _, proc, x := tr.Observe([]byte("a"), 60_000, 60_100); proc || x != nil {
		t.Fatalf("a delayed record after a silence degraded the source: %+v", x)
	}
	if s := tr.Sources()[0]; s.Known {
		t.Fatalf("%+v: want warm-up again", s)
	}
}

// TestSkewBackwardsReference: a record whose reference time is behind the
// newest sub-window counts in it, and does not turn the clocks back.
func TestSkewBackwardsReference(t *testing.T) {
	tr := NewSkewTracker(SkewOptions{MinSamples: 1})
	for ref := int64(0); ref <= 1_500; ref++ {
		tr.Observe([]byte("a"), ref-3, ref)
	}
	// 950ms back: its sub-window is gone, yet it is a fresh sample.
	tr.Observe([]byte("a"), 550+100, 550)
	s := tr.Sources()[0]
	if s.Skew != 100*time.Millisecond || !s.Degraded || s.DegradedFor != 0 {
		t.Fatalf("%+v", s)
	}
	// It stays in the envelope for a window after the newest reference time.
	for ref := int64(1_501); ref < 2_400; ref++ {
		tr.Observe([]byte("a"), ref-3, ref)
	}
	if s := tr.Sources()[0]; s.Skew != 100*time.Millisecond || s.DegradedFor != 899*time.Millisecond {
		t.Fatalf("%+v", s)
	}
}

// TestSkewScope: with scope job every source is re-timed while one is
// degraded; with scope source only that one.
func TestSkewScope(t *testing.T) {
	for _, scope := range []rules.Scope{rules.ScopeSource, rules.ScopeJob} {
		t.Run(scope.String(), func(t *testing.T) {
			tr := NewSkewTracker(SkewOptionsFrom(rules.SkewConfig{Scope: scope}))
			srcs := fourSources(0, step(10_000, 20_000, 200))
			var degradedAt, recoveredAt int64 = -1, -1
			simulate(srcs, 0, 30_000, 6, func(r simRec) {
				wt, proc, x := tr.Observe(simNames[r.src], r.ts, r.ref)
				if x != nil && x.Degraded {
					degradedAt = x.At
				} else if x != nil {
					recoveredAt = x.At
				}
				skewed := degradedAt >= 0 && recoveredAt < 0
				want := skewed && (r.src == 0 || scope == rules.ScopeJob)
				if proc != want || (proc && wt != r.ref) {
					t.Fatalf("%+v: processing %v, want %v", r, proc, want)
				}
			})
			if degradedAt < 0 || recoveredAt < 0 {
				t.Fatalf("degraded at %d, recovered at %d", degradedAt, recoveredAt)
			}
			for _, s := range tr.Sources() {
				if want := 2 * int(boolInt(s.Source == "gw-0")); s.Transitions != want {
					t.Errorf("%+v: want %d transitions", s, want)
				}
			}
		})
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// TestSkewCheckpoint: a tracker decoded mid-run gives exactly the outputs of
// the original for the rest of the run.
func TestSkewCheckpoint(t *testing.T) {
	o := SkewOptions{Scope: rules.ScopeJob}
	srcs := fourSources(500, step(10_000, 20_000, -40))
	srcs[2].offset = func(t int64, _ *rand.Rand) int64 { return t / 1_000 }
	var recs []simRec
	simulate(srcs, 0, 40_000, 7, func(r simRec) { recs = append(recs, r) })
	for _, cut := range []int{0, 100, len(recs) / 3, len(recs) / 2} {
		a := NewSkewTracker(o)
		for _, r := range recs[:cut] {
			a.Observe(simNames[r.src], r.ts, r.ref)
		}
		enc := a.AppendBinary([]byte("prefix"))[len("prefix"):]
		b, err := DecodeSkewTracker(enc, o)
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		if !bytes.Equal(b.AppendBinary(nil), enc) || !slices.Equal(a.Sources(), b.Sources()) {
			t.Fatalf("cut %d: the decoded tracker differs", cut)
		}
		nTrans := 0
		for i, r := range recs[cut:] {
			wa, pa, xa := a.Observe(simNames[r.src], r.ts, r.ref)
			wb, pb, xb := b.Observe(simNames[r.src], r.ts, r.ref)
			if wa != wb || pa != pb || (xa == nil) != (xb == nil) || (xa != nil && *xa != *xb) {
				t.Fatalf("cut %d, record %d: (%d %v %+v) vs (%d %v %+v)", cut, cut+i, wa, pa, xa, wb, pb, xb)
			}
			if xa != nil {
				nTrans++
			}
		}
		t.Logf("cut at record %d of %d: %d-byte state, %d transitions after it, identical", cut, len(recs), len(enc), nTrans)
		if !slices.Equal(a.Sources(), b.Sources()) {
			t.Fatalf("cut %d: final states differ", cut)
		}
	}
}

func TestDecodeSkewTrackerErrors(t *testing.T) {
	tr := NewSkewTracker(SkewOptions{})
	for ref := int64(0); ref < 2_000; ref++ {
		tr.Observe([]byte("a"), ref+100, ref)
	}
	good := tr.AppendBinary(nil)
	for _, c := range []struct {
		name string
		b    []byte
		o    SkewOptions
	}{
		{"empty", nil, SkewOptions{}},
		{"version", append([]byte{9}, good[1:]...), SkewOptions{}},
		{"truncated", good[:len(good)-1], SkewOptions{}},
		{"trailing", append(slices.Clone(good), 0), SkewOptions{}},
		{"other window", good, SkewOptions{Window: 2 * time.Second}},
	} {
		if _, err := DecodeSkewTracker(c.b, c.o); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

func FuzzDecodeSkewTracker(f *testing.F) {
	tr := NewSkewTracker(SkewOptions{})
	f.Add(tr.AppendBinary(nil))
	for ref := int64(0); ref < 1_500; ref += 7 {
		tr.Observe([]byte("gw-1"), ref+30, ref)
		tr.Observe([]byte("gw-2"), ref, ref)
	}
	f.Add(tr.AppendBinary(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeSkewTracker(b, SkewOptions{})
		if err != nil {
			return
		}
		d.Sources()
		d.Observe([]byte("gw-1"), 1_000, 900)
		d.Observe([]byte("gw-2"), -1<<62, 1<<62)
		if _, err := DecodeSkewTracker(d.AppendBinary(nil), SkewOptions{}); err != nil {
			t.Fatalf("re-encoding does not decode: %v", err)
		}
	})
}

// TestObserveNoAllocs: a known source costs no allocation per record.
func TestObserveNoAllocs(t *testing.T) {
	tr := NewSkewTracker(SkewOptions{})
	src := []byte("gw-0")
	ref := int64(0)
	tr.Observe(src, ref, ref)
	if n := testing.AllocsPerRun(1_000, func() {
		ref++
		tr.Observe(src, ref+1, ref)
	}); n != 0 {
		t.Fatalf("%v allocations per record", n)
	}
}

func BenchmarkObserve(b *testing.B) {
	tr := NewSkewTracker(SkewOptions{})
	b.ReportAllocs()
	var ref int64
	for i := 0; b.Loop(); i++ {
		ref += int64(i & 1)
		tr.Observe(simNames[i&3], ref+int64(i&7), ref)
	}
}
