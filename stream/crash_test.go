package stream

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/produce"
)

// buildBinary builds the riskstream command for tests that run it as a
// process, as the test itself was built: with the race detector if it
// was, and without profile-guided optimisation, which the command's
// default.pgo would otherwise ask for, recompiling every package the test
// build had just compiled (on a cold, loaded machine past the test
// timeout).
func buildBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "riskstream")
	args := []string{"build", "-pgo=off", "-o", bin}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	out, err := exec.Command("go", append(args, "../cmd/riskstream")...).CombinedOutput()
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

var resumedAt = regexp.MustCompile(`resuming from checkpoint"? offsets="?map\[0:(\d+)\]`)

// TestCrashSafety kills the job with SIGKILL at random moments while input
// arrives, 20 times, restarting it each time on the same state. At the end its
// decisions are every decision of replay, each written once, with nothing
// replay does not make, and every restart resumed from a checkpoint rather
// than from the beginning.
func TestCrashSafety(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	bin := buildBinary(t)
	want := replayDecisions(t)
	addr := testbroker.Start(t, 1)
	stateDir := t.TempDir()

	// Input arrives over the kills: 20000 events in 10 s.
	const rate = 2000.0
	produced := make(chan error, 1)
	go func() {
		_, err := produce.Run(context.Background(), produce.Options{File: bundledInput, Brokers: []string{addr}, Rate: rate})
		produced <- err
	}()

	start := func() (*exec.Cmd, *testinput.LockedBuffer) {
		return startProcess(t, bin, "run", "--rules", bundledRules, "--brokers", addr, "--state-dir", stateDir,
			"--metrics-addr", "", "--checkpoint-interval", "50ms")
	}
	r := rand.New(rand.NewPCG(11, 12))
	var resumed []int
	const kills = 20
	var slowest time.Duration // from a restart to consuming again
	for i := range kills {
		started := time.Now()
		cmd, logs := start()
		waitFor(t, logs, "consuming")
		if i > 0 {
			slowest = max(slowest, time.Since(started))
		}
		time.Sleep(time.Duration(60+r.IntN(300)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if i > 0 {
			m := resumedAt.FindSubmatch(logs.Bytes())
			if m == nil {
				t.Fatalf("restart %d did not resume from a checkpoint:\n%s", i, logs.String())
			}
			n, _ := strconv.Atoi(string(m[1]))
			resumed = append(resumed, n)
		}
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	t.Logf("restarts resumed at offsets %v, each consuming again within %v of its start", resumed, slowest.Round(time.Millisecond))
	if resumed[len(resumed)-1] == 0 {
		t.Fatal("the last restart resumed from offset 0: checkpoints did not advance")
	}

	// A last run to the end, stopped cleanly.
	cmd, logs := start()
	waitFor(t, logs, "consuming")
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if set := decisionSet(t, addr); coversAll(set, want) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("clean stop: %v\n%s", err, logs.String())
	}
	checkDecisions(t, addr, want)
	// Effectively once: a restart reads what its predecessor wrote after
	// the last checkpoint and does not write it again.
	if got := liveDecisions(t, addr); len(got) != len(want) {
		t.Errorf("%d decisions written for %d distinct: %d duplicates", len(got), len(want), len(got)-len(want))
	}
}

// TestKilledTwiceCatchingUp: a run killed before its first periodic
// checkpoint, then its restart killed after checkpointing partway through
// remaking its predecessor's outputs, then a run to the end. Every
// decision is written once: the first run's outputs are not written again
// after either restart.
func TestKilledTwiceCatchingUp(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	bin, cfg := threeKeysJob(t)
	const events = 200_000
	addr := testbroker.Start(t, 1)
	if st, err := produce.Run(context.Background(), produce.Options{File: generated(t, events), Brokers: []string{addr}}); err != nil || st.Failed != 0 {
		t.Fatalf("produce: %+v, %v", st, err)
	}
	want := topicReplayDecisions(t, addr, cfg)
	runs := threeKeysRuns{t, bin, addr, t.TempDir()}
	// The first run checkpoints no more after it starts, and is killed
	// once it has written every decision.
	cmd, logs := runs.start("1h")
	killOnceWritten(t, cmd, logs, addr, len(want))
	// The second checkpoints often, and is killed once a checkpoint of
	// part of the input is durable.
	cmd, logs = runs.start("2ms")
	waitCheckpointed(t, addr, 1, 1, logs)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	at := committed(t, addr, 1)
	if at >= events {
		t.Fatalf("the second run's first checkpoint covers the whole input (%d): nothing left to test", at)
	}
	cmd, logs = runs.start("50ms")
	stopOnceCheckpointed(t, cmd, logs, addr, 1, events)
	t.Logf("the second run was killed after a checkpoint at offset %d of %d", at, events)
	compareDecisions(t, readTopic(t, addr, "decisions"), want)
}

// TestKilledOutputTopicsCreatedSince: on a broker that creates topics on
// first use, the first run creates the output topics at start, checkpoints
// before its first record and is killed once it has written every
// decision; its restart reads the decisions topic from its start, and
// writes none of them again.
func TestKilledOutputTopicsCreatedSince(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	bin, cfg := threeKeysJob(t)
	addr := startAutoCreatingBroker(t)
	const events = 50_000
	if st, err := produce.Run(context.Background(), produce.Options{File: generated(t, events), Brokers: []string{addr}}); err != nil || st.Failed != 0 {
		t.Fatalf("produce: %+v, %v", st, err)
	}
	want := topicReplayDecisions(t, addr, cfg)
	if n := recordsIn(t, addr, "decisions"); n != 0 {
		t.Fatalf("the decisions topic holds %d records before the job ran", n)
	}
	runs := threeKeysRuns{t, bin, addr, t.TempDir()}
	// The first run checkpoints only before its first record.
	cmd, logs := runs.start("1h")
	killOnceWritten(t, cmd, logs, addr, len(want))
	cmd, logs = runs.start("50ms")
	stopOnceCheckpointed(t, cmd, logs, addr, 1, events)
	compareDecisions(t, readTopic(t, addr, "decisions"), want)
}

// threeKeysRuns starts runs of the threeKeysRules job as a process, one
// after the other, on the broker at addr over one state directory.
type threeKeysRuns struct {
	t                   *testing.T
	bin, addr, stateDir string
}

// start starts a run that checkpoints every interval.
func (r threeKeysRuns) start(interval string) (*exec.Cmd, *testinput.LockedBuffer) {
	return startProcess(r.t, r.bin, "run", "--rules", threeKeysRules, "--brokers", r.addr, "--state-dir", r.stateDir,
		"--metrics-addr", "", "--checkpoint-interval", interval)
}

// killOnceWritten waits until the decisions topic holds n records, then
// kills cmd with SIGKILL.
func killOnceWritten(t *testing.T, cmd *exec.Cmd, logs *testinput.LockedBuffer, addr string, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); recordsIn(t, addr, "decisions") < int64(n); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the job wrote %d of %d decisions:\n%s", recordsIn(t, addr, "decisions"), n, logs.String())
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
}

// stopOnceCheckpointed waits until the job has checkpointed n records of
// the input's partitions, then stops cmd with SIGTERM, which must end it
// cleanly.
func stopOnceCheckpointed(t *testing.T, cmd *exec.Cmd, logs *testinput.LockedBuffer, addr string, partitions int, n int64) {
	t.Helper()
	waitCheckpointed(t, addr, partitions, n, logs)
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("clean stop: %v\n%s", err, logs.String())
	}
}

// startProcess starts the riskstream binary bin with args, its standard
// error collected in the buffer returned.
func startProcess(t testing.TB, bin string, args ...string) (*exec.Cmd, *testinput.LockedBuffer) {
	t.Helper()
	logs := &testinput.LockedBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, logs
}

// waitFor waits until the process has logged s.
func waitFor(t *testing.T, logs *testinput.LockedBuffer, s string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if bytes.Contains(logs.Bytes(), []byte(s)) {
			return
		}
	}
	t.Fatalf("the job never logged %q:\n%s", s, logs.String())
}

func decisionSet(t *testing.T, addr string) map[string]bool {
	set := map[string]bool{}
	for _, d := range liveDecisions(t, addr) {
		set[d] = true
	}
	return set
}

func coversAll(set map[string]bool, want []string) bool {
	for _, d := range want {
		if !set[d] {
			return false
		}
	}
	return true
}
