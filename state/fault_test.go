package state

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/riskstream/riskstream/internal/testinput"
)

// faultFS is errorfs over the operating system's filesystem. Pebble
// recycles WAL files with ReuseForWrite, whose file errorfs does not wrap:
// here it is opened through errorfs too.
type faultFS struct{ *errorfs.FS }

func newFaultFS(inj errorfs.Injector) faultFS { return faultFS{errorfs.Wrap(vfs.Default, inj)} }

func (f faultFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := f.Rename(oldname, newname); err != nil {
		return nil, err
	}
	return f.OpenReadWrite(newname, category)
}

// diskFull is an errorfs injector that, once armed, fails with ENOSPC the
// operations that take space (creating, writing, syncing) on the files
// match accepts (all if nil), as a full disk does.
type diskFull struct {
	armed  atomic.Bool
	match  func(path string) bool
	errors atomic.Int64
}

func (d *diskFull) String() string { return "disk full" }

func (d *diskFull) MaybeError(op errorfs.Op) error {
	if !d.armed.Load() {
		return nil
	}
	switch op.Kind {
	case errorfs.OpCreate, errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFilePreallocate,
		errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo, errorfs.OpFileFlush:
	default:
		return nil
	}
	if d.match != nil && !d.match(op.Path) {
		return nil
	}
	d.errors.Add(1)
	return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
}

// within runs f on another goroutine, failing the test if it panics or
// does not return within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		f()
	}()
	select {
	case r := <-done:
		if r != nil {
			t.Fatalf("%s panicked: %v", what, r)
		}
	case <-time.After(d):
		t.Fatalf("%s did not return within %s", what, d)
	}
}

// TestDiskFull: ENOSPC on any of Pebble's writes (the WAL, a flush's
// table, the MANIFEST, everything) fails the DB with one ErrDiskFull naming
// the state folder, promptly, without a panic or a line logged per retry;
// Close returns, and the state reopened holds the last commit that
// succeeded.
func TestDiskFull(t *testing.T) {
	for name, match := range map[string]func(string) bool{
		"wal":      func(p string) bool { return strings.HasSuffix(p, ".log") },
		"flush":    func(p string) bool { return strings.HasSuffix(p, ".sst") },
		"manifest": func(p string) bool { return strings.Contains(p, "MANIFEST") },
		"all":      nil,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			inj := &diskFull{match: match}
			var logs testinput.LockedBuffer
			db := open(t, dir, Options{AtomicCheckpoints: true, FS: newFaultFS(inj), WriteErrorGrace: 200 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			// Values of 64 KiB, 4 MiB a commit: Pebble flushes every commit or
			// two (a memtable holds 4 MiB, a batch of half that is flushed on
			// its own), so flushes and MANIFEST updates come soon.
			val := make([]byte, 64<<10)
			var err error
			last := -1 // the last round committed
			within(t, 20*time.Second, "committing on a full disk", func() {
				for i := 0; ; i++ {
					if i == 5 {
						inj.armed.Store(true)
					}
					for k := range 64 {
						if err = db.Set(fmt.Appendf(nil, "%d-%d", i, k), val); err != nil {
							return
						}
					}
					if err = db.Commit(true); err != nil {
						return
					}
					last = i
				}
			})
			if !errors.Is(err, ErrDiskFull) || !errors.Is(err, ErrFailed) {
				t.Fatalf("got %v, want ErrDiskFull", err)
			}
			want := "state: the disk holding " + dir + " is full (no space left on device)"
			if err.Error() != want {
				t.Errorf("message %q, want %q", err, want)
			}
			if !errors.Is(db.Err(), ErrDiskFull) || !errors.Is(db.Health(), ErrDiskFull) {
				t.Errorf("Err %v, Health %v", db.Err(), db.Health())
			}
			select {
			case <-db.Failed():
			default:
				t.Error("Failed not closed")
			}
			if _, _, err := db.Get([]byte("0-0")); !errors.Is(err, ErrDiskFull) {
				t.Errorf("a read after the failure: %v", err)
			}
			if n := strings.Count(logs.String(), "\n"); n > 20 {
				t.Errorf("%d log lines for %d injected errors:\n%s", n, inj.errors.Load(), logs.String())
			}
			within(t, 10*time.Second, "Close", func() {
				if err := db.Close(); !errors.Is(err, ErrDiskFull) {
					t.Errorf("Close: %v", err)
				}
			})

			// Pebble may keep the folder locked: a commit stuck in a write
			// stall (behind the flushes that fail) holds locks its Close
			// takes. A copy shows what a restart finds.
			db = open(t, copyDir(t, dir), Options{})
			defer db.Close()
			if last >= 0 {
				if _, ok := get(t, db, fmt.Sprintf("%d-63", last)); !ok {
					t.Errorf("the last commit that succeeded (round %d) is lost", last)
				}
			}
		})
	}
}

// copyDir copies the files of dir to a new folder, returned.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// TestBackgroundErrorGrace: a flush that fails once and then succeeds
// makes Health report the error meanwhile, and the DB goes on.
func TestBackgroundErrorGrace(t *testing.T) {
	inj := &diskFull{match: func(p string) bool { return strings.HasSuffix(p, ".sst") }}
	db := open(t, t.TempDir(), Options{FS: newFaultFS(inj), WriteErrorGrace: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	defer db.Close()
	db.Set([]byte("k"), []byte("v"))
	if err := db.Commit(true); err != nil {
		t.Fatal(err)
	}
	inj.armed.Store(true)
	flushed, err := db.db.AsyncFlush()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for db.Health() == nil {
		if time.Now().After(deadline) {
			t.Fatal("Health reports nothing while flushes fail")
		}
		time.Sleep(time.Millisecond)
	}
	if err := db.Health(); !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "failing for") {
		t.Fatalf("Health while flushes fail: %v", err)
	}
	if db.WriteErrors() == 0 {
		t.Error("no write error counted")
	}
	inj.armed.Store(false)
	<-flushed
	for db.Health() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Health after the flush succeeded: %v", db.Health())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := db.Err(); err != nil {
		t.Fatalf("a transient error failed the DB: %v", err)
	}
	if err := db.Set([]byte("k2"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := db.Commit(true); err != nil {
		t.Fatal(err)
	}
}

// stall is an errorfs injector that, once armed, blocks WAL syncs until
// released, as a disk that does not answer.
type stall struct {
	armed   atomic.Bool
	release chan struct{}
}

func (s *stall) String() string { return "stall" }

func (s *stall) MaybeError(op errorfs.Op) error {
	if s.armed.Load() && op.Kind == errorfs.OpFileSyncData && strings.HasSuffix(op.Path, ".log") {
		<-s.release
	}
	return nil
}

// TestStalledCommit: a commit that does not finish within StallTimeout
// fails the DB with ErrDiskStalled; Wait, Commit and Close return instead
// of waiting for it, and Health reports the commit in flight before.
func TestStalledCommit(t *testing.T) {
	inj := &stall{release: make(chan struct{})}
	defer close(inj.release)
	db := open(t, t.TempDir(), Options{AtomicCheckpoints: true, FS: newFaultFS(inj), StallTimeout: 300 * time.Millisecond})
	db.Set([]byte("a"), []byte("1"))
	if err := db.Commit(true); err != nil {
		t.Fatal(err)
	}
	inj.armed.Store(true)
	db.Set([]byte("b"), []byte("2"))
	db.CommitAsync(func(err error) {
		// Once released, at the end, the commit returns the DB's failure.
		if err == nil {
			t.Error("the stalled commit succeeded after the DB failed")
		}
	})
	db.Set([]byte("c"), []byte("3"))
	for db.Health() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	if err := db.Health(); !strings.Contains(err.Error(), "has been in flight for") || db.Err() != nil {
		t.Fatalf("Health during the stall: %v", err)
	}
	var err error
	within(t, 5*time.Second, "Commit behind a stalled one", func() { err = db.Commit(true) })
	if !errors.Is(err, ErrDiskStalled) || !strings.Contains(err.Error(), "a commit has not finished in 300ms") {
		t.Fatalf("got %v, want ErrDiskStalled", err)
	}
	if err := db.Wait(); !errors.Is(err, ErrDiskStalled) {
		t.Fatalf("Wait: %v", err)
	}
	within(t, 10*time.Second, "Close", func() { err = db.Close() })
	if !errors.Is(err, ErrDiskStalled) {
		t.Fatalf("Close: %v", err)
	}
}

// TestFatalfDoesNotPanic: Pebble's Fatalf fails the DB (classified by the
// error among its arguments) instead of panicking.
func TestFatalfDoesNotPanic(t *testing.T) {
	m := newMonitor("/state", slog.New(slog.DiscardHandler), time.Second, time.Second)
	pebbleLogger{m}.Fatalf("MANIFEST flush failed: %v", &os.PathError{Op: "write", Path: "/state/MANIFEST-000001", Err: syscall.ENOSPC})
	if !errors.Is(m.failure(), ErrDiskFull) {
		t.Fatalf("got %v", m.failure())
	}
	m = newMonitor("/state", slog.New(slog.DiscardHandler), time.Second, time.Second)
	pebbleLogger{m}.Fatalf("pebble: fatal commit error: %v", errors.New("EIO"))
	if err := m.failure(); !errors.Is(err, ErrWriteFailed) || err.Error() != "state: writing to /state failed: pebble: fatal commit error: EIO" {
		t.Fatalf("got %v", err)
	}
}

// TestQuietLog: an error repeated, with other file numbers, is logged once
// and then as a count at most once per interval.
func TestQuietLog(t *testing.T) {
	var logs testinput.LockedBuffer
	q := newQuietLog(slog.New(slog.NewTextHandler(&logs, nil)), 50*time.Millisecond)
	now := time.Unix(1, 0)
	q.now = func() time.Time { return now }
	for i := range 1000 {
		q.log(slog.LevelWarn, "write failed", fmt.Errorf("creating object %06d: no space left on device", i))
		now = now.Add(49 * time.Microsecond)
	}
	q.log(slog.LevelWarn, "write failed", errors.New("other"))
	now = now.Add(10 * time.Millisecond)
	q.log(slog.LevelWarn, "write failed", errors.New("creating object 001001: no space left on device"))
	out := logs.String()
	if n := strings.Count(out, "\n"); n != 3 || !strings.Contains(out, "repeats=1000") {
		t.Fatalf("want 3 lines, the last with repeats=1000:\n%s", out)
	}
}

// TestDiskSlow: Pebble's reports of a slow disk operation make Health
// unhealthy, and one past StallTimeout fails the DB with ErrDiskStalled.
func TestDiskSlow(t *testing.T) {
	m := newMonitor("/state", slog.New(slog.DiscardHandler), time.Second, 20*time.Second)
	slow := pebble.DiskSlowInfo{Path: "/state/000004.log", OpType: vfs.OpTypeSyncData, Duration: 6 * time.Second}
	m.diskSlow(slow)
	if err := m.health(); err == nil || err.Error() != "state: the disk holding /state is slow: a syncdata of 000004.log has taken 6s so far" {
		t.Fatalf("Health: %v", err)
	}
	if m.failure() != nil {
		t.Fatal("a slow disk failed the store")
	}
	slow.Duration = 20 * time.Second
	m.diskSlow(slow)
	if err := m.failure(); !errors.Is(err, ErrDiskStalled) || err.Error() != "state: the disk holding /state is stalled: a syncdata of 000004.log has not finished in 20s" {
		t.Fatalf("got %v", err)
	}
}
