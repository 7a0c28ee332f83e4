package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corruptpkg "github.com/riskstream/riskstream/internal/corrupt"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/produce"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/state"
)

// TestHealthz: 200 "ok" while healthy, 503 with the reason otherwise.
func TestHealthz(t *testing.T) {
	var health error
	h := healthz(func() error { return health })
	for _, c := range []struct {
		health error
		code   int
		body   string
	}{
		{nil, 200, "ok\n"},
		{errors.New("state: the disk holding /s is full (no space left on device)"), 503,
			"unhealthy: state: the disk holding /s is full (no space left on device)\n"},
	} {
		health = c.health
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest("GET", "/healthz", nil))
		if rec.Code != c.code || rec.Body.String() != c.body {
			t.Errorf("health %v: %d %q, want %d %q", c.health, rec.Code, rec.Body.String(), c.code, c.body)
		}
	}
}

// TestExplainState: a failure of the state store, however wrapped, is told
// as the store's message and what to do, live or in replay.
func TestExplainState(t *testing.T) {
	full := &state.Error{Kind: state.ErrDiskFull, Path: "/s/state"}
	corrupt := &state.Error{Kind: state.ErrCorrupt, Path: "/s/state/000012.sst", Detail: "checksum mismatch"}
	const rebuild = "restore the state dir from a backup (nothing is lost); or move the state dir aside and start on an empty one: " +
		"the job reads the input topic again from its earliest offsets and writes those records' outputs again, " +
		"so the output topics hold them twice, and its windows lack the events the topic no longer holds"
	for _, c := range []struct {
		err  error
		live bool
		want string
	}{
		{full, true, "state: the disk holding /s/state is full (no space left on device): free space or move --state-dir; the job stopped at its last checkpoint, nothing is lost"},
		{fmt.Errorf("state in /s: windows: load state: %w", corrupt), true,
			"state: /s/state/000012.sst is corrupt (checksum mismatch): " + rebuild},
		{&state.Error{Kind: state.ErrCorrupt, Path: "/s/state/000007.log", Detail: "pebble/record: invalid chunk"}, true,
			"state: /s/state/000007.log is corrupt (pebble/record: invalid chunk): " + rebuild + "; or move the WAL 000007.log aside: " +
				"the job resumes from the last checkpoint written to the tables before it (from the earliest offsets if none was), " +
				"and outputs it finds already written are not written again"},
		{&state.Error{Kind: state.ErrCorrupt, Missing: true, Path: "/s/state/marker.manifest.*", Detail: "the file naming the current MANIFEST; 000005.sst and the other files are there"}, true,
			"state: /s/state/marker.manifest.* is missing (the file naming the current MANIFEST; 000005.sst and the other files are there): " + rebuild},
		{corrupt, false, "state: /s/state/000012.sst is corrupt (checksum mismatch): delete the --state-dir folder and run the replay again"},
		{&state.Error{Kind: state.ErrDiskStalled, Path: "/s/state", Detail: "a commit has not finished in 20s"}, true,
			"state: the disk holding /s/state is stalled: a commit has not finished in 20s: check the disk; the job stopped at its last checkpoint, nothing is lost"},
	} {
		err := state.Explain(c.err, c.live)
		if err.Error() != c.want || !errors.Is(err, state.ErrFailed) {
			t.Errorf("got %q\nwant %q", err, c.want)
		}
	}
	// Stored state that does not decode, found above the store: the same
	// choices.
	decoded := fmt.Errorf("state in /s: %w", corruptpkg.Errorf("windows: state of %q: corrupt state", "k"))
	if got, want := state.Explain(decoded, true).Error(), `state in /s: windows: state of "k": corrupt state: `+rebuild; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	other := errors.New("other")
	if state.Explain(other, true) != other {
		t.Error("other errors must pass as they are")
	}
}

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
		done <- Run(ctx, RunOptions{Config: loadRules(t), Brokers: []string{addr}, StateDir: stateDir,
			CheckpointInterval: 50 * time.Millisecond, MetricsAddr: metrics, state: so})
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

// TestEndpointsReadOnly: every endpoint answers 405 to methods other than
// GET and HEAD, and the console answers 403 to a client not on loopback
// unless it is public, as it shows keys; /metrics and the probes answer
// anyone.
func TestEndpointsReadOnly(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry(), &rules.Config{}, 10)
	console := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "console") })
	for _, public := range []bool{false, true} {
		addr := kafkatest.FreeAddr(t)
		srv, err := m.serve(addr, func() error { return nil }, console, public)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		for _, c := range []struct {
			method, path, remote string
			want                 int
		}{
			{"GET", "/", "127.0.0.1:5000", http.StatusOK},
			{"HEAD", "/", "[::1]:5000", http.StatusOK},
			{"GET", "/", "10.1.2.3:5000", map[bool]int{false: http.StatusForbidden, true: http.StatusOK}[public]},
			{"GET", "/metrics", "10.1.2.3:5000", http.StatusOK},
			{"GET", "/healthz", "10.1.2.3:5000", http.StatusOK},
			{"DELETE", "/metrics", "127.0.0.1:5000", http.StatusMethodNotAllowed},
			{"POST", "/healthz", "127.0.0.1:5000", http.StatusMethodNotAllowed},
			{"PUT", "/", "127.0.0.1:5000", http.StatusMethodNotAllowed},
		} {
			req := httptest.NewRequest(c.method, c.path, nil)
			req.RemoteAddr = c.remote
			rec := httptest.NewRecorder()
			srv.Handler.ServeHTTP(rec, req)
			if rec.Code != c.want {
				t.Errorf("public %v: %s %s from %s: %d, want %d", public, c.method, c.path, c.remote, rec.Code, c.want)
			}
			if c.want == http.StatusMethodNotAllowed && rec.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: Allow %q", c.method, c.path, rec.Header().Get("Allow"))
			}
		}
		// Over TCP from this machine, as a browser on it.
		resp, err := http.Post("http://"+addr+"/", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST / over TCP: %s", resp.Status)
		}
	}
}

// TestStartLogsWhereToLook: the line a job logs when it starts consuming
// says where its console and metrics are, as a browser on the machine
// reaches them (a listener on every interface as localhost).
func TestStartLogsWhereToLook(t *testing.T) {
	for addr, want := range map[string]string{"127.0.0.1:9464": "http://127.0.0.1:9464", "[::]:9464": "http://localhost:9464",
		"0.0.0.0:80": "http://localhost:80", "[::1]:9464": "http://[::1]:9464"} {
		tcp, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := baseURL(tcp); got != want {
			t.Errorf("baseURL(%s) = %s, want %s", addr, got, want)
		}
	}
	if testing.Short() {
		return
	}
	logs := &lockedBuffer{}
	metrics := kafkatest.FreeAddr(t)
	startJob(t, RunOptions{Brokers: []string{testbroker.Start(t, 1)}, MetricsAddr: metrics, Registry: prometheus.NewRegistry(),
		Logger: slog.New(slog.NewTextHandler(logs, nil))})()
	want := fmt.Sprintf("console=http://%s/ metrics=http://%s/metrics", metrics, metrics)
	if !strings.Contains(logs.String(), want) {
		t.Fatalf("the job's log lacks %q:\n%s", want, logs)
	}
}
