package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/state"
)

// TestMain runs main itself when the test binary is started by runMain.
func TestMain(m *testing.M) {
	if os.Getenv("RISKSTREAM_TEST_MAIN") == "1" {
		i := slices.Index(os.Args, "--")
		os.Args = append([]string{"riskstream"}, os.Args[i+1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runMain runs the riskstream command in a process of its own, as a user
// would, and returns its stderr and exit status.
func runMain(t *testing.T, args ...string) (stderr string, status int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"--"}, args...)...)
	cmd.Env = append(os.Environ(), "RISKSTREAM_TEST_MAIN=1")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return errOut.String(), cmd.ProcessState.ExitCode()
}

// writeLiveState writes the live job's state for the bundled rules and
// input to dir/state, as a checkpoint would, its window state flushed to
// tables on disk, and returns the largest table.
func writeLiveState(t *testing.T, dir string) string {
	t.Helper()
	cfg, err := rules.Load("../../testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	db, err := state.Open(state.Options{Dir: filepath.Join(dir, "state"), AtomicCheckpoints: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := sink.OpenFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// A small cache: most window state lives in Pebble.
	e, err := engine.New(engine.Options{Config: cfg, Backend: db, Output: out, CacheSlots: 64})
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range testinput.BundledLines(t) {
		if err := e.Process(&engine.Record{Value: line, Prov: event.Provenance{File: "in", Line: int64(i + 1)}}, 0); err != nil {
			t.Fatal(err)
		}
	}
	cp, err := e.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	db.SetMeta("checkpoint", cp)
	db.SetMeta("offsets", nil)
	if err := db.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	tables, _ := filepath.Glob(filepath.Join(dir, "state", "*.sst"))
	largest, size := "", int64(0)
	for _, p := range tables {
		if fi, err := os.Stat(p); err == nil && fi.Size() > size {
			largest, size = p, fi.Size()
		}
	}
	if largest == "" {
		t.Fatal("no table written")
	}
	return largest
}

// flipStateBlocks inverts 8 bytes in every data block but the first (the
// metadata's) of the table at path, so that their checksums fail: a
// restore then reads a corrupt block when it seeks the first timer entry,
// which sorts after every slot.
func flipStateBlocks(t *testing.T, path string) {
	t.Helper()
	f, err := vfs.Default.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sstable.NewReader(context.Background(), readable, pebble.DefaultOptions().MakeReaderOptions())
	if err != nil {
		t.Fatal(err)
	}
	layout, err := r.Layout()
	r.Close()
	if err != nil || len(layout.Data) < 3 {
		t.Fatalf("%d data blocks, %v", len(layout.Data), err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range layout.Data[1:] {
		for i := range 8 {
			b[int(h.Offset+h.Length/2)+i] ^= 0xff
		}
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRunOnCorruptState: `riskstream run` on a state folder with a corrupt
// file (a table's data blocks, read while restoring the window state; the
// MANIFEST, read while opening) exits with status 1 and one line saying
// which file is corrupt and what to do: no panic, no stack trace.
func TestRunOnCorruptState(t *testing.T) {
	for name, corrupt := range map[string]func(t *testing.T, dir, table string) string{
		"table": func(t *testing.T, dir, table string) string {
			flipStateBlocks(t, table)
			return table + " is corrupt (checksum mismatch)"
		},
		"manifest": func(t *testing.T, dir, table string) string {
			manifests, _ := filepath.Glob(filepath.Join(dir, "state", "MANIFEST-*"))
			if len(manifests) != 1 {
				t.Fatalf("MANIFEST files: %q", manifests)
			}
			b, err := os.ReadFile(manifests[0])
			if err != nil {
				t.Fatal(err)
			}
			for i := 12; i < 16; i++ {
				b[i] ^= 0xff
			}
			if err := os.WriteFile(manifests[0], b, 0o600); err != nil {
				t.Fatal(err)
			}
			return manifests[0] + " is corrupt (malformed manifest file)"
		},
		"marker": func(t *testing.T, dir, table string) string {
			markers, _ := filepath.Glob(filepath.Join(dir, "state", "marker.manifest.*"))
			if len(markers) != 1 {
				t.Fatalf("manifest markers: %q", markers)
			}
			os.Remove(markers[0])
			return filepath.Join(dir, "state", "marker.manifest.*") + " is missing (the file naming the current MANIFEST; " +
				filepath.Base(table) + " and the other files are there)"
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			what := corrupt(t, dir, writeLiveState(t, dir))
			// Unreachable brokers: the state is read before they are.
			stderr, status := runMain(t, "run", "--rules", "../../testdata/rules.yaml", "--state-dir", dir,
				"--brokers", "127.0.0.1:1", "--metrics-addr", "")
			want := "riskstream: state: " + what + ": restore the state dir from a backup (nothing is lost); or move the state dir aside and start on an empty one: " +
				"the job reads the input topic again from its earliest offsets and writes those records' outputs again, " +
				"so the output topics hold them twice, and its windows lack the events the topic no longer holds\n"
			if status != 1 || stderr != want {
				t.Fatalf("exit status %d, stderr:\n%s\nwant status 1 and:\n%s", status, stderr, want)
			}
		})
	}
}

// TestSecondSignalExits: the first SIGINT cancels the job's context (a
// clean stop); a second exits at once with status 130, saying so.
func TestSecondSignalExits(t *testing.T) {
	var stderr testinput.LockedBuffer
	exited := make(chan int, 1)
	ctx, stop := notifyStop(context.Background(), &stderr, func(code int) { exited <- code })
	defer stop()
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the first signal did not stop the job")
	}
	select {
	case code := <-exited:
		t.Fatalf("the first signal exited (%d)", code)
	default:
	}
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	select {
	case code := <-exited:
		if code != 130 {
			t.Errorf("exit status %d, want 130", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second signal did not exit")
	}
	if want := "riskstream: interrupt again: exiting without a final checkpoint; the next run resumes from the last one\n"; stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
}
