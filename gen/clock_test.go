package gen

import (
	"strings"
	"testing"
	"time"
)

func TestParseClock(t *testing.T) {
	good := []struct {
		in   string
		want Clock
	}{
		{"gw-1:offset=20ms", Clock{Source: "gw-1", Offset: 20 * time.Millisecond}},
		{"gw-2:step=+200ms@30s", Clock{Source: "gw-2", Step: 200 * time.Millisecond, StepAt: 30 * time.Second}},
		{"gw-0:step=-1.5s@0s", Clock{Source: "gw-0", Step: -1500 * time.Millisecond}},
		{"gw-3:drift=100", Clock{Source: "gw-3", DriftPPM: 100}},
		{"gw-1:offset=-5ms,drift=50", Clock{Source: "gw-1", Offset: -5 * time.Millisecond, DriftPPM: 50}},
		{"gw-12:drift=-0.5,step=1m@2m,offset=1us", Clock{Source: "gw-12", Offset: time.Microsecond, Step: time.Minute, StepAt: 2 * time.Minute, DriftPPM: -0.5}},
	}
	for _, tc := range good {
		got, err := ParseClock(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseClock(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		// String writes what ParseClock reads.
		if back, err := ParseClock(got.String()); err != nil || back != got {
			t.Errorf("ParseClock(%q.String() = %q) = %+v, %v", tc.in, got.String(), back, err)
		}
	}

	bad := []struct{ in, msg string }{
		{"", "want SOURCE:SETTING"},
		{"gw-1", "want SOURCE:SETTING"},
		{"gw-1:", `setting ""`},
		{"node-1:offset=1ms", "not a gateway name"},
		{"gw-01:offset=1ms", "not a gateway name"},
		{"gw-:offset=1ms", "not a gateway name"},
		{"gw-1:offset", "want offset=DURATION"},
		{"gw-1:offset=", "want offset=DURATION"},
		{"gw-1:offset=20", "missing unit"},
		{"gw-1:offset=1ms,,drift=2", `setting ""`},
		{"gw-1:offset=1ms,offset=2ms", "offset given twice"},
		{"gw-1:skew=1ms", `unknown setting "skew"`},
		{"gw-1:step=200ms", "want SIZE@WHEN"},
		{"gw-1:step=200ms@", "step"},
		{"gw-1:step=200ms@-1s", "before the start"},
		{"gw-1:step=fast@1s", "invalid duration"},
		{"gw-1:drift=fast", "invalid syntax"},
		{"gw-1:drift=NaN", "within ±1e6 ppm"},
		{"gw-1:drift=2e6", "within ±1e6 ppm"},
	}
	for _, tc := range bad {
		got, err := ParseClock(tc.in)
		if err == nil {
			t.Errorf("ParseClock(%q) = %+v, want an error", tc.in, got)
			continue
		}
		if !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), tc.in) {
			t.Errorf("ParseClock(%q) error %q: want it to quote the input and say %q", tc.in, err, tc.msg)
		}
	}
}

func TestClockStep(t *testing.T) {
	o := DefaultOptions()
	o.Rate = 1_000
	o.Events = 30_000 // 30 s
	o.Clocks = []Clock{{Source: "gw-1", Step: 200 * time.Millisecond, StepAt: 10 * time.Second}}
	data, _ := generate(t, o)
	jitter := o.Jitter.Milliseconds()
	stepAt := o.Start + (10 * time.Second).Milliseconds()
	var before, after, others int
	for _, l := range parse(t, data) {
		if l.reason != "" {
			continue
		}
		d := l.ts - *l.Ingest // ts - reference: the clock error, less the delivery delay
		if d < -1000 {
			continue // late
		}
		switch {
		case l.Source != "gw-1":
			others++
			if d < -jitter || d > 0 {
				t.Fatalf("%s has ts - ingest_ts = %d ms, want [-%d, 0]: %s", l.Source, d, jitter, l.raw)
			}
		case *l.Ingest < stepAt:
			before++
			if d < -jitter || d > 0 {
				t.Fatalf("gw-1 before the step has ts - ingest_ts = %d ms, want [-%d, 0]: %s", d, jitter, l.raw)
			}
		case *l.Ingest >= stepAt+jitter: // surely after the step in true time
			after++
			if d < 200-jitter || d > 200 {
				t.Fatalf("gw-1 after the step has ts - ingest_ts = %d ms, want [%d, 200]: %s", d, 200-jitter, l.raw)
			}
		}
	}
	if before < 1000 || after < 1000 || others < 1000 {
		t.Errorf("too few records to judge: %d before, %d after, %d on other sources", before, after, others)
	}
}

func TestClockDriftAndOffset(t *testing.T) {
	o := DefaultOptions()
	o.Rate = 20
	o.Events = 20_000 // 1000 s
	o.BurstRate, o.ScrapeRate = 0, 0
	o.Jitter = 0 // so that ts - ingest_ts is the clock error alone
	o.LateFraction = 0
	o.Clocks = []Clock{
		{Source: "gw-3", DriftPPM: 100},
		{Source: "gw-0", Offset: -20 * time.Millisecond},
	}
	data, _ := generate(t, o)
	var maxDrift int64
	for _, l := range parse(t, data) {
		if l.reason != "" {
			continue
		}
		d := l.ts - *l.Ingest
		switch l.Source {
		case "gw-3":
			// 100 ppm of the true time since Start, give or take the ms
			// rounding of both times.
			want := float64(*l.Ingest-o.Start) * 100e-6
			if float64(d) < want-1 || float64(d) > want+1 {
				t.Fatalf("gw-3 at %d ms: ts - ingest_ts = %d ms, want %.1f ± 1", *l.Ingest-o.Start, d, want)
			}
			maxDrift = max(maxDrift, d)
		case "gw-0":
			if d != -20 {
				t.Fatalf("gw-0: ts - ingest_ts = %d ms, want -20: %s", d, l.raw)
			}
		default:
			if d != 0 {
				t.Fatalf("%s: ts - ingest_ts = %d ms, want 0: %s", l.Source, d, l.raw)
			}
		}
	}
	if maxDrift < 99 {
		t.Errorf("after 1000 s, a 100 ppm clock is only %d ms ahead", maxDrift)
	}
}
