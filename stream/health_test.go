package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/produce"
	"github.com/riskstream/riskstream/state"
	"github.com/riskstream/riskstream/stream/internal/jobbase"
)

// faultFS is errorfs over the operating system's filesystem, with recycled
// WAL files (ReuseForWrite, whose file errorfs does not wrap) opened
// through errorfs too.
type faultFS struct{ *errorfs.FS }

func (f faultFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := f.Rename(oldname, newname); err != nil {
		return nil, err
	}
	return f.OpenReadWrite(newname, category)
}

// getHealthz returns the status and body of /healthz at addr.
func getHealthz(addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startFaultyJob runs the job with its state on fs and /healthz on
// metrics, and returns once /healthz says ok, with the job's result to
// come and how to stop it as SIGTERM would.
func startFaultyJob(t *testing.T, addr, stateDir, metrics string, so state.Options) (<-chan error, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunOptions{Config: testinput.Rules(t), Brokers: []string{addr}, StateDir: stateDir,
			CheckpointInterval: 50 * time.Millisecond, MetricsAddr: metrics, Testing: jobbase.Testing{State: so}})
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if code, _ := getHealthz(metrics); code == 200 {
			return done, cancel
		}
		select {
		case err := <-done:
			t.Fatalf("the job did not start: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("/healthz never said ok")
		}
	}
}

// produceHalves returns a function that produces the first (half 0) or
// second (half 1) half of the bundled input.
func produceHalves(t *testing.T, addr string) func(half int) {
	t.Helper()
	b := testinput.Bundled(t)
	lines := strings.SplitAfter(string(b), "\n")
	halves := []string{strings.Join(lines[:len(lines)/2], ""), strings.Join(lines[len(lines)/2:], "")}
	return func(half int) {
		st, err := produce.Run(context.Background(), produce.Options{File: "-", Stdin: strings.NewReader(halves[half]), Brokers: []string{addr}})
		if err != nil || st.Failed != 0 {
			t.Fatalf("produce: %+v, %v", st, err)
		}
	}
}

// TestLiveStateDiskFull: the disk under the live job's state fills after a
// checkpoint of the first half of the input, while it reads the second:
// the job stops at once with one error saying so and what to do, no
// panic. Restarted on its state (a copy: Pebble may keep the folder
// locked in this process), it resumes from that checkpoint and makes
// every decision replay makes, and no other.
func TestLiveStateDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	want := replayDecisions(t)
	addr := testbroker.Start(t, 1)
	produce := produceHalves(t, addr)
	produce(0)
	var full atomic.Bool
	fs := faultFS{errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && op.Kind != errorfs.OpFileClose &&
			op.Kind != errorfs.OpRemove && op.Kind != errorfs.OpLock {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	}))}
	stateDir := t.TempDir()
	done, _ := startFaultyJob(t, addr, stateDir, kafkatest.FreeAddr(t), state.Options{FS: fs})
	for deadline := time.Now().Add(30 * time.Second); committed(t, addr, 1) != 10000; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first half never checkpointed: group offset %d", committed(t, addr, 1))
		}
	}
	full.Store(true)
	produce(1)
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the job goes on with its disk full")
	}
	msg := fmt.Sprintf("state: the disk holding %s is full (no space left on device): free space or move --state-dir; the job stopped at its last checkpoint, nothing is lost",
		filepath.Join(stateDir, "state"))
	if !errors.Is(err, state.ErrDiskFull) || err.Error() != msg {
		t.Fatalf("got %v\nwant %s", err, msg)
	}
	if off := committed(t, addr, 1); off != 10000 {
		t.Fatalf("group offset %d after the disk filled: ahead of the checkpoint", off)
	}
	mid := int(recordsIn(t, addr, "decisions"))

	restarted := t.TempDir()
	copyTree(t, filepath.Join(stateDir, "state"), filepath.Join(restarted, "state"))
	stop := startJob(t, RunOptions{Brokers: []string{addr}, StateDir: restarted, CheckpointInterval: 50 * time.Millisecond})
	for deadline := time.Now().Add(60 * time.Second); committed(t, addr, 1) != 20000; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted job never checkpointed the input: group offset %d", committed(t, addr, 1))
		}
	}
	stop()
	checkDecisions(t, addr, want)
	t.Logf("%d decisions before the disk filled", mid)
}

// TestLiveStateStall: the disk under the live job's state stops answering
// (WAL syncs block): /healthz turns 503 with the reason, and a stop
// (SIGTERM) ends the job within the stall timeout, with one error saying
// so, instead of waiting for the disk for ever.
func TestLiveStateStall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	addr := testbroker.Start(t, 1)
	produceBundled(t, addr)
	var stalled atomic.Bool
	release := make(chan struct{})
	defer close(release)
	fs := faultFS{errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if stalled.Load() && op.Kind == errorfs.OpFileSyncData && strings.HasSuffix(op.Path, ".log") {
			<-release
		}
		return nil
	}))}
	metrics := kafkatest.FreeAddr(t)
	stateDir := filepath.Join(t.TempDir(), "live")
	done, stop := startFaultyJob(t, addr, stateDir, metrics, state.Options{FS: fs, StallTimeout: 3 * time.Second})
	checkOwnerOnly(t, stateDir, filepath.Join(stateDir, "state"))
	stalled.Store(true)
	var body string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var code int
		if code, body = getHealthz(metrics); code == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz during the stall: %d %q", code, body)
		}
	}
	if !strings.HasPrefix(body, "unhealthy: state: a commit to ") || !strings.Contains(body, "has been in flight for") {
		t.Errorf("/healthz body %q", body)
	}
	stopped := time.Now()
	stop()
	var err error
	select {
	case err = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the stop waits on the stalled disk")
	}
	t.Logf("stopped %s after SIGTERM", time.Since(stopped).Round(time.Millisecond))
	msg := fmt.Sprintf("state: the disk holding %s is stalled: a commit has not finished in 3s: check the disk; the job stopped at its last checkpoint, nothing is lost",
		filepath.Join(stateDir, "state"))
	if !errors.Is(err, state.ErrDiskStalled) || err.Error() != msg {
		t.Fatalf("got %v\nwant %s", err, msg)
	}
}

// copyTree copies the files of the folder from into the new folder to.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStartLogsWhereToLook: the line a job logs when it starts consuming
// says where its console and metrics are, as a browser on the machine
// reaches them (a listener on every interface as localhost).
func TestStartLogsWhereToLook(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	logs := &testinput.LockedBuffer{}
	metrics := kafkatest.FreeAddr(t)
	startJob(t, RunOptions{Brokers: []string{testbroker.Start(t, 1)}, MetricsAddr: metrics, Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(logs, nil))})()
	want := fmt.Sprintf("console=http://%s/ metrics=http://%s/metrics", metrics, metrics)
	if !strings.Contains(logs.String(), want) {
		t.Fatalf("the job's log lacks %q:\n%s", want, logs)
	}
}
