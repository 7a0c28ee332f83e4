package state

import (
	"fmt"
	"testing"
)

// TestBlockCacheHoldsBlocks: a store keeps the blocks it reads from its
// tables in its block cache, however small CacheBytes is beside the
// memtables, which Pebble counts against the same cache. Reading the same
// keys a second time finds their blocks in memory.
func TestBlockCacheHoldsBlocks(t *testing.T) {
	db := open(t, t.TempDir(), Options{CacheBytes: 1 << 20})
	defer db.Close()
	val := make([]byte, 100)
	const keys = 20_000
	for i := range keys {
		if err := db.Set(fmt.Appendf(nil, "key-%06d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := db.db.Flush(); err != nil { // to a table: reads go through the cache
		t.Fatal(err)
	}
	read := func() {
		for i := 0; i < keys; i += 100 {
			if _, ok := get(t, db, fmt.Sprintf("key-%06d", i)); !ok {
				t.Fatalf("key-%06d not found", i)
			}
		}
	}
	read()
	before := db.db.Metrics().BlockCache
	read()
	after := db.db.Metrics().BlockCache
	hits, misses := after.Hits-before.Hits, after.Misses-before.Misses
	if hits == 0 || misses > hits/10 {
		t.Fatalf("second read of %d keys: %d block cache hits, %d misses", keys/100, hits, misses)
	}
}
