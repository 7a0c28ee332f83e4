package stream

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/produce"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// reloadedRules is testdata/rules.yaml after an edit: pay-burst with
// another threshold and action (its state kept), user-spend over another
// window (restarted), device-session-scraping removed, a ratio rule added,
// the heatmap unchanged.
const reloadedRules = `
watermark:
  out_of_orderness: 2s
  idle_timeout: 10s
  allowed_lateness: 0s
  max_ahead: 2h
rules:
  - name: pay-ratio
    key: [user]
    window: {type: tumbling, size: 1m}
    aggregate: ratio
    match: {api: /pay}
    min_events: 3
    threshold: 0.5
    action: review
  - name: pay-burst
    where: {api: /pay}
    key: [user]
    window: {type: sliding, size: 60s, slide: 1s}
    aggregate: count
    threshold: 4
    action: block
  - name: user-spend
    where: {api: /pay, channel: [alipay, wechat, card]}
    key: [user]
    window: {type: tumbling, size: 30s}
    aggregate: sum:amount
    threshold: 300
    action: review
heatmaps:
  - name: api-latency
    key: [api]
    field: latency_ms
    window: {type: tumbling, size: 10s}
    buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
`

// TestDistributedReload: two instances of a distributed job share the
// bundled input, routed by the bundled rules; the first instance's rules
// file changes halfway, and both take the new rules before the second
// half arrives: the decisions are those of one engine reloaded between
// the halves, each once (the state of the rules whose definition is
// unchanged kept, the changed rule restarted, the removed gone, the added
// deciding). A file a reload cannot take (another watermark) is refused,
// and changes nothing.
func TestDistributedReload(t *testing.T) {
	if testing.Short() {
		t.Skip("live test")
	}
	lines := testinput.BundledLines(t)
	cut := len(lines) / 2
	before, err := rules.Load("../testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	after, err := rules.Parse("reloaded.yaml", []byte(reloadedRules))
	if err != nil {
		t.Fatal(err)
	}
	first, all := reloadedDecisions(t, before, after, lines, cut)

	dir := t.TempDir()
	halves := []string{filepath.Join(dir, "first.jsonl"), filepath.Join(dir, "second.jsonl")}
	for i, part := range [][][]byte{lines[:cut], lines[cut:]} {
		if err := os.WriteFile(halves[i], append(bytes.Join(part, []byte("\n")), '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	broker := testbroker.Start(t, 1)
	produceTo := func(path string) {
		t.Helper()
		st, err := produce.Run(context.Background(), produce.Options{File: path, Brokers: []string{broker}})
		if err != nil || st.Failed != 0 {
			t.Fatalf("produce %s: %+v, %v", path, st, err)
		}
	}
	// Each instance has its own copy of the rules file, as on machines of
	// their own.
	var regs []*prometheus.Registry
	var files []string
	var stops []func()
	for i := range 2 {
		path := filepath.Join(dir, fmt.Sprintf("rules-%d.yaml", i))
		if err := os.WriteFile(path, before.Source, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := rules.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		regs, files = append(regs, reg), append(files, path)
		stops = append(stops, startJob(t, RunOptions{Brokers: []string{broker}, Distributed: true, RepartitionPartitions: 4,
			CheckpointInterval: 100 * time.Millisecond, Registry: reg, Config: cfg, WatchRules: true}))
	}
	sum := func(name string, label ...string) float64 {
		n := 0.0
		for _, reg := range regs {
			if len(label) > 0 {
				n += metricOf(t, reg, name, label[0])
			} else {
				n += metricSum(t, reg, name)
			}
		}
		return n
	}
	waitFor := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !done(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited a minute for %s", what)
			}
		}
	}

	produceTo(halves[0])
	waitFor("the first half routed and decided", func() bool {
		return sum("riskstream_routed_records_total") >= float64(cut) && len(readTopic(t, broker, "decisions")) >= len(first)
	})
	// A file with another watermark is refused by the instance that reads
	// it, and changes nothing.
	refused := strings.Replace(string(before.Source), "out_of_orderness: 2s", "out_of_orderness: 5s", 1)
	writeRules(t, files[1], refused)
	waitFor("the refusal", func() bool { return metricOf(t, regs[1], "riskstream_rules_reloads_total", "refused") == 1 })
	writeRules(t, files[0], reloadedRules)
	waitFor("both instances to take the new rules", func() bool {
		return metricOf(t, regs[0], "riskstream_rules_reloads_total", "applied") == 1 &&
			metricOf(t, regs[1], "riskstream_rules_reloads_total", "applied") == 1
	})
	produceTo(halves[1])
	waitRecords(t, broker, "decisions", len(all))
	for _, stop := range stops {
		stop()
	}
	got := liveDecisions(t, broker)
	slices.Sort(got)
	compareDecisions(t, got, all)
	if n := sum("riskstream_rules_reloads_total", "applied"); n != 2 {
		t.Errorf("reloads applied: %v over both instances, want one each", n)
	}
}

// writeRules replaces a rules file, its modification time a second later
// than before, so that a watch sees it changed however coarse the file
// system's clock.
func writeRules(t *testing.T, path, text string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	later := fi.ModTime().Add(time.Second)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
}

// reloadedDecisions returns what one engine decides with rules before on
// lines[:cut], and on all lines when it reloads after between the halves,
// each sorted.
func reloadedDecisions(t *testing.T, before, after *rules.Config, lines [][]byte, cut int) (first, all []string) {
	t.Helper()
	rec := testinput.NewRecorder()
	e, err := engine.New(engine.Options{Config: before, Backend: slotstore.NewMemBackend(), Output: rec})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	take := func() {
		for _, l := range strings.Split(rec.Take(), "\n") {
			if d, ok := strings.CutPrefix(l, "decision "); ok {
				out = append(out, d)
			}
		}
	}
	for i, l := range lines {
		if i == cut {
			take()
			first = slices.Clone(out)
			if _, err := e.Reload(after); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Process(&engine.Record{Value: l}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Finish(); err != nil {
		t.Fatal(err)
	}
	take()
	slices.Sort(first)
	slices.Sort(out)
	return first, out
}
