package state

import (
	"io"
	"os"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Permissions of what the state creates: the state holds user ids, so
// only the job's own user may read it.
const (
	dirMode  os.FileMode = 0o700
	fileMode os.FileMode = 0o600
)

// guardFS is the filesystem Pebble keeps the state in. It creates folders
// owner-only (0700) and, on the operating system's filesystem, files too
// (0600: Pebble creates them 0666 less the umask).
//
// It also keeps Pebble from writing once the store has failed, so that the
// files stay as a crash at that moment would have left them, and from
// panicking. Most writes are then refused with the failure, errors Pebble
// handles. But Pebble panics on an error writing, syncing or creating a
// WAL (the panic unwinds through its locks: "sync: unlock of unlocked
// mutex", which no recover catches) or syncing the folder for a new WAL.
// guardFS does not let it see one: such an error fails the store, and from
// then on writes to WALs and syncs of folders succeed without touching the
// disk, and a new WAL is a file that keeps nothing. The last WAL on disk
// may end in a torn record, which Pebble's recovery expects of the last
// WAL.
type guardFS struct {
	vfs.FS
	m *monitor
	// chmod: the files are the operating system's.
	chmod bool
}

func newGuardFS(fs vfs.FS, m *monitor) *guardFS {
	return &guardFS{FS: fs, m: m, chmod: vfs.Root(fs) == vfs.Default}
}

// isWAL reports whether name is one of Pebble's write-ahead logs.
func isWAL(name string) bool { return strings.HasSuffix(name, ".log") }

// Unwrap returns the filesystem g guards.
func (g *guardFS) Unwrap() vfs.FS { return g.FS }

// open guards the file f, named name, just created or opened for writing.
func (g *guardFS) open(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		if isWAL(name) {
			g.m.fail(classify(g.m.dir, err))
			return discardFile{}, nil
		}
		return nil, err
	}
	if g.chmod {
		if err := os.Chmod(name, fileMode); err != nil {
			f.Close()
			return nil, err
		}
	}
	return &guardFile{File: f, m: g.m, wal: isWAL(name)}, nil
}

// refuse returns the failure, if any, for creating or opening name for
// writing; for a WAL (discard true) Pebble must not see it. A file other
// than a WAL waits first if background writes fail or the store has
// failed (monitor.pause).
func (g *guardFS) refuse(name string) (discard bool, err error) {
	if isWAL(name) {
		err = g.m.failure()
		return err != nil, err
	}
	if g.m.failure() != nil || g.m.retrying() {
		g.m.pause()
	}
	return false, g.m.failure()
}

// Create implements vfs.FS.
func (g *guardFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if discard, err := g.refuse(name); discard {
		return discardFile{}, nil
	} else if err != nil {
		return nil, err
	}
	f, err := g.FS.Create(name, category)
	return g.open(name, f, err)
}

// OpenReadWrite implements vfs.FS.
func (g *guardFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if discard, err := g.refuse(name); discard {
		return discardFile{}, nil
	} else if err != nil {
		return nil, err
	}
	f, err := g.FS.OpenReadWrite(name, category, opts...)
	return g.open(name, f, err)
}

// ReuseForWrite implements vfs.FS: Pebble recycles a WAL's file for a new
// one.
func (g *guardFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if discard, err := g.refuse(newname); discard {
		return discardFile{}, nil
	} else if err != nil {
		return nil, err
	}
	f, err := g.FS.ReuseForWrite(oldname, newname, category)
	return g.open(newname, f, err)
}

// OpenDir implements vfs.FS: a folder is synced through its File.
func (g *guardFS) OpenDir(name string) (vfs.File, error) {
	f, err := g.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &guardFile{File: f, m: g.m, dir: true}, nil
}

// Lock implements vfs.FS.
func (g *guardFS) Lock(name string) (io.Closer, error) {
	c, err := g.FS.Lock(name)
	if err == nil && g.chmod {
		if err := os.Chmod(name, fileMode); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, err
}

// MkdirAll implements vfs.FS, creating folders owner-only whatever perm.
func (g *guardFS) MkdirAll(dir string, _ os.FileMode) error {
	if err := g.m.failure(); err != nil {
		return err
	}
	return g.FS.MkdirAll(dir, dirMode)
}

// Link implements vfs.FS.
func (g *guardFS) Link(oldname, newname string) error {
	if err := g.m.failure(); err != nil {
		return err
	}
	return g.FS.Link(oldname, newname)
}

// Remove implements vfs.FS.
func (g *guardFS) Remove(name string) error {
	if err := g.m.failure(); err != nil {
		return err
	}
	return g.FS.Remove(name)
}

// RemoveAll implements vfs.FS.
func (g *guardFS) RemoveAll(name string) error {
	if err := g.m.failure(); err != nil {
		return err
	}
	return g.FS.RemoveAll(name)
}

// Rename implements vfs.FS.
func (g *guardFS) Rename(oldname, newname string) error {
	if err := g.m.failure(); err != nil {
		return err
	}
	return g.FS.Rename(oldname, newname)
}

// guardFile is a file of guardFS: once the store has failed, a WAL's
// writes and a folder's syncs succeed without touching the disk, and any
// other file's are refused with the failure.
type guardFile struct {
	vfs.File
	m *monitor
	// wal: the file is a WAL; dir: a folder.
	wal, dir bool
}

// guard runs the write op unless the store has failed. For a WAL or a
// folder an error fails the store and is kept from Pebble, as is the
// failure.
func (f *guardFile) guard(op func() error) error {
	hide := f.wal || f.dir
	if err := f.m.failure(); err != nil {
		if hide {
			return nil
		}
		return err
	}
	err := op()
	if err != nil && hide {
		f.m.fail(classify(f.m.dir, err))
		return nil
	}
	return err
}

func (f *guardFile) Write(p []byte) (n int, err error) {
	err = f.guard(func() error {
		n, err = f.File.Write(p)
		return err
	})
	if err == nil {
		n = len(p)
	}
	return n, err
}

func (f *guardFile) WriteAt(p []byte, off int64) (n int, err error) {
	err = f.guard(func() error {
		n, err = f.File.WriteAt(p, off)
		return err
	})
	if err == nil {
		n = len(p)
	}
	return n, err
}

func (f *guardFile) Preallocate(offset, length int64) error {
	return f.guard(func() error { return f.File.Preallocate(offset, length) })
}

func (f *guardFile) Sync() error { return f.guard(f.File.Sync) }

func (f *guardFile) SyncData() error { return f.guard(f.File.SyncData) }

func (f *guardFile) SyncTo(length int64) (fullSync bool, err error) {
	err = f.guard(func() error {
		fullSync, err = f.File.SyncTo(length)
		return err
	})
	return fullSync, err
}

// discardFile is a WAL created after the store failed: it keeps nothing.
type discardFile struct{}

func (discardFile) Close() error                           { return nil }
func (discardFile) Read([]byte) (int, error)               { return 0, io.EOF }
func (discardFile) ReadAt([]byte, int64) (int, error)      { return 0, io.EOF }
func (discardFile) Write(p []byte) (int, error)            { return len(p), nil }
func (discardFile) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }
func (discardFile) Preallocate(int64, int64) error         { return nil }
func (discardFile) Stat() (vfs.FileInfo, error)            { return discardInfo{}, nil }
func (discardFile) Sync() error                            { return nil }
func (discardFile) SyncTo(int64) (bool, error)             { return true, nil }
func (discardFile) SyncData() error                        { return nil }
func (discardFile) Prefetch(int64, int64) error            { return nil }
func (discardFile) Fd() uintptr                            { return vfs.InvalidFd }

// discardInfo is the FileInfo of a discardFile: empty.
type discardInfo struct{}

func (discardInfo) Name() string           { return "" }
func (discardInfo) Size() int64            { return 0 }
func (discardInfo) Mode() os.FileMode      { return fileMode }
func (discardInfo) ModTime() time.Time     { return time.Time{} }
func (discardInfo) IsDir() bool            { return false }
func (discardInfo) Sys() any               { return nil }
func (discardInfo) DeviceID() vfs.DeviceID { return vfs.DeviceID{} }
