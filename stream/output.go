package stream

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/sink"
)

// outputWriter writes the live job's outputs from its own goroutine, so
// that the event loop never waits for Kafka's acknowledgements except at a
// checkpoint. One batch is in flight at a time, which keeps the outputs in
// order; the loop accumulates the next meanwhile. Only the loop's goroutine
// calls its methods.
type outputWriter struct {
	out     *sink.Kafka
	latency prometheus.Histogram
	todo    chan sink.Batch
	// done receives the result of each write; the loop passes it to
	// finished.
	done chan error
	busy bool
}

func newOutputWriter(out *sink.Kafka, latency prometheus.Histogram) *outputWriter {
	w := &outputWriter{out: out, latency: latency, todo: make(chan sink.Batch, 1), done: make(chan error, 1)}
	go w.run()
	return w
}

func (w *outputWriter) run() {
	// Writes are not cancelled by a stop: the outputs a checkpoint covers
	// must reach Kafka first. The writer's own timeouts bound them.
	ctx := context.Background()
	for b := range w.todo {
		err := w.out.Write(ctx, b)
		if err == nil {
			acked := time.Now().UnixMilli()
			for _, ref := range b.DecisionRefs {
				w.latency.Observe(float64(acked-ref) / 1000)
			}
		}
		w.done <- err
	}
}

// start hands the pending outputs to the writer if it is free.
func (w *outputWriter) start() {
	if w.busy || w.out.Pending() == 0 {
		return
	}
	w.todo <- w.out.Detach()
	w.busy = true
}

// finished takes the result of a write received from done.
func (w *outputWriter) finished(err error) error {
	w.busy = false
	return err
}

// drain returns once every output made so far is acknowledged.
func (w *outputWriter) drain() error {
	for w.busy || w.out.Pending() > 0 {
		if w.busy {
			if err := w.finished(<-w.done); err != nil {
				return err
			}
		}
		w.start()
	}
	return nil
}

// close stops the goroutine after its write in flight, if any.
func (w *outputWriter) close() { close(w.todo) }
