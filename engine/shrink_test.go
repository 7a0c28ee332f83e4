package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/state"
)

// TestStateOnDiskShrinks: the live job's state on disk follows the live
// keys, not the keys ever seen. A million keys' windows are written to
// Pebble at checkpoints; once the watermark has passed them, their
// deletions reach Pebble at the next checkpoint, and its compactions leave
// tables a hundredth of the size (the write-ahead log is recycled, not
// counted). In the fault-injection suite: it takes seconds.
func TestStateOnDiskShrinks(t *testing.T) {
	if testing.Short() || os.Getenv("RISKSTREAM_FAULTS") == "" {
		t.Skip("a million keys: set RISKSTREAM_FAULTS=1")
	}
	cfg, err := rules.Parse("rules.yaml", []byte(`
rules:
  - {name: per-user, key: [user], window: {type: tumbling, size: 10s}, aggregate: count, threshold: 100, action: deny}
`))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	db, err := state.Open(state.Options{Dir: dir, AtomicCheckpoints: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e, err := New(Options{Config: cfg, Backend: db, Output: testinput.NewRecorder()})
	if err != nil {
		t.Fatal(err)
	}
	checkpoint := func() {
		t.Helper()
		if _, err := e.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		if err := db.Commit(true); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	process := func(line string) {
		t.Helper()
		if err := e.Process(&Record{Value: []byte(line), Prov: event.Provenance{File: "in"}}, 0); err != nil {
			t.Fatal(err)
		}
	}
	const keys = 1_000_000
	for i := range keys {
		process(fmt.Sprintf(`{"id":"e%d","ts":%d,"user":"u%d"}`, i, 1_000_000+i/100, i))
		if i%100_000 == 99_999 {
			checkpoint()
		}
	}
	peak := tableBytes(t, dir)
	if peak < keys*20 {
		t.Fatalf("a million keys took %d bytes of tables: the state did not reach Pebble", peak)
	}
	// An hour later (within watermark.max_ahead): every window is purged.
	process(`{"id":"later","ts":4600000,"user":"x"}`)
	checkpoint()
	var now int64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if now = tableBytes(t, dir); now < peak/100 {
			t.Logf("tables: %d bytes with a million keys, %d once they expired", peak, now)
			return
		}
	}
	t.Fatalf("tables still take %d bytes, of %d with a million keys live, after the keys expired", now, peak)
}

// tableBytes is the size of Pebble's tables in dir.
func tableBytes(t *testing.T, dir string) int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".sst") {
			if info, err := os.Stat(filepath.Join(dir, e.Name())); err == nil {
				n += info.Size()
			}
		}
	}
	return n
}
