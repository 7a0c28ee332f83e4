package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/console"
	"github.com/riskstream/riskstream/gen"
	"github.com/riskstream/riskstream/internal/headless"
	"github.com/riskstream/riskstream/replay"
	"github.com/riskstream/riskstream/rules"
)

const (
	bundledRules = "../testdata/rules.yaml"
	bundledInput = "../testdata/requests.jsonl.gz"
)

// replayOf runs a replay of input with the bundled rules and returns its
// output folder.
func replayOf(t *testing.T, input string) string {
	t.Helper()
	cfg, err := rules.Load(bundledRules)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	_, err = replay.Run(context.Background(), replay.Options{Config: cfg, Inputs: []string{input}, OutDir: out,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// report draws the outputs in dir.
func report(t *testing.T, dir string) []byte {
	t.Helper()
	r, err := console.LoadReport(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := console.WriteReport(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// lines reads the records of an output file.
func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// checkCells compares the heatmap cells of a page with those of the
// heatmaps records, every one both ways.
func checkCells(t *testing.T, page string, records []string) int {
	t.Helper()
	got, err := headless.DOMCells(page)
	if err != nil {
		t.Fatal(err)
	}
	want, err := headless.RecordCells(records)
	if err != nil {
		t.Fatal(err)
	}
	for c, n := range want {
		if g, ok := got[c]; !ok || g != n {
			t.Errorf("cell %+v: the page has %d (drawn: %v), the heatmaps output %d", c, g, ok, n)
		}
	}
	for c := range got {
		if _, ok := want[c]; !ok {
			t.Errorf("cell %+v drawn, not in the heatmaps output", c)
		}
	}
	return len(want)
}

// TestReportOfTestdata: the report of the bundled workload's replay is the
// same bytes from two replays, and draws every bucket of every heatmap
// window the replay wrote, with its count.
func TestReportOfTestdata(t *testing.T) {
	a, b := replayOf(t, bundledInput), replayOf(t, bundledInput)
	first, second := report(t, a), report(t, b)
	if !bytes.Equal(first, second) {
		t.Fatalf("two reports of the same replay differ (%d and %d bytes)", len(first), len(second))
	}
	if again := report(t, a); !bytes.Equal(first, again) {
		t.Fatal("two reports of the same folder differ")
	}
	if n := checkCells(t, string(first), lines(t, filepath.Join(a, "heatmaps.jsonl"))); n == 0 {
		t.Fatal("the replay wrote no heatmap cell")
	}
	for _, want := range []string{"Late: 23", "Dead letters: 39", "No source was degraded"} {
		if !bytes.Contains(first, []byte(want)) {
			t.Errorf("the report does not say %q", want)
		}
	}
	if bytes.Contains(first, []byte("http://")) || bytes.Contains(first, []byte("https://")) {
		t.Error("the report refers to a network address; it must need none")
	}
}

// TestReportSkewPeriods: a workload whose gw-1 clock steps 200 ms ahead
// 30 s in is reported degraded from the transition replay recorded in
// skew.jsonl, to the end.
func TestReportSkewPeriods(t *testing.T) {
	o := gen.DefaultOptions()
	o.Events, o.Users, o.Rate = 9000, 400, 300
	o.Clocks = []gen.Clock{{Source: "gw-1", Step: 200 * time.Millisecond, StepAt: 10 * time.Second}}
	input := filepath.Join(t.TempDir(), "skewed.jsonl")
	f, err := os.Create(input)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gen.Generate(f, o); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dir := replayOf(t, input)
	type transition struct {
		Source   string `json:"source"`
		Degraded bool   `json:"degraded"`
		At       int64  `json:"at"`
	}
	var transitions []transition
	for _, l := range lines(t, filepath.Join(dir, "skew.jsonl")) {
		var tr transition
		if err := json.Unmarshal([]byte(l), &tr); err != nil {
			t.Fatal(err)
		}
		transitions = append(transitions, tr)
	}
	if len(transitions) != 1 || transitions[0].Source != "gw-1" || !transitions[0].Degraded {
		t.Fatalf("skew.jsonl: %+v, want gw-1 degraded once", transitions)
	}
	r, err := console.LoadReport(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Skew) != 1 || r.Skew[0].Source != "gw-1" || len(r.Skew[0].Periods) != 1 {
		t.Fatalf("report's skew: %+v, want one period of gw-1", r.Skew)
	}
	p := r.Skew[0].Periods[0]
	if p.From != transitions[0].At || p.To != r.To {
		t.Errorf("gw-1 degraded %d–%d, want from the transition at %d to the end %d", p.From, p.To, transitions[0].At, r.To)
	}
	if r.Processing == 0 {
		t.Error("no decision on a re-timed event counted")
	}
	var page bytes.Buffer
	if err := console.WriteReport(&page, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), `class="period"`) || !strings.Contains(page.String(), `class="degraded-mark"`) {
		t.Error("the report draws neither the degraded period nor the windows with re-timed events")
	}
}

// TestReportRefusesBadOutputs: a line that is not a record is an error
// naming its file and line; a folder without outputs is an error.
func TestReportRefusesBadOutputs(t *testing.T) {
	dir := t.TempDir()
	if _, err := console.LoadReport(dir); err == nil || !strings.Contains(err.Error(), "heatmaps.jsonl") {
		t.Errorf("a folder without outputs: %v, want an error naming heatmaps.jsonl", err)
	}
	os.WriteFile(filepath.Join(dir, "heatmaps.jsonl"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "decisions.jsonl"), []byte("{\"rule\":\"r\",\"key\":{\"u\":\"a\"}}\nnot json\n"), 0o644)
	_, err := console.LoadReport(dir)
	if err == nil || !strings.Contains(err.Error(), "decisions.jsonl:2") {
		t.Errorf("a bad line: %v, want an error naming decisions.jsonl:2", err)
	}
}

// TestReportCapsHeatmapKeys: of more heatmap keys than a report draws, the
// ones with the most values are drawn, and the page says how many are not.
func TestReportCapsHeatmapKeys(t *testing.T) {
	dir := t.TempDir()
	var heatmaps strings.Builder
	const keys = 50
	for k := range keys {
		// Key k has k+1 values.
		fmt.Fprintf(&heatmaps, `{"heatmap":"lat","key":{"user":"u%02d"},"window":{"start":0,"end":1000},"revision":0,"count":%d,"p50":1,"p99":1,"buckets":[{"le":10,"count":%d},{"le":"+Inf","count":0}],"degraded_events":0}`+"\n", k, k+1, k+1)
	}
	os.WriteFile(filepath.Join(dir, "heatmaps.jsonl"), []byte(heatmaps.String()), 0o644)
	os.WriteFile(filepath.Join(dir, "decisions.jsonl"), nil, 0o644)
	r, err := console.LoadReport(dir)
	if err != nil {
		t.Fatal(err)
	}
	hidden := keys - len(r.Heatmaps)
	if r.HiddenHeatmaps != hidden || hidden <= 0 {
		t.Fatalf("%d keys drawn, %d hidden, of %d", len(r.Heatmaps), r.HiddenHeatmaps, keys)
	}
	for _, s := range r.Heatmaps {
		// The keys with the fewest values are those left out.
		if s.Key < fmt.Sprintf("user=u%02d", hidden) {
			t.Errorf("key %s drawn, one with fewer values than those left out", s.Key)
		}
	}
	page := report(t, dir)
	if want := fmt.Sprintf("%d more are not drawn", hidden); !bytes.Contains(page, []byte(want)) {
		t.Errorf("the report does not say %q", want)
	}
}

// TestReportTopKeys: the report's top keys are those with the most
// decisions per rule, named as name=value pairs in the key's order, the
// most first, ties by rule and key.
func TestReportTopKeys(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "heatmaps.jsonl"), nil, 0o644)
	var decisions strings.Builder
	for _, d := range []struct {
		rule, key string
		n         int
	}{{"burst", `{"user":"u1"}`, 3}, {"burst", `{"user":"u2"}`, 5}, {"scrape", `{"device":"d1","api":"/pay"}`, 3}, {"burst", `{"user":7}`, 1}} {
		for range d.n {
			fmt.Fprintf(&decisions, `{"rule":%q,"action":"deny","event_ts":1000,"key":%s}`+"\n", d.rule, d.key)
		}
	}
	os.WriteFile(filepath.Join(dir, "decisions.jsonl"), []byte(decisions.String()), 0o644)
	r, err := console.LoadReport(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range r.TopKeys {
		got = append(got, fmt.Sprintf("%s %s %d", k.Rule, k.Key, k.Count))
	}
	want := []string{"burst user=u2 5", "burst user=u1 3", "scrape device=d1, api=/pay 3", "burst user=7 1"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("top keys %q, want %q", got, want)
	}
}
