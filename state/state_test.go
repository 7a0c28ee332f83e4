package state

import (
	"errors"
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
		committed := db.batch.Len() < 100*100 // the pending batch holds every write until a commit
		if committed == atomic {
			t.Errorf("AtomicCheckpoints=%v: batch committed early = %v", atomic, committed)
		}
		db.Close()
	}
}

func TestOptionsValidate(t *testing.T) {
	if _, err := Open(Options{}); err == nil {
		t.Fatal("Open without a Dir must fail")
	}
}
