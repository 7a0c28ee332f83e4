package sink

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Writer writes a Kafka sink's outputs from a goroutine of its own, so
// that the job's loop never waits for Kafka's acknowledgements except at a
// checkpoint. One batch is in flight at a time, which keeps the outputs in
// order; the loop accumulates the next in the sink meanwhile. Only the
// loop's goroutine calls its methods, StopRetrying aside.
//
// A write that fails is retried, with a backoff, until the broker
// acknowledges it: an outage of the output topics' brokers holds the job at
// its next checkpoint (the outputs are never behind the checkpoint that
// covers them) instead of stopping it. Only StopRetrying and errors that
// writing again cannot cure (Permanent) end the retries.
type Writer struct {
	out  *Kafka
	opts WriterOptions
	// stages are opts.Stages' observers, by DecisionStages.
	stages [len(DecisionStages)]prometheus.Observer
	todo   chan Batch
	done   chan error
	busy   bool
	// giveUp, once closed, makes a failing write return its error instead
	// of trying again.
	giveUp     chan struct{}
	giveUpOnce sync.Once
	// stopCtx is cancelled with giveUp: it ends a write in flight too,
	// which kafka-go would otherwise retry against brokers that do not
	// answer for minutes.
	stopCtx    context.Context
	cancelStop context.CancelFunc
}

// WriterOptions say what a Writer observes of its writes. Each may be left
// unset.
type WriterOptions struct {
	// Latency observes the event-to-decision latency of each decision
	// written, from its record's time to its acknowledgement.
	Latency prometheus.Histogram
	// JobLatency observes the job's own share of each decision's latency,
	// from the arrival of the fetch that carried its event to its
	// acknowledgement; Stages, labelled by DecisionStages, its parts;
	// Timed receives the same times. Decisions whose times have no
	// arrival (DecisionTimes.Arrived) are left out.
	JobLatency prometheus.Histogram
	Stages     *prometheus.HistogramVec
	Timed      func(t DecisionTimes, written, acked int64)
	// Writing holds when the write in flight started, in Unix nanoseconds,
	// and 0 when none is: how long the brokers have kept the job waiting,
	// for health checks.
	Writing *atomic.Int64
	// Lock, if set, is held while Start takes the sink's pending outputs:
	// for a sink that other goroutines write to meanwhile.
	Lock sync.Locker
	// Log takes the retries; the default discards them.
	Log *slog.Logger
	// Now is the job's clock: when a write started and was acknowledged.
	// The default is time.Now.
	Now func() time.Time
}

// Backoffs between attempts at a failing write.
const (
	WriteBackoffMin = 100 * time.Millisecond
	WriteBackoffMax = 5 * time.Second
)

// NewWriter starts a writer of out's outputs.
func NewWriter(out *Kafka, opts WriterOptions) *Writer {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	w := &Writer{out: out, opts: opts,
		todo: make(chan Batch, 1), done: make(chan error, 1), giveUp: make(chan struct{})}
	if opts.Stages != nil {
		for i, name := range DecisionStages {
			w.stages[i] = opts.Stages.WithLabelValues(name)
		}
	}
	w.stopCtx, w.cancelStop = context.WithCancel(context.Background())
	go w.run()
	return w
}

func (w *Writer) run() {
	for b := range w.todo {
		written := w.opts.Now().UnixNano()
		if w.opts.Writing != nil {
			w.opts.Writing.Store(written)
		}
		err := w.write(&b)
		if w.opts.Writing != nil {
			w.opts.Writing.Store(0)
		}
		if err == nil {
			w.observe(&b, written)
		}
		w.done <- err
	}
}

// observe observes the latencies of b's decisions, whose write started at
// written and is acknowledged now.
func (w *Writer) observe(b *Batch, written int64) {
	acked := w.opts.Now()
	if w.opts.Latency != nil {
		ms := acked.UnixMilli()
		for i := range b.Decisions {
			w.opts.Latency.Observe(float64(ms-b.Decisions[i].Ref) / 1000)
		}
	}
	if w.opts.JobLatency == nil && w.opts.Stages == nil && w.opts.Timed == nil {
		return
	}
	ns := acked.UnixNano()
	for i := range b.Decisions {
		t := &b.Decisions[i]
		if t.Arrived == 0 {
			continue // not fetched by this job (a distributed task's)
		}
		if w.opts.JobLatency != nil {
			w.opts.JobLatency.Observe(time.Duration(ns - t.Arrived).Seconds())
		}
		if w.opts.Stages != nil {
			for k, d := range StageDurations(t, written, ns) {
				w.stages[k].Observe(d.Seconds())
			}
		}
		if w.opts.Timed != nil {
			w.opts.Timed(*t, written, ns)
		}
	}
}

// DecisionStages name the stages of a decision's latency in the job
// (riskstream_decision_stage_seconds), in the order StageDurations gives
// them.
var DecisionStages = [...]string{"merge", "engine", "queue", "write"}

// StageDurations splits the job's latency of a decision with times t,
// whose write started at written and was acknowledged at acked (Unix ns),
// into its stages: from the fetch's arrival to the loop taking the event
// from the merge (the fetch waiting for the loop, and the merge for the
// other partitions), to the decision made, to the write that carries it
// starting (the write before it in flight), to its acknowledgement.
func StageDurations(t *DecisionTimes, written, acked int64) [len(DecisionStages)]time.Duration {
	return [...]time.Duration{
		time.Duration(t.Popped - t.Arrived), time.Duration(t.Made - t.Popped),
		time.Duration(written - t.Made), time.Duration(acked - written),
	}
}

// write writes b until every message is acknowledged or the writer gives
// up. Writes are not cancelled by a stop: the outputs a checkpoint covers
// must reach Kafka first.
func (w *Writer) write(b *Batch) error {
	backoff := WriteBackoffMin
	for {
		err := w.out.Write(w.stopCtx, b)
		if err == nil {
			return nil
		}
		if Permanent(err) {
			return err
		}
		select {
		case <-w.giveUp:
			return fmt.Errorf("gave up on the outputs: %w", err)
		default:
		}
		w.opts.Log.Warn("writing outputs, retrying", "messages", len(b.Messages), "in", backoff, "err", err)
		select {
		case <-w.giveUp:
			return fmt.Errorf("gave up on the outputs: %w", err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, WriteBackoffMax)
	}
}

// StopRetrying makes failing writes, the one in flight included, return
// their error. It may be called from any goroutine, more than once.
func (w *Writer) StopRetrying() {
	w.giveUpOnce.Do(func() {
		close(w.giveUp)
		w.cancelStop()
	})
}

// Start hands the sink's pending outputs to the writer if it is free.
func (w *Writer) Start() {
	if w.busy {
		return
	}
	if w.opts.Lock != nil {
		w.opts.Lock.Lock()
		defer w.opts.Lock.Unlock()
	}
	if w.out.Pending() == 0 {
		return
	}
	w.todo <- w.out.Detach()
	w.busy = true
}

// Done receives the result of each write Start began; the loop passes it
// to Finished.
func (w *Writer) Done() <-chan error { return w.done }

// Finished takes the result of a write received from Done, and returns
// it.
func (w *Writer) Finished(err error) error {
	w.busy = false
	return err
}

// Drain returns once every output made so far is acknowledged. Nothing
// else may write to the sink meanwhile.
func (w *Writer) Drain() error {
	for w.busy || w.out.Pending() > 0 {
		if w.busy {
			if err := w.Finished(<-w.done); err != nil {
				return err
			}
		}
		w.Start()
	}
	return nil
}

// Close stops the goroutine after its write in flight, if any, which no
// longer retries.
func (w *Writer) Close() {
	w.StopRetrying()
	close(w.todo)
}
