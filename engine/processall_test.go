package engine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/windows"
)

// TestPropertyProcessAllMatchesProcess: ProcessAll, the live loop's path,
// gives what Process gives record by record (the same outputs in the same
// order, and the same stats) for records cut into calls of random sizes,
// with invalid records among them, and with one-slot caches, where every
// access goes through the backend.
func TestPropertyProcessAllMatchesProcess(t *testing.T) {
	runProperty(t, propCacheIterations, func(c *propCase) error {
		r := rand.New(rand.NewPCG(c.seed, 7))
		recs := make([]Record, len(c.events))
		for i := range c.events {
			value := []byte(c.events[i].json())
			if r.IntN(13) == 0 {
				value = value[:len(value)/2] // cut short: invalid JSON
			}
			recs[i] = Record{Value: value, Prov: event.Provenance{File: "events.jsonl", Line: int64(i + 1)}}
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
			return fmt.Errorf("process all: %v", err)
		}
		wl, gl := strings.SplitAfter(string(want.rendered), "\n"), strings.SplitAfter(string(got.rendered), "\n")
		for i := range max(len(wl), len(gl)) {
			if i >= len(wl) || i >= len(gl) || wl[i] != gl[i] {
				return fmt.Errorf("cache %d: output differs at line %d:\nProcess:    %s\nProcessAll: %s", slots, i+1, at(wl, i), at(gl, i))
			}
		}
		if fmt.Sprint(got.stats) != fmt.Sprint(want.stats) {
			return fmt.Errorf("stats %+v, Process's %+v", got.stats, want.stats)
		}
		return nil
	})
}

// runRecords runs recs through an engine with Process one by one, or, with
// r, through ProcessAll in calls of random sizes, checking that before sees
// every record in order.
func runRecords(c *propCase, recs []Record, slots int, r *rand.Rand) (*capture, error) {
	cfg, err := rules.Parse("rules.yaml", []byte(c.yaml()))
	if err != nil {
		return nil, err
	}
	out := &capture{enc: sink.NewEncoder()}
	e, err := New(Options{Config: cfg, Backend: windows.NewMemBackend(), Output: out, CacheSlots: slots})
	if err != nil {
		return nil, err
	}
	for i := 0; i < len(recs); {
		if r == nil {
			if err := e.Process(&recs[i], 0); err != nil {
				return nil, err
			}
			i++
			continue
		}
		n := min(1+r.IntN(40), len(recs)-i)
		next := 0
		if err := e.ProcessAll(recs[i:i+n], func() int64 { return 0 }, func(j int) {
			if j != next {
				panic(fmt.Sprintf("before(%d), want before(%d)", j, next))
			}
			next++
		}); err != nil {
			return nil, err
		}
		if next != n {
			return nil, fmt.Errorf("before called %d times for %d records", next, n)
		}
		i += n
	}
	err = e.Finish()
	out.stats = e.Stats()
	return out, err
}
