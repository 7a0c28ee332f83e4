package jobbase

import (
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/riskstream/riskstream/console"
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/observe"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/segmentio/kafka-go"
)

// stepsCheckpointer is a Checkpointer that notes the steps Base.Checkpoint
// asks of it, and what the job's outputs were at each.
type stepsCheckpointer struct {
	out   *sink.Kafka
	steps []string
	// ends are those persist was given.
	ends []kafkaio.OutputEnd
	// persisted decides what persist does: call durable at once, later
	// (kept in later), never, or fail.
	persisted string
	later     func()
}

func (c *stepsCheckpointer) AppliedRecords() int64 {
	if c.out.Pending() > 0 {
		c.steps = append(c.steps, "ends noted before the outputs were drained")
	}
	c.steps = append(c.steps, "ends")
	return 0
}

func (c *stepsCheckpointer) Persist(ends []kafkaio.OutputEnd, durable func(commitOffsets func())) error {
	c.steps, c.ends = append(c.steps, "persist"), ends
	commit := func() { c.steps = append(c.steps, "offsets") }
	switch c.persisted {
	case "now":
		durable(commit)
	case "later":
		c.later = func() { durable(commit) }
	case "fails":
		return errors.New("the store failed")
	}
	return nil
}

func (c *stepsCheckpointer) PublishGauges() { c.steps = append(c.steps, "gauges") }

func (c *stepsCheckpointer) Sample(int64) console.Sample {
	c.steps = append(c.steps, "sample")
	return console.Sample{}
}

// TestCheckpointSteps: a checkpoint (Base.Checkpoint) takes docs/design.md's steps in their
// order, for whatever a job writes: the outputs are acknowledged before
// their ends are noted, and the ends persisted cover them; the input
// offsets go to the group, and the checkpoint counts as taken, only once
// the job reports it durable, however late; a checkpoint not written
// leaves the last one in force, and a failure ends with its error.
func TestCheckpointSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	addr := testbroker.Start(t, 1)
	cfg, err := rules.Parse("rules.yaml", []byte("rules:\n  - {name: r, key: [user], window: {type: tumbling, size: 1m}, aggregate: count, threshold: 0, action: alert}\n"))
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Brokers: []string{addr}, Config: cfg}
	opts.EnsureDefaults()
	now := time.UnixMilli(1_000_000)
	opts.Now = func() time.Time { return now }
	j := &Base{Opts: opts, Log: slog.New(slog.DiscardHandler),
		M: observe.NewMetrics(prometheus.NewRegistry(), cfg, 100)}
	j.StartSink(opts.Brokers)
	defer j.Out.Close()
	j.Writer = sink.NewWriter(j.Out, sink.WriterOptions{Now: opts.Now})
	j.Ends = kafkaio.NewEndTracker(&kafka.Client{Addr: kafka.TCP(addr), Timeout: 10 * time.Second},
		opts.Outputs.Names(), j.Out, j.Log)
	lastCheckpoint := func() float64 {
		var m dto.Metric
		if err := j.M.LastCheckpoint.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetGauge().GetValue()
	}

	for i, c := range []struct {
		persisted string
		want      []string
		err       bool
		taken     bool
	}{
		{persisted: "now", want: []string{"ends", "persist", "offsets", "gauges"}, taken: true},
		{persisted: "later", want: []string{"ends", "persist", "gauges"}},
		{persisted: "never", want: []string{"ends", "persist", "gauges"}},
		{persisted: "fails", want: []string{"ends", "persist"}, err: true},
	} {
		now = now.Add(time.Second)
		// Two outputs made since the last checkpoint, not yet written.
		for range 2 {
			j.Out.DLQ([]byte(`{}`), "test", &event.Provenance{})
		}
		cp := &stepsCheckpointer{out: j.Out, persisted: c.persisted}
		err := j.Checkpoint(cp, j.Writer)
		if (err != nil) != c.err {
			t.Fatalf("%s: checkpoint: %v", c.persisted, err)
		}
		if !slices.Equal(cp.steps, c.want) {
			t.Fatalf("%s: steps %v, want %v", c.persisted, cp.steps, c.want)
		}
		end := int64(-1)
		for _, e := range cp.ends {
			if e.Topic == opts.Outputs.DLQ {
				end = e.Offset
			}
		}
		if want := int64(2 * (i + 1)); end != want {
			t.Fatalf("%s: the dlq ends at %d in the checkpoint, want %d: the outputs made before it", c.persisted, end, want)
		}
		if taken := lastCheckpoint() == float64(now.UnixMilli())/1000; taken != c.taken {
			t.Fatalf("%s: the checkpoint counted as taken: %v, want %v", c.persisted, taken, c.taken)
		}
		if cp.later != nil {
			// Durable on the store's goroutine, after the loop went on.
			now = now.Add(time.Millisecond)
			cp.later()
			if want := append(slices.Clone(c.want), "offsets"); !slices.Equal(cp.steps, want) {
				t.Fatalf("%s, durable: steps %v, want %v", c.persisted, cp.steps, want)
			}
			if lastCheckpoint() != float64(now.UnixMilli())/1000 {
				t.Fatalf("%s: the checkpoint did not count as taken once durable", c.persisted)
			}
		}
	}
}
