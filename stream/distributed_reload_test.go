package stream

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/produce"
	"github.com/riskstream/riskstream/replay"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/ruleslog"
	"github.com/riskstream/riskstream/windows/slotstore"
	"github.com/segmentio/kafka-go"
)

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
	before, after, halves, cut, first, all := reloadCase(t)
	dir := t.TempDir()
	broker := testbroker.Start(t, 1)
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

	produceFile(t, broker, halves[0])
	waitUntil(t, "the first half routed and decided", func() bool {
		return sum("riskstream_routed_records_total") >= float64(cut) && len(readTopic(t, broker, "decisions")) >= len(first)
	})
	// A file with another watermark is refused by the instance that reads
	// it, and changes nothing.
	refused := strings.Replace(string(before.Source), "out_of_orderness: 2s", "out_of_orderness: 5s", 1)
	writeRules(t, files[1], refused)
	waitUntil(t, "the refusal", func() bool { return metricOf(t, regs[1], "riskstream_rules_reloads_total", "refused") == 1 })
	// Records of the rules topic that are not rules the job may take,
	// written by something else than an instance, are skipped alike by
	// every instance: the proposal after them is version 2.
	changed := strings.Replace(string(after.Source), "out_of_orderness: 2s", "out_of_orderness: 9s", 1)
	_, bad := ruleslog.EncodeVersion(ruleslog.Version{Version: 2, File: "bad.yaml", Source: []byte(changed)})
	client := &kafka.Client{Addr: kafka.TCP(broker)}
	if _, err := kafkaio.Produce(context.Background(), client, "riskstream-rules", 0,
		[]kafka.Record{{Key: kafka.NewBytes([]byte("x")), Value: kafka.NewBytes([]byte("not json"))}, {Key: kafka.NewBytes([]byte("2")), Value: kafka.NewBytes(bad)}}); err != nil {
		t.Fatal(err)
	}
	writeRules(t, files[0], string(after.Source))
	written := time.Now()
	waitUntil(t, "both instances to take the new rules", func() bool {
		return metricOf(t, regs[0], "riskstream_rules_reloads_total", "applied") == 1 &&
			metricOf(t, regs[1], "riskstream_rules_reloads_total", "applied") == 1
	})
	t.Logf("both instances took the new rules %v after the file changed", time.Since(written).Round(time.Millisecond))
	for i, reg := range regs {
		if v := metricSum(t, reg, "riskstream_rules_version"); v != 2 {
			t.Errorf("instance %d: riskstream_rules_version %v, want 2", i, v)
		}
	}
	produceFile(t, broker, halves[1])
	waitRecords(t, broker, "decisions", len(all))
	for _, stop := range stops {
		stop()
	}
	got := liveDecisions(t, broker)
	slices.Sort(got)
	compareDecisions(t, got, all)
	// A replay of the topic with the job's rules topic reloads where the
	// job did, and makes its decisions.
	compareDecisions(t, got, replayWithRulesTopic(t, broker))
	if n := sum("riskstream_rules_reloads_total", "applied"); n != 2 {
		t.Errorf("reloads applied: %v over both instances, want one each", n)
	}
}

// TestDistributedReloadPartitioned: two instances on an input of four
// partitions take new rules halfway through the bundled input; a replay of
// the topic with the job's rules topic, which takes the partitions in the
// single job's order and reloads where the job's router switched, makes
// the job's decisions, each once.
func TestDistributedReloadPartitioned(t *testing.T) {
	if testing.Short() {
		t.Skip("live test")
	}
	before, after, halves, cut, _, _ := reloadCase(t)
	broker := startPartitionedBroker(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, before.Source, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := rules.Load(path) // the file both instances watch
	if err != nil {
		t.Fatal(err)
	}
	var regs []*prometheus.Registry
	for range 2 {
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		stop := startJob(t, RunOptions{Brokers: []string{broker}, Distributed: true, RepartitionPartitions: 4,
			CheckpointInterval: 100 * time.Millisecond, Registry: reg, Config: cfg, WatchRules: true})
		defer stop()
	}
	produceFile(t, broker, halves[0])
	waitUntil(t, "the first half routed", func() bool {
		return metricSum(t, regs[0], "riskstream_routed_records_total")+metricSum(t, regs[1], "riskstream_routed_records_total") >= float64(cut)
	})
	writeRules(t, path, string(after.Source))
	waitUntil(t, "both instances to take the new rules", func() bool {
		return metricOf(t, regs[0], "riskstream_rules_reloads_total", "applied") == 1 &&
			metricOf(t, regs[1], "riskstream_rules_reloads_total", "applied") == 1
	})
	produceFile(t, broker, halves[1])
	want := replayWithRulesTopic(t, broker)
	waitRecords(t, broker, "decisions", len(want))
	got := liveDecisions(t, broker)
	slices.Sort(got)
	compareDecisions(t, got, want)
}

// waitUntil polls done until it holds, failing after a minute.
func waitUntil(t *testing.T, what string, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !done(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}

// replayWithRulesTopic returns the decisions of a replay of the input
// topic with the rules of the job's rules topic, sorted, without where
// their events came from.
func replayWithRulesTopic(t *testing.T, broker string) []string {
	t.Helper()
	out := t.TempDir()
	runReplay(t, replay.Options{Brokers: []string{broker}, Topic: "requests", RulesTopic: "riskstream-rules", OutDir: out})
	b, err := os.ReadFile(filepath.Join(out, "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return withoutSource(strings.Split(strings.TrimSpace(string(b)), "\n"))
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

// TestDistributedReloadTakeover: two instances, processes of their own,
// take new rules halfway through the bundled input; then one is killed,
// and the other takes its state over, restored with the new rules from
// the changelog or a standby copy; then a third joins with the old rules
// file, older than the job's rules, which stand, and takes some state
// over. The decisions are those of one engine reloaded between the
// halves, each once.
func TestDistributedReloadTakeover(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	before, after, halves, cut, _, all := reloadCase(t)
	dir := t.TempDir()
	d := &distributedRun{t: t, bin: buildBinary(t), addr: testbroker.Start(t, 1)}
	var files []string
	for i := range 3 {
		path := filepath.Join(dir, fmt.Sprintf("rules-%d.yaml", i))
		if err := os.WriteFile(path, before.Source, 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, path)
	}
	old := time.Now().Add(-time.Hour) // the third instance's copy: stale
	if err := os.Chtimes(files[2], old, old); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		d.start("--rules", files[i])
	}
	produceFile(t, d.addr, halves[0])
	waitLogs := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !done(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				var b strings.Builder
				for i, l := range d.logs {
					fmt.Fprintf(&b, "instance %d:\n%s\n", i, l.String())
				}
				t.Fatalf("waited a minute for %s:\n%s", what, b.String())
			}
		}
	}
	waitLogs("the first half routed and checkpointed", func() bool { return committed(t, d.addr, 1) >= int64(cut) })
	writeRules(t, files[0], string(after.Source))
	waitLogs("both instances to take the new rules", func() bool {
		return strings.Contains(d.logs[0].String(), "rules reloaded") && strings.Contains(d.logs[1].String(), "rules reloaded")
	})
	// Both have checkpointed since: the killed one's state is in its
	// changelog with the new rules.
	time.Sleep(500 * time.Millisecond)
	d.cmds[1].Process.Signal(syscall.SIGKILL)
	d.cmds[1].Wait()
	waitLogs("the survivor to take the killed instance's state over", func() bool {
		took := tookPartitions.FindAllStringSubmatch(d.logs[0].String(), -1)
		return len(took) > 0 && len(strings.Fields(took[len(took)-1][1])) == 6
	})
	third := d.start("--rules", files[2])
	waitLogs("the third instance to join with the job's rules", func() bool {
		return strings.Contains(d.logs[third].String(), "differs from the job's rules, which stand") &&
			len(tookPartitions.FindAllStringSubmatch(d.logs[third].String(), -1)) > 0
	})
	produceFile(t, d.addr, halves[1])
	waitRecords(t, d.addr, "decisions", len(all))
	d.stopAll()
	got := withoutSource(readTopic(t, d.addr, "decisions"))
	compareDecisions(t, got, all)
	compareDecisions(t, got, replayWithRulesTopic(t, d.addr))
	if strings.Contains(d.logs[third].String(), "rules reloaded") {
		t.Errorf("the instance started with the stale file reloaded the job's rules:\n%s", d.logs[third].String())
	}
}

// TestDistributedRouterResumesBeforeReload: the only instance takes new
// rules halfway through the bundled input and is killed once it has
// written every decision, before any periodic checkpoint of its router;
// the next instance routes the input again from its start, by the first
// rules up to where the first instance switched (the rules topic's note)
// and by the new ones after: its outputs are what was written, and none is
// written again with another value.
func TestDistributedRouterResumesBeforeReload(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	before, after, halves, _, first, all := reloadCase(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, before.Source, 0o600); err != nil {
		t.Fatal(err)
	}
	d := &distributedRun{t: t, bin: buildBinary(t), addr: testbroker.Start(t, 1), rules: path}
	killed := d.start("--checkpoint-interval", "1h")
	produceFile(t, d.addr, halves[0])
	waitRecords(t, d.addr, "decisions", len(first))
	writeRules(t, path, string(after.Source))
	for deadline := time.Now().Add(time.Minute); !strings.Contains(d.logs[killed].String(), "rules reloaded"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no reload:\n%s", d.logs[killed].String())
		}
	}
	produceFile(t, d.addr, halves[1])
	killOnceWritten(t, d.cmds[killed], d.logs[killed], d.addr, len(all))
	next := d.start()
	waitCheckpointed(t, d.addr, 1, int64(len(testinput.BundledLines(t))), d.logs[next])
	d.stopAll()
	if !strings.Contains(d.logs[next].String(), "routing by its rules up to where they changed") {
		t.Errorf("the second instance did not route by the first rules up to the switch:\n%s", d.logs[next].String())
	}
	got := withoutSource(readTopic(t, d.addr, "decisions"))
	compareDecisions(t, got, all)
	compareDecisions(t, got, replayWithRulesTopic(t, d.addr))
}

// reloadCase is the case of the reload tests: the bundled rules before,
// testdata/rules-reloaded.yaml after, the bundled input's halves in two
// files (the first of cut lines), and what one engine decides on the
// first half with the rules before, and on both when it reloads between
// them, each sorted.
func reloadCase(t *testing.T) (before, after *rules.Config, halves []string, cut int, first, all []string) {
	t.Helper()
	lines := testinput.BundledLines(t)
	cut = len(lines) / 2
	before, after = testinput.Rules(t), testinput.ReloadedRules(t)
	first, all = reloadedDecisions(t, before, after, lines, cut)
	return before, after, writeHalves(t, t.TempDir(), lines, cut), cut, first, all
}

// writeHalves writes lines[:cut] and lines[cut:] to two files in dir and
// returns their paths.
func writeHalves(t *testing.T, dir string, lines [][]byte, cut int) []string {
	t.Helper()
	halves := []string{filepath.Join(dir, "first.jsonl"), filepath.Join(dir, "second.jsonl")}
	for i, part := range [][][]byte{lines[:cut], lines[cut:]} {
		if err := os.WriteFile(halves[i], append(bytes.Join(part, []byte("\n")), '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return halves
}

// produceFile sends a file's lines to the input topic.
func produceFile(t *testing.T, addr, path string) {
	t.Helper()
	st, err := produce.Run(context.Background(), produce.Options{File: path, Brokers: []string{addr}})
	if err != nil || st.Failed != 0 {
		t.Fatalf("produce %s: %+v, %v", path, st, err)
	}
}

// TestDistributedStartWithDroppedRules: an instance started with a rules
// file edited after the job's rules were written proposes it, as a reload;
// when the edit would delete the state of rules, only with
// --allow-dropped-state, as the single job's restart.
func TestDistributedStartWithDroppedRules(t *testing.T) {
	if testing.Short() {
		t.Skip("live test")
	}
	broker := testbroker.Start(t, 1)
	opts := RunOptions{Brokers: []string{broker}, Distributed: true, RepartitionPartitions: 2, CheckpointInterval: 100 * time.Millisecond}
	first := opts
	first.Registry = prometheus.NewRegistry()
	startJob(t, first)() // the job's rules: version 1, testdata/rules.yaml
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, testinput.ReloadedRules(t).Source, 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Second) // after the job's rules were written, however coarse the file system's clock
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	edited, err := rules.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	refused := opts
	refused.Config, refused.StateDir, refused.Registry = edited, t.TempDir(), prometheus.NewRegistry()
	err = Run(context.Background(), refused)
	if err == nil || !strings.Contains(err.Error(), "--allow-dropped-state") || !strings.Contains(err.Error(), `rule "device-session-scraping" (removed)`) {
		t.Fatalf("a start that would drop state: %v, want a refusal naming the rule and the flag", err)
	}
	allowed := refused
	allowed.AllowDroppedState, allowed.Registry = true, prometheus.NewRegistry()
	stop := startJob(t, allowed)
	for deadline := time.Now().Add(30 * time.Second); metricOf(t, allowed.Registry, "riskstream_rules_reloads_total", "applied") != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the edited file was not taken as the job's rules")
		}
	}
	stop()
}

// TestDistributedSIGHUP: without --watch-rules, an instance proposes its
// rules file when it gets SIGHUP (RunOptions.ReloadRules), and not before.
func TestDistributedSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("live test")
	}
	broker := testbroker.Start(t, 1)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, testinput.Rules(t).Source, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := rules.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	hup := make(chan struct{})
	reg := prometheus.NewRegistry()
	stop := startJob(t, RunOptions{Brokers: []string{broker}, Distributed: true, RepartitionPartitions: 2,
		CheckpointInterval: 100 * time.Millisecond, Registry: reg, Config: cfg, ReloadRules: hup})
	defer stop()
	writeRules(t, path, string(testinput.ReloadedRules(t).Source))
	time.Sleep(600 * time.Millisecond) // more than a watch's look
	if n := metricOf(t, reg, "riskstream_rules_reloads_total", "applied"); n != 0 {
		t.Fatalf("reloaded %v times without SIGHUP or --watch-rules", n)
	}
	hup <- struct{}{}
	for deadline := time.Now().Add(30 * time.Second); metricOf(t, reg, "riskstream_rules_reloads_total", "applied") != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("SIGHUP did not reload the rules")
		}
	}
}
