package state

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCheckpoints models the live job's state traffic at 200,000
// events/s: every checkpoint rewrites the state of 200,000 active keys
// (about one changed slot per event) and commits it with CommitAsync. It
// reports the process's CPU per written state, Pebble's flushes and
// compactions on its own goroutines included, which is where a
// configuration change shows: wall time hides work done in the background.
func BenchmarkCheckpoints(b *testing.B) {
	const keys = 200_000
	db, err := Open(Options{Dir: b.TempDir(), AtomicCheckpoints: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	key := make([]byte, 0, 32)
	val := make([]byte, 0, 128)
	writes := 0
	cpu0 := cpuTime()
	for i := 0; b.Loop(); i++ {
		for k := range keys {
			// A slot key: the rule's index, then the key's text.
			key = fmt.Appendf(key[:0], "\x00%c\"u%d\"\x00", byte(k%3), k/3)
			// A slot's encoding: a few varint counts and times, some
			// shared with the previous checkpoint.
			val = val[:0]
			for range 12 {
				val = binary.AppendUvarint(val, uint64(1732150000000+i*1000+rng.IntN(60_000)))
			}
			if err := db.Set(key, val); err != nil {
				b.Fatal(err)
			}
			writes++
		}
		db.CommitAsync(func(err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := db.Wait(); err != nil {
		b.Fatal(err)
	}
	// Let background flushes and compactions catch up before reading
	// the CPU they used.
	for db.db.Metrics().Compact.NumInProgress > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(writes), "cpu-ns/write")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
