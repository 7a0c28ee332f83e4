package rules

import (
	"bufio"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// FuzzParse checks that Parse never panics, that what it accepts satisfies
// the invariants the rest of the job relies on, and that what it refuses is
// explained by located problems. The scenario files seed it.
func FuzzParse(f *testing.F) {
	for _, seed := range scenarioInputs(f) {
		f.Add([]byte(seed))
	}
	f.Add([]byte("rules: [{name: r, key: u, window: {type: sliding, size: 1ms, slide: 876000h}, aggregate: sum:a, threshold: 1e300, action: x}]"))
	f.Add([]byte("heatmaps: [&h {name: h, key: [a, b], field: f, window: {type: session, gap: 1s}, buckets: [-1e9, 0, 1]}, *h]"))
	f.Add([]byte("rules: [{name: r, where: {a: [\"\\u0000\", 1_0, 0b11, yes, 2001-12-14t21:59:43.10-05:00]}}]"))
	f.Add([]byte("a: [\n"))
	f.Add([]byte("\xef\xbb\xbfrules: []"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if err != nil {
			checkFailure(t, err)
			return
		}
		checkConfig(t, cfg)
	})
}

// scenarioInputs returns the input of every parse case in testdata.
func scenarioInputs(tb testing.TB) []string {
	paths, err := filepath.Glob("testdata/*")
	if err != nil {
		tb.Fatal(err)
	}
	var inputs []string
	for _, path := range paths {
		file, err := os.Open(path)
		if err != nil {
			tb.Fatal(err)
		}
		var input []string
		in := false
		for sc := bufio.NewScanner(file); sc.Scan(); {
			switch line := sc.Text(); {
			case strings.HasPrefix(line, "parse"):
				in, input = true, nil
			case line == "----" && in:
				in = false
				inputs = append(inputs, strings.Join(input, "\n"))
			case in:
				input = append(input, line)
			}
		}
		file.Close()
	}
	return inputs
}

func checkFailure(t *testing.T, err error) {
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("error is %T, not *ValidationError: %v", err, err)
	}
	if len(verr.Problems) == 0 {
		t.Fatal("ValidationError without problems")
	}
	for i, p := range verr.Problems {
		if p.File != "fuzz.yaml" || p.Msg == "" {
			t.Errorf("problem %d is not attributed: %#v", i, p)
		}
		if p.Line < 0 || p.Line == 0 && !strings.HasPrefix(p.Msg, "no rules or heatmaps") {
			t.Errorf("problem %d has no line: %#v", i, p)
		}
		if i > 0 && p.Line < verr.Problems[i-1].Line {
			t.Errorf("problems not sorted by line: %v", verr.Problems)
		}
	}
}

func checkConfig(t *testing.T, cfg *Config) {
	wm, sk := cfg.Watermark, cfg.Skew
	checkDuration(t, "out_of_orderness", wm.OutOfOrderness, true)
	checkDuration(t, "idle_timeout", wm.IdleTimeout, false)
	checkDuration(t, "allowed_lateness", wm.AllowedLateness, true)
	checkDuration(t, "skew threshold", sk.Threshold, false)
	checkDuration(t, "recover_after", sk.RecoverAfter, true)
	if sk.Scope != ScopeSource && sk.Scope != ScopeJob {
		t.Errorf("scope %d", sk.Scope)
	}
	if len(cfg.Rules)+len(cfg.Heatmaps) == 0 {
		t.Error("no rules or heatmaps")
	}
	names := map[string]bool{}
	for _, r := range cfg.Rules {
		if r.Name == "" || names[r.Name] || r.Line < 1 {
			t.Errorf("rule name %q at line %d: empty or duplicate", r.Name, r.Line)
		}
		names[r.Name] = true
		checkWhere(t, r.Where)
		checkKey(t, r.Key)
		checkWindow(t, r.Window)
		switch r.Aggregate.Kind {
		case Count:
			if r.Aggregate.Field != "" {
				t.Errorf("count with field %q", r.Aggregate.Field)
			}
		case Ratio:
			if r.Aggregate.Field != "" || len(r.Match) == 0 {
				t.Errorf("ratio with field %q and %d match filters", r.Aggregate.Field, len(r.Match))
			}
			checkWhere(t, r.Match)
		case Quantile:
			checkAttr(t, r.Aggregate.Field)
			if !(r.Aggregate.Q > 0 && r.Aggregate.Q <= 1) {
				t.Errorf("quantile %v", r.Aggregate.Q)
			}
		case Sum, Distinct, Avg, Min, Max:
			checkAttr(t, r.Aggregate.Field)
		default:
			t.Errorf("aggregate kind %d", r.Aggregate.Kind)
		}
		if r.Aggregate.Kind != Ratio && r.Match != nil {
			t.Errorf("%s aggregate with match filters", r.Aggregate.Kind)
		}
		if r.MinEvents < 0 {
			t.Errorf("min_events %d", r.MinEvents)
		}
		if r.Mode != Enforce && r.Mode != Shadow {
			t.Errorf("mode %d", r.Mode)
		}
		if !(r.Threshold >= 0) || math.IsInf(r.Threshold, 0) {
			t.Errorf("threshold %v", r.Threshold)
		}
		if r.Action == "" {
			t.Error("empty action")
		}
	}
	names = map[string]bool{}
	for _, h := range cfg.Heatmaps {
		if h.Name == "" || names[h.Name] || h.Line < 1 {
			t.Errorf("heatmap name %q at line %d: empty or duplicate", h.Name, h.Line)
		}
		names[h.Name] = true
		checkWhere(t, h.Where)
		checkKey(t, h.Key)
		checkAttr(t, h.Field)
		checkWindow(t, h.Window)
		if len(h.Buckets) == 0 {
			t.Error("no buckets")
		}
		for i, b := range h.Buckets {
			if math.IsInf(b, 0) || math.IsNaN(b) || i > 0 && b <= h.Buckets[i-1] {
				t.Errorf("buckets %v", h.Buckets)
			}
		}
	}
	if fp := cfg.Fingerprint(); len(fp) != 64 {
		t.Errorf("fingerprint %q", fp)
	}
}

func checkDuration(t *testing.T, name string, d time.Duration, zeroOK bool) {
	if d < 0 || d == 0 && !zeroOK || d%time.Millisecond != 0 || d > maxDuration {
		t.Errorf("%s = %v", name, d)
	}
}

func checkWindow(t *testing.T, w Window) {
	var params []time.Duration
	switch w.Type {
	case Tumbling:
		params = []time.Duration{w.Size}
		if w.Slide != 0 || w.Gap != 0 {
			t.Errorf("window %+v has extra parameters", w)
		}
	case Sliding:
		params = []time.Duration{w.Size, w.Slide}
		if w.Gap != 0 {
			t.Errorf("window %+v has extra parameters", w)
		}
	case Session:
		params = []time.Duration{w.Gap}
		if w.Size != 0 || w.Slide != 0 {
			t.Errorf("window %+v has extra parameters", w)
		}
	default:
		t.Errorf("window type %d", w.Type)
	}
	for _, d := range params {
		checkDuration(t, "window "+w.String(), d, false)
	}
}

func checkKey(t *testing.T, key []string) {
	if len(key) == 0 {
		t.Error("empty key")
	}
	for i, name := range key {
		checkAttr(t, name)
		if slices.Contains(key[:i], name) {
			t.Errorf("key %q repeats %q", key, name)
		}
	}
}

func checkAttr(t *testing.T, name string) {
	if p := attrProblem(name); p != "" {
		t.Errorf("attribute %q accepted: %s", name, p)
	}
}

func checkWhere(t *testing.T, filters []Filter) {
	for i, f := range filters {
		checkAttr(t, f.Field)
		if len(f.Values) == 0 {
			t.Errorf("filter %q has no values", f.Field)
		}
		for _, g := range filters[:i] {
			if g.Field == f.Field {
				t.Errorf("filter %q repeated", f.Field)
			}
		}
		for _, v := range f.Values {
			checkScalar(t, v)
		}
	}
}

// checkScalar verifies that Text is the canonical JSON text of the value.
func checkScalar(t *testing.T, v Scalar) {
	switch v.Kind {
	case String:
		var s string
		if err := json.Unmarshal([]byte(v.Text), &s); err != nil || jsonQuote(s) != v.Text {
			t.Errorf("string text %q is not canonical JSON (%v)", v.Text, err)
		}
	case Number:
		var n float64
		if !jsonNumber.MatchString(v.Text) || json.Unmarshal([]byte(v.Text), &n) != nil || n != v.Num {
			t.Errorf("number text %q does not read as %v", v.Text, v.Num)
		}
	case Bool:
		if v.Text != "true" && v.Text != "false" {
			t.Errorf("bool text %q", v.Text)
		}
	default:
		t.Errorf("scalar kind %d", v.Kind)
	}
}
