package engine

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/gen"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/state"
	"github.com/riskstream/riskstream/windows"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// discard encodes outputs like the file sink, without the files.
type discard struct {
	enc *sink.Encoder
	buf []byte
}

func (d *discard) Decision(x *windows.Decision)     { d.buf = d.enc.AppendDecision(d.buf[:0], x) }
func (d *discard) Heatmap(x *windows.HeatmapWindow) { d.buf = d.enc.AppendHeatmap(d.buf[:0], x) }
func (d *discard) Late(raw []byte, wm int64, p *event.Provenance) {
	d.buf = sink.AppendLate(d.buf[:0], raw, wm, p)
}
func (d *discard) DLQ(raw []byte, reason string, p *event.Provenance) {
	d.buf = sink.AppendDLQ(d.buf[:0], raw, reason, p)
}

// benchWorkload returns the example rules and a generated workload of
// events records over users users, one record per line.
func benchWorkload(b *testing.B, events, users int) (*rules.Config, [][]byte) {
	cfg, err := rules.Load("../testdata/rules.yaml")
	if err != nil {
		b.Fatal(err)
	}
	o := gen.DefaultOptions()
	o.Events, o.Users = events, users
	var buf bytes.Buffer
	if _, err := gen.Generate(&buf, o); err != nil {
		b.Fatal(err)
	}
	return cfg, bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte{'\n'})
}

// BenchmarkEngine measures decode + windows + outputs per event on the
// example rules over a generated workload held in memory (200,000 events,
// 10,000 users), with all state in the cache.
func BenchmarkEngine(b *testing.B) {
	cfg, lines := benchWorkload(b, 200_000, 10_000)
	b.ReportAllocs()
	b.ResetTimer()
	events := 0
	var samples []time.Duration
	for b.Loop() {
		e, err := New(Options{Config: cfg, Backend: slotstore.NewMemBackend(), Output: &discard{enc: sink.NewEncoder()}})
		if err != nil {
			b.Fatal(err)
		}
		var rec Record
		for i, l := range lines {
			rec.Value = l
			// Every 16th event is timed on its own, for the percentiles.
			var t0 time.Time
			if i%16 == 0 {
				t0 = time.Now()
			}
			if err := e.Process(&rec, 0); err != nil {
				b.Fatal(err)
			}
			if i%16 == 0 {
				samples = append(samples, time.Since(t0))
			}
		}
		if err := e.Finish(); err != nil {
			b.Fatal(err)
		}
		events += len(lines)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	slices.Sort(samples)
	for _, p := range []struct {
		name string
		q    float64
	}{{"p50-ns", 0.50}, {"p99-ns", 0.99}, {"p99.9-ns", 0.999}} {
		b.ReportMetric(float64(samples[int(p.q*float64(len(samples)-1))].Nanoseconds()), p.name)
	}
}

// BenchmarkDecoder measures what replay's decode workers do per record:
// decode it and key it for the example rules (Decoder.Decode), over 4,096
// generated records.
func BenchmarkDecoder(b *testing.B) {
	cfg, lines := benchWorkload(b, 4096, 1000)
	e, err := NewSharded(Options{Config: cfg, Output: &discard{enc: sink.NewEncoder()}}, []slotstore.Backend{slotstore.NewMemBackend()})
	if err != nil {
		b.Fatal(err)
	}
	d := e.NewDecoder()
	var ev event.Event
	var refs []windows.SlotRef
	var keys []byte
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		refs, keys, _ = d.Decode(lines[i%len(lines)], &ev, refs[:0], keys[:0])
		i++
	}
}

// BenchmarkRouter measures what a distributed job's router does per
// record, over 4,096 generated records of 4 input partitions: route it
// (decode, key, time) and encode its message for each partition of 12
// that holds its keys. Without dedupe: the records come round again, and
// would all be duplicates.
func BenchmarkRouter(b *testing.B) {
	cfg, lines := benchWorkload(b, 4096, 1000)
	cfg.Dedupe.Horizon = 0
	r, err := NewRouter(cfg, 12, nil)
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p := int32(i % 4)
		rec := Record{Value: lines[i%len(lines)], Partition: p, Prov: event.Provenance{Topic: "requests", Partition: p, Offset: int64(i)}}
		routed := r.Route(&rec, 0, nil)
		for range routed.Partitions {
			buf = AppendMessage(buf[:0], &routed.Message)
		}
		i++
	}
}

// BenchmarkEngineReference measures the window operator's part of replay
// on the reference workload (2,000,000 events, 100,000 users): as
// in replay, records are decoded, keyed and timed a chunk at a time ahead
// of the operator, untimed, and one shard's Process and the Merge of the
// outputs (encoded, not written) are timed. With ~300,000 keys this is
// bound by memory latency, which the 10,000-user BenchmarkEngine hides.
// Skipped with -short.
func BenchmarkEngineReference(b *testing.B) {
	if testing.Short() {
		b.Skip("2M events")
	}
	cfg, lines := benchWorkload(b, 2_000_000, 100_000)
	const chunk = 4096
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		e, err := NewSharded(Options{Config: cfg, Output: &discard{enc: sink.NewEncoder()}}, []slotstore.Backend{slotstore.NewMemBackend()})
		if err != nil {
			b.Fatal(err)
		}
		dec, batch, shard := e.NewDecoder(), e.NewBatch(), e.Shards()[0]
		var rec Record
		for c := 0; c < len(lines); c += chunk {
			b.StopTimer()
			batch.Reset()
			for _, l := range lines[c:min(c+chunk, len(lines))] {
				rec.Value = l
				batch.Add(dec, &rec)
			}
			e.Time(batch, 0)
			b.StartTimer()
			if err := shard.Process(batch); err != nil {
				b.Fatal(err)
			}
			e.Merge(batch, nil)
		}
		if err := e.Finish(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(lines)), "ns/event")
}

// BenchmarkCheckpoint measures what the live job pauses for once a
// checkpoint interval: Engine.Checkpoint after 20,000 events (one second at
// 20,000 events/s) on an engine already holding the state of 200,000 events
// of 10,000 users, over Pebble. With writeback=N the events come in 100
// groups (the live loop's 10 ms ticks), each followed by WriteBack(N), whose
// longest call is reported too.
func BenchmarkCheckpoint(b *testing.B) {
	for _, n := range []int{0, 128, 256, 512} {
		b.Run(fmt.Sprintf("writeback=%d", n), func(b *testing.B) { benchmarkCheckpoint(b, n) })
	}
}

func benchmarkCheckpoint(b *testing.B, writeBack int) {
	cfg, lines := benchWorkload(b, 400_000, 10_000)
	db, err := state.Open(state.Options{Dir: b.TempDir(), AtomicCheckpoints: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	e, err := New(Options{Config: cfg, Backend: db, Output: &discard{enc: sink.NewEncoder()}})
	if err != nil {
		b.Fatal(err)
	}
	var rec Record
	next := 0
	feed := func(n int) {
		for ; n > 0 && next < len(lines); n-- {
			rec.Value = lines[next]
			next++
			if err := e.Process(&rec, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	feed(200_000)
	if _, err := e.Checkpoint(); err != nil {
		b.Fatal(err)
	}
	var longest time.Duration
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		if next == len(lines) {
			b.Fatal("workload exhausted: lower -benchtime")
		}
		for range 100 {
			feed(200)
			if writeBack > 0 {
				t0 := time.Now()
				if err := e.WriteBack(writeBack); err != nil {
					b.Fatal(err)
				}
				longest = max(longest, time.Since(t0))
			}
		}
		b.StartTimer()
		if _, err := e.Checkpoint(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := db.Commit(false); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "checkpoint-ms")
	b.ReportMetric(float64(longest.Microseconds())/1000, "longest-writeback-ms")
}

// BenchmarkTaskApply measures what a distributed job's state does per
// record its router hands it in the same process, with the event the
// router decoded (decoded) or decoding the record again (encoded): over
// 100,000 generated records routed ahead, untimed, to one partition.
func BenchmarkTaskApply(b *testing.B) {
	cfg, lines := benchWorkload(b, 100_000, 10_000)
	cfg.Dedupe.Horizon = 0
	r, err := NewRouter(cfg, 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	var msgs []Message
	var evs []*Decoded
	for i, l := range lines {
		ev := new(Decoded)
		routed := r.Route(&Record{Value: l, Prov: event.Provenance{Topic: "requests", Offset: int64(i)}}, 0, ev)
		if len(routed.Partitions) > 0 {
			msgs, evs = append(msgs, routed.Message), append(evs, ev)
		}
	}
	for _, name := range []string{"encoded", "decoded"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				t, err := NewTask(TaskOptions{Config: cfg, Backend: slotstore.NewMemBackend(), Output: &discard{enc: sink.NewEncoder()},
					Partitions: 1, Topic: "requests"})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for i := range msgs {
					var ev *Decoded
					if name == "decoded" {
						ev = evs[i]
					}
					if _, err := t.ApplyDecoded(&msgs[i], ev); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/record")
		})
	}
}
