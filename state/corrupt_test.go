package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestMissingFile: a store that lacks its manifest marker, its MANIFEST or
// a table is refused at Open with one ErrCorrupt naming what is missing,
// and nothing in the folder is deleted: Pebble, without the marker, would
// take the folder for a new store, open it empty and delete the tables.
func TestMissingFile(t *testing.T) {
	for _, c := range []struct{ remove, want string }{
		{"marker.manifest.*", "state: DIR/marker.manifest.* is missing (the file naming the current MANIFEST; TABLE and the other files are there)"},
		{"MANIFEST-*", "state: DIR/MANIFEST- is missing (the current MANIFEST, named by MARKER)"},
		{"*.sst", "state: DIR/TABLE is missing (a table the MANIFEST lists)"},
	} {
		dir := t.TempDir()
		table := filepath.Base(writeTable(t, dir, 100))
		markers, _ := filepath.Glob(filepath.Join(dir, "marker.manifest.*"))
		marker := filepath.Base(markers[0])
		manifest := marker[strings.LastIndexByte(marker, '.')+1:]
		files, _ := filepath.Glob(filepath.Join(dir, c.remove))
		for _, f := range files {
			os.Remove(f)
		}
		before, _ := os.ReadDir(dir)
		db, err := Open(Options{Dir: dir})
		if err == nil {
			db.Close()
		}
		want := strings.NewReplacer("DIR", dir, "TABLE", table, "MARKER", marker, "MANIFEST-", manifest).Replace(c.want)
		if !errors.Is(err, ErrCorrupt) || err.Error() != want {
			t.Fatalf("without %s: %v, want %q", c.remove, err, want)
		}
		if after, _ := os.ReadDir(dir); len(after) != len(before) {
			t.Fatalf("without %s, Open changed the folder: %v, then %v", c.remove, before, after)
		}
	}
}

// TestCorruptWAL: a WAL with flipped bytes before records that were synced
// after them is refused at Open with one ErrCorrupt naming it, for a store
// created by this build as for one of an older format: Pebble took such a
// WAL for one torn at its end, and opened the store without every commit
// after the flipped bytes, an older checkpoint.
func TestCorruptWAL(t *testing.T) {
	for _, old := range []bool{false, true} {
		dir := t.TempDir()
		if old {
			db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatMinSupported})
			if err != nil {
				t.Fatal(err)
			}
			db.Close()
		}
		db := open(t, dir, Options{AtomicCheckpoints: true})
		for c := range 5 {
			for i := range 200 {
				db.Set(fmt.Appendf(nil, "k%06d", i), fmt.Appendf(nil, "value %d of a slot at checkpoint %d", i, c))
			}
			db.SetMeta("checkpoint", fmt.Appendf(nil, "cp%d", c))
			if err := db.Commit(true); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		var wal string
		var size int64
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		for _, l := range logs {
			if st, _ := os.Stat(l); st.Size() > size {
				wal, size = l, st.Size()
			}
		}
		flip(t, wal, size/3, 16)
		db, err := Open(Options{Dir: dir})
		if err == nil {
			cp, _, _ := db.Meta("checkpoint")
			db.Close()
			t.Fatalf("older format %v: opened with checkpoint %q, 16 bytes of the WAL flipped", old, cp)
		}
		if !errors.Is(err, ErrCorrupt) || !strings.HasPrefix(err.Error(), "state: "+wal+" is corrupt (") {
			t.Fatalf("older format %v: %v, want an ErrCorrupt naming %s", old, err, wal)
		}
	}
}

// TestVerify: Verify checks every table of an open store, finds a flipped
// data block that no read has touched, fails the DB with an ErrCorrupt
// naming the table, as the read would, and passes a sound store.
func TestVerify(t *testing.T) {
	dir := t.TempDir()
	path := writeTable(t, dir, 2000)
	db := open(t, dir, Options{})
	var checked, tables int
	if err := db.Verify(context.Background(), func(c, n int) { checked, tables = c, n }); err != nil || checked != 1 || tables != 1 {
		t.Fatalf("a sound store: %v, %d of %d tables checked", err, checked, tables)
	}
	db.Close()
	blocks := dataBlocks(t, path)
	last := blocks[len(blocks)-1] // not the metadata's: Open reads no slot
	flip(t, path, last[0]+last[1]/2, 8)
	db = open(t, dir, Options{})
	defer db.Close()
	err := db.Verify(context.Background(), nil)
	want := fmt.Sprintf("state: %s is corrupt (checksum mismatch)", path)
	if !errors.Is(err, ErrCorrupt) || err.Error() != want {
		t.Fatalf("Verify of a flipped block: %v, want %q", err, want)
	}
	if !errors.Is(db.Err(), ErrCorrupt) {
		t.Fatalf("the DB did not fail: %v", db.Err())
	}
}
