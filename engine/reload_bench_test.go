package engine

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/parallel"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/state"
	"github.com/riskstream/riskstream/windows/slotstore"
)

var reloadUsers = flag.Int("reload.users", 500_000, "BenchmarkReload: users, each with a state in each of two rules")

// reloadBenchRules are the rules BenchmarkReload starts with; a reload
// to edit(reloadBenchRules) follows.
const reloadBenchRules = `
watermark: {out_of_orderness: 2s}
rules:
  - {name: user-burst, key: [user], window: {type: sliding, size: 1h, slide: 1m}, aggregate: count, threshold: 100, action: deny}
  - {name: user-spend, key: [user], window: {type: tumbling, size: 1h}, aggregate: "sum:amount", threshold: 1000, action: review}
`

// BenchmarkReload measures the pause of a rules reload in a job with
// 2 × -reload.users live states (1,000,000 by default), as the live job
// runs it: two shards over parts of one Pebble store, the default memory
// budget, checkpointed once so that the states are in the store too. The
// reload runs between two records; "tune" changes a threshold and an
// action (every state kept), "restart" changes user-spend's window (its
// states deleted, user-burst's kept). ms/reload is the pause.
//
//	go test ./engine/ -run '^$' -bench BenchmarkReload -benchtime 5x [-reload.users N]
func BenchmarkReload(b *testing.B) {
	for _, c := range []struct {
		name string
		edit func(string) string
	}{
		{"tune", func(s string) string {
			return strings.Replace(strings.Replace(s, "threshold: 100,", "threshold: 50,", 1), "action: deny", "action: block", 1)
		}},
		{"restart", func(s string) string {
			return strings.Replace(s, "size: 1h}, aggregate: \"sum", "size: 30m}, aggregate: \"sum", 1)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			before, err := rules.Parse("rules.yaml", []byte(reloadBenchRules))
			if err != nil {
				b.Fatal(err)
			}
			after, err := rules.Parse("rules.yaml", []byte(c.edit(reloadBenchRules)))
			if err != nil {
				b.Fatal(err)
			}
			var total time.Duration
			for b.Loop() {
				b.StopTimer()
				e, db := loadedSharded(b, before, *reloadUsers)
				b.StartTimer()
				start := time.Now()
				diff, err := e.Reload(after)
				total += time.Since(start)
				b.StopTimer()
				if err != nil || len(diff.Kept) == 0 {
					b.Fatalf("reload: %v, %+v", err, diff)
				}
				db.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/reload")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// loadedSharded returns a two-shard engine of cfg, as the live job's, in
// which users users have each made one event, checkpointed.
func loadedSharded(b *testing.B, cfg *rules.Config, users int) (*Sharded, *state.DB) {
	db, err := state.Open(state.Options{Dir: b.TempDir(), AtomicCheckpoints: true})
	if err != nil {
		b.Fatal(err)
	}
	parts, err := db.Parts(2)
	if err != nil {
		b.Fatal(err)
	}
	e, err := NewSharded(Options{Config: cfg, Output: &discard{enc: sink.NewEncoder()}, MemoryBytes: 768 << 20, Checkpoints: true,
		Parallel: parallel.Do},
		[]slotstore.Backend{parts[0], parts[1]})
	if err != nil {
		b.Fatal(err)
	}
	dec, batch := e.NewDecoder(), e.NewBatch()
	const start = 1732150000000
	for i := 0; i < users; {
		batch.Reset()
		batch.Grow(1024)
		for ; i < users && batch.Len() < 1024; i++ {
			ts := start + int64(i)
			batch.Add(dec, &Record{Value: fmt.Appendf(nil, `{"id":"r%d","ts":%d,"user":"u%d","amount":5}`, i, ts, i)})
		}
		if err := processBatch(e, batch); err != nil {
			b.Fatal(err)
		}
	}
	commitCheckpoint(b, db, e.Checkpoint)
	return e, db
}

// BenchmarkAggregates measures events/s of one rule of each aggregate,
// sliding 60 s / 1 s per user and per api (a hot key: thousands of events
// in each window), over the generated workload of BenchmarkEngine (200,000
// events, 10,000 users), all state in the cache: what each aggregate costs
// against a count rule. scripts/bench-aggregates measures the same of the
// whole job, by window type too.
//
//	go test ./engine/ -run '^$' -bench BenchmarkAggregates -benchtime 3x
func BenchmarkAggregates(b *testing.B) {
	_, lines := benchWorkload(b, 200_000, 10_000)
	for _, c := range []struct {
		key, agg string
		decided  bool
	}{
		{"user", "count", false}, {"user", "sum:amount", false}, {"user", "avg:latency_ms", false}, {"user", "max:latency_ms", false}, {"user", "ratio", false},
		{"user", "distinct:device", false}, {"user", "quantile:latency_ms:0.99", false},
		{"api", "count", false}, {"api", "distinct:user", false}, {"api", "quantile:latency_ms:0.99", false},
		// Every event decided (threshold 0): each finds its best window.
		{"api", "count", true}, {"api", "quantile:latency_ms:0.99", true}, {"user", "count", true}, {"user", "quantile:latency_ms:0.99", true},
	} {
		key, agg := c.key, c.agg
		name, threshold := key+"/"+strings.SplitN(agg, ":", 2)[0], "1e9"
		if c.decided {
			name, threshold = name+"/decided", "0"
		}
		b.Run(name, func(b *testing.B) {
			match := ""
			if agg == "ratio" {
				match = ", match: {status: [500, 502, 503]}"
			}
			// No dedupe: Engine stores every id in its backend for its
			// checkpoints, a map here, which replay does not and which is
			// no aggregate's cost.
			cfg, err := rules.Parse("rules.yaml", []byte(fmt.Sprintf(`
dedupe: {horizon: 0s}
rules:
  - {name: r, key: [%s], window: {type: sliding, size: 60s, slide: 1s}, aggregate: %q%s, threshold: %s, action: deny}
`, key, agg, match, threshold)))
			if err != nil {
				b.Fatal(err)
			}
			events := 0
			for b.Loop() {
				e, err := New(Options{Config: cfg, Backend: slotstore.NewMemBackend(), Output: &discard{enc: sink.NewEncoder()}})
				if err != nil {
					b.Fatal(err)
				}
				var rec Record
				for _, l := range lines {
					rec.Value = l
					if err := e.Process(&rec, 0); err != nil {
						b.Fatal(err)
					}
				}
				if err := e.Finish(); err != nil {
					b.Fatal(err)
				}
				events += len(lines)
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
		})
	}
}
