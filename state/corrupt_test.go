package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// writeTable writes n slots and a metadata value to a new state in dir,
// flushed to one table on disk, and returns the table's path.
func writeTable(t *testing.T, dir string, n int) string {
	t.Helper()
	db := open(t, dir, Options{AtomicCheckpoints: true})
	for i := range n {
		db.Set(fmt.Appendf(nil, "k%06d", i), fmt.Appendf(nil, "value %d of a slot, long enough to fill blocks", i))
	}
	db.SetMeta("checkpoint", []byte("cp"))
	if err := db.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	tables, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(tables) != 1 {
		t.Fatalf("want one table, have %q", tables)
	}
	return tables[0]
}

// dataBlocks returns the offset and length of each data block of the
// table at path.
func dataBlocks(t *testing.T, path string) [][2]int64 {
	t.Helper()
	f, err := vfs.Default.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		t.Fatal(err)
	}
	defaults := pebble.DefaultOptions()
	r, err := sstable.NewReader(context.Background(), readable, defaults.MakeReaderOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	layout, err := r.Layout()
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][2]int64
	for _, h := range layout.Data {
		blocks = append(blocks, [2]int64{int64(h.Offset), int64(h.Length)})
	}
	return blocks
}

// flip inverts n bytes of the file at path from off.
func flip(t *testing.T, path string, off int64, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		b[off+int64(i)] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptTable: a state whose table has a flipped data block (its
// checksum fails) or a flipped footer is one ErrCorrupt naming the table
// and the check, whichever read (Open, Meta, Get, Scan) finds it first,
// and every read after; no panic.
func TestCorruptTable(t *testing.T) {
	block := func(which func(n int) int) func(t *testing.T, path string) int64 {
		return func(t *testing.T, path string) int64 {
			blocks := dataBlocks(t, path)
			if len(blocks) < 3 {
				t.Fatalf("want several data blocks, have %d", len(blocks))
			}
			b := blocks[which(len(blocks))]
			return b[0] + b[1]/2
		}
	}
	for name, c := range map[string]struct {
		at     func(t *testing.T, path string) int64
		reason string
		reads  []string
	}{
		// The metadata sorts first: in the first block.
		"first data block":  {block(func(int) int { return 0 }), "checksum mismatch", []string{"meta", "get", "scan"}},
		"middle data block": {block(func(n int) int { return n / 2 }), "checksum mismatch", []string{"get", "scan"}},
		"footer": {func(t *testing.T, path string) int64 {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			return fi.Size() - 8 // the magic number
		}, "bad magic number", []string{"meta", "get", "scan"}},
	} {
		t.Run(name, func(t *testing.T) {
			corrupt := t.TempDir()
			table := filepath.Join(corrupt, filepath.Base(writeTable(t, corrupt, 20000)))
			flip(t, table, c.at(t, table), 8)
			for _, read := range c.reads {
				// Each read on a copy of its own, opened anew, so that it is
				// the first to meet the corrupt table (or Open is).
				dir := copyDir(t, corrupt)
				file := filepath.Join(dir, filepath.Base(table))
				want := fmt.Sprintf("state: %s is corrupt (%s)", file, c.reason)
				var errs []error
				within(t, 10*time.Second, "reading the corrupt state", func() {
					db, err := Open(Options{Dir: dir})
					if err != nil {
						errs = append(errs, err)
						return
					}
					switch read {
					case "meta":
						_, _, err = db.Meta("checkpoint")
					case "get":
						for i := 0; i < 20000 && err == nil; i += 100 {
							_, _, err = db.Get(fmt.Appendf(nil, "k%06d", i))
						}
					case "scan":
						err = db.Seek(nil, func(_, _ []byte) (bool, error) { return true, nil })
					}
					errs = append(errs, err)
					// Every read after the failure returns it.
					_, _, err = db.Get([]byte("k000000"))
					errs = append(errs, err, db.Close())
				})
				errs = slices.DeleteFunc(errs, func(err error) bool { return err == nil })
				if len(errs) == 0 {
					t.Errorf("%s: the corruption went unnoticed", read)
				}
				for _, err := range errs {
					if !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrFailed) || err.Error() != want {
						t.Errorf("%s: got %v, want %q", read, err, want)
					}
				}
			}
		})
	}
}

// TestCorruptManifest: a MANIFEST whose first record is flipped fails Open
// with an ErrCorrupt naming it.
func TestCorruptManifest(t *testing.T) {
	dir := t.TempDir()
	writeTable(t, dir, 100)
	manifests, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	if len(manifests) != 1 {
		t.Fatalf("want one MANIFEST, have %q", manifests)
	}
	flip(t, manifests[0], 12, 4)
	var err error
	within(t, 10*time.Second, "Open", func() {
		var db *DB
		if db, err = Open(Options{Dir: dir}); err == nil {
			db.Close()
		}
	})
	want := fmt.Sprintf("state: %s is corrupt (malformed manifest file)", manifests[0])
	if !errors.Is(err, ErrCorrupt) || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
}
