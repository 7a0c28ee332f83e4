package stream

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/riskstream/riskstream/gen"
	"github.com/riskstream/riskstream/replay"
	"github.com/riskstream/riskstream/rules"
)

// skewRules are short windows with a tight out-of-orderness bound, where a
// 200 ms clock step matters: it moves events across window bounds and drags
// the watermark ahead of the other sources.
const skewRules = `
watermark: {out_of_orderness: 100ms}
rules:
  - name: per-second
    key: [user]
    window: {type: tumbling, size: 1s}
    aggregate: count
    threshold: 3
    action: review
  - name: pay-burst
    where: {api: /pay}
    key: [user]
    window: {type: sliding, size: 2s, slide: 250ms}
    aggregate: count
    threshold: 1
    action: deny
`

// decisionIDs replays a generated workload and returns the ids of its
// decisions (event_id/rule).
func decisionIDs(t *testing.T, o gen.Options, threshold time.Duration) (map[string]bool, *replay.Summary) {
	t.Helper()
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	f, err := os.Create(in)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	if _, err := gen.Generate(w, o); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	f.Close()
	cfg, err := rules.Parse("skew-rules.yaml", []byte(skewRules))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Skew.Threshold = threshold
	sum := runReplay(t, replay.Options{Config: cfg, Inputs: []string{in}, OutDir: dir})
	out, err := os.Open(filepath.Join(dir, "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ids := map[string]bool{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var d struct{ ID string }
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
		ids[d.ID] = true
	}
	return ids, sum
}

func recallPrecision(got, want map[string]bool) (recall, precision float64) {
	hit := 0
	for id := range got {
		if want[id] {
			hit++
		}
	}
	return float64(hit) / float64(len(want)), float64(hit) / float64(len(got))
}

// TestSkewDegradationKeepsDecisions is the point of skew handling: with one
// of four sources stepping +200 ms, the decisions made with degradation
// match those of the same workload without skew far better than with
// degradation off (docs/time.md "Clock skew", issue 4).
func TestSkewDegradationKeepsDecisions(t *testing.T) {
	o := gen.DefaultOptions()
	o.Events, o.Users, o.Rate, o.BurstRate = 120_000, 600, 2_000, 1
	o.Jitter, o.LateFraction, o.InvalidFraction = 2*time.Millisecond, 0, 0
	base, _ := decisionIDs(t, o, 15*time.Millisecond)

	step, err := gen.ParseClock("gw-1:step=+200ms@10s")
	if err != nil {
		t.Fatal(err)
	}
	o.Clocks = []gen.Clock{step}
	withDeg, sum := decisionIDs(t, o, 15*time.Millisecond)
	without, _ := decisionIDs(t, o, time.Hour)

	rWith, pWith := recallPrecision(withDeg, base)
	rWithout, pWithout := recallPrecision(without, base)
	t.Logf("%d decisions without skew; with degradation: recall %.4f precision %.4f; degradation off: recall %.4f precision %.4f; %d events re-timed",
		len(base), rWith, pWith, rWithout, pWithout, sum.Retimed)
	if len(base) < 500 {
		t.Fatalf("only %d decisions: the workload does not exercise the rules", len(base))
	}
	if rWith < 0.99 || pWith < 0.99 {
		t.Errorf("with degradation recall %.4f precision %.4f, want both >= 0.99", rWith, pWith)
	}
	if rWith <= rWithout && pWith <= pWithout {
		t.Errorf("degradation does not help: %.4f/%.4f vs %.4f/%.4f", rWith, pWith, rWithout, pWithout)
	}
	var degraded bool
	for _, s := range sum.Sources {
		if s.Source == "gw-1" && s.Degraded {
			degraded = true
		} else if s.Degraded || s.Transitions > 0 {
			t.Errorf("in-sync source %s degraded", s.Source)
		}
	}
	if !degraded {
		t.Error("gw-1 was not degraded")
	}
}
