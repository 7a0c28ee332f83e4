package stream

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/gen"
)

var ingestField = regexp.MustCompile(`,"ingest_ts":\d+`)

// BenchmarkLive measures the live path on this machine: producer, embedded
// broker and job in one process, 100,000 events at a steady 20,000/s,
// record timestamps set at send time. It reports the event-to-decision
// latency percentiles from the job's own histogram (bucket upper bounds).
//
//	go test ./stream/ -run '^$' -bench BenchmarkLive -benchtime 1x
func BenchmarkLive(b *testing.B) {
	o := gen.DefaultOptions()
	o.Events, o.Users = 100_000, 5_000
	var buf bytes.Buffer
	if _, err := gen.Generate(&buf, o); err != nil {
		b.Fatal(err)
	}
	// Without ingest_ts the producer stamps the send time, the reference a
	// live latency is measured from.
	input := ingestField.ReplaceAll(buf.Bytes(), nil)
	for b.Loop() {
		addr := startLiveBroker(b)
		reg := prometheus.NewRegistry()
		stop := startJob(b, RunOptions{Brokers: []string{addr}, Registry: reg})
		st, err := Produce(context.Background(), ProduceOptions{File: "-", Stdin: bytes.NewReader(input),
			Brokers: []string{addr}, Rate: 20_000})
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(2 * time.Second) // let the job drain and checkpoint
		stop()
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != "riskstream_event_decision_latency_seconds" {
				continue
			}
			h := mf.GetMetric()[0].GetHistogram()
			total := float64(h.GetSampleCount())
			for _, q := range []struct {
				name string
				q    float64
			}{{"p50-ms", 0.5}, {"p99-ms", 0.99}} {
				for _, bk := range h.GetBucket() {
					if float64(bk.GetCumulativeCount()) >= q.q*total {
						b.ReportMetric(bk.GetUpperBound()*1000, q.name)
						break
					}
				}
			}
			b.ReportMetric(total, "decisions")
		}
		b.ReportMetric(float64(st.Records)/st.Elapsed.Seconds(), "sent/s")
	}
}
