package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/state"
	"github.com/riskstream/riskstream/stream/internal/jobbase"
)

// editedRules is the bundled rules file after an edit: pay-burst
// unchanged, user-spend over 30 s windows instead of a minute, with a
// lower threshold (its state restarts), device-session-scraping removed, and a shadow copy of
// pay-burst added.
func editedRules(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(bundledRules)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "window: {type: tumbling, size: 1m}", "window: {type: tumbling, size: 30s}", 1)
	s = strings.Replace(s, "threshold: 1000", "threshold: 300", 1)
	start := strings.Index(s, "  - name: device-session-scraping")
	end := strings.Index(s, "  - name: user-spend")
	if start < 0 || end < start || s == string(b) {
		t.Fatal("the bundled rules file is not laid out as this test expects")
	}
	shadow := "  - name: pay-burst-watched\n    where: {api: /pay}\n    key: [user]\n" +
		"    window: {type: sliding, size: 60s, slide: 1s}\n    aggregate: count\n    threshold: 3\n    action: deny\n    mode: shadow\n"
	return s[:start] + shadow + s[end:]
}

// bundledRulesCopy writes the bundled rules to a file of the test's own,
// for the job to watch and the test to edit, and returns its path.
func bundledRulesCopy(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(bundledRules)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// inputEnd is the offset after the last record of the input topic.
func inputEnd(t *testing.T, addr string) int64 {
	t.Helper()
	return kafkatest.EndOffset(t, addr, "requests", 0)
}

// waitMetric waits until a counter written as name{labels} reaches n.
func waitMetric(t *testing.T, reg *prometheus.Registry, name string, n float64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); metricValue(t, reg, name) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v, want %v", name, metricValue(t, reg, name), n)
		}
	}
}

// ofRule keeps the decisions of one rule.
func ofRule(decisions []string, rule string) []string {
	var out []string
	for _, d := range decisions {
		if strings.Contains(d, `"rule":"`+rule+`"`) {
			out = append(out, d)
		}
	}
	return out
}

// checkReloadedDecisions checks the decisions of a job that ran the
// bundled rules, then the edited ones, over the bundled input: the
// unchanged rule decided as a job that never reloaded; the removed rule
// decided nothing once the changed rule used its new windows; the shadow
// rule's decisions are marked. decisions may hold duplicates (a restart).
func checkReloadedDecisions(t *testing.T, decisions []string, want []string) {
	t.Helper()
	got, seen := []string{}, map[string]bool{}
	for _, d := range ofRule(decisions, "pay-burst") {
		if !seen[d] {
			seen[d] = true
			got = append(got, d)
		}
	}
	if w := ofRule(want, "pay-burst"); strings.Join(got, "\n") != strings.Join(w, "\n") {
		t.Errorf("pay-burst, unchanged, made %d decisions over the reload, %d without one", len(got), len(w))
	}
	firstNew, lastRemoved := -1, -1
	for i, d := range decisions {
		var rec struct {
			Rule   string
			Mode   string
			Window struct{ Start, End int64 }
		}
		if err := json.Unmarshal([]byte(d), &rec); err != nil {
			t.Fatal(err)
		}
		switch {
		case rec.Rule == "user-spend" && rec.Window.End-rec.Window.Start == 30_000 && firstNew < 0:
			firstNew = i
		case rec.Rule == "device-session-scraping":
			lastRemoved = i
		case rec.Rule == "pay-burst-watched" && rec.Mode != "shadow":
			t.Errorf("a shadow rule's decision is not marked: %s", d)
		}
	}
	if firstNew < 0 || lastRemoved > firstNew || len(ofRule(decisions, "pay-burst-watched")) == 0 {
		t.Errorf("user-spend's first 30 s window at decision %d, device-session-scraping's last decision at %d, %d shadow decisions",
			firstNew, lastRemoved, len(ofRule(decisions, "pay-burst-watched")))
	}
}

// TestLiveReload: the live job reloads its rules file when it changes,
// between two records: a broken file is refused and the job goes on with
// its rules; then the edited file is taken, and the rule it leaves
// unchanged decides exactly as in a run that never reloaded, while the
// changed one uses its new windows and the removed one decides nothing
// more. SIGHUP reloads a file that did not change, keeping every state.
func TestLiveReload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	want := replayDecisions(t)
	addr := testbroker.Start(t, 1)
	produce := produceHalves(t, addr)
	produce(0)
	rulesPath := bundledRulesCopy(t)
	cfg, err := rules.Load(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	hup := make(chan struct{}, 1)
	stateDir := t.TempDir()
	stop := startJob(t, RunOptions{Config: cfg, Brokers: []string{addr}, CheckpointInterval: 100 * time.Millisecond,
		WatchRules: true, ReloadRules: hup, Registry: reg, StateDir: stateDir})
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	waitCheckpointed(t, addr, 1, inputEnd(t, addr), nil)

	os.WriteFile(rulesPath, []byte(strings.Replace(editedRules(t), "aggregate: count", "aggregate: median", 1)), 0o644)
	waitMetric(t, reg, `riskstream_rules_reloads_total{result="refused"}`, 1)
	if n := metricValue(t, reg, `riskstream_rules_reloads_total{result="applied"}`); n != 0 {
		t.Fatalf("a broken rules file was applied (%v reloads)", n)
	}
	os.WriteFile(rulesPath, []byte(editedRules(t)), 0o644)
	waitMetric(t, reg, `riskstream_rules_reloads_total{result="applied"}`, 1)
	hup <- struct{}{}
	waitMetric(t, reg, `riskstream_rules_reloads_total{result="applied"}`, 2)

	produce(1)
	waitCheckpointed(t, addr, 1, inputEnd(t, addr), nil)
	stop()
	stop = nil
	decisions := liveDecisions(t, addr)
	checkReloadedDecisions(t, decisions, want)
	// The decisions counter follows each rule by name over the reload.
	for _, series := range []struct{ rule, action string }{{"pay-burst", "deny"}, {"user-spend", "review"}} {
		name := fmt.Sprintf(`riskstream_decisions_total{action=%q,rule=%q}`, series.action, series.rule)
		if got, want := metricValue(t, reg, name), len(ofRule(decisions, series.rule)); got != float64(want) {
			t.Errorf("%s is %v, the decisions topic has %d", name, got, want)
		}
	}
	// The shadow rule took the removed rule's place in the file.
	if n, want := metricValue(t, reg, `riskstream_shadow_decisions_total{action="deny",rule="pay-burst-watched"}`),
		len(ofRule(decisions, "pay-burst-watched")); n <= 0 || n != float64(want) {
		t.Errorf("riskstream_shadow_decisions_total of the shadow rule: %v, the decisions topic has %d", n, want)
	}
	// The removed and the changed rule's states (state ids 1 and 2) left
	// the disk too, with their timer entries, without a restart.
	db, err := state.Open(state.Options{Dir: filepath.Join(stateDir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Keys as docs/format/state.md lays them out: a state's starts with its
	// state id, a timer entry's with ff ff and 8 bytes of time before the
	// slot key; the entries of the rules kept show the layout is read right.
	retired := func(id byte) bool { return id == 1 || id == 2 }
	states, timers, keptTimers := 0, 0, 0
	err = db.Seek(nil, func(k, _ []byte) (bool, error) {
		switch {
		case k[0] == 0 && retired(k[1]):
			states++
		case k[0] == 0xff && k[1] == 0xff && len(k) > 12 && k[10] == 0 && retired(k[11]):
			timers++
		case k[0] == 0xff && k[1] == 0xff && len(k) > 12 && k[10] == 0:
			keptTimers++
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if states+timers > 0 {
		t.Errorf("%d states and %d timer entries of the rules the reload removed or changed still stored", states, timers)
	}
	if keptTimers == 0 {
		t.Error("no timer entry of the rules kept found: the test no longer reads the stored layout")
	}
}

// TestLiveReloadSurvivesSIGKILL: a job killed right after it reloaded its
// rules resumes, from the checkpoint the reload made, with the new rules
// and the state they kept.
func TestLiveReloadSurvivesSIGKILL(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	bin := buildBinary(t)
	want := replayDecisions(t)
	addr := testbroker.Start(t, 1)
	produce := produceHalves(t, addr)
	produce(0)
	rulesPath := bundledRulesCopy(t)
	stateDir := t.TempDir()
	start := func() (interface{ Wait() error }, *testinput.LockedBuffer, func(syscall.Signal)) {
		cmd, logs := startProcess(t, bin, "run", "--rules", rulesPath, "--brokers", addr, "--state-dir", stateDir,
			"--metrics-addr", "", "--checkpoint-interval", "200ms")
		return cmd, logs, func(s syscall.Signal) { cmd.Process.Signal(s) }
	}
	cmd, logs, signal := start()
	waitFor(t, logs, "consuming")
	waitCheckpointed(t, addr, 1, inputEnd(t, addr), nil)
	os.WriteFile(rulesPath, []byte(editedRules(t)), 0o644)
	waitFor(t, logs, "rules reloaded")
	signal(syscall.SIGKILL)
	cmd.Wait()

	cmd, logs, signal = start()
	waitFor(t, logs, "resuming from checkpoint")
	if strings.Contains(logs.String(), "rules changed since the checkpoint") {
		t.Errorf("the checkpoint did not record the reload:\n%s", logs.String())
	}
	produce(1)
	waitCheckpointed(t, addr, 1, inputEnd(t, addr), nil)
	signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("clean stop: %v\n%s", err, logs.String())
	}
	checkReloadedDecisions(t, liveDecisions(t, addr), want)
}

// TestRulesWatchSeesEditsBeforeStart: an edit between the parse of the
// rules and the start of the watch is seen at the watch's first look, not
// taken for the rules the job runs.
func TestRulesWatchSeesEditsBeforeStart(t *testing.T) {
	path := bundledRulesCopy(t)
	cfg, err := rules.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(cfg.Source, []byte("threshold: 5"), []byte("threshold: 6"), 1)
	if err := os.WriteFile(path, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	w := jobbase.NewRulesWatch(cfg)
	if !w.Changed(time.Now()) {
		t.Fatal("the watch's first look finds nothing to read")
	}
	if data, changed, err := w.Reread(false); err != nil || !changed || !bytes.Equal(data, edited) {
		t.Fatalf("the edit is taken for the rules parsed (changed %v, err %v)", changed, err)
	}
}

// TestStartRefusesDroppedState: a start on a checkpoint whose rules the
// rules file removes or changes is refused, naming them and the flag,
// before anything is deleted; with AllowDroppedState it starts and drops
// them, as a reload would.
func TestStartRefusesDroppedState(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and a job")
	}
	addr := testbroker.Start(t, 1)
	stateDir := t.TempDir()
	startJob(t, RunOptions{Brokers: []string{addr}, StateDir: stateDir, MetricsAddr: "", Registry: prometheus.NewRegistry()})()
	edited, err := rules.Parse("edited.yaml", []byte(editedRules(t)))
	if err != nil {
		t.Fatal(err)
	}
	opts := RunOptions{Brokers: []string{addr}, StateDir: stateDir, Config: edited, Registry: prometheus.NewRegistry()}
	err = Run(context.Background(), opts)
	for _, want := range []string{`rule "device-session-scraping" (removed)`, `rule "user-spend" (changed)`, "edited.yaml", "--allow-dropped-state"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("start with rules that drop state: %v, want an error naming %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "pay-burst") {
		t.Errorf("the error names a rule kept or added: %v", err)
	}
	opts.AllowDroppedState, opts.Registry = true, prometheus.NewRegistry()
	startJob(t, opts)()
	// The start dropped them: the original rules are now the change.
	opts.Config, opts.AllowDroppedState, opts.Registry = testinput.Rules(t), false, prometheus.NewRegistry()
	if err := Run(context.Background(), opts); err == nil || !strings.Contains(err.Error(), `rule "pay-burst-watched" (removed)`) {
		t.Fatalf("start with the original rules after the edited ones: %v", err)
	}
}
