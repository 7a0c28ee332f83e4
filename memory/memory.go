// Package memory shares the job's memory budget (--memory) among the
// window state, Pebble's caches and memtables, and what is in flight, and
// gives it to the Go runtime as its soft limit.
package memory

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/riskstream/riskstream/state"
)

// Default is the memory budget of replay and the live job when
// none is given (--memory).
const Default = 1 << 30

// Min is the smallest memory budget the job accepts.
const Min = 64 << 20

// MaxChunk is the size of replay's input chunks within a large budget
// (Plan.Chunk).
const MaxChunk = 1 << 20

// Plan is how a memory budget is shared (docs/commands.md "Memory").
type Plan struct {
	// State is the window state's share: decoded states in the cache, the
	// encoded ones of the cold store, and the timers (windows.Options).
	State int64
	// PebbleCache is the block cache of each Pebble store.
	PebbleCache int64
	// BatchBytes is the size at which each Pebble store commits the
	// writes it holds (state.Options.BatchBytes); a store holds up to three
	// times as much while one batch commits.
	BatchBytes int
	// Chunk is the size of the chunks replay reads its input in: a few
	// dozen chunks and their decoded records are in flight at once, so
	// that they fit in the eighth of the budget kept for them.
	Chunk int
}

// NewPlan shares budget among the window state, the block caches and
// memtables of stores Pebble stores, and an eighth kept for the rest:
// input chunks and decoded batches in flight, the state writes each store
// holds until it commits them, output buffers, and the garbage the
// collector has not yet reclaimed.
func NewPlan(budget int64, stores int) (Plan, error) {
	if budget < Min {
		return Plan{}, fmt.Errorf("memory budget %d bytes: at least %d MiB", budget, Min>>20)
	}
	cache := min(max(budget/16, 4<<20), 1<<30)
	windowState := budget - cache - budget/8 - int64(stores)*state.MemtableBytes
	if windowState < Min/2 {
		return Plan{}, fmt.Errorf("memory budget %d MiB: too small for %d state stores", budget>>20, stores)
	}
	chunk := MaxChunk
	for chunk > 64<<10 && int64(chunk)*512 > budget {
		chunk /= 2
	}
	return Plan{
		State:       windowState,
		PebbleCache: max(cache/int64(stores), 1<<20),
		BatchBytes:  int(min(max(budget/128/int64(stores), 1<<20), 8<<20)),
		Chunk:       chunk,
	}, nil
}

// SetLimit makes budget the Go runtime's soft memory limit, so that
// the garbage collector works harder as the heap nears it instead of
// letting it grow to GOGC's target, unless GOMEMLIMIT is set.
func SetLimit(budget int64) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(budget)
	}
}
