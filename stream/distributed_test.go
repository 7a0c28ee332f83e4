package stream

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riskstream/riskstream/rules"
)

// waitDecisions waits until the decisions topic (one partition) holds n
// records, and returns them without their events' provenance.
func waitDecisions(t *testing.T, addr string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := liveDecisions(t, addr)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDistributedOneInstance: one instance of a distributed job, through
// the repartition topic, decides what replay does.
func TestDistributedOneInstance(t *testing.T) {
	if testing.Short() {
		t.Skip("live test")
	}
	want := replayDecisions(t)
	addr := startLiveBroker(t)
	produceBundled(t, addr)
	stop := startJob(t, RunOptions{Brokers: []string{addr}, Distributed: true, RepartitionPartitions: 4,
		CheckpointInterval: 200 * time.Millisecond})
	got := waitDecisions(t, addr, len(want))
	stop()
	slices.Sort(got)
	sorted := slices.Clone(want)
	slices.Sort(sorted)
	compareDecisions(t, got, sorted)
}

// distributedRun is a test's cluster of distributed instances: processes
// of the riskstream binary on one broker, each with a state directory of
// its own.
type distributedRun struct {
	t    *testing.T
	bin  string
	addr string
	cmds []*exec.Cmd
	logs []*lockedBuffer
}

// start starts one more instance.
func (d *distributedRun) start() int {
	d.t.Helper()
	cmd, logs := startProcess(d.t, d.bin, "run", "--distributed", "--rules", threeKeysRules, "--brokers", d.addr,
		"--state-dir", d.t.TempDir(), "--metrics-addr", "", "--checkpoint-interval", "100ms", "--repartition-partitions", "6")
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

// decisionsOf reads the decisions topic until it holds n records or a
// minute passes, and returns them sorted.
func (d *distributedRun) decisionsOf(n int) []string {
	d.t.Helper()
	var got []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if got = readTopic(d.t, d.addr, "decisions"); len(got) >= n || time.Now().After(deadline) {
			break
		}
	}
	slices.Sort(got)
	return got
}

// newDistributedRun produces events events to a one-partition input topic
// at rate, while the test starts instances, and returns the replay's
// decisions of them, sorted.
func newDistributedRun(t *testing.T, events int, rate float64) (*distributedRun, []string, chan error) {
	cfg, err := rules.Load(threeKeysRules)
	if err != nil {
		t.Fatal(err)
	}
	input := generated(t, events)
	d := &distributedRun{t: t, bin: buildBinary(t), addr: startLiveBroker(t)}
	want := replayDecisionsWith(t, cfg, input)
	produced := make(chan error, 1)
	go func() {
		_, err := Produce(context.Background(), ProduceOptions{File: input, Brokers: []string{d.addr}, Rate: rate})
		produced <- err
	}()
	return d, want, produced
}

// replayDecisionsWith is what replay decides on input with cfg, sorted.
func replayDecisionsWith(t *testing.T, cfg *rules.Config, input string) []string {
	t.Helper()
	out := t.TempDir()
	replay(t, ReplayOptions{Config: cfg, Inputs: []string{input}, OutDir: out})
	b, err := os.ReadFile(filepath.Join(out, "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSpace(string(b)), "\n")
	slices.Sort(want)
	return want
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
// (one partition, so that its order is defined) arrives while they run,
// with three rules keyed by unrelated attributes: their decisions are
// replay's, each written once.
func TestDistributedThreeInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and three jobs")
	}
	const events = 40_000
	d, want, produced := newDistributedRun(t, events, 8000)
	for range 3 {
		d.start()
	}
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	got := d.decisionsOf(len(want))
	d.stopAll()
	compareDecisions(t, withoutSource(got), want)
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

// tookPartitions finds the repartition partitions an instance took in a
// generation.
var tookPartitions = regexp.MustCompile(`took partitions.* repartition="?\[([0-9 ]*)\]`)

// TestDistributedTakeover: one of three instances is killed mid-stream and
// a fourth started: the partitions it held move, their state is restored
// from the changelog, and the decisions are replay's, each written once.
func TestDistributedTakeover(t *testing.T) {
	if testing.Short() || !faults() {
		t.Skipf("fault injection: set %s=1", faultsEnv)
	}
	const events = 60_000
	d, want, produced := newDistributedRun(t, events, 8000)
	for range 3 {
		d.start()
	}
	time.Sleep(3 * time.Second)
	killed := 1
	d.cmds[killed].Process.Signal(syscall.SIGKILL)
	d.cmds[killed].Wait()
	time.Sleep(time.Second)
	fourth := d.start()
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	got := d.decisionsOf(len(want))
	d.stopAll()
	compareDecisions(t, withoutSource(got), want)
	restored := false
	for i, l := range d.logs {
		restored = restored || i != killed && restoredRecords.MatchString(l.String())
	}
	if !restored {
		t.Errorf("no instance restored state from the changelog; the fourth's logs:\n%s", d.logs[fourth].String())
	}
}
