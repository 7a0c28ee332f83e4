package engine

import (
	"bytes"
	"testing"

	"github.com/riskstream/riskstream/gen"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/windows"
)

// discard encodes outputs like the file sink, without the files.
type discard struct {
	enc *sink.Encoder
	buf []byte
}

func (d *discard) Decision(x *windows.Decision)     { d.buf = d.enc.AppendDecision(d.buf[:0], x) }
func (d *discard) Heatmap(x *windows.HeatmapWindow) { d.buf = d.enc.AppendHeatmap(d.buf[:0], x) }
func (d *discard) Late(raw []byte, wm int64, p *sink.Provenance) {
	d.buf = sink.AppendLate(d.buf[:0], raw, wm, p)
}
func (d *discard) DLQ(raw []byte, reason string, p *sink.Provenance) {
	d.buf = sink.AppendDLQ(d.buf[:0], raw, reason, p)
}

// BenchmarkEngine measures decode + windows + outputs per event on the
// example rules over a generated workload held in memory (200,000 events,
// 10,000 users), with all state in the cache.
func BenchmarkEngine(b *testing.B) {
	cfg, err := rules.Load("../testdata/rules.yaml")
	if err != nil {
		b.Fatal(err)
	}
	o := gen.DefaultOptions()
	o.Events, o.Users = 200_000, 10_000
	var buf bytes.Buffer
	if _, err := gen.Generate(&buf, o); err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte{'\n'})
	b.ReportAllocs()
	b.ResetTimer()
	events := 0
	for b.Loop() {
		e, err := New(Options{Config: cfg, Backend: windows.NewMemBackend(), Output: &discard{enc: sink.NewEncoder()}})
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
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
