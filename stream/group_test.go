package stream

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/kafkaio"
)

// TestGroupGuardSurvivesBrokerRestart: a broker restart ends the job's
// group generation; the job joins again and keeps the one-instance guard. A
// second instance started right after the restart, when the group may be
// empty, is refused or gives up once the first is back, and the first goes
// on.
func TestGroupGuardSurvivesBrokerRestart(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	opts := restartableBroker(t)
	addr := opts.Addr
	b, err := broker.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunOptions{Config: testinput.Rules(t), Brokers: []string{addr}, StateDir: t.TempDir(),
			CheckpointInterval: 50 * time.Millisecond})
	}()
	kafkatest.WaitMembers(t, addr, 1)
	b.Close()
	time.Sleep(500 * time.Millisecond)
	if b, err = broker.Start(opts); err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	// The second instance, at once: before or after the first rejoins.
	second := make(chan error, 1)
	go func() {
		second <- Run(context.Background(), RunOptions{Config: testinput.Rules(t), Brokers: []string{addr}, StateDir: t.TempDir()})
	}()
	var busy *kafkaio.ErrGroupBusy
	select {
	case err := <-second:
		if !errors.As(err, &busy) {
			t.Fatalf("second instance: %v, want kafkaio.ErrGroupBusy", err)
		}
		t.Log(err)
	case err := <-done:
		t.Fatalf("the first instance stopped: %v", err)
	case <-time.After(45 * time.Second):
		t.Fatal("the second instance still runs beside the first")
	}
	// The first holds the group, and a third is refused as at any time.
	kafkatest.WaitMembers(t, addr, 1)
	if err := Run(context.Background(), RunOptions{Config: testinput.Rules(t), Brokers: []string{addr}, StateDir: t.TempDir()}); !errors.As(err, &busy) {
		t.Fatalf("third instance: %v, want kafkaio.ErrGroupBusy", err)
	}
	// And the first still decides.
	produceBundled(t, addr)
	want := replayDecisions(t)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if coversAll(decisionSet(t, addr), want) {
			break
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !coversAll(decisionSet(t, addr), want) {
		t.Fatal("the first instance did not decide the input produced after the restart")
	}
}

// TestCopiedStateDir: an instance started on a copy of a running job's
// state folder (a backup restored beside it, a cloned machine) carries the
// same state id; it does not take the running job's membership for one a
// killed run left behind: it waits for the broker to expire it, and stops
// with an error saying the state is shared, while the running job goes on.
// A run killed with SIGKILL is still removed at once by its restart, its
// process being gone.
func TestCopiedStateDir(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	bin := buildBinary(t)
	addr := testbroker.Start(t, 1)
	stateDir := t.TempDir()
	run := func(dir string) (*exec.Cmd, *testinput.LockedBuffer) {
		return startProcess(t, bin, "run", "--rules", bundledRules, "--brokers", addr, "--state-dir", dir, "--metrics-addr", "")
	}
	first, logs := run(stateDir)
	waitFor(t, logs, "consuming")
	first.Process.Signal(syscall.SIGTERM)
	if err := first.Wait(); err != nil {
		t.Fatalf("first run: %v\n%s", err, logs)
	}
	copied := filepath.Join(t.TempDir(), "copy")
	if err := os.CopyFS(copied, os.DirFS(stateDir)); err != nil {
		t.Fatal(err)
	}
	running, logs := run(stateDir)
	defer func() { running.Process.Kill(); running.Wait() }()
	waitFor(t, logs, "consuming")

	started := time.Now()
	copy, copyLogs := run(copied)
	err := copy.Wait()
	if err == nil || !strings.Contains(copyLogs.String(), "started on this state folder or a copy of it") {
		t.Fatalf("the instance on the copy: %v\n%s", err, copyLogs)
	}
	if took := time.Since(started); took < kafkaio.SessionTimeout {
		t.Errorf("the copy gave up after %s, before the broker could have expired a killed run's membership", took)
	}
	if strings.Contains(logs.String(), "lost the consumer group") || strings.Contains(copyLogs.String(), "removed the group membership") {
		t.Fatalf("the running job's membership was touched:\n%s\n%s", logs, copyLogs)
	}

	// A killed run's restart removes its membership at once.
	running.Process.Kill()
	running.Wait()
	started = time.Now()
	restarted, logs := run(stateDir)
	defer func() { restarted.Process.Kill(); restarted.Wait() }()
	waitFor(t, logs, "consuming")
	if !strings.Contains(logs.String(), "removed the group membership a killed run of this job left behind") || time.Since(started) > kafkaio.SessionTimeout {
		t.Fatalf("a killed run's restart took %s to consume:\n%s", time.Since(started), logs)
	}
}
