package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func open(t *testing.T, dir string, o Options) *DB {
	t.Helper()
	o.Dir = dir
	db, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func get(t *testing.T, db *DB, key string) (string, bool) {
	t.Helper()
	v, ok, err := db.Get([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return string(v), ok
}

// TestReadThroughAndDurability: pending writes are visible to Get before a
// commit, survive Close and reopening, and deletes too.
func TestReadThroughAndDurability(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, Options{})
	if err := db.Set([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	db.Set([]byte("b"), []byte("2"))
	db.Delete([]byte("b"))
	db.SetMeta("offsets", []byte("x"))
	if v, ok := get(t, db, "a"); !ok || v != "1" {
		t.Fatalf("pending write not visible: %q %v", v, ok)
	}
	if err := db.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.Get([]byte("a")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	db = open(t, dir, Options{})
	defer db.Close()
	if v, ok := get(t, db, "a"); !ok || v != "1" {
		t.Fatalf("after reopening: %q %v", v, ok)
	}
	if _, ok := get(t, db, "b"); ok {
		t.Fatal("deleted key came back")
	}
	if v, ok, _ := db.Meta("offsets"); !ok || string(v) != "x" {
		t.Fatal("metadata lost")
	}
	if _, ok := get(t, db, "offsets"); ok {
		t.Fatal("metadata and slot keys must not share a keyspace")
	}
}

// TestAtomicCheckpoints: with AtomicCheckpoints nothing is committed before
// Commit, however large the batch; without it the batch commits by size.
func TestAtomicCheckpoints(t *testing.T) {
	for _, atomic := range []bool{true, false} {
		db := open(t, t.TempDir(), Options{BatchBytes: 1 << 10, AtomicCheckpoints: atomic})
		for i := range 100 {
			db.Set([]byte{byte(i)}, make([]byte, 100))
		}
		committed := len(db.own.pending.data) < 100*100 // the pending writes are all there until a commit
		if committed == atomic {
			t.Errorf("AtomicCheckpoints=%v: batch committed early = %v", atomic, committed)
		}
		db.Close()
	}
}

// TestCloseDropsUncommitted: with AtomicCheckpoints, Close leaves out the
// writes since the last Commit, slots and metadata alike: they belong to a
// checkpoint a stop gave up on, and committed they would put the state past
// the last checkpoint's offsets. Without it Close commits them.
func TestCloseDropsUncommitted(t *testing.T) {
	for _, atomic := range []bool{true, false} {
		dir := t.TempDir()
		db := open(t, dir, Options{AtomicCheckpoints: atomic})
		db.Set([]byte("slot"), []byte("at the checkpoint"))
		db.SetMeta("offsets", []byte("100"))
		if err := db.Commit(true); err != nil {
			t.Fatal(err)
		}
		db.Set([]byte("slot"), []byte("past it"))
		db.SetMeta("offsets", []byte("200"))
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		db = open(t, dir, Options{})
		v, _ := get(t, db, "slot")
		m, _, _ := db.Meta("offsets")
		db.Close()
		want := map[bool][2]string{true: {"at the checkpoint", "100"}, false: {"past it", "200"}}[atomic]
		if v != want[0] || string(m) != want[1] {
			t.Errorf("AtomicCheckpoints=%v: after Close the slot is %q and the offsets %q, want %q", atomic, v, m, want)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	if _, err := Open(Options{}); err == nil {
		t.Fatal("Open without a Dir must fail")
	}
}

// TestCommitAsync: while a commit runs on another goroutine the owner
// keeps writing to a new batch, reads see the batch being committed, the
// callbacks run in order once each commit is done, and everything is there
// after reopening.
func TestCommitAsync(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, Options{AtomicCheckpoints: true})
	var order []int
	var mu sync.Mutex
	for i := range 50 {
		db.Set([]byte{byte(i)}, []byte("v"))
		if i > 0 {
			// Written by the previous round, perhaps still being committed.
			if v, ok := get(t, db, string([]byte{byte(i - 1)})); !ok || v != "v" {
				t.Fatalf("key %d not visible during its commit: %q %v", i-1, v, ok)
			}
		}
		db.CommitAsync(func(err error) {
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		})
	}
	if err := db.Wait(); err != nil {
		t.Fatal(err)
	}
	for i, n := range order {
		if n != i || len(order) != 50 {
			t.Fatalf("callbacks out of order or missing: %v", order)
		}
	}
	db.Close()
	db = open(t, dir, Options{})
	defer db.Close()
	if v, ok := get(t, db, "\x31"); !ok || v != "v" {
		t.Fatalf("committed write lost: %q %v", v, ok)
	}
}

// TestPendingDelete: a deletion hides the committed value before its own
// commit, and while that commit is in flight.
func TestPendingDelete(t *testing.T) {
	db := open(t, t.TempDir(), Options{AtomicCheckpoints: true})
	defer db.Close()
	db.Set([]byte("k"), []byte("v"))
	if err := db.Commit(true); err != nil {
		t.Fatal(err)
	}
	db.Delete([]byte("k"))
	if _, ok := get(t, db, "k"); ok {
		t.Fatal("deleted key visible before the commit")
	}
	db.CommitAsync(func(err error) {
		if err != nil {
			t.Error(err)
		}
	})
	if _, ok := get(t, db, "k"); ok {
		t.Fatal("deleted key visible during the commit")
	}
	if err := db.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, db, "k"); ok {
		t.Fatal("deleted key visible after the commit")
	}
}

// TestLastWriteWins: of several writes to a key between commits, the last
// is what reads see and what is committed, whatever the order of the keys,
// and a value written after a deletion brings the key back.
func TestLastWriteWins(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, Options{AtomicCheckpoints: true})
	db.Set([]byte("z"), []byte("1"))
	db.Set([]byte("a"), []byte("1"))
	db.Set([]byte("z"), []byte("22"))
	db.Delete([]byte("a"))
	db.Set([]byte("m"), []byte("x"))
	db.Delete([]byte("m"))
	db.Set([]byte("m"), []byte("333"))
	want := map[string]string{"z": "22", "m": "333"}
	check := func(when string) {
		t.Helper()
		for _, k := range []string{"a", "m", "z"} {
			v, ok := get(t, db, k)
			if w, wok := want[k]; ok != wok || v != w {
				t.Errorf("%s: %q = %q, %v; want %q, %v", when, k, v, ok, w, wok)
			}
		}
	}
	check("pending")
	// Reads index the pending writes; later writes must update the index.
	db.Set([]byte("z"), []byte("4444"))
	db.Delete([]byte("m"))
	want = map[string]string{"z": "4444"}
	check("written after a read")
	if err := db.Commit(true); err != nil {
		t.Fatal(err)
	}
	check("committed")
	db.Close()
	db = open(t, dir, Options{})
	defer db.Close()
	check("reopened")
}

// TestSeek: Seek lists the committed slot keys from its start in key
// order, not metadata nor (with atomic checkpoints) pending writes, and
// stops when fn says so or fails.
func TestSeek(t *testing.T) {
	db := open(t, t.TempDir(), Options{AtomicCheckpoints: true})
	defer db.Close()
	for _, k := range []string{"c", "a", "b", "d"} {
		db.Set([]byte(k), []byte("v"+k))
	}
	db.Delete([]byte("d"))
	db.SetMeta("checkpoint", []byte("x"))
	seek := func(start string, n int) []string {
		t.Helper()
		var got []string
		if err := db.Seek([]byte(start), func(k, _ []byte) (bool, error) {
			got = append(got, string(k))
			return len(got) < n, nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := seek("", 10); len(got) != 0 {
		t.Fatalf("seek saw pending writes: %q", got)
	}
	if err := db.Commit(false); err != nil {
		t.Fatal(err)
	}
	db.Set([]byte("bb"), nil) // pending: not seen
	if got, want := seek("", 10), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("seek gave %q, want %q", got, want)
	}
	if got, want := seek("b", 10), []string{"b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("seek from b gave %q, want %q", got, want)
	}
	if got, want := seek("ab", 1), []string{"b"}; !slices.Equal(got, want) {
		t.Fatalf("seek from ab, one key, gave %q, want %q", got, want)
	}
	stop := errors.New("stop")
	if err := db.Seek(nil, func(_, _ []byte) (bool, error) { return true, stop }); err != stop {
		t.Fatalf("seek returned %v, want fn's error", err)
	}

	// Without atomic checkpoints, writes may be committed at any time:
	// Seek commits them first, and sees them.
	free := open(t, t.TempDir(), Options{})
	defer free.Close()
	free.Set([]byte("x"), []byte("vx"))
	var got []string
	if err := free.Seek(nil, func(k, _ []byte) (bool, error) { got = append(got, string(k)); return true, nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"x"}) {
		t.Fatalf("seek without atomic checkpoints gave %q, want the write pending before it", got)
	}
}

// TestPermissions: the state holds user ids: the folders Open creates and
// every file in them are its user's only.
func TestPermissions(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b")
	writeTable(t, dir, 1000) // a table, WAL, MANIFEST, OPTIONS, LOCK
	db := open(t, dir, Options{})
	db.Set([]byte("k"), []byte("v"))
	if err := db.Commit(true); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, d := range []string{filepath.Join(root, "a"), dir} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("folder %s: %v, %v; want 0700", d, fi.Mode(), err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) < 5 {
		t.Fatalf("%d files, %v", len(entries), err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want 0600", e.Name(), fi.Mode())
		}
	}
}

// TestGetSorted: a sorted run of keys reads what Get reads for each: values
// committed, overwritten, deleted and pending, and keys never written.
func TestGetSorted(t *testing.T) {
	db := open(t, t.TempDir(), Options{AtomicCheckpoints: true})
	defer db.Close()
	for i := range 1000 {
		db.Set(fmt.Appendf(nil, "k%04d", i), fmt.Appendf(nil, "v%d", i))
	}
	if err := db.Commit(true); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i += 7 {
		db.Set(fmt.Appendf(nil, "k%04d", i), []byte("pending"))
	}
	for i := 3; i < 1000; i += 11 {
		db.Delete(fmt.Appendf(nil, "k%04d", i))
	}
	var keys [][]byte
	for i := 0; i < 1200; i += 2 { // beyond 999: never written
		keys = append(keys, fmt.Appendf(nil, "k%04d", i))
	}
	n := 0
	err := db.GetSorted(keys, func(i int, value []byte, found bool) error {
		want, wantFound := get(t, db, string(keys[i]))
		if found != wantFound || string(value) != want {
			t.Errorf("%s: %q, %v; Get reads %q, %v", keys[i], value, found, want, wantFound)
		}
		n++
		return nil
	})
	if err != nil || n != len(keys) {
		t.Fatalf("GetSorted: %v after %d of %d keys", err, n, len(keys))
	}
}

// TestParts: shards write and read their slots through parts on
// goroutines of their own; one commit of the DB makes the writes of every
// part and its own durable together, and a part reads its writes, pending
// and in flight, before that.
func TestParts(t *testing.T) {
	dir := t.TempDir()
	if _, err := open(t, t.TempDir(), Options{}).Parts(2); err == nil {
		t.Fatal("parts without atomic checkpoints")
	}
	db := open(t, dir, Options{AtomicCheckpoints: true})
	parts, err := db.Parts(2)
	if err != nil {
		t.Fatal(err)
	}
	write := func(round int) {
		var wg sync.WaitGroup
		for k, p := range parts {
			wg.Go(func() {
				for i := range 1000 {
					key := fmt.Appendf(nil, "p%d-%04d", k, i)
					if err := p.Set(key, fmt.Appendf(nil, "v%d", round)); err != nil {
						t.Error(err)
					}
					if v, ok, err := p.Get(key); err != nil || !ok || string(v) != fmt.Sprintf("v%d", round) {
						t.Errorf("part %d reads %q %v %v", k, v, ok, err)
					}
				}
				if err := p.Delete(fmt.Appendf(nil, "p%d-%04d", k, 0)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	write(1)
	if err := db.SetMeta("checkpoint", []byte("1")); err != nil {
		t.Fatal(err)
	}
	committed := make(chan error, 1)
	db.CommitAsync(func(err error) { committed <- err })
	// The commit is in flight: writes go on, and reads see the ones it
	// commits.
	write(2)
	if v, ok, _ := parts[1].Get([]byte("p1-0005")); !ok || string(v) != "v2" {
		t.Fatalf("part 1 reads %q %v during the commit", v, ok)
	}
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if err := db.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := db.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened: the commit took what was pending, the parts' writes with
	// the DB's own: the last round of both parts is there, deletions
	// included.
	db = open(t, dir, Options{})
	defer db.Close()
	for k := range 2 {
		if _, ok := get(t, db, fmt.Sprintf("p%d-0000", k)); ok {
			t.Errorf("part %d's deletion lost", k)
		}
		if v, ok := get(t, db, fmt.Sprintf("p%d-0999", k)); !ok || v != "v2" {
			t.Errorf("part %d's writes: %q %v", k, v, ok)
		}
	}
	if v, ok, _ := db.Meta("checkpoint"); !ok || string(v) != "1" {
		t.Errorf("meta %q %v", v, ok)
	}
}

// TestJournal: journal entries are durable when AppendJournal returns,
// whatever becomes of the pending writes (a Close that drops them), and
// go with the commit that follows DropJournal, not before; Changes, a
// copy of the state for elsewhere, leaves them out.
func TestJournal(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, Options{AtomicCheckpoints: true})
	if err := db.AppendJournal(7, [][]byte{[]byte("a"), []byte("b")}); err != nil {
		t.Fatal(err)
	}
	db.SetMeta("offsets", []byte("past the checkpoint"))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	journal := func(db *DB) string {
		var got []string
		if err := db.Journal(func(seq uint64, e []byte) error {
			got = append(got, fmt.Sprintf("%d:%s", seq, e))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return strings.Join(got, " ")
	}
	db = open(t, dir, Options{AtomicCheckpoints: true})
	defer db.Close()
	if got := journal(db); got != "7:a 8:b" {
		t.Fatalf("journal after a close without commit: %q", got)
	}
	if err := db.DropJournal([]uint64{7}); err != nil {
		t.Fatal(err)
	}
	if err := db.AppendJournal(9, [][]byte{[]byte("c")}); err != nil {
		t.Fatal(err)
	}
	if got := journal(db); got != "7:a 8:b 9:c" {
		t.Fatalf("journal before the commit of its drop: %q", got)
	}
	var changed []string
	db.Changes(func(k, _ []byte) error { changed = append(changed, string(k)); return nil })
	if len(changed) != 0 {
		t.Errorf("Changes gave the journal's keys %q", changed)
	}
	if err := db.Commit(true); err != nil {
		t.Fatal(err)
	}
	if got := journal(db); got != "8:b 9:c" {
		t.Fatalf("journal after the commit of its drop: %q", got)
	}
}
