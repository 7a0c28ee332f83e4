package watermark

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/corrupt"

	"github.com/riskstream/riskstream/rules"
)

// The simulation runs in microseconds of true time; records carry whole
// milliseconds, as events and Kafka timestamps do.

// skewSimSource is one simulated source node.
type skewSimSource struct {
	// offset is the clock's error at true time t, both µs.
	offset func(t int64) int64
	// batch is the producer's linger in µs: a batch leaves this long after
	// its first record. 0 sends each record alone.
	batch int64
}

// skewSim is a run: sources sending 2,000 records/s each, at irregular
// intervals, over true times [from, to) ms.
type skewSim struct {
	srcs     []skewSimSource
	from, to int64
	// jitter is the largest transport delay in µs, uniform per flush (a
	// batch gets one broker timestamp, as with LogAppendTime) or per record
	// when unbatched.
	jitter int64
	// disorder is how late, in ms (under 64), the consumer may see a
	// record after its reference time, as partitions interleave: reference
	// times go back a little.
	disorder int64
	seed     uint64
}

// skewSimRec is a record as the job sees it; t is its true time in µs.
type skewSimRec struct {
	src        int
	t, ts, ref int64
}

const skewSimPeriod = 500 // mean µs between records of a source

var skewSimNames = [][]byte{[]byte("gw-0"), []byte("gw-1"), []byte("gw-2"), []byte("gw-3")}

func skewInSync(int64) int64 { return 0 }

// skewStep is an offset of off ms during true times [from, to) ms.
func skewStep(from, to, off int64) func(int64) int64 {
	return func(t int64) int64 {
		if t >= from*1000 && t < to*1000 {
			return off * 1000
		}
		return 0
	}
}

// skewDrift is a clock gaining ppm parts per million (losing when negative)
// from true time from ms on.
func skewDrift(from, ppm int64) func(int64) int64 {
	return func(t int64) int64 { return max(0, t-from*1000) * ppm / 1_000_000 }
}

func skewMod(a int64, n int) int { return int(a - skewFloorDiv(a, int64(n))*int64(n)) }

func skewFloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// run calls f with every record in the order the job receives them.
func (s skewSim) run(f func(skewSimRec)) {
	rng := rand.New(rand.NewPCG(s.seed, 0x5eed))
	type state struct {
		t                 int64 // true time of the next record, µs
		flushAt, flushRef int64 // the open batch's departure and arrival, µs
		next              skewSimRec
	}
	st := make([]state, len(s.srcs))
	gen := func(i int) {
		src, p := &s.srcs[i], &st[i]
		ref := p.t + rng.Int64N(s.jitter+1)
		if src.batch > 0 {
			if p.t >= p.flushAt {
				p.flushAt = p.t + src.batch
				p.flushRef = p.flushAt + rng.Int64N(s.jitter+1)
			}
			ref = p.flushRef
		}
		p.next = skewSimRec{src: i, t: p.t, ts: skewFloorDiv(p.t+src.offset(p.t), 1000), ref: skewFloorDiv(ref, 1000)}
		p.t += skewSimPeriod/2 + rng.Int64N(skewSimPeriod+1)
	}
	for i := range st {
		st[i].t = s.from*1000 + int64(i)*skewSimPeriod/int64(len(st))
		gen(i)
	}
	// Records on their way to the consumer, by the ms they reach it.
	var late [64][]skewSimRec
	at := s.from // the ms the consumer is at
	for {
		// Brokers append in reference-time order.
		m := 0
		for i := range st {
			if st[i].next.ref < st[m].next.ref {
				m = i
			}
		}
		next := st[m].next
		done := next.t >= s.to*1000
		for ; at < next.ref || done && at < next.ref+int64(len(late)); at++ {
			q := &late[skewMod(at, len(late))]
			for _, r := range *q {
				f(r)
			}
			*q = (*q)[:0]
		}
		if done {
			return
		}
		q := &late[skewMod(next.ref+rng.Int64N(s.disorder+1), len(late))]
		*q = append(*q, next)
		gen(m)
	}
}

// skewFeed runs s through tr and returns the transitions. It checks every
// record's time domain against the transitions so far: processing while
// its source (with scope job, any source) is degraded, and windowed at the
// time that domain says.
func skewFeed(t *testing.T, tr *SkewTracker, s skewSim, each func(r skewSimRec, processing bool)) []Transition {
	t.Helper()
	var out []Transition
	degraded := make([]bool, len(s.srcs))
	s.run(func(r skewSimRec) {
		wt, proc, x := tr.Observe(skewSimNames[r.src], r.ts, r.ref)
		if x != nil {
			out = append(out, *x)
			degraded[slices.IndexFunc(skewSimNames, func(n []byte) bool { return string(n) == x.Source })] = x.Degraded
		}
		want := degraded[r.src] || tr.scope == rules.ScopeJob && slices.Contains(degraded, true)
		if proc != want || proc && wt != r.ref || !proc && wt != r.ts {
			t.Fatalf("%+v: window time %d, processing %v, want processing %v", r, wt, proc, want)
		}
		if each != nil {
			each(r, proc)
		}
	})
	return out
}

// skewFourSources are in sync but for gw-0, all batching for batch ms.
func skewFourSources(batch int64, first func(int64) int64) []skewSimSource {
	srcs := make([]skewSimSource, 4)
	for i := range srcs {
		srcs[i] = skewSimSource{offset: skewInSync, batch: batch * 1000}
	}
	srcs[0].offset = first
	return srcs
}

func skewMS(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// TestSkewDetection: a step or a drift on one of four sources is caught
// within the latency the envelope allows, and no other source is touched.
// Each case runs with several seeds, the step falling at a different point
// of the batching cycle; the delay is reference time from the moment the
// true offset passes the threshold to the degradation.
func TestSkewDetection(t *testing.T) {
	step := func(off int64) func(at int64) func(int64) int64 {
		return func(at int64) func(int64) int64 { return skewStep(at, 1<<40, off) }
	}
	// 100 ppm is 0.1ms per second: past 15ms 150s after it starts.
	drift := func(ppm int64) func(at int64) func(int64) int64 {
		return func(at int64) func(int64) int64 { return skewDrift(at-150_000, ppm) }
	}
	for _, c := range []struct {
		name   string
		batch  int64 // ms
		offset func(at int64) func(int64) int64
		// maxWorst bounds the worst delay over the seeds, maxMean their mean.
		maxWorst, maxMean time.Duration
		why               string
	}{
		{"+200ms step", 0, step(200), time.Second, time.Second, ""},
		{"+200ms step, 500ms batching", 500, step(200), time.Second, time.Second, ""},
		{"-40ms step", 0, step(-40), time.Second, time.Second, ""},
		{"-40ms step, 500ms batching", 500, step(-40), 1025 * time.Millisecond, time.Second,
			"a step just before a flush: that batch holds records stamped before the step that waited under 15ms, and they leave the window only two flushes later (2×500ms + 15ms + jitter)"},
		{"+100ppm drift", 0, drift(100), 3 * time.Second, 1500 * time.Millisecond,
			"timestamps are whole ms: a clock 15.1ms ahead shows d = 16 only on records that waited under 0.1ms and straddle a ms boundary, about one a second with 0-10ms jitter"},
		{"-100ppm drift", 0, drift(-100), 3 * time.Second, 1500 * time.Millisecond, ""},
		{"+100ppm drift, 500ms batching", 500, drift(100), 120 * time.Second, 30 * time.Second,
			"each flush gets one broker timestamp, so only its last record tells the offset, and the window holds one or two: the envelope reads low by their least jitter (up to 10ms, which 100 ppm takes 100s to make up)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			seeds := 12
			if c.maxWorst > time.Minute {
				seeds = 4 // long runs
			}
			var worst, sum time.Duration
			for seed := range uint64(seeds) {
				at := 5_000 + int64(seed)*71
				srcs := skewFourSources(c.batch, c.offset(at))
				if c.maxWorst > 2*time.Second {
					srcs = srcs[:2] // long runs: one in-sync source is company enough
				}
				s := skewSim{srcs: srcs, to: at + c.maxWorst.Milliseconds() + 1_000, jitter: 10_000, disorder: 5, seed: seed}
				got := skewFeed(t, NewSkewTracker(SkewOptions{}), s, nil)
				if len(got) != 1 || got[0].Source != "gw-0" || !got[0].Degraded {
					t.Fatalf("seed %d: transitions %+v, want gw-0 degraded once", seed, got)
				}
				d := skewMS(got[0].At - at)
				worst, sum = max(worst, d), sum+d
			}
			mean := sum / time.Duration(seeds)
			t.Logf("detection delay over %d phases: mean %v, worst %v", seeds, mean, worst)
			if worst > c.maxWorst || mean > c.maxMean {
				t.Errorf("want worst within %v, mean within %v (%s)", c.maxWorst, c.maxMean, c.why)
			}
		})
	}
}

// TestSkewNoFalseDegradation: in-sync clocks behind up to 10ms of jitter and
// up to 500ms of batching, their records interleaved out of order, are
// never degraded.
func TestSkewNoFalseDegradation(t *testing.T) {
	minutes := int64(10)
	if testing.Short() {
		minutes = 1
	}
	tr := NewSkewTracker(SkewOptions{})
	srcs := []skewSimSource{{skewInSync, 500_000}, {skewInSync, 500_000}, {skewInSync, 20_000}, {skewInSync, 0}}
	var worst int64 // the lowest estimate: delay reads as a clock behind
	n := 0
	s := skewSim{srcs: srcs, to: minutes * 60_000, jitter: 10_000, disorder: 20, seed: 2}
	got := skewFeed(t, tr, s, func(r skewSimRec, _ bool) {
		if n++; n%100 == 0 {
			if e := tr.srcs[string(skewSimNames[r.src])]; tr.known(e) {
				worst = min(worst, e.estimate())
			}
		}
	})
	t.Logf("%d min, %d records (batching 500, 500, 20, 0ms): %d false degradations; the estimate went down to %dms",
		minutes, n, len(got), worst)
	if len(got) != 0 {
		t.Errorf("transitions %+v", got)
	}
}

// TestSkewClockBehind: a clock 20ms behind makes every record look delayed
// by 20ms or more: it is degraded, though no record alone tells it from
// transport delay.
func TestSkewClockBehind(t *testing.T) {
	for _, batch := range []int64{0, 500} {
		t.Run(fmt.Sprintf("batch %dms", batch), func(t *testing.T) {
			tr := NewSkewTracker(SkewOptions{})
			s := skewSim{srcs: skewFourSources(batch, skewStep(0, 1<<40, -20)), to: 10_000, jitter: 10_000, disorder: 5, seed: 3}
			got := skewFeed(t, tr, s, nil)
			if len(got) != 1 || got[0].Source != "gw-0" || !got[0].Degraded || got[0].Skew > -20*time.Millisecond {
				t.Fatalf("transitions %+v, want gw-0 degraded once at -20ms or below", got)
			}
			t.Logf("degraded at %dms, at the end of its warm-up, with estimate %v", got[0].At, got[0].Skew)
		})
	}
}

// TestSkewRecovery: once the clock is fixed, the source recovers after
// RecoverAfter, plus the time its skewed records take to leave the window,
// and its events go back to event time (skewFeed checks that).
func TestSkewRecovery(t *testing.T) {
	const fixAt = 20_000
	for _, c := range []struct {
		name       string
		batch, off int64 // ms
	}{
		{"+200ms", 0, 200},
		{"+200ms, 500ms batching", 500, 200},
		{"-40ms", 0, -40},
		{"-40ms, 500ms batching", 500, -40},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := NewSkewTracker(SkewOptions{})
			s := skewSim{srcs: skewFourSources(c.batch, skewStep(10_000, fixAt, c.off)), to: 30_000, jitter: 10_000, disorder: 5, seed: 4}
			got := skewFeed(t, tr, s, nil)
			if len(got) != 2 || !got[0].Degraded || got[1].Degraded || got[1].Source != "gw-0" {
				t.Fatalf("transitions %+v, want one degradation and one recovery of gw-0", got)
			}
			took := skewMS(got[1].At - fixAt)
			// The estimate is good from the first fresh record after the fix
			// (a flush away) or, for a clock that was ahead, from the first
			// record after the last skewed one left the window; recovery is
			// at the first record RecoverAfter after that.
			flush := skewMS(c.batch + 10)
			lo, hi := 5*time.Second, 5*time.Second+2*flush+5*time.Millisecond
			if c.off > 0 {
				hi += 800*time.Millisecond + flush
			}
			t.Logf("recovered %v after the fix (bounds %v..%v)", took, lo, hi)
			if took < lo || took > hi {
				t.Errorf("recovery %v after the fix, want within %v..%v", took, lo, hi)
			}
			if s := tr.Sources()[0]; s.Degraded || s.Transitions != 2 || s.DegradedFor != skewMS(got[1].At-got[0].At) {
				t.Errorf("%+v", s)
			}
		})
	}
}

// TestSkewNoFlapping: a clock hovering at the threshold changes time domain
// at most twice in five minutes, though its estimate crosses the threshold
// dozens of times.
func TestSkewNoFlapping(t *testing.T) {
	const minutes = 5
	noise := rand.New(rand.NewPCG(9, 9))
	// jumpy: the offset redrawn every 100ms within ±3ms of center ms.
	jumpy := func(center int64) func(int64) int64 {
		v := make([]int64, minutes*600+1)
		for i := range v {
			v[i] = center*1000 + noise.Int64N(6_001) - 3_000
		}
		return func(t int64) int64 { return v[t/100_000] }
	}
	// wandering: a random walk of ±0.1ms every 100ms, kept within ±2ms.
	wandering := func(center int64) func(int64) int64 {
		v := make([]int64, minutes*600+1)
		w := int64(0)
		for i := range v {
			w += noise.Int64N(201) - 100
			w = max(-4_000-w, min(4_000-w, w)) // reflect at ±2ms
			v[i] = center*1000 + w
		}
		return func(t int64) int64 { return v[t/100_000] }
	}
	for _, c := range []struct {
		name   string
		batch  int64
		offset func(int64) func(int64) int64
		center int64
	}{
		{"+15ms ±3ms jumps", 0, jumpy, 15},
		{"+15ms ±3ms jumps, 500ms batching", 500, jumpy, 15},
		{"-15ms ±3ms jumps", 0, jumpy, -15},
		{"-15ms ±3ms jumps, 500ms batching", 500, jumpy, -15},
		{"+15ms ±2ms wander", 0, wandering, 15},
		{"+15ms ±2ms wander, 500ms batching", 500, wandering, 15},
		{"-15ms ±2ms wander", 0, wandering, -15},
		{"-15ms ±2ms wander, 500ms batching", 500, wandering, -15},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := NewSkewTracker(SkewOptions{})
			crossings, wasBad := 0, false
			srcs := []skewSimSource{{c.offset(c.center), c.batch * 1000}}
			s := skewSim{srcs: srcs, to: minutes * 60_000, jitter: 10_000, disorder: 5, seed: 5}
			got := skewFeed(t, tr, s, func(r skewSimRec, _ bool) {
				if e := tr.srcs["gw-0"]; r.src == 0 && tr.known(e) {
					est := e.estimate()
					if bad := est > tr.thr || est <= -tr.thr; bad != wasBad {
						crossings, wasBad = crossings+1, bad
					}
				}
			})
			t.Logf("%d transitions; the estimate crossed the threshold %d times", len(got), crossings)
			if len(got) > 2 || len(got) > 0 && got[0].Source != "gw-0" {
				t.Errorf("transitions %+v, want at most 2, of gw-0", got)
			}
		})
	}
}

// TestSkewWarmUp: a source is judged only once it has MinSamples records
// spanning a full Window.
func TestSkewWarmUp(t *testing.T) {
	for _, c := range []struct {
		name    string
		every   int64 // ms between records
		wantRef int64 // the first reference time judged
	}{
		{"dense: the window is the limit", 1, 800},
		{"sparse: the sample count is the limit", 100, 1_500},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := NewSkewTracker(SkewOptions{})
			for ref := int64(0); ref <= 3_000; ref += c.every {
				_, proc, x := tr.Observe([]byte("a"), ref+200, ref)
				if judged := ref >= c.wantRef; proc != judged || tr.Sources()[0].Known != judged {
					t.Fatalf("ref %d: processing %v, %+v", ref, proc, tr.Sources()[0])
				}
				if ref == c.wantRef && (x == nil || !x.Degraded || x.Skew != 200*time.Millisecond || x.At != ref) {
					t.Fatalf("ref %d: transition %+v", ref, x)
				}
			}
		})
	}
}

// TestSkewReferenceTime: how the estimator takes reference times that go
// back, pause, or sit far from any wall clock.
func TestSkewReferenceTime(t *testing.T) {
	type rec struct{ ts, ref int64 }
	// steady is one record a ms over [from, to) with d = ts - ref.
	steady := func(from, to, d int64, more ...rec) []rec {
		var out []rec
		for ref := from; ref < to; ref++ {
			out = append(out, rec{ref + d, ref})
		}
		return append(out, more...)
	}
	for _, c := range []struct {
		name string
		recs []rec
		want SourceSkew
	}{
		{"a record a little behind counts in its sub-window",
			steady(0, 2_000, -3, rec{1_500 + 100, 1_500}),
			SourceSkew{Skew: 100 * time.Millisecond, Known: true, Degraded: true, Transitions: 1}},
		{"a record behind the whole window is ignored",
			steady(0, 2_000, -3, rec{1_000 + 100, 1_000}),
			SourceSkew{Skew: -3 * time.Millisecond, Known: true}},
		{"nor does it reset the window",
			append(steady(0, 2_000, -3, rec{100, 0}), steady(2_000, 2_100, -3)...),
			SourceSkew{Skew: -3 * time.Millisecond, Known: true}},
		{"a silence longer than the window warms up again",
			steady(0, 2_000, 0, rec{3_600_000 + 100, 3_600_000}),
			SourceSkew{Skew: 100 * time.Millisecond}},
		{"a silence within the window does not",
			steady(0, 2_000, 0, rec{2_600 + 100, 2_600}),
			SourceSkew{Skew: 100 * time.Millisecond, Known: true, Degraded: true, Transitions: 1}},
		{"a degraded source stays degraded over a silence, warming up",
			steady(0, 2_000, 50, rec{3_600_000, 3_600_000}),
			SourceSkew{Degraded: true, DegradedFor: 3_600_000*time.Millisecond - 800*time.Millisecond, Transitions: 1}},
		{"negative and far from any wall clock",
			steady(-1_000_000_000_000, -1_000_000_000_000+2_000, 20),
			SourceSkew{Skew: 20 * time.Millisecond, Known: true, Degraded: true, DegradedFor: 1_199 * time.Millisecond, Transitions: 1}},
		{"a wild timestamp saturates instead of wrapping",
			steady(-2_000, 0, 0, rec{math.MaxInt64, -1}),
			SourceSkew{Skew: math.MaxInt64 / time.Millisecond * time.Millisecond, Known: true, Degraded: true, Transitions: 1}},
		{"and one far behind does not move the envelope",
			steady(0, 2_000, 0, rec{math.MinInt64, 1_999}),
			SourceSkew{Known: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := NewSkewTracker(SkewOptions{})
			for _, r := range c.recs {
				tr.Observe([]byte("a"), r.ts, r.ref)
			}
			c.want.Source = "a"
			if got := tr.Sources()[0]; got != c.want {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// TestSkewScope: with scope job every source is re-timed while one is
// degraded, with scope source only that one; skewFeed checks every record.
func TestSkewScope(t *testing.T) {
	for _, scope := range []rules.Scope{rules.ScopeSource, rules.ScopeJob} {
		t.Run(scope.String(), func(t *testing.T) {
			tr := NewSkewTracker(SkewOptionsFrom(rules.SkewConfig{Scope: scope}))
			processing := make([]int, 4)
			s := skewSim{srcs: skewFourSources(0, skewStep(5_000, 10_000, 200)), to: 20_000, jitter: 10_000, disorder: 5, seed: 6}
			got := skewFeed(t, tr, s, func(r skewSimRec, proc bool) {
				if proc {
					processing[r.src]++
				}
			})
			if len(got) != 2 || got[0].Source != "gw-0" || got[1].Source != "gw-0" {
				t.Fatalf("transitions %+v, want gw-0 degraded and recovered", got)
			}
			t.Logf("records in processing time per source: %v", processing)
			for i, n := range processing[1:] {
				if (n > 0) != (scope == rules.ScopeJob) {
					t.Errorf("%s: %d records in processing time", skewSimNames[i+1], n)
				}
			}
		})
	}
}

// TestSkewCheckpoint: a tracker decoded mid-run gives exactly the outputs of
// the original for the rest of the run.
func TestSkewCheckpoint(t *testing.T) {
	o := SkewOptions{Scope: rules.ScopeJob}
	srcs := skewFourSources(500, skewStep(5_000, 8_000, -40))
	srcs[1].offset = skewDrift(0, 3_000)
	srcs[2].offset = skewStep(12_000, 1<<40, 100)
	var recs []skewSimRec
	skewSim{srcs: srcs, to: 25_000, jitter: 10_000, disorder: 5, seed: 7}.run(func(r skewSimRec) { recs = append(recs, r) })
	for _, cut := range []int{0, 1, 100, len(recs) / 4, len(recs) / 3, len(recs) / 2, len(recs) - 1} {
		a := NewSkewTracker(o)
		for _, r := range recs[:cut] {
			a.Observe(skewSimNames[r.src], r.ts, r.ref)
		}
		enc := a.AppendBinary([]byte("prefix"))[len("prefix"):]
		b, err := DecodeSkewTracker(enc, o)
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		if !bytes.Equal(b.AppendBinary(nil), enc) || !slices.Equal(a.Sources(), b.Sources()) {
			t.Fatalf("cut %d: the decoded tracker differs", cut)
		}
		transitions := 0
		for i, r := range recs[cut:] {
			wa, pa, xa := a.Observe(skewSimNames[r.src], r.ts, r.ref)
			wb, pb, xb := b.Observe(skewSimNames[r.src], r.ts, r.ref)
			if wa != wb || pa != pb || (xa == nil) != (xb == nil) || xa != nil && *xa != *xb {
				t.Fatalf("cut %d, record %d: (%d %v %+v) vs (%d %v %+v)", cut, cut+i, wa, pa, xa, wb, pb, xb)
			}
			if xa != nil {
				transitions++
			}
		}
		if !slices.Equal(a.Sources(), b.Sources()) {
			t.Fatalf("cut %d: final states differ", cut)
		}
		t.Logf("cut at record %d of %d: %d-byte state, then %d identical transitions", cut, len(recs), len(enc), transitions)
	}
}

// TestDecodeSkewTracker: corrupt input is refused, and a checkpoint taken
// with another window makes the sources warm up again, keeping their state.
func TestDecodeSkewTracker(t *testing.T) {
	tr := NewSkewTracker(SkewOptions{})
	for ref := int64(0); ref < 2_000; ref++ {
		tr.Observe([]byte("a"), ref+100, ref)
		tr.Observe([]byte("b"), ref, ref)
	}
	good := tr.AppendBinary(nil)
	for n := range len(good) {
		if _, err := DecodeSkewTracker(good[:n], SkewOptions{}); err == nil {
			t.Errorf("a %d-byte prefix decodes", n)
		}
	}
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"version", append([]byte{skewVersion + 1}, good[1:]...)},
		{"trailing bytes", append(slices.Clone(good), 0)},
		{"unsorted names", bytes.Replace(slices.Clone(good), []byte{1, 'b'}, []byte{1, 'a'}, 1)},
	} {
		if _, err := DecodeSkewTracker(c.b, SkewOptions{}); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	if _, err := DecodeSkewTracker(good[:1], SkewOptions{}); !corrupt.Is(err) {
		t.Errorf("truncated: %v, want corruption", err)
	}
	d, err := DecodeSkewTracker(good, SkewOptions{Window: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Sources(); s[0].Known || !s[0].Degraded || s[1].Known || s[1].Degraded {
		t.Fatalf("after a window change: %+v", s)
	}
}

// FuzzDecodeSkewTracker: no input makes decoding panic, and whatever
// decodes can be used and encodes to something that decodes again.
func FuzzDecodeSkewTracker(f *testing.F) {
	tr := NewSkewTracker(SkewOptions{Scope: rules.ScopeJob})
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
		enc := d.AppendBinary(nil)
		d.Sources()
		d.Observe([]byte("gw-1"), 1_000, 900)
		d.Observe([]byte("gw-2"), -1<<62, 1<<62)
		if _, err := DecodeSkewTracker(enc, SkewOptions{}); err != nil {
			t.Fatalf("re-encoding does not decode: %v", err)
		}
	})
}

// TestSkewOptionsFrom: zero settings take the documented defaults, and the
// rules file's settings carry over.
func TestSkewOptionsFrom(t *testing.T) {
	tr := NewSkewTracker(SkewOptionsFrom(rules.SkewConfig{}))
	if tr.thr != 15 || tr.recoverLo != 13 || tr.recoverHi != 10 || tr.recoverAfter != 5_000 || tr.window != 800 || tr.minSamples != 16 || tr.scope != rules.ScopeSource {
		t.Errorf("defaults: %+v", tr)
	}
	tr = NewSkewTracker(SkewOptionsFrom(rules.SkewConfig{Threshold: 6 * time.Millisecond, RecoverAfter: time.Minute, Scope: rules.ScopeJob}))
	if tr.thr != 6 || tr.recoverLo != 5 || tr.recoverHi != 4 || tr.recoverAfter != 60_000 || tr.scope != rules.ScopeJob {
		t.Errorf("from rules: %+v", tr)
	}
}

// TestObserveNoAllocs: a known source costs no allocation per record.
func TestObserveNoAllocs(t *testing.T) {
	tr := NewSkewTracker(SkewOptions{})
	src := []byte("gw-0")
	ref := int64(0)
	tr.Observe(src, ref, ref)
	if n := testing.AllocsPerRun(10_000, func() {
		ref++
		tr.Observe(src, ref+1, ref)
	}); n != 0 {
		t.Fatalf("%v allocations per record", n)
	}
}

// BenchmarkObserve: 64 sources at 2,000 records/s each, their records
// interleaved one by one (the worst case) or in runs of 100 (batches).
func BenchmarkObserve(b *testing.B) {
	for _, run := range []int{1, 100} {
		b.Run(fmt.Sprintf("runs of %d", run), func(b *testing.B) {
			tr := NewSkewTracker(SkewOptions{})
			names := make([][]byte, 64)
			for i := range names {
				names[i] = fmt.Appendf(nil, "gateway-%02d", i)
			}
			rng := rand.New(rand.NewPCG(1, 1))
			ref := int64(1_732_150_000_000)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if i%128 == 0 {
					ref++ // 64 sources × 2 records per ms
				}
				tr.Observe(names[i/run%64], ref-rng.Int64N(10), ref)
			}
		})
	}
}

// TestSkewMaxSources: new source names past MaxSources make the tracker
// forget the ones seen least recently, healthy before degraded, so that
// its size stays bounded whatever the input sends; a forgotten source that
// comes back warms up again.
func TestSkewMaxSources(t *testing.T) {
	tr := NewSkewTracker(SkewOptions{MaxSources: 10})
	// gw-skewed runs 200 ms ahead and is degraded once warmed up.
	ref := int64(1_000_000)
	for range 40 {
		ref += 50
		tr.Observe([]byte("gw-skewed"), ref+200, ref)
	}
	if s := tr.Sources(); len(s) != 1 || !s[0].Degraded {
		t.Fatalf("gw-skewed not degraded: %+v", s)
	}
	for i := range 1000 {
		ref++
		tr.Observe(fmt.Appendf(nil, "rnd-%d", i), ref, ref)
		if n := len(tr.Sources()); n > 10 {
			t.Fatalf("%d sources tracked after %d, want at most 10", n, i+1)
		}
	}
	if tr.Forgotten() < 990 {
		t.Errorf("%d sources forgotten, want at least 990", tr.Forgotten())
	}
	// The degraded source, the least recently seen, was kept.
	var kept bool
	for _, s := range tr.Sources() {
		if s.Source == "gw-skewed" {
			kept = s.Degraded
		}
	}
	if !kept {
		t.Error("the degraded source was forgotten while healthy ones were left")
	}
	// A forgotten healthy source is new again: not judged before its
	// warm-up.
	_, processing, _ := tr.Observe([]byte("rnd-0"), ref+10_000, ref+1)
	if processing {
		t.Error("a forgotten source coming back was judged without a warm-up")
	}
}
