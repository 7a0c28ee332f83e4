package stream

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/sink"
)

// outputWriter writes the live job's outputs from its own goroutine, so
// that the event loop never waits for Kafka's acknowledgements except at a
// checkpoint. One batch is in flight at a time, which keeps the outputs in
// order; the loop accumulates the next meanwhile. Only the loop's goroutine
// calls its methods.
//
// A write that fails is retried, with a backoff, until the broker
// acknowledges it: an outage of the output topics' brokers holds the job at
// its next checkpoint (the outputs are never behind the checkpoint that
// covers them) instead of stopping it. Only giveUp and errors that writing
// again cannot cure (sink.Permanent) end the retries.
type outputWriter struct {
	out     *sink.Kafka
	latency prometheus.Histogram
	// jobLatency, if not nil, observes the job's own share of each
	// decision's latency, from its fetch's arrival, and stages its parts
	// (decisionStages); timed, if not nil, receives the same times
	// (RunOptions.decisionTimed). measureJob sets them.
	jobLatency prometheus.Histogram
	stages     [len(decisionStages)]prometheus.Observer
	timed      func(t sink.DecisionTimes, written, acked int64)
	log        *slog.Logger
	// now is the job's clock (RunOptions.Now): when a write started and
	// was acknowledged.
	now  func() time.Time
	todo chan sink.Batch
	// done receives the result of each write; the loop passes it to
	// finished.
	done chan error
	busy bool
	// giveUp, once closed, makes a failing write return its error instead
	// of trying again.
	giveUp     chan struct{}
	giveUpOnce sync.Once
	// stopCtx is cancelled with giveUp: it ends a write in flight too,
	// which kafka-go would otherwise retry against brokers that do not
	// answer for minutes.
	stopCtx    context.Context
	cancelStop context.CancelFunc
	// since, if not nil, holds when the write in flight started, in Unix
	// nanoseconds (0 when none is), for /healthz.
	since *atomic.Int64
}

// Backoffs between attempts at a failing output write.
const (
	outputBackoffMin = 100 * time.Millisecond
	outputBackoffMax = 5 * time.Second
)

// newOutputWriter starts a writer of out's messages; latency, if not nil,
// observes the event-to-decision latency of the decisions written, and
// since, if not nil, holds when the write in flight started (see
// outputWriter.since).
func newOutputWriter(out *sink.Kafka, latency prometheus.Histogram, since *atomic.Int64, log *slog.Logger, now func() time.Time) *outputWriter {
	if now == nil {
		now = time.Now
	}
	w := &outputWriter{out: out, latency: latency, since: since, log: log, now: now,
		todo: make(chan sink.Batch, 1), done: make(chan error, 1), giveUp: make(chan struct{})}
	w.stopCtx, w.cancelStop = context.WithCancel(context.Background())
	go w.run()
	return w
}

func (w *outputWriter) run() {
	for b := range w.todo {
		written := w.now().UnixNano()
		if w.since != nil {
			w.since.Store(written)
		}
		err := w.write(&b)
		if w.since != nil {
			w.since.Store(0)
		}
		if err == nil {
			w.observe(&b, written)
		}
		w.done <- err
	}
}

// observe observes the latencies of b's decisions, whose write started at
// written and is acknowledged now.
func (w *outputWriter) observe(b *sink.Batch, written int64) {
	acked := w.now()
	if w.latency != nil {
		ms := acked.UnixMilli()
		for i := range b.Decisions {
			w.latency.Observe(float64(ms-b.Decisions[i].Ref) / 1000)
		}
	}
	if w.jobLatency == nil {
		return
	}
	ns := acked.UnixNano()
	for i := range b.Decisions {
		t := &b.Decisions[i]
		if t.Arrived == 0 {
			continue // not fetched by this job (a distributed task's)
		}
		w.jobLatency.Observe(time.Duration(ns - t.Arrived).Seconds())
		for k, d := range stageDurations(t, written, ns) {
			w.stages[k].Observe(d.Seconds())
		}
		if w.timed != nil {
			w.timed(*t, written, ns)
		}
	}
}

// measureJob makes w observe the job's own share of each decision's
// latency in jobLatency, and its stages in stages by their names
// (decisionStages); timed, if not nil, receives each decision's times.
func (w *outputWriter) measureJob(jobLatency prometheus.Histogram, stages *prometheus.HistogramVec, timed func(t sink.DecisionTimes, written, acked int64)) {
	w.jobLatency, w.timed = jobLatency, timed
	for i, name := range decisionStages {
		w.stages[i] = stages.WithLabelValues(name)
	}
}

// decisionStages name the stages of a decision's latency in the job
// (riskstream_decision_stage_seconds), in the order stageDurations gives
// them.
var decisionStages = [...]string{"merge", "engine", "queue", "write"}

// stageDurations splits the job's latency of a decision with times t,
// whose write started at written and was acknowledged at acked (Unix ns),
// into its stages: from the fetch's arrival to the loop taking the event
// from the merge (the fetch waiting for the loop, and the merge for the
// other partitions), to the decision made, to the write that carries it
// starting (the write before it in flight), to its acknowledgement.
func stageDurations(t *sink.DecisionTimes, written, acked int64) [len(decisionStages)]time.Duration {
	return [...]time.Duration{
		time.Duration(t.Popped - t.Arrived), time.Duration(t.Made - t.Popped),
		time.Duration(written - t.Made), time.Duration(acked - written),
	}
}

// write writes b until every message is acknowledged or the writer gives
// up. Writes are not cancelled by a stop: the outputs a checkpoint covers
// must reach Kafka first.
func (w *outputWriter) write(b *sink.Batch) error {
	backoff := outputBackoffMin
	for {
		err := w.out.Write(w.stopCtx, b)
		if err == nil {
			return nil
		}
		if sink.Permanent(err) {
			return err
		}
		select {
		case <-w.giveUp:
			return fmt.Errorf("gave up on the outputs: %w", err)
		default:
		}
		w.log.Warn("writing outputs, retrying", "messages", len(b.Messages), "in", backoff, "err", err)
		select {
		case <-w.giveUp:
			return fmt.Errorf("gave up on the outputs: %w", err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, outputBackoffMax)
	}
}

// stopRetrying makes failing writes, the one in flight included, return
// their error. It may be called from any goroutine, more than once.
func (w *outputWriter) stopRetrying() {
	w.giveUpOnce.Do(func() {
		close(w.giveUp)
		w.cancelStop()
	})
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

// close stops the goroutine after its write in flight, if any, which no
// longer retries.
func (w *outputWriter) close() {
	w.stopRetrying()
	close(w.todo)
}
