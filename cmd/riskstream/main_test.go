package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/riskstream/riskstream/broker"
	"github.com/spf13/cobra"
)

// run executes the CLI with args as a user would, returning stdout and the
// error main would print.
func run(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(strings.NewReader(stdin))
	err := cmd.Execute()
	return out.String(), err
}

func TestCheck(t *testing.T) {
	out, err := run(t, "", "check", "../../testdata/rules.yaml")
	if err != nil || !strings.Contains(out, "ok: 3 rules, 1 heatmaps") {
		t.Fatalf("check of the bundled rules: %q, %v", out, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("rules:\n  - name: r\n    key: []\n    window: {type: tumbling, size: -1s}\n    aggregate: count\n    threshold: 1\n    action: deny\n"), 0o644)
	_, err = run(t, "", "check", bad)
	if err == nil || !strings.Contains(err.Error(), bad+":3:") || !strings.Contains(err.Error(), bad+":4:") {
		t.Fatalf("a bad file must fail with every problem as file:line: %v", err)
	}
}

func TestReplayCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	out, err := run(t, "", "replay", "--rules", "../../testdata/rules.yaml", "--out", dir, "../../testdata/requests.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"records   20000", "decisions pay-burst", "events/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"decisions.jsonl", "heatmaps.jsonl", "late.jsonl", "dlq.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if _, err := run(t, "", "replay", "--rules", "../../testdata/rules.yaml", "--out", dir, "missing.jsonl"); err == nil {
		t.Error("a missing input must fail")
	}
	if _, err := run(t, "", "replay", "--out", dir, "x.jsonl"); err == nil {
		t.Error("--rules is required")
	}
	for _, flag := range []string{"--shards=-3", "--shards=0", "--cache-slots=-1"} {
		_, err := run(t, "", "replay", "--rules", "../../testdata/rules.yaml", "--out", dir, flag, "../../testdata/requests.jsonl.gz")
		if name, _, _ := strings.Cut(flag, "="); err == nil || !strings.Contains(err.Error(), name+" must be at least 1") {
			t.Errorf("replay %s: err = %v, want it refused", flag, err)
		}
	}
}

// TestReportCommand: replay --report writes report.html beside the
// outputs, the page report makes of them, as a file only others may read
// too; report refuses a folder without outputs.
func TestReportCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	out, err := run(t, "", "replay", "--rules", "../../testdata/rules.yaml", "--out", dir, "--report", "../../testdata/requests.jsonl.gz")
	if err != nil || !strings.Contains(out, "report    "+filepath.Join(dir, "report.html")) {
		t.Fatalf("replay --report: %v\n%s", err, out)
	}
	other := filepath.Join(t.TempDir(), "replay.html")
	if out, err := run(t, "", "report", dir, "-o", other); err != nil || !strings.Contains(out, other) {
		t.Fatalf("report -o: %v\n%s", err, out)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	b, _ := os.ReadFile(other)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Errorf("replay --report wrote %d bytes, report %d: want the same page", len(a), len(b))
	}
	if fi, err := os.Stat(other); err != nil || fi.Mode().Perm()&0o044 != 0o044 {
		t.Errorf("report's file: %v, %v: want it readable by others, as the outputs are", fi.Mode(), err)
	}
	if _, err := run(t, "", "report", t.TempDir()); err == nil || !strings.Contains(err.Error(), "heatmaps.jsonl") {
		t.Errorf("report of a folder without outputs: %v, want an error naming heatmaps.jsonl", err)
	}
}

// TestGenPipesIntoReplay: gen to stdout is deterministic and replay reads it
// from stdin.
func TestGenPipesIntoReplay(t *testing.T) {
	a, err := run(t, "", "gen", "--events", "500", "--seed", "3")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := run(t, "", "gen", "--events", "500", "--seed", "3")
	if a != b || strings.Count(a, "\n") != 500 {
		t.Fatalf("gen is not deterministic or wrote %d lines", strings.Count(a, "\n"))
	}
	out, err := run(t, a, "replay", "--rules", "../../testdata/rules.yaml", "--out", t.TempDir(), "-")
	if err != nil || !strings.Contains(out, "records   500") {
		t.Fatalf("replay from stdin: %q, %v", out, err)
	}
	if _, err := run(t, "", "gen", "--clock", "nonsense"); err == nil {
		t.Error("a bad --clock must fail")
	}
}

// TestProduceOversizedLine: produce sends the lines around one too large,
// reports it on stderr by file and line, and fails (main exits 1).
func TestProduceOversizedLine(t *testing.T) {
	b := startInputBroker(t)
	file := filepath.Join(t.TempDir(), "in.jsonl")
	big := `{"id":"big","ts":2,"pad":"` + strings.Repeat("x", 300) + `"}`
	os.WriteFile(file, []byte(`{"id":"a","ts":1}`+"\n"+big+"\n"+`{"id":"c","ts":3}`+"\n"), 0o644)
	cmd := newRootCmd()
	var stderr bytes.Buffer
	cmd.SetArgs([]string{"produce", "--brokers", b.Addr(), "--max-message-bytes", "200", file})
	cmd.SetOut(io.Discard)
	cmd.SetErr(&stderr)
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), file+":2") {
		t.Fatalf("produce with a line too large: %v", err)
	}
	if !strings.Contains(stderr.String(), "line=2") || !strings.Contains(stderr.String(), "records=2 ") {
		t.Fatalf("stderr does not report the line and the records sent:\n%s", stderr.String())
	}
}

// TestVersion: the version command prints the build, one fact a line.
func TestVersion(t *testing.T) {
	out, err := run(t, "", "version")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "riskstream ") || !strings.HasPrefix(lines[1], "revision ") ||
		!strings.HasPrefix(lines[2], "committed ") || !strings.HasPrefix(lines[3], "go         go1.") {
		t.Fatalf("version printed:\n%s", out)
	}
}

// TestCheckWarnsSlideLargerThanSize: a sliding window whose slide is
// larger than its size passes check with a warning on stderr naming the
// line.
func TestCheckWarnsSlideLargerThanSize(t *testing.T) {
	file := filepath.Join(t.TempDir(), "gaps.yaml")
	os.WriteFile(file, []byte("heatmaps:\n  - name: h\n    key: [api]\n    field: latency_ms\n    window: {type: sliding, size: 1s,\n      slide: 5s}\n    buckets: [1]\n"), 0o644)
	cmd := newRootCmd()
	var stdout, stderr bytes.Buffer
	cmd.SetArgs([]string{"check", file})
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("check refused a valid file: %v", err)
	}
	if want := "warning: " + file + ":6: slide 5s is larger than size 1s"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr = %q, want it to contain %q", stderr.String(), want)
	}
	if !strings.Contains(stdout.String(), "ok: 0 rules, 1 heatmaps") {
		t.Errorf("stdout = %q", stdout.String())
	}

	// A job logs the warning at start.
	cmd = newRootCmd()
	stderr.Reset()
	cmd.SetArgs([]string{"replay", "--rules", file, "--out", t.TempDir(), "-"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(&stderr)
	cmd.SetIn(strings.NewReader(`{"id":"a","ts":1,"api":"/pay","latency_ms":1}` + "\n"))
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "level=WARN") || !strings.Contains(stderr.String(), file+":6: slide 5s") {
		t.Errorf("replay did not log the warning:\n%s", stderr.String())
	}
}

// TestBrokersFlag: run and produce take --brokers the same way, as a list
// given comma-separated (blanks dropped) or by repeating the flag.
func TestBrokersFlag(t *testing.T) {
	for _, cmd := range []*cobra.Command{newRunCmd(), newProduceCmd()} {
		if err := cmd.ParseFlags([]string{"--brokers", "a:9092, b:9092,", "--brokers", "c:9092"}); err != nil {
			t.Fatalf("%s: %v", cmd.Name(), err)
		}
		v, err := cmd.Flags().GetStringSlice("brokers")
		if err != nil {
			t.Fatalf("%s --brokers is not a list: %v", cmd.Name(), err)
		}
		if got := strings.Join(brokerList(v), " "); got != "a:9092 b:9092 c:9092" {
			t.Errorf("%s --brokers gives %q", cmd.Name(), got)
		}
	}
}

// TestDefaultStateDir: run's state lives in one folder per user, not in
// the working directory.
func TestDefaultStateDir(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/var/xdg")
	if got := defaultStateDir(); got != filepath.Join("/var/xdg", "riskstream") {
		t.Errorf("with XDG_STATE_HOME: %s", got)
	}
	home := t.TempDir()
	t.Setenv("XDG_STATE_HOME", "relative/is/ignored")
	t.Setenv("HOME", home)
	if got := defaultStateDir(); got != filepath.Join(home, ".local", "state", "riskstream") {
		t.Errorf("without XDG_STATE_HOME: %s", got)
	}
	if def := newRunCmd().Flags().Lookup("state-dir").DefValue; !filepath.IsAbs(def) {
		t.Errorf("run --state-dir defaults to %q, a path relative to the working directory", def)
	}
}

// TestHealthcheck: exit 0 when /healthz answers 200, an error naming the
// answer or the failure otherwise.
func TestHealthcheck(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	if _, err := run(t, "", "healthcheck", "--url", srv.URL+"/healthz"); err != nil {
		t.Errorf("healthy job: %v", err)
	}
	status = http.StatusServiceUnavailable
	if _, err := run(t, "", "healthcheck", "--url", srv.URL+"/healthz"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("unhealthy job: err = %v, want the 503", err)
	}
	if _, err := run(t, "", "healthcheck", "--url", "http://127.0.0.1:1/healthz", "--timeout", "2s"); err == nil {
		t.Error("no job: healthcheck succeeded")
	}
}

// startInputBroker starts a development broker with a one-partition input
// topic, stopped when the test ends.
func startInputBroker(t *testing.T) *broker.Broker {
	t.Helper()
	b, err := broker.Start(broker.Options{Addr: "127.0.0.1:0", Topics: map[string]int32{"requests": 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// TestReplayShadowRule: a rule in mode shadow decides what the same rule
// enforcing does, its decisions marked, and the summary tells them apart.
func TestReplayShadowRule(t *testing.T) {
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	body := "    key: [user]\n    window: {type: sliding, size: 60s, slide: 1s}\n    aggregate: count\n    threshold: 5\n    action: deny\n"
	os.WriteFile(rulesFile, []byte("rules:\n  - name: burst\n"+body+"  - name: burst-watched\n"+body+"    mode: shadow\n"), 0o644)
	out, err := run(t, "", "replay", "--rules", rulesFile, "--out", dir, "../../testdata/requests.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	events := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var d struct{ EventID, Rule, Mode string }
		if err := json.Unmarshal([]byte(strings.ReplaceAll(line, "event_id", "eventid")), &d); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if (d.Rule == "burst-watched") != (d.Mode == "shadow") {
			t.Fatalf("decision of %s with mode %q: %s", d.Rule, d.Mode, line)
		}
		events[d.Rule] = append(events[d.Rule], d.EventID)
	}
	if n := len(events["burst"]); n == 0 || !slices.Equal(events["burst"], events["burst-watched"]) {
		t.Errorf("enforcing rule decided %d events, the shadow copy %d, or others", n, len(events["burst-watched"]))
	}
	for _, want := range []string{
		fmt.Sprintf("decisions %-24s %d\n", "burst", len(events["burst"])),
		fmt.Sprintf("decisions %-24s %d (shadow)\n", "burst-watched", len(events["burst-watched"])),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

// TestCheckDiff: check --diff says which rules keep their state, restart,
// go and come, as the engine decides it, and refuses a change a reload
// cannot make.
func TestCheckDiff(t *testing.T) {
	old, err := os.ReadFile("../../testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(old), "threshold: 5 ", "threshold: 4 ", 1)                // pay-burst: kept
	edited = strings.Replace(edited, "size: 1m}", "size: 30s}", 1)                             // user-spend: restarted
	edited = strings.Replace(edited, "name: device-session-scraping", "name: device-burst", 1) // removed, added
	newPath := filepath.Join(t.TempDir(), "new.yaml")
	os.WriteFile(newPath, []byte(edited), 0o644)
	out, err := run(t, "", "check", "--diff", "../../testdata/rules.yaml", newPath)
	if err != nil {
		t.Fatal(err)
	}
	want := "2 kept with their state, 1 restarted empty, 1 removed, 1 added\n" +
		"kept       rule \"pay-burst\"\nkept       heatmap \"api-latency\"\n" +
		"restarted  rule \"user-spend\": its definition changed, its state starts empty\n" +
		"removed    rule \"device-session-scraping\": its state is deleted\n" +
		"added      rule \"device-burst\"\n"
	if !strings.HasSuffix(out, want) {
		t.Errorf("check --diff:\n%s\nwant it to end with:\n%s", out, want)
	}
	os.WriteFile(newPath, []byte(strings.Replace(string(old), "out_of_orderness: 2s", "out_of_orderness: 3s", 1)), 0o644)
	if _, err := run(t, "", "check", "--diff", "../../testdata/rules.yaml", newPath); err == nil || !strings.Contains(err.Error(), "restart") {
		t.Errorf("check --diff of another out_of_orderness: %v, want a refusal", err)
	}
	if _, err := run(t, "", "check", "--diff", "../../testdata/rules.yaml"); err == nil {
		t.Error("check --diff needs two files")
	}
}
