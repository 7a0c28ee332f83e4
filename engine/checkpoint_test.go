package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/parallel"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/state"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// TestCheckpointRestore stops the engine at several points of the bundled
// workload, checkpoints it into Pebble, closes the database, and resumes a
// new engine from it: the concatenated outputs must equal those of one
// uninterrupted run, byte for byte. This is what recovery after a crash
// relies on.
func TestCheckpointRestore(t *testing.T) {
	cfg, err := rules.Load("../testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := testinput.BundledLines(t)
	// writeBack > 0 writes that many states back every 97 records, as the
	// live loop does between checkpoints.
	run := func(cuts []int, slots, writeBack int, memory int64) string {
		dir := t.TempDir()
		rec := testinput.NewRecorder()
		var cp []byte
		start := 0
		for _, end := range append(cuts, len(lines)) {
			db, err := state.Open(state.Options{Dir: dir, AtomicCheckpoints: true})
			if err != nil {
				t.Fatal(err)
			}
			e, err := New(Options{Config: cfg, Backend: db, Output: rec, CacheSlots: slots, MemoryBytes: memory})
			if err != nil {
				t.Fatal(err)
			}
			if cp != nil {
				if err := e.Restore(cp); err != nil {
					t.Fatal(err)
				}
			}
			for i := start; i < end; i++ {
				if err := e.Process(&Record{Value: lines[i], Prov: event.Provenance{File: "in", Line: int64(i + 1)}}, 0); err != nil {
					t.Fatal(err)
				}
				if writeBack > 0 && i%97 == 0 {
					if err := e.WriteBack(writeBack); err != nil {
						t.Fatal(err)
					}
				}
			}
			if end == len(lines) {
				if err := e.Finish(); err != nil {
					t.Fatal(err)
				}
			} else if cp, err = e.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			// A checkpoint is what a commit takes: Close drops writes past
			// the last one.
			if err := db.Commit(true); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			start = end
		}
		return rec.Take()
	}
	want := run(nil, 0, 0, 0)
	for name, c := range map[string]struct {
		cuts             []int
		slots, writeBack int
		memory           int64
	}{
		"one cut":                         {[]int{10_000}, 0, 0, 0},
		"many cuts":                       {[]int{1, 2_000, 7_777, 15_000, 19_999}, 0, 0, 0},
		"many cuts, 50 slots":             {[]int{3_000, 9_000, 12_345}, 50, 0, 0},
		"many cuts, write-back":           {[]int{1, 2_000, 7_777, 15_000, 19_999}, 0, 64, 0},
		"many cuts, 50 slots, write-back": {[]int{3_000, 9_000, 12_345}, 50, 8, 0},
		"many cuts, 50 slots, spilling":   {[]int{3_000, 9_000, 12_345}, 50, 8, 1},
	} {
		if raceShort() && c.memory == 0 {
			continue // spilling, with 50 slots and write-back, goes through every path
		}
		t.Run(name, func(t *testing.T) {
			if got := run(c.cuts, c.slots, c.writeBack, c.memory); got != want {
				t.Fatalf("outputs after restoring differ from an uninterrupted run (%d vs %d bytes)", len(got), len(want))
			}
		})
	}
}

// TestRestoreRefusesOtherRules: state written with other watermark
// settings is refused, as a version 1 checkpoint (one fingerprint of the
// whole rules file) of other rules is; other rules are not.
func TestRestoreRefusesOtherRules(t *testing.T) {
	cfg, err := rules.Load("../testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	db, err := state.Open(state.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	newEngine := func(cfg *rules.Config) *Engine {
		e, err := New(Options{Config: cfg, Backend: db, Output: testinput.NewRecorder()})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	cp, err := newEngine(cfg).Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	other := *cfg
	other.Rules = other.Rules[1:]
	if err := newEngine(&other).Restore(cp); err != nil {
		t.Fatalf("restore with other rules: %v", err)
	}
	lateness := *cfg
	lateness.Watermark.AllowedLateness = time.Second
	if err := newEngine(&lateness).Restore(cp); !errors.Is(err, ErrRulesChanged) {
		t.Fatalf("restore with other watermark settings: %v, want ErrRulesChanged", err)
	}
	if err := newEngine(cfg).Restore(cp[:len(cp)/2]); err == nil {
		t.Fatal("a truncated checkpoint must be refused")
	}
	// A version 1 checkpoint: the whole rules' fingerprint, no layout.
	sections, err := readSections(cp[1:], 6)
	if err != nil {
		t.Fatal(err)
	}
	v1 := appendSections([]byte{1}, append([][]byte{[]byte(cfg.Fingerprint())}, sections[2:]...)...)
	if err := newEngine(cfg).Restore(v1); err != nil {
		t.Fatalf("restore of a version 1 checkpoint of the same rules: %v", err)
	}
	if err := newEngine(&other).Restore(v1); !errors.Is(err, ErrRulesChanged) {
		t.Fatalf("restore of a version 1 checkpoint of other rules: %v, want ErrRulesChanged", err)
	}
	// A version 1 operator checkpoint held the timer queue, which version 2
	// rebuilds from the slots: it must be refused, not misread.
	old := append([]byte(nil), cp...)
	opStart := 1
	for range 2 { // the settings and the layout
		n, k := binary.Uvarint(old[opStart:])
		opStart += k + int(n)
	}
	_, k := binary.Uvarint(old[opStart:])
	old[opStart+k] = 1
	if err := newEngine(cfg).Restore(old); err == nil || !strings.Contains(err.Error(), "version 1") {
		t.Fatalf("restore of a version 1 operator checkpoint: %v, want a version error", err)
	}
}

// TestShardedCheckpointRestore: a sharded engine over parts of one store,
// as the live job runs it, checkpointed at several points of the bundled
// workload and resumed by an engine with another number of shards (or by
// Engine, or resuming Engine's checkpoint), gives the outputs of one
// uninterrupted run of Engine, byte for byte.
func TestShardedCheckpointRestore(t *testing.T) {
	cfg, err := rules.Load("../testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := testinput.BundledLines(t)
	wantRec := testinput.NewRecorder()
	{
		db, err := state.Open(state.Options{Dir: t.TempDir(), AtomicCheckpoints: true})
		if err != nil {
			t.Fatal(err)
		}
		e, _ := New(Options{Config: cfg, Backend: db, Output: wantRec})
		for i, l := range lines {
			if err := e.Process(&Record{Value: l, Prov: event.Provenance{File: "in", Line: int64(i + 1)}}, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Finish(); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	want := wantRec.Take()

	// shards per segment: 0 is Engine.
	for _, plan := range [][]int{{2, 3, 1, 2}, {0, 2, 0, 3}, {3, 3, 3, 3}} {
		if raceShort() && plan[0] != 0 {
			continue // one plan goes from Engine to Sharded and back
		}
		t.Run(fmt.Sprint(plan), func(t *testing.T) {
			dir := t.TempDir()
			rec := testinput.NewRecorder()
			rng := rand.New(rand.NewPCG(uint64(plan[0]), uint64(plan[1])))
			cuts := []int{4_000, 9_500, 15_001, len(lines)}
			var cp []byte
			start := 0
			for seg, end := range cuts {
				db, err := state.Open(state.Options{Dir: dir, AtomicCheckpoints: true})
				if err != nil {
					t.Fatal(err)
				}
				var restore func([]byte) error
				var checkpoint func() ([]byte, error)
				var finish func() error
				var process func(from, to int) error
				if n := plan[seg]; n == 0 {
					e, err := New(Options{Config: cfg, Backend: db, Output: rec, CacheSlots: 300})
					if err != nil {
						t.Fatal(err)
					}
					restore, checkpoint, finish = e.Restore, e.Checkpoint, e.Finish
					process = func(from, to int) error {
						for i := from; i < to; i++ {
							if err := e.Process(&Record{Value: lines[i], Prov: event.Provenance{File: "in", Line: int64(i + 1)}}, 0); err != nil {
								return err
							}
						}
						return e.WriteBack(16)
					}
				} else {
					parts, err := db.Parts(n)
					if err != nil {
						t.Fatal(err)
					}
					backends := make([]slotstore.Backend, n)
					for k, p := range parts {
						backends[k] = p
					}
					e, err := NewSharded(Options{Config: cfg, Output: rec, CacheSlots: 300, Checkpoints: true, Parallel: parallel.Do}, backends)
					if err != nil {
						t.Fatal(err)
					}
					restore, checkpoint, finish = e.Restore, e.Checkpoint, e.Finish
					dec, b := e.NewDecoder(), e.NewBatch()
					process = func(from, to int) error {
						b.Reset()
						for i := from; i < to; i++ {
							b.Add(dec, &Record{Value: lines[i], Prov: event.Provenance{File: "in", Line: int64(i + 1)}})
						}
						if err := processBatch(e, b); err != nil {
							return err
						}
						return e.WriteBack(16)
					}
				}
				if cp != nil {
					if err := restore(cp); err != nil {
						t.Fatal(err)
					}
				}
				for i := start; i < end; {
					j := min(end, i+1+rng.IntN(300))
					if err := process(i, j); err != nil {
						t.Fatal(err)
					}
					i = j
				}
				if end == len(lines) {
					if err := finish(); err != nil {
						t.Fatal(err)
					}
				} else if cp, err = checkpoint(); err != nil {
					t.Fatal(err)
				} else if err := db.Commit(true); err != nil {
					t.Fatal(err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				start = end
			}
			if got := rec.Take(); got != want {
				t.Fatalf("outputs after restoring differ from an uninterrupted run (%d vs %d bytes)", len(got), len(want))
			}
		})
	}
}

// TestDedupeRestart: the ids dedupe remembers are stored with the
// checkpoint and read back by a restore, so that a record sent again
// after a restart is still dropped; ids of generations rotated out are
// deleted from the store, which holds at most two generations' ids.
func TestDedupeRestart(t *testing.T) {
	cfg, err := rules.Parse("rules.yaml", []byte(`
watermark: {out_of_orderness: 0s}
dedupe: {horizon: 1s}
rules:
  - {name: r, key: [user], window: {type: tumbling, size: 1h}, aggregate: count, threshold: 1000000, action: deny}
`))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	open := func() (*state.DB, *Engine) {
		db, err := state.Open(state.Options{Dir: dir, AtomicCheckpoints: true})
		if err != nil {
			t.Fatal(err)
		}
		e, err := New(Options{Config: cfg, Backend: db, Output: testinput.NewRecorder()})
		if err != nil {
			t.Fatal(err)
		}
		return db, e
	}
	send := func(e *Engine, id string, ts int) {
		t.Helper()
		if err := e.Process(&Record{Value: fmt.Appendf(nil, `{"id":%q,"ts":%d,"user":"u"}`, id, ts)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(db *state.DB) int {
		n := 0
		db.Seek(idPrefix, func(k, _ []byte) (bool, error) {
			if string(k[:2]) != string(idPrefix) {
				return false, nil
			}
			n++
			return true, nil
		})
		return n
	}
	db, e := open()
	for i := range 5000 { // 5 s of event time: rotations delete old ids
		send(e, fmt.Sprintf("e%d", i), i)
	}
	cp := commitCheckpoint(t, db, e.Checkpoint)
	if n := stored(db); n > 2100 || n < 1000 {
		t.Fatalf("%d ids stored, want those of one or two 1 s generations", n)
	}
	send(e, "after the checkpoint", 5000) // lost with the restart
	db.Close()

	db, e = open()
	defer db.Close()
	if err := e.Restore(cp); err != nil {
		t.Fatal(err)
	}
	send(e, "e4990", 4990)                // taken before the checkpoint: dropped
	send(e, "e10", 10)                    // forgotten long ago: taken
	send(e, "after the checkpoint", 5000) // never committed: taken
	if st := e.Stats(); st.Duplicates != 1 || st.Accepted != 5002 {
		t.Fatalf("after the restore: %d duplicates, %d accepted; want 1 and 5002", st.Duplicates, st.Accepted)
	}
}
