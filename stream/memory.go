package stream

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/riskstream/riskstream/state"
)

// DefaultMemory is the memory budget of replay and the live job when
// none is given (--memory).
const DefaultMemory = 1 << 30

// MinMemory is the smallest memory budget the job accepts.
const MinMemory = 64 << 20

// MemoryPlan is how a memory budget is shared (docs/commands.md "Memory").
type MemoryPlan struct {
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

// PlanMemory shares budget among the window state, the block caches and
// memtables of stores Pebble stores, and an eighth kept for the rest:
// input chunks and decoded batches in flight, the state writes each store
// holds until it commits them, output buffers, and the garbage the
// collector has not yet reclaimed.
func PlanMemory(budget int64, stores int) (MemoryPlan, error) {
	if budget < MinMemory {
		return MemoryPlan{}, fmt.Errorf("memory budget %d bytes: at least %d MiB", budget, MinMemory>>20)
	}
	cache := min(max(budget/16, 4<<20), 1<<30)
	windowState := budget - cache - budget/8 - int64(stores)*state.MemtableBytes
	if windowState < MinMemory/2 {
		return MemoryPlan{}, fmt.Errorf("memory budget %d MiB: too small for %d state stores", budget>>20, stores)
	}
	chunk := chunkSize
	for chunk > 64<<10 && int64(chunk)*512 > budget {
		chunk /= 2
	}
	return MemoryPlan{
		State:       windowState,
		PebbleCache: max(cache/int64(stores), 1<<20),
		BatchBytes:  int(min(max(budget/128/int64(stores), 1<<20), 8<<20)),
		Chunk:       chunk,
	}, nil
}

// SetMemoryLimit makes budget the Go runtime's soft memory limit, so that
// the garbage collector works harder as the heap nears it instead of
// letting it grow to GOGC's target, unless GOMEMLIMIT is set.
func SetMemoryLimit(budget int64) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(budget)
	}
}
