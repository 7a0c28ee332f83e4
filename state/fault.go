package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/riskstream/riskstream/internal/corrupt"
)

// A DB fails, for good, on the first write to disk Pebble cannot complete
// (a commit, a MANIFEST update, a flush or compaction that keeps failing),
// on a disk that stalls, and on a corrupt file. Its operations then return
// the failure, an *Error; the files stay as they were at that moment, as
// after a crash, and hold the last commit that succeeded.
var (
	// ErrFailed matches every failure of the state store (errors.Is).
	ErrFailed = errors.New("state: failed")
	// ErrDiskFull is the failure to write for lack of space (ENOSPC).
	ErrDiskFull = errors.New("state: disk full")
	// ErrDiskStalled is a write or commit that did not finish within
	// Options.StallTimeout.
	ErrDiskStalled = errors.New("state: disk stalled")
	// ErrWriteFailed is any other failure to write the state.
	ErrWriteFailed = errors.New("state: write failed")
	// ErrCorrupt is a state file whose contents fail Pebble's checks (a
	// checksum mismatch, a bad table footer, a WAL record that a later
	// one says was synced), or one that the store needs and is missing.
	ErrCorrupt = corrupt.Errorf("state: corrupt")
)

// Error is why a DB failed. It matches ErrFailed and its Kind with
// errors.Is, and unwraps to the error Pebble reported.
type Error struct {
	// Kind is ErrDiskFull, ErrDiskStalled, ErrWriteFailed, ErrCorrupt, or
	// ErrFailed for anything else (a panic in Pebble).
	Kind error
	// Path is the state directory, or the corrupt file.
	Path string
	// Detail says what happened, in a few words.
	Detail string
	// Missing says that the corrupt file is not there at all.
	Missing bool
	// Err is the error Pebble reported, if any.
	Err error
}

// Error says what failed, where: the state folder, or the corrupt file.
func (e *Error) Error() string {
	switch e.Kind {
	case ErrDiskFull:
		return fmt.Sprintf("state: the disk holding %s is full (no space left on device)", e.Path)
	case ErrDiskStalled:
		return fmt.Sprintf("state: the disk holding %s is stalled: %s", e.Path, e.Detail)
	case ErrCorrupt:
		if e.Missing {
			return fmt.Sprintf("state: %s is missing (%s)", e.Path, e.Detail)
		}
		return fmt.Sprintf("state: %s is corrupt (%s)", e.Path, e.Detail)
	case ErrWriteFailed:
		return fmt.Sprintf("state: writing to %s failed: %s", e.Path, e.Detail)
	}
	return fmt.Sprintf("state: %s: %s", e.Path, e.Detail)
}

// Is reports whether target is ErrFailed or e's Kind, or what its Kind
// matches (ErrCorrupt is corruption: corrupt.ErrCorruption).
func (e *Error) Is(target error) bool { return target == ErrFailed || errors.Is(e.Kind, target) }

// Unwrap returns the error Pebble reported.
func (e *Error) Unwrap() error { return e.Err }

// classify turns an error from Pebble into the failure it means for the
// state in dir.
func classify(dir string, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	switch m := missingTable.FindStringSubmatch(err.Error()); {
	case m != nil:
		return &Error{Kind: ErrCorrupt, Missing: true, Path: filepath.Join(dir, m[1]+".sst"), Detail: "a table the MANIFEST lists", Err: err}
	case pebble.IsCorruptionError(err):
		return corruptError(dir, err)
	case errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), syscall.ENOSPC.Error()):
		return &Error{Kind: ErrDiskFull, Path: dir, Detail: syscall.ENOSPC.Error(), Err: err}
	}
	return &Error{Kind: ErrWriteFailed, Path: dir, Detail: err.Error(), Err: err}
}

// pebbleFile matches the name of a file of Pebble's in a message.
var pebbleFile = regexp.MustCompile(`MANIFEST-\d+|OPTIONS-\d+|\d+\.(?:sst|log|blob)`)

// missingTable matches Pebble's error for a table its MANIFEST lists and
// the folder lacks.
var missingTable = regexp.MustCompile(`file (\d+) \(type sstable\) unknown to the objstorage provider: file does not exist`)

// corruptError names the corrupt file, as Pebble reports it or as its
// message or its details name it (a WAL's, "replaying wal 6, offset
// (DIR/000006.log: 11938)"), and the check it failed.
func corruptError(dir string, err error) *Error {
	path := dir
	if info := pebble.ExtractDataCorruptionInfo(err); info != nil && info.Path != "" {
		path = info.Path
	} else if name := pebbleFile.FindString(fmt.Sprintf("%+v", err)); name != "" {
		path = filepath.Join(dir, name) // %+v has the message, then the details
	}
	return &Error{Kind: ErrCorrupt, Path: path, Detail: corruptionReason(err), Err: err}
}

// missingFile returns the failure of a store in dir that lacks a file it
// needs, checked before Pebble opens it: the manifest marker, when tables
// or a written WAL are there (without it Pebble would take the folder for
// a new store, open it empty and delete them), or the MANIFEST the marker
// names. It returns nil for a store that lacks none, or a new one.
func missingFile(fs vfs.FS, dir string) error {
	names, err := fs.List(dir)
	if err != nil {
		return nil // a folder to create; any other trouble is Open's to report
	}
	slices.Sort(names) // the same file named every time
	var marker, data string
	for _, name := range names {
		switch {
		case strings.HasPrefix(name, "marker.manifest."):
			marker = name
		case strings.HasSuffix(name, ".sst"):
			data = name
		case strings.HasSuffix(name, ".log") && data == "":
			if st, err := fs.Stat(fs.PathJoin(dir, name)); err == nil && st.Size() > 0 {
				data = name
			}
		}
	}
	switch {
	case marker == "" && data != "":
		return &Error{Kind: ErrCorrupt, Missing: true, Path: fs.PathJoin(dir, "marker.manifest.*"),
			Detail: "the file naming the current MANIFEST; " + data + " and the other files are there"}
	case marker != "":
		manifest := marker[strings.LastIndexByte(marker, '.')+1:]
		if _, err := fs.Stat(fs.PathJoin(dir, manifest)); errors.Is(err, os.ErrNotExist) {
			return &Error{Kind: ErrCorrupt, Missing: true, Path: fs.PathJoin(dir, manifest), Detail: "the current MANIFEST, named by " + marker}
		}
	}
	return nil
}

// corruptionReason is the innermost message of a corruption error, short:
// "block 344589/4046: crc32c checksum mismatch 979098c1 != f2766c06" says
// "checksum mismatch", "(bad magic number: 0x...)" "bad magic number",
// `pebble: malformed manifest file "MANIFEST-000001" for DB "/dir"`
// "malformed manifest file".
func corruptionReason(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			break
		}
		err = next
	}
	msg := strings.Trim(err.Error(), "()")
	for _, known := range []string{"checksum mismatch", "bad magic number"} {
		if strings.Contains(msg, known) {
			return known
		}
	}
	msg = strings.TrimPrefix(msg, "pebble: ")
	msg, _, _ = strings.Cut(msg, " for DB ")
	if name := pebbleFile.FindString(msg); name != "" {
		msg = strings.TrimSpace(strings.ReplaceAll(msg, `"`+name+`"`, ""))
	}
	return msg
}

// fatalError is a Fatalf from Pebble: its message, and the error among its
// arguments, which classify looks into.
type fatalError struct {
	msg string
	err error
}

func (e *fatalError) Error() string { return e.msg }
func (e *fatalError) Unwrap() error { return e.err }

// monitor watches one Pebble store for the faults that fail it: Pebble's
// logger and event listener report to it, and the FS it writes through
// refuses every write once it has failed.
type monitor struct {
	dir   string
	log   *quietLog
	grace time.Duration
	stall time.Duration

	// err is the failure, set once; failed is closed after it is set.
	err    atomic.Pointer[Error]
	failed chan struct{}
	once   sync.Once
	// closing is closed when the DB closes.
	closing   chan struct{}
	closeOnce sync.Once

	// writeErrors counts the failed writes Pebble reported.
	writeErrors atomic.Uint64

	mu sync.Mutex
	// failingSince is when background writes started failing, zero once
	// one succeeds; lastErr is the last of their errors.
	failingSince time.Time
	lastErr      error
	// slowAt is when Pebble last reported a slow disk operation, slow
	// what it was.
	slowAt time.Time
	slow   string
}

func newMonitor(dir string, l *slog.Logger, grace, stall time.Duration) *monitor {
	return &monitor{dir: dir, log: newQuietLog(l, repeatLogInterval), grace: grace, stall: stall,
		failed: make(chan struct{}), closing: make(chan struct{})}
}

// close tells that the DB is closing.
func (m *monitor) close() { m.closeOnce.Do(func() { close(m.closing) }) }

// retrying reports whether background writes are failing, and Pebble
// retrying them.
func (m *monitor) retrying() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.failingSince.IsZero()
}

// pause paces Pebble while its background writes fail, and once the store
// has failed: Pebble retries a failed flush or compaction at once, without
// end or backoff, each attempt starting with a file it creates. Creating
// one then waits fencePause, or until the DB closes.
func (m *monitor) pause() {
	t := time.NewTimer(fencePause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-m.closing:
	}
}

// fail records err as the failure, unless there is one already, and
// returns the failure.
func (m *monitor) fail(err *Error) *Error {
	m.once.Do(func() {
		m.err.Store(err)
		close(m.failed)
	})
	return m.err.Load()
}

// failure returns the failure, or nil.
func (m *monitor) failure() error {
	if e := m.err.Load(); e != nil {
		return e
	}
	return nil
}

// health returns nil while the store works, else what is wrong.
func (m *monitor) health() error {
	if err := m.failure(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if !m.failingSince.IsZero() {
		return fmt.Errorf("%w (failing for %s, retried; the store fails after %s)",
			classify(m.dir, m.lastErr), now.Sub(m.failingSince).Round(time.Millisecond), m.grace)
	}
	if !m.slowAt.IsZero() && now.Sub(m.slowAt) < slowHealthWindow {
		return fmt.Errorf("state: the disk holding %s is slow: %s", m.dir, m.slow)
	}
	return nil
}

// backgroundError is a flush, compaction or other background job of
// Pebble that failed; Pebble retries it. A corrupt file fails the store at
// once, other errors after m.grace without a success.
func (m *monitor) backgroundError(err error) {
	if m.err.Load() != nil {
		return // the fence refusing writes: nothing new
	}
	if pebble.IsCorruptionError(err) {
		m.fail(corruptError(m.dir, err))
		return
	}
	m.writeErrors.Add(1)
	m.log.log(slog.LevelWarn, "state: a background write failed; Pebble retries it", err)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastErr = err
	if m.failingSince.IsZero() {
		since := time.Now()
		m.failingSince = since
		time.AfterFunc(m.grace, func() { m.checkFailing(since) })
	}
}

// checkFailing fails the store if the background writes failing since
// since have not succeeded since.
func (m *monitor) checkFailing(since time.Time) {
	m.mu.Lock()
	still, err := m.failingSince.Equal(since), m.lastErr
	m.mu.Unlock()
	if still {
		m.fail(classify(m.dir, err))
	}
}

// succeeded is a background write that worked: the store recovered.
func (m *monitor) succeeded() {
	m.mu.Lock()
	if !m.failingSince.IsZero() && m.err.Load() == nil {
		m.log.l.Info("state: background writes work again", "dir", m.dir)
	}
	m.failingSince = time.Time{}
	m.mu.Unlock()
}

// diskSlow is a disk operation Pebble has seen last longer than its
// threshold, reported again every few seconds while it goes on.
func (m *monitor) diskSlow(info pebble.DiskSlowInfo) {
	if m.err.Load() != nil {
		return
	}
	op := fmt.Sprintf("a %s of %s", info.OpType, filepath.Base(info.Path))
	if info.Duration >= m.stall {
		m.fail(&Error{Kind: ErrDiskStalled, Path: m.dir, Detail: fmt.Sprintf("%s has not finished in %s", op, m.stall)})
		return
	}
	slow := fmt.Sprintf("%s has taken %s so far", op, info.Duration.Round(time.Second))
	m.mu.Lock()
	m.slowAt, m.slow = time.Now(), slow
	m.mu.Unlock()
	m.log.log(slog.LevelWarn, "state: disk slow", errors.New(slow))
}

// commitFailed is a commit Pebble could not write: Pebble's commit
// pipeline is unusable after it, so the store fails.
func (m *monitor) commitFailed(err error) *Error {
	m.writeErrors.Add(1)
	return m.fail(classify(m.dir, err))
}

// recovered turns a panic in Pebble into the store's failure.
func (m *monitor) recovered(r any) *Error {
	err, ok := r.(error)
	if !ok {
		err = fmt.Errorf("%v", r)
	}
	if pebble.IsCorruptionError(err) {
		return m.fail(corruptError(m.dir, err))
	}
	return m.fail(&Error{Kind: ErrFailed, Path: m.dir, Detail: "pebble panicked: " + err.Error(), Err: err})
}

// listener is the event listener that reports to m.
func (m *monitor) listener() *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: m.backgroundError,
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			m.fail(&Error{Kind: ErrCorrupt, Path: info.Path, Detail: corruptionReason(info.Details), Err: info.Details})
		},
		DiskSlow: m.diskSlow,
		FlushEnd: func(info pebble.FlushInfo) {
			if info.Err == nil {
				m.succeeded()
			}
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			if info.Err == nil {
				m.succeeded()
			}
		},
	}
}

// Timing of faults and their reports.
const (
	// repeatLogInterval is how often a message repeated is logged again,
	// with its count.
	repeatLogInterval = 10 * time.Second
	// slowHealthWindow is how long after Pebble's last report of a slow
	// disk operation Health reports it: Pebble reports one every 2s while
	// it lasts.
	slowHealthWindow = 5 * time.Second
	// closeTimeout bounds the close of a failed store, which Pebble may
	// never finish (a commit stuck on the disk holds its locks).
	closeTimeout = 5 * time.Second
	// fencePause is how long creating a file waits while background
	// writes fail or once the store has failed (monitor.pause).
	fencePause = 100 * time.Millisecond
)

// pebbleLogger sends Pebble's messages to slog: Infof at debug level,
// Errorf at error level with repeats counted (quietLog). Fatalf is Pebble
// giving up on the store (a failed MANIFEST or WAL write, corruption): the
// store fails and Fatalf returns, since a panic would end the process from
// a goroutine of Pebble's, or unwind through Pebble's locks; the store's FS
// then refuses every write, so Pebble, going on, changes nothing on disk.
type pebbleLogger struct {
	m *monitor
}

func (p pebbleLogger) Infof(format string, args ...any) {
	p.m.log.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	if p.m.err.Load() != nil {
		return
	}
	p.m.log.log(slog.LevelError, "pebble", fmt.Errorf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	err := &fatalError{msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if e, ok := a.(error); ok {
			err.err = e
			break
		}
	}
	p.m.fail(classify(p.m.dir, err))
}

// quietLog logs each distinct error once, then counts its repeats and logs
// the count at most once per interval, instead of a line per repeat (a
// flush Pebble retries on a full disk fails again at each attempt). Errors
// differing only in numbers (file numbers) are the same.
type quietLog struct {
	l     *slog.Logger
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	seen  map[string]*repeats
}

type repeats struct {
	n    int
	last time.Time
}

// maxDistinct bounds the distinct errors quietLog remembers.
const maxDistinct = 256

func newQuietLog(l *slog.Logger, every time.Duration) *quietLog {
	return &quietLog{l: l, every: every, now: time.Now, seen: map[string]*repeats{}}
}

func (q *quietLog) log(level slog.Level, msg string, err error) {
	key := msg + "\x00" + withoutDigits(err.Error())
	now := q.now()
	q.mu.Lock()
	r := q.seen[key]
	if r == nil {
		if len(q.seen) >= maxDistinct {
			clear(q.seen)
		}
		q.seen[key] = &repeats{last: now}
		q.mu.Unlock()
		q.l.Log(context.Background(), level, msg, "err", err.Error())
		return
	}
	r.n++
	if now.Sub(r.last) < q.every {
		q.mu.Unlock()
		return
	}
	n := r.n
	r.n, r.last = 0, now
	q.mu.Unlock()
	q.l.Log(context.Background(), level, msg, "err", err.Error(), "repeats", n, "over", q.every)
}

// withoutDigits replaces each run of digits in s by '#'.
func withoutDigits(s string) string {
	var b strings.Builder
	digits := false
	for _, r := range s {
		if r >= '0' && r <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(r)
	}
	return b.String()
}
