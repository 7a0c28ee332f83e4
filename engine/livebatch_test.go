package engine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// TestPropertyLiveBatchesMatchProcess: a Sharded engine fed as the live
// loop feeds it (batches of random sizes, Merge's hook before each
// record's outputs) gives what Engine's Process gives record by record (the
// same outputs in the same order, and the same stats), with invalid
// records among them, and with one-slot caches, where every access goes
// through the backend.
func TestPropertyLiveBatchesMatchProcess(t *testing.T) {
	runProperty(t, propCacheIterations, func(c *propCase) error {
		r := rand.New(rand.NewPCG(c.seed, 7))
		recs := make([]Record, len(c.events))
		for i := range c.events {
			value := []byte(c.events[i].json())
			if r.IntN(13) == 0 {
				value = value[:len(value)/2] // cut short: invalid JSON
			}
			recs[i] = Record{Value: value, Prov: propProvenance(i)}
		}
		slots := 0
		if c.seed%2 == 1 {
			slots = 1
		}
		want, err := runRecords(c, recs, slots, nil)
		if err != nil {
			return fmt.Errorf("process: %v", err)
		}
		got, err := runRecords(c, recs, slots, r)
		if err != nil {
			return fmt.Errorf("sharded: %v", err)
		}
		wl, gl := strings.SplitAfter(string(want.rendered), "\n"), strings.SplitAfter(string(got.rendered), "\n")
		for i := range max(len(wl), len(gl)) {
			if i >= len(wl) || i >= len(gl) || wl[i] != gl[i] {
				return fmt.Errorf("cache %d: output differs at line %d:\nProcess: %s\nSharded: %s", slots, i+1, at(wl, i), at(gl, i))
			}
		}
		if fmt.Sprint(got.stats) != fmt.Sprint(want.stats) {
			return fmt.Errorf("stats %+v, Process's %+v", got.stats, want.stats)
		}
		return nil
	})
}

// runRecords runs recs through an engine with Process one by one, or, with
// r, through a Sharded engine of two shards in batches of random sizes,
// checking that Merge's hook sees every record in order.
func runRecords(c *propCase, recs []Record, slots int, r *rand.Rand) (*capture, error) {
	cfg, err := rules.Parse("rules.yaml", []byte(c.yaml()))
	if err != nil {
		return nil, err
	}
	out := &capture{enc: sink.NewEncoder()}
	if r == nil {
		e, err := New(Options{Config: cfg, Backend: slotstore.NewMemBackend(), Output: out, CacheSlots: slots})
		if err != nil {
			return nil, err
		}
		for i := range recs {
			if err := e.Process(&recs[i], 0); err != nil {
				return nil, err
			}
		}
		err = e.Finish()
		out.stats = e.Stats()
		return out, err
	}
	if slots > 0 {
		slots *= 2 // one per shard
	}
	e, err := NewSharded(Options{Config: cfg, Output: out, CacheSlots: slots},
		[]slotstore.Backend{slotstore.NewMemBackend(), slotstore.NewMemBackend()})
	if err != nil {
		return nil, err
	}
	dec, b := e.NewDecoder(), e.NewBatch()
	for i := 0; i < len(recs); {
		n := min(1+r.IntN(40), len(recs)-i)
		b.Reset()
		for j := range n {
			b.Add(dec, &recs[i+j])
		}
		e.Time(b, 0)
		for _, s := range e.Shards() {
			if err := s.Process(b); err != nil {
				return nil, err
			}
		}
		next := 0
		e.Merge(b, func(j int) {
			if j != next {
				panic(fmt.Sprintf("before(%d), want before(%d)", j, next))
			}
			next++
		})
		if next != n {
			return nil, fmt.Errorf("before called %d times for %d records", next, n)
		}
		i += n
	}
	err = e.Finish()
	out.stats = e.Stats()
	return out, err
}
