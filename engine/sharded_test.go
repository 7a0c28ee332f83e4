package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/riskstream/riskstream/internal/parallel"
	"github.com/riskstream/riskstream/internal/race"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// processBatch times b, runs every shard over it on a goroutine of its own,
// as replay and the live job do, and merges its outputs.
func processBatch(e *Sharded, b *Batch) error {
	e.Time(b, 0)
	errs := make([]error, len(e.Shards()))
	var wg sync.WaitGroup
	for k, s := range e.Shards() {
		wg.Go(func() { errs[k] = s.Process(b) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	e.Merge(b, nil)
	return nil
}

// runSharded runs c through a Sharded engine of n shards, in batches of
// random sizes, each batch's shards on goroutines of their own as replay
// runs them, and returns the rendered output.
func runSharded(c *propCase, n, slots int, memory int64) (*capture, error) {
	cfg, err := rules.Parse("rules.yaml", []byte(c.yaml()))
	if err != nil {
		return nil, err
	}
	out := &capture{enc: sink.NewEncoder()}
	backends := make([]slotstore.Backend, n)
	for i := range backends {
		backends[i] = slotstore.NewMemBackend()
	}
	e, err := NewSharded(Options{Config: cfg, Output: out, CacheSlots: slots, MemoryBytes: memory, Parallel: parallel.Do}, backends)
	if err != nil {
		return nil, err
	}
	dec := e.NewDecoder()
	rng := rand.New(rand.NewPCG(c.seed, uint64(n)))
	b := e.NewBatch()
	flush := func() error {
		if err := processBatch(e, b); err != nil {
			return err
		}
		b.Reset()
		return nil
	}
	// Replay grows each batch for its chunk's records; a guess too small
	// or too large must not change anything.
	next := func() int {
		size := 1 + rng.IntN(40)
		if rng.IntN(2) == 0 {
			b.Grow(rng.IntN(2 * size))
		}
		return size
	}
	size := next()
	for i := range c.events {
		rec := Record{Value: []byte(c.events[i].json()), Prov: propProvenance(i)}
		b.Add(dec, &rec)
		if b.Len() >= size {
			if err := flush(); err != nil {
				return nil, err
			}
			size = next()
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	err = e.Finish()
	out.stats = e.Stats()
	return out, err
}

// TestPropertyShardedMatchesEngine checks that a Sharded engine, whatever
// its number of shards, batch sizes and cache size, emits exactly what
// Engine does, byte for byte and in the same order, and counts the same.
func TestPropertyShardedMatchesEngine(t *testing.T) {
	runProperty(t, propCacheIterations, func(c *propCase) error {
		want, err := runEngine(c, slotstore.NewMemBackend(), 0, 0, true)
		if err != nil {
			return fmt.Errorf("engine: %v", err)
		}
		for _, n := range []int{1, 2, 3} {
			slots, memory := 0, int64(0)
			switch c.seed % 3 {
			case 1:
				slots = n // one slot per shard: every access goes through the cold store
			case 2:
				// and the cold stores spill all but their newest chunk to
				// the backends
				slots, memory = n, int64(n)
			}
			got, err := runSharded(c, n, slots, memory)
			if err != nil {
				return fmt.Errorf("sharded %d: %v", n, err)
			}
			wl, gl := strings.SplitAfter(string(want.rendered), "\n"), strings.SplitAfter(string(got.rendered), "\n")
			for i := range max(len(wl), len(gl)) {
				if i >= len(wl) || i >= len(gl) || wl[i] != gl[i] {
					return fmt.Errorf("%d shards, cache %d: output differs at line %d:\nengine:  %s\nsharded: %s", n, slots, i+1, at(wl, i), at(gl, i))
				}
			}
			if fmt.Sprint(got.stats) != fmt.Sprint(want.stats) {
				return fmt.Errorf("%d shards: stats %+v, engine's %+v", n, got.stats, want.stats)
			}
		}
		return nil
	})
}

// raceShort reports whether the tests run under the race detector with
// -short, as CI's race run does: it is there for the goroutines, which the
// plain run's cases already cover semantically, so the slowest tests take
// fewer of their cases, each about ten times slower under the detector.
func raceShort() bool { return race.Enabled && testing.Short() }

// TestBatchGrow checks that a fresh batch grown for its records takes them
// with no allocation but the decoder's, as a reused batch does: replay's
// first batches are all fresh.
func TestBatchGrow(t *testing.T) {
	if race.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	cfg, err := rules.Load("../testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewSharded(Options{Config: cfg, Output: &capture{enc: sink.NewEncoder()}}, []slotstore.Backend{slotstore.NewMemBackend(), slotstore.NewMemBackend()})
	if err != nil {
		t.Fatal(err)
	}
	var recs []Record
	for i := range 2000 {
		line := fmt.Sprintf(`{"id":"r%d","ts":%d,"source":"gw-%d","user":"u%d","device":"d%d","api":"/pay","channel":"card","amount":%d,"latency_ms":%d.5}`, i, 1000*i, i%3, i%97, i%89, i, i%50)
		recs = append(recs, Record{Value: []byte(line)})
	}
	dec := e.NewDecoder()
	fill := func(b *Batch) {
		for i := range recs {
			b.Add(dec, &recs[i])
		}
	}
	mallocs := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.Mallocs - before.Mallocs
	}
	reused := e.NewBatch()
	fill(reused)
	reused.Reset()
	want := mallocs(func() { fill(reused) })
	fresh := e.NewBatch()
	got := mallocs(func() { fresh.Grow(len(recs)); fill(fresh) })
	// Grow's own: the events, their attributes, and per-record arrays.
	const growAllocs = 20
	if got > want+growAllocs {
		t.Errorf("a grown batch allocated %d times for %d records, a reused one %d", got, len(recs), want)
	}
	for i := range recs {
		if fresh.errs[i] != nil {
			t.Fatalf("record %d: %v", i, fresh.errs[i])
		}
	}
}
