package stream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/gen"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/produce"
	"github.com/riskstream/riskstream/replay"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/stream/internal/jobbase"
)

// waitRecords reads a one-partition topic until it holds n records or a
// minute passes, and returns them.
func waitRecords(t *testing.T, addr, topic string, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if got := readTopic(t, addr, topic); len(got) >= n || time.Now().After(deadline) {
			return got
		}
	}
}

// TestDistributedOneInstance: one instance of a distributed job decides
// what replay does, handing every record to the states it holds directly,
// and so it does with every record sent through the repartition topic.
func TestDistributedOneInstance(t *testing.T) {
	if testing.Short() {
		t.Skip("live test")
	}
	want := replayDecisions(t)
	for _, hopAll := range []bool{false, true} {
		t.Run(fmt.Sprintf("hopAll=%v", hopAll), func(t *testing.T) { testDistributedOneInstance(t, want, hopAll) })
	}
}

func testDistributedOneInstance(t *testing.T, want []string, hopAll bool) {
	addr := testbroker.Start(t, 1)
	produceBundled(t, addr)
	reg := prometheus.NewRegistry()
	metrics := kafkatest.FreeAddr(t)
	stop := startJob(t, RunOptions{Brokers: []string{addr}, Distributed: true, RepartitionPartitions: 4,
		CheckpointInterval: 200 * time.Millisecond, Registry: reg, MetricsAddr: metrics, Testing: jobbase.Testing{HopAll: hopAll}})
	waitRecords(t, addr, "decisions", len(want))
	got := liveDecisions(t, addr) // each says where its event came from
	slices.Sort(got)
	// The instance's console: what it holds, the rules that fired among
	// them, its heatmaps.
	status := waitConsole(t, metrics, "status", "<td><code>pay-burst</code></td>")
	for _, want := range []string{`<div class="label">health</div><div class="value">ok</div>`, `<section id="p99-now">`} {
		if !strings.Contains(status, want) {
			t.Errorf("the console's figures lack %s", want)
		}
	}
	waitConsole(t, metrics, "heatmaps", `class="cell"`)
	// The whole job's console, read from the output topics, counts the
	// decisions this instance made, all of the job's, and draws its
	// heatmaps.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		mine, whole := firingTotals(waitConsole(t, metrics, "status", "")), firingTotals(waitConsole(t, metrics+"/job", "status", ""))
		if len(mine) > 0 && maps.Equal(mine, whole) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the whole job's console counts %v decisions per rule and action, this instance's %v", whole, mine)
		}
	}
	waitConsole(t, metrics+"/job", "heatmaps", `class="cell"`)
	// A checkpoint publishes the gauges.
	for deadline := time.Now().Add(30 * time.Second); metricSum(t, reg, "riskstream_assigned_partitions") != 5; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("riskstream_assigned_partitions is %v after 30 s, want 5", metricSum(t, reg, "riskstream_assigned_partitions"))
		}
	}
	stop()
	if n := metricSum(t, reg, "riskstream_assigned_partitions"); n != 5 {
		t.Errorf("riskstream_assigned_partitions sums to %v, want 5 (1 input, 4 repartition)", n)
	}
	if at := metricSum(t, reg, "riskstream_last_checkpoint_timestamp_seconds"); at < 1.7e9 {
		t.Errorf("riskstream_last_checkpoint_timestamp_seconds = %v, want when the last checkpoint was durable", at)
	}
	if wm := metricSum(t, reg, "riskstream_watermark_seconds"); wm < 1.7e9 {
		t.Errorf("riskstream_watermark_seconds = %v, want the watermark of the 2024 input", wm)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	skews := 0
	for _, mf := range mfs {
		if mf.GetName() == "riskstream_source_degraded" {
			skews = len(mf.GetMetric())
		}
	}
	if skews == 0 {
		t.Error("no source's skew is published")
	}
	if n := metricSum(t, reg, "riskstream_decisions_total"); int(n) != len(want) {
		t.Errorf("riskstream_decisions_total = %v, want %d", n, len(want))
	}
	local, topic := metricOf(t, reg, "riskstream_repartition_messages_total", "local"), metricOf(t, reg, "riskstream_repartition_messages_total", "topic")
	var sent int
	for p := range 4 {
		sent += len(readPartition(t, addr, "riskstream-repartition", p))
	}
	if hopAll && (local != 0 || topic == 0 || sent != int(topic)) || !hopAll && (local == 0 || topic != 0 || sent != 0) {
		t.Errorf("hopAll %v: %v messages local, %v through the topic, which holds %d", hopAll, local, topic, sent)
	}
	sorted := slices.Clone(want)
	slices.Sort(sorted)
	compareDecisions(t, got, sorted)
}

// firingRow is a row of the console's rules firing: rule, action, and
// the count since start.
var firingRow = regexp.MustCompile(`<tr><td><code>([^<]*)</code></td><td>([^<]*)</td><td class="n">[^<]*</td><td class="n">[^<]*</td><td class="n">([^<]*)</td></tr>`)

// firingTotals returns the decisions since start per rule and action of
// the console's status.
func firingTotals(status string) map[string]string {
	totals := map[string]string{}
	for _, m := range firingRow.FindAllStringSubmatch(status, -1) {
		totals[m[1]+" "+m[2]] = m[3]
	}
	return totals
}

// distributedRun is a test's cluster of distributed instances: processes
// of the riskstream binary on one broker, each with a state directory of
// its own.
type distributedRun struct {
	t     *testing.T
	bin   string
	addr  string
	rules string
	cmds  []*exec.Cmd
	logs  []*testinput.LockedBuffer
}

// start starts one more instance.
func (d *distributedRun) start(flags ...string) int {
	d.t.Helper()
	args := append([]string{"run", "--distributed", "--rules", d.rules, "--brokers", d.addr,
		"--state-dir", d.t.TempDir(), "--metrics-addr", "", "--checkpoint-interval", "100ms", "--repartition-partitions", "6"}, flags...)
	cmd, logs := startProcess(d.t, d.bin, args...)
	d.cmds, d.logs = append(d.cmds, cmd), append(d.logs, logs)
	return len(d.cmds) - 1
}

// stopAll stops every instance still running with SIGTERM and checks that
// each stopped cleanly.
func (d *distributedRun) stopAll() {
	d.t.Helper()
	for i, cmd := range d.cmds {
		if cmd.ProcessState != nil {
			continue
		}
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			d.t.Errorf("instance %d: clean stop: %v\n%s", i, err, d.logs[i].String())
		}
	}
}

// checkOutputs waits for the decisions of want and the heatmaps of the
// windows the last watermark passed, stops every instance, and checks
// that the four outputs are replay's, each record once.
func (d *distributedRun) checkOutputs(want replayed) {
	d.t.Helper()
	got := waitRecords(d.t, d.addr, "decisions", len(want.decisions))
	// The windows the last watermark passed fire on a mark.
	wm, fired := want.maxTS-2000-1, 0
	for _, h := range want.heatmaps {
		if end, _ := strconv.ParseInt(windowEnd.FindStringSubmatch(h)[1], 10, 64); end-1 <= wm {
			fired++
		}
	}
	waitRecords(d.t, d.addr, "heatmaps", fired)
	d.stopAll()
	if c := countDecisions(withoutSource(got), want.decisions); c.twice > 0 {
		d.explainTwice()
	}
	compareDecisions(d.t, withoutSource(got), want.decisions)
	compareHeatmaps(d.t, readTopic(d.t, d.addr, "heatmaps"), want)
	compareSide(d.t, "late", readTopic(d.t, d.addr, "late"), want.late)
	compareSide(d.t, "dlq", readTopic(d.t, d.addr, "dlq"), want.dlq)
}

// explainTwice logs, for a failure, where each decision written more than
// once is in the decisions topic, and what every instance logged.
func (d *distributedRun) explainTwice() {
	d.t.Helper()
	at := map[string][]string{}
	for _, m := range readPartition(d.t, d.addr, "decisions", 0) {
		v := string(m.Value)
		id := decisionID.FindString(v)
		at[id] = append(at[id], fmt.Sprintf("offset %d (%s): %s", m.Offset, m.Time.Format("15:04:05.000"), v))
	}
	shown := 0
	for _, copies := range at {
		if len(copies) > 1 && shown < 5 {
			shown++
			d.t.Logf("written %d times:\n  %s", len(copies), strings.Join(copies, "\n  "))
		}
	}
	for i, l := range d.logs {
		d.t.Logf("instance %d logged:\n%s", i, l.String())
	}
}

// distributedRules are the three rules keyed by unrelated attributes, and
// heatmaps by tumbling and session windows.
const distributedRules = `
watermark:
  out_of_orderness: 2s
  idle_timeout: 10s
rules:
  - {name: user-burst, key: [user], window: {type: sliding, size: 60s, slide: 5s}, aggregate: count, threshold: 10, action: review}
  - {name: merchant-burst, where: {api: /pay}, key: [channel, merchant, api], window: {type: tumbling, size: 10s}, aggregate: count, threshold: 40, action: review}
  - {name: device-session, key: [device], window: {type: session, gap: 30s}, aggregate: count, threshold: 8, action: deny}
heatmaps:
  - {name: api-latency, key: [api], field: latency_ms, window: {type: tumbling, size: 10s}, buckets: [5, 10, 50, 100, 500]}
  - {name: device-latency, key: [device], field: latency_ms, window: {type: session, gap: 30s}, buckets: [10, 100]}
`

// replayed is what replay makes of a test's input, sorted.
type replayed struct {
	decisions, heatmaps []string
	// late and dlq are without their provenance.
	late, dlq []string
	// maxTS is the largest event time of the input.
	maxTS int64
}

// newDistributedRun produces events events to a one-partition input topic
// at rate, while the test starts instances, and returns what replay makes
// of them.
func newDistributedRun(t *testing.T, events int, rate float64) (*distributedRun, replayed, chan error) {
	return newDistributedRunOn(t, testbroker.Start(t, 1), events, rate)
}

// newDistributedRunOn is newDistributedRun on the broker at addr.
func newDistributedRunOn(t *testing.T, addr string, events int, rate float64) (*distributedRun, replayed, chan error) {
	return newDistributedRunOf(t, addr, events, rate, func(input string) string { return input })
}

// newDistributedRunOf is newDistributedRunOn with the generated input
// file changed by edit first.
func newDistributedRunOf(t *testing.T, addr string, events int, rate float64, edit func(input string) string) (*distributedRun, replayed, chan error) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(distributedRules), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := rules.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// Events over minutes of event time, so that windows fire while the
	// jobs run.
	o := gen.DefaultOptions()
	o.Events, o.Rate = events, 400
	input := edit(generatedWith(t, o))
	d := &distributedRun{t: t, bin: buildBinary(t), addr: addr, rules: path}
	want := replayOf(t, cfg, input)
	produced := make(chan error, 1)
	go func() {
		_, err := produce.Run(context.Background(), produce.Options{File: input, Brokers: []string{d.addr}, Rate: rate})
		produced <- err
	}()
	return d, want, produced
}

var eventTS = regexp.MustCompile(`"ts":(\d+)`)

// replayOf is what replay makes of input with cfg.
func replayOf(t *testing.T, cfg *rules.Config, input string) replayed {
	t.Helper()
	r := replayedWith(t, replay.Options{Config: cfg, Inputs: []string{input}})
	b, err := os.ReadFile(input)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range eventTS.FindAllSubmatch(b, -1) {
		ts, _ := strconv.ParseInt(string(m[1]), 10, 64)
		r.maxTS = max(r.maxTS, ts)
	}
	return r
}

// replayedWith runs a replay with opts and returns its outputs, sorted,
// without the provenance of decisions (a topic's), late and dlq records.
func replayedWith(t *testing.T, opts replay.Options) replayed {
	t.Helper()
	opts.OutDir = t.TempDir()
	runReplay(t, opts)
	lines := func(name string) []string {
		b, err := os.ReadFile(filepath.Join(opts.OutDir, name))
		if err != nil {
			t.Fatal(err)
		}
		ls := strings.Split(strings.TrimSpace(string(b)), "\n")
		slices.Sort(ls)
		return ls
	}
	return replayed{decisions: withoutSource(lines("decisions.jsonl")), heatmaps: lines("heatmaps.jsonl"),
		late: withoutProvenance(lines("late.jsonl")), dlq: withoutProvenance(lines("dlq.jsonl"))}
}

// provenance is where a late or dlq record's input came from: a file's
// line in replay, a partition's offset live.
var provenance = regexp.MustCompile(`,("file":"[^"]*","line"|"partition":\d+,"offset"):\d+}$`)

// withoutProvenance drops the provenance of late or dlq records, sorted.
func withoutProvenance(rs []string) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		if r != "" {
			out = append(out, provenance.ReplaceAllString(r, "}"))
		}
	}
	slices.Sort(out)
	return out
}

// compareSide fails unless a side output's records are replay's.
func compareSide(t *testing.T, topic string, got, want []string) {
	t.Helper()
	got = withoutProvenance(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s: %d records, replay's %d:\n%s\nreplay:\n%s", topic, len(got), len(want), strings.Join(got, "\n"), strings.Join(want, "\n"))
		return
	}
	t.Logf("%s: %d records, equal to replay's", topic, len(got))
}

var windowEnd = regexp.MustCompile(`"window":\{"start":-?\d+,"end":(-?\d+)\}`)

// compareHeatmaps fails unless the heatmap records got are replay's, each
// once, but for the windows the job's watermark has not reached (replay
// fires them all at the end of its input).
func compareHeatmaps(t *testing.T, got []string, want replayed) {
	t.Helper()
	wm := want.maxTS - 2000 - 1 // the watermark after the last event
	seen := map[string]int{}
	for _, h := range got {
		if seen[h]++; seen[h] == 2 {
			t.Errorf("heatmap written twice: %s", h)
		}
	}
	wantSet := map[string]bool{}
	unfired := 0
	for _, h := range want.heatmaps {
		wantSet[h] = true
		if seen[h] > 0 {
			continue
		}
		end, _ := strconv.ParseInt(windowEnd.FindStringSubmatch(h)[1], 10, 64)
		if end-1 <= wm {
			t.Errorf("heatmap of a window the watermark passed is missing: %s", h)
		}
		unfired++
	}
	for _, h := range got {
		if !wantSet[h] {
			t.Errorf("heatmap replay does not make: %s", h)
		}
	}
	t.Logf("%d heatmap records equal to replay's; %d more of replay's windows not fired yet", len(got), unfired)
}

// withoutSource drops the partition and offset of decisions' events, for a
// comparison with a replay of files.
func withoutSource(ds []string) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = sourceSuffix.ReplaceAllString(d, "}")
	}
	slices.Sort(out)
	return out
}

// TestDistributedThreeInstances: three instances share a job whose input
// (one partition, so that a replay of the file has the topic's order)
// arrives while they run, with three rules keyed by unrelated attributes:
// their decisions are replay's, each written once.
func TestDistributedThreeInstances(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("seconds of consumer group rebalances: set %s=1", kafkatest.FaultsEnv)
	}
	const events = 40_000
	d, want, produced := newDistributedRun(t, events, 8000)
	var consoles []string
	for range 3 {
		consoles = append(consoles, kafkatest.FreeAddr(t))
		d.start("--metrics-addr", consoles[len(consoles)-1])
	}
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	// Each instance's console of the whole job counts every decision,
	// those of the state other instances hold too; none reads the outputs
	// back before its page is asked for.
	waitRecords(t, d.addr, "decisions", len(want.decisions))
	for i, l := range d.logs {
		if strings.Contains(l.String(), "reads the output topics") {
			t.Errorf("instance %d read the outputs back before its console of the whole job was asked for", i)
		}
	}
	for i, addr := range consoles {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			n := 0
			totals := firingTotals(waitConsole(t, addr+"/job", "status", ""))
			for _, total := range totals {
				c, _ := strconv.Atoi(strings.ReplaceAll(total, ",", ""))
				n += c
			}
			if n == len(want.decisions) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("instance %d's console of the whole job counts %d decisions (%v), want %d", i, n, totals, len(want.decisions))
			}
		}
	}
	for i, l := range d.logs {
		if !strings.Contains(l.String(), "reads the output topics") {
			t.Errorf("instance %d's console of the whole job never said it reads the outputs", i)
		}
	}
	d.checkOutputs(want)
	// The work was shared: in the group's last generation each instance
	// held state.
	for i, l := range d.logs {
		took := tookPartitions.FindAllStringSubmatch(l.String(), -1)
		if len(took) == 0 || took[len(took)-1][1] == "" {
			t.Errorf("instance %d held no repartition partition at the end:\n%s", i, l.String())
		}
	}
}

// restoredRecords finds a restore of state from a changelog that was not
// empty.
var restoredRecords = regexp.MustCompile(`from its changelog"? partition=\d+ records=[1-9]`)

// restoredFrom finds a restore that started from a store's own position
// (a standby copy), not from the changelog's start.
var restoredFrom = regexp.MustCompile(`from its changelog"? partition=\d+ records=\d+ bytes=\d+ from=[1-9]|local store is current`)

// fromStandby reports whether an instance but skip restored a partition
// from a standby copy.
func fromStandby(logs []*testinput.LockedBuffer, skip int) bool {
	for i, l := range logs {
		if i != skip && restoredFrom.MatchString(l.String()) {
			return true
		}
	}
	return false
}

// router returns the instance but skip that routes the input (the
// partitions of its last generation), -1 when none does.
func (d *distributedRun) router(skip int) int {
	for i, l := range d.logs {
		took := tookInput.FindAllStringSubmatch(l.String(), -1)
		if i != skip && len(took) > 0 && took[len(took)-1][1] != "" {
			return i
		}
	}
	return -1
}

// tookInput finds the input partitions an instance took in a generation.
var tookInput = regexp.MustCompile(`took partitions.* input="?\[([0-9 ]*)\]`)

// tookPartitions finds the repartition partitions an instance took in a
// generation.
var tookPartitions = regexp.MustCompile(`took partitions.* repartition="?\[([0-9 ]*)\]`)

// TestDistributedTakeover: one of three instances is killed mid-stream:
// the partitions it held move to the others, which take them over from
// their standby copies; then a fourth starts and takes some, restoring
// them from the changelog. The outputs are replay's, each written once.
func TestDistributedTakeover(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	const events = 60_000
	d, want, produced := newDistributedRun(t, events, 8000)
	for range 3 {
		d.start()
	}
	time.Sleep(3 * time.Second)
	// The instance routing the input goes: the new router resumes from its
	// checkpoint, and the tasks take what it sends again once.
	killed := d.router(-1)
	if killed < 0 {
		t.Fatal("no instance routes the input")
	}
	d.cmds[killed].Process.Signal(syscall.SIGKILL)
	d.cmds[killed].Wait()
	// The survivors take its partitions over from their standby copies
	// once its session expires, then a fourth instance joins.
	for deadline := time.Now().Add(30 * time.Second); !fromStandby(d.logs, killed); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no survivor took a partition over from a standby copy:\n%s\n%s", d.logs[(killed+1)%3], d.logs[(killed+2)%3])
		}
	}
	fourth := d.start()
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	d.checkOutputs(want)
	restored := false
	for i, l := range d.logs {
		restored = restored || i != killed && restoredRecords.MatchString(l.String())
	}
	if !restored {
		t.Errorf("no instance restored state from the changelog; the fourth's logs:\n%s", d.logs[fourth].String())
	}
}

// TestDistributedPartitionedTakeover: three instances share a job whose
// input has four partitions, arriving while they run, with some events
// sent again, as a producer retrying does; the instance that routes the
// input is killed mid-stream, another takes the routing over from its
// checkpoint (and the event ids its dedupe remembers), and a fourth
// instance joins. The outputs are those of a replay of the topic, which
// takes its partitions in the single job's order and drops the events
// sent again, each record once: decisions by id and value, heatmaps, late
// and dlq.
func TestDistributedPartitionedTakeover(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	const events = 60_000
	d, _, produced := newDistributedRunOf(t, startPartitionedBroker(t), events, 8000, func(input string) string {
		return withResent(t, input, 40)
	})
	for range 3 {
		d.start()
	}
	time.Sleep(3 * time.Second)
	router := d.router(-1)
	if router < 0 {
		t.Fatal("no instance routes the input")
	}
	if took := tookInput.FindAllStringSubmatch(d.logs[router].String(), -1); took[len(took)-1][1] != "0 1 2 3" {
		t.Fatalf("the router routes input partitions %s, want all four together", took[len(took)-1][1])
	}
	d.cmds[router].Process.Signal(syscall.SIGKILL)
	d.cmds[router].Wait()
	for deadline := time.Now().Add(30 * time.Second); d.router(router) < 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no survivor took the routing over:\n%s\n%s", d.logs[(router+1)%3], d.logs[(router+2)%3])
		}
	}
	d.start()
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	d.checkOutputs(replayTopicOf(t, d.addr, d.rules, 4))
}

// withResent writes input again with every n-th line sent again three
// lines later, and returns the new file's path.
func withResent(t *testing.T, input string, n int) string {
	t.Helper()
	b, err := os.ReadFile(input)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	var out []string
	for i, l := range lines {
		out = append(out, l)
		if i >= 3 && (i-3)%n == 0 {
			out = append(out, lines[i-3])
		}
	}
	path := filepath.Join(t.TempDir(), "resent.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// replayTopicOf is what a replay of the input topic, of the given number
// of partitions, makes with the rules file rulesFile, sorted; its maxTS
// is the least of the partitions' largest ts, where the watermark stops
// once every partition is idle.
func replayTopicOf(t *testing.T, addr, rulesFile string, partitions int) replayed {
	t.Helper()
	cfg, err := rules.Load(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	r := replayedWith(t, replay.Options{Config: cfg, Brokers: []string{addr}, Topic: "requests"})
	r.maxTS = math.MaxInt64
	for p := range partitions {
		var most int64
		for _, m := range readPartition(t, addr, "requests", p) {
			if ts := eventTS.FindSubmatch(m.Value); ts != nil {
				v, _ := strconv.ParseInt(string(ts[1]), 10, 64)
				most = max(most, v)
			}
		}
		r.maxTS = min(r.maxTS, most)
	}
	return r
}

// TestDistributedKilledBeforeCheckpoint: the only instance is killed once
// it has written every decision, before its first periodic checkpoint;
// the next is killed after checkpointing partway through making those
// outputs again, and a third goes to the end. None is written twice.
func TestDistributedKilledBeforeCheckpoint(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	const events = 60_000
	d, want, produced := newDistributedRun(t, events, 0)
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	first := d.start("--checkpoint-interval", "1h")
	killOnceWritten(t, d.cmds[first], d.logs[first], d.addr, len(want.decisions))
	// The second checkpoints often, and is killed once a checkpoint of
	// part of the input is durable, while it has not made all the first
	// one's outputs again.
	second := d.start("--checkpoint-interval", "2ms")
	waitCheckpointed(t, d.addr, 1, 1, d.logs[second])
	d.cmds[second].Process.Signal(syscall.SIGKILL)
	d.cmds[second].Wait()
	at := committed(t, d.addr, 1)
	if at >= events {
		t.Fatalf("the second instance's first checkpoint covers the whole input (%d): nothing left to test", at)
	}
	t.Logf("the second instance was killed after a checkpoint at offset %d of %d", at, events)
	third := d.start()
	waitCheckpointed(t, d.addr, 1, events, d.logs[third])
	d.checkOutputs(want)
}

// TestDistributedKilledOutputTopicsCreatedSince is
// TestKilledOutputTopicsCreatedSince with --distributed: the first
// instance creates the output topics at start, and is killed once it has
// written every decision; the next reads them from their start.
func TestDistributedKilledOutputTopicsCreatedSince(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	const events = 60_000
	d, want, produced := newDistributedRunOn(t, startAutoCreatingBroker(t), events, 0)
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	first := d.start("--checkpoint-interval", "1h")
	killOnceWritten(t, d.cmds[first], d.logs[first], d.addr, len(want.decisions))
	second := d.start()
	waitCheckpointed(t, d.addr, 1, events, d.logs[second])
	d.checkOutputs(want)
}

// TestDistributedAndSingleExclusive: an instance without --distributed
// reads the whole input, so a distributed one refuses its group, and the
// other way round.
func TestDistributedAndSingleExclusive(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("seconds of consumer group rebalances: set %s=1", kafkatest.FaultsEnv)
	}
	addr := testbroker.Start(t, 1)
	stop := startJob(t, RunOptions{Brokers: []string{addr}})
	err := Run(context.Background(), RunOptions{Config: testinput.Rules(t), Brokers: []string{addr}, StateDir: t.TempDir(), Distributed: true})
	if err == nil || !strings.Contains(err.Error(), "without --distributed") {
		t.Fatalf("a distributed instance beside a single one: %v, want a refusal", err)
	}
	stop()

	stop = startJob(t, RunOptions{Brokers: []string{addr}, Distributed: true, Group: "shared"})
	defer stop()
	err = Run(context.Background(), RunOptions{Config: testinput.Rules(t), Brokers: []string{addr}, StateDir: t.TempDir(), Group: "shared"})
	var busy *kafkaio.ErrGroupBusy
	if !errors.As(err, &busy) {
		t.Fatalf("a single instance beside a distributed one: %v, want ErrGroupBusy", err)
	}
}
