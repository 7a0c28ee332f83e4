package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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

// dedupeStore is a store of a checkpointing engine with a dedupe of 1 s
// over one rule, reopened at will.
type dedupeStore struct {
	t   *testing.T
	cfg *rules.Config
	dir string
}

func newDedupeStore(t *testing.T) *dedupeStore {
	cfg, err := rules.Parse("rules.yaml", []byte(`
watermark: {out_of_orderness: 0s}
dedupe: {horizon: 1s}
rules:
  - {name: r, key: [user], window: {type: tumbling, size: 1h}, aggregate: count, threshold: 1000000, action: deny}
`))
	if err != nil {
		t.Fatal(err)
	}
	return &dedupeStore{t: t, cfg: cfg, dir: t.TempDir()}
}

func (s *dedupeStore) open() (*state.DB, *Engine) {
	db, err := state.Open(state.Options{Dir: s.dir, AtomicCheckpoints: true})
	if err != nil {
		s.t.Fatal(err)
	}
	e, err := New(Options{Config: s.cfg, Backend: db, Output: testinput.NewRecorder()})
	if err != nil {
		s.t.Fatal(err)
	}
	return db, e
}

func (s *dedupeStore) send(e *Engine, id string, ts int) {
	s.t.Helper()
	if err := e.Process(&Record{Value: fmt.Appendf(nil, `{"id":%q,"ts":%d,"user":"u"}`, id, ts)}, 0); err != nil {
		s.t.Fatal(err)
	}
}

// stored returns the ids db holds, in blobs, and the blobs' keys.
func storedIDs(t *testing.T, db *state.DB) (ids int, blobs [][]byte) {
	l := NewIDLog()
	err := db.Seek(idBlobPrefix, func(k, v []byte) (bool, error) {
		if string(k[:2]) != string(idBlobPrefix) {
			return false, nil
		}
		blobs = append(blobs, slices.Clone(k))
		return true, l.Load(int64(binary.BigEndian.Uint64(k[2:])), v)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, entries := range l.loaded {
		l.eachEntry(entries, func([2]uint64, []byte) { ids++ })
	}
	return ids, blobs
}

// TestDedupeRestart: the ids dedupe remembers are stored with the
// checkpoint and read back by a restore, so that a record sent again
// after a restart is still dropped; ids of generations rotated out are
// deleted from the store, which holds at most two generations' ids.
func TestDedupeRestart(t *testing.T) {
	s := newDedupeStore(t)
	db, e := s.open()
	for i := range 5000 { // 5 s of event time: rotations delete old ids
		s.send(e, fmt.Sprintf("e%d", i), i)
	}
	cp := commitCheckpoint(t, db, e.Checkpoint)
	if n, _ := storedIDs(t, db); n > 2100 || n < 1000 {
		t.Fatalf("%d ids stored, want those of one or two 1 s generations", n)
	}
	s.send(e, "after the checkpoint", 5000) // lost with the restart
	db.Close()

	db, e = s.open()
	defer db.Close()
	if err := e.Restore(cp); err != nil {
		t.Fatal(err)
	}
	s.send(e, "e4990", 4990)                // taken before the checkpoint: dropped
	s.send(e, "e10", 10)                    // forgotten long ago: taken
	s.send(e, "after the checkpoint", 5000) // never committed: taken
	if st := e.Stats(); st.Duplicates != 1 || st.Accepted != 5002 {
		t.Fatalf("after the restore: %d duplicates, %d accepted; want 1 and 5002", st.Duplicates, st.Accepted)
	}
}

// TestDedupeBlobs: with a checkpoint every quarter of a generation, the
// store holds a blob per checkpoint and generation, and the blobs of a
// generation forgotten are deleted with the next checkpoint; a restore
// rewrites the blobs it read into new ones.
func TestDedupeBlobs(t *testing.T) {
	s := newDedupeStore(t)
	db, e := s.open()
	var (
		cp   []byte
		want int
	)
	for i := range 5000 {
		s.send(e, fmt.Sprintf("e%d", i), i)
		if (i+1)%250 == 0 {
			cp = commitCheckpoint(t, db, e.Checkpoint)
			n, blobs := storedIDs(t, db)
			// The watermark is i: generations i/1000 and the one before.
			// An event is taken at the watermark of the events before
			// it, one less than the last one's time; the checkpoint
			// forgets at the watermark after event i.
			gen := func(j int) int64 { return floorDiv(int64(max(j, 1)-2), 1000) }
			want = 0
			for j := 0; j <= i; j++ {
				if gen(j) >= floorDiv(int64(i-1), 1000)-1 {
					want++
				}
			}
			if n != want {
				t.Fatalf("after event %d: %d ids stored, want %d", i, n, want)
			}
			if len(blobs) > 10 {
				t.Fatalf("after event %d: %d blobs, want at most one for each of the 5 checkpoints a generation spans, twice", i, len(blobs))
			}
		}
	}
	_, before := storedIDs(t, db)
	db.Close()
	db, e = s.open()
	defer db.Close()
	if err := e.Restore(cp); err != nil {
		t.Fatal(err)
	}
	commitCheckpoint(t, db, e.Checkpoint)
	n, after := storedIDs(t, db)
	if n != want || len(after) > 2 || slices.ContainsFunc(after, func(k []byte) bool {
		return slices.ContainsFunc(before, func(b []byte) bool { return bytes.Equal(b, k) })
	}) {
		t.Fatalf("after a restore and a checkpoint: %d ids in blobs %x, want %d in new blobs, one a generation (before: %x)", n, after, want, before)
	}
	s.send(e, "e4999", 4999)
	if st := e.Stats(); st.Duplicates != 1 {
		t.Fatalf("%d duplicates after the restore, want 1", st.Duplicates)
	}
}

// TestDedupeRestoresIDsStoredOneByOne: a store where an earlier version
// kept an id a key is restored with its ids, which the next checkpoint
// writes as blobs, deleting the keys.
func TestDedupeRestoresIDsStoredOneByOne(t *testing.T) {
	s := newDedupeStore(t)
	db, e := s.open()
	for i := range 1500 {
		s.send(e, fmt.Sprintf("e%d", i), i)
	}
	cp := commitCheckpoint(t, db, e.Checkpoint)
	// Lay the blobs out as the earlier version stored them.
	l := NewIDLog()
	_, blobs := storedIDs(t, db)
	for _, k := range blobs {
		v, _, err := db.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		gen := int64(binary.BigEndian.Uint64(k[2:]))
		l.eachEntry(v, func(h [2]uint64, _ []byte) {
			if err := db.Set(appendIDKey(nil, gen, h), nil); err != nil {
				t.Fatal(err)
			}
		})
		if err := db.Delete(k); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Commit(true); err != nil {
		t.Fatal(err)
	}
	if n, _ := storedIDs(t, db); n != 0 {
		t.Fatalf("%d ids in blobs after laying them out one a key", n)
	}
	db.Close()

	db, e = s.open()
	defer db.Close()
	if err := e.Restore(cp); err != nil {
		t.Fatal(err)
	}
	s.send(e, "e1499", 1499)
	s.send(e, "e1", 1) // of generation -1, forgotten
	if st := e.Stats(); st.Duplicates != 1 {
		t.Fatalf("%d duplicates after the restore, want 1", st.Duplicates)
	}
	commitCheckpoint(t, db, e.Checkpoint)
	if n, _ := storedIDs(t, db); n != 1499 {
		t.Fatalf("%d ids in blobs after a checkpoint, want the 1,499 of generations 0 and 1", n)
	}
	left := 0
	if err := db.Seek(idPrefix, func(k, _ []byte) (bool, error) {
		if string(k[:2]) != string(idPrefix) {
			return false, nil
		}
		left++
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d ids still stored one a key after a checkpoint", left)
	}
}

// appendIDKey appends the key under which earlier versions stored id hash
// h of generation gen, one per key (parseIDKey reads it).
func appendIDKey(dst []byte, gen int64, h [2]uint64) []byte {
	dst = append(dst, idPrefix...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(gen))
	dst = binary.BigEndian.AppendUint64(dst, h[0])
	return binary.BigEndian.AppendUint64(dst, h[1])
}
