package engine

import (
	"flag"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/state"
)

var restoreKeys = flag.Int("restore.keys", 1_000_000, "BenchmarkTaskRestore: users (and devices) in the state")

// BenchmarkTaskRestore measures what taking a repartition partition over
// costs once its store is current (a standby copy): a Task over a Pebble
// store holding -restore.keys users' and devices' windows of day-long
// rules restores its checkpoint (restore-ms: opening the store is not
// counted), then applies one record of a known key and one of a new key
// (first-ms, the first outputs' wait).
//
//	go test ./engine/ -run '^$' -bench BenchmarkTaskRestore -benchtime 1x [-restore.keys N]
func BenchmarkTaskRestore(b *testing.B) {
	cfg, err := rules.Parse("rules.yaml", []byte(`
watermark: {out_of_orderness: 2s}
rules:
  - {name: user-devices-day, key: [user], window: {type: tumbling, size: 24h}, aggregate: "distinct:device", threshold: 5, action: review}
  - {name: device-hour, key: [device], window: {type: sliding, size: 1h, slide: 1m}, aggregate: count, threshold: 1000, action: review}
`))
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	db, err := state.Open(state.Options{Dir: dir, AtomicCheckpoints: true})
	if err != nil {
		b.Fatal(err)
	}
	out := &capture{}
	task, err := NewTask(TaskOptions{Config: cfg, Backend: db, Output: out, Partitions: 1,
		MemoryBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	const start = 1732150000000
	for i := range *restoreKeys {
		ts := start + int64(i)
		m := Message{Kind: RecordMessage, Offset: int64(i), Time: ts, Before: ts - 2001, Watermark: ts - 2001,
			Value: fmt.Appendf(nil, `{"id":"r%d","ts":%d,"user":"u%d","device":"d%d"}`, i, ts, i, i)}
		if _, err := task.Apply(&m); err != nil {
			b.Fatal(err)
		}
		if i%100_000 == 99_999 {
			if _, err := task.Checkpoint(); err != nil {
				b.Fatal(err)
			}
			if err := db.Commit(false); err != nil {
				b.Fatal(err)
			}
		}
	}
	cp, err := task.Checkpoint()
	if err != nil {
		b.Fatal(err)
	}
	if err := db.Commit(true); err != nil {
		b.Fatal(err)
	}
	db.Close()
	var size int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				size += info.Size()
			}
		}
		return nil
	})
	for b.Loop() {
		db, err := state.Open(state.Options{Dir: dir, AtomicCheckpoints: true})
		if err != nil {
			b.Fatal(err)
		}
		begin := time.Now()
		t, err := NewTask(TaskOptions{Config: cfg, Backend: db, Output: out, Partitions: 1,
			MemoryBytes: 256 << 20})
		if err != nil {
			b.Fatal(err)
		}
		if err := t.Restore(cp); err != nil {
			b.Fatal(err)
		}
		restored := time.Since(begin)
		ts := start + int64(*restoreKeys)
		for i, user := range []int{*restoreKeys / 2, *restoreKeys} {
			m := Message{Kind: RecordMessage, Offset: int64(*restoreKeys + i), Time: ts, Before: ts - 2001, Watermark: ts - 2001,
				Value: fmt.Appendf(nil, `{"id":"n%d","ts":%d,"user":"u%d","device":"d%d"}`, i, ts, user, user)}
			if _, err := t.Apply(&m); err != nil {
				b.Fatal(err)
			}
		}
		first := time.Since(begin) - restored
		db.Close()
		b.ReportMetric(float64(restored.Microseconds())/1000, "restore-ms")
		b.ReportMetric(float64(first.Microseconds())/1000, "first-ms")
		b.ReportMetric(float64(size)/(1<<20), "store-MiB")
	}
}
