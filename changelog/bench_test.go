package changelog

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/riskstream/riskstream/state"
	"github.com/segmentio/kafka-go"
)

var restoreBytes = flag.Int64("restore.bytes", 256<<20, "BenchmarkChangelogRestore: bytes of state in the changelog")

// BenchmarkChangelogRestore measures a takeover's restore: -restore.bytes
// of window state (keys of 24 bytes, values of 512) checkpointed to a
// changelog partition on the embedded broker, then rebuilt into an empty
// store, as an instance taking the partition over does. s/GB is the
// restore's time per GiB of keys and values.
//
//	go test ./changelog/ -run '^$' -bench BenchmarkChangelogRestore -benchtime 1x [-restore.bytes N]
func BenchmarkChangelogRestore(b *testing.B) {
	ctx := context.Background()
	addr, client, topics := withInternalTopics(b, "bench", 1)
	log := Log{Client: client, Brokers: []string{addr}, Dialer: &kafka.Dialer{}, Topic: topics.Changelog}
	src, err := state.Open(state.Options{Dir: b.TempDir(), AtomicCheckpoints: true, DisableWAL: true})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	value := bytes.Repeat([]byte{7}, 512)
	var written int64
	for i := 0; written < *restoreBytes; i++ {
		key := fmt.Appendf(nil, "\x00\x00user-%016d\x00", i)
		if err := src.Set(key, value); err != nil {
			b.Fatal(err)
		}
		written += int64(len(key) + len(value))
		if i%100_000 == 99_999 { // a checkpoint every 100,000 states
			if _, _, err := log.Write(ctx, src, 1); err != nil {
				b.Fatal(err)
			}
			if err := src.Commit(false); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, _, err := log.Write(ctx, src, 1); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		dst, err := state.Open(state.Options{Dir: b.TempDir(), AtomicCheckpoints: true})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		_, st, err := log.Restore(ctx, dst, NoPosition, 2)
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		dst.Close()
		b.ReportMetric(float64(st.Bytes)/(1<<20), "MiB")
		b.ReportMetric(took.Seconds()/(float64(st.Bytes)/(1<<30)), "s/GiB")
	}
}
