// Package driver runs a job's loop: the one goroutine that takes what the
// fetchers bring, moves processing time on, checkpoints on a clock and
// hands the outputs made to their writers. The single live job, each
// instance of a distributed one and a replay of a topic's ranges are
// configurations of it (Options): which channels of fetches it takes and
// what it does with each, which writers it keeps busy, its tick, its
// checkpoint, and what ends it.
//
// Everything the loop runs, runs on its goroutine, one step at a time: a
// step is a fetch taken, a tick, a piece of mail (anything another
// goroutine asks of the loop: a failure, partitions found, a reload), and
// a checkpoint when one is due after it; after each step the writers take
// the outputs made. The fetchers, the writers and the store's commits run
// on goroutines of their own and reach the loop only through channels
// (docs/design.md "Goroutines and what they own").
package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/sink"
)

// Source is a channel of fetches and what the loop does with each.
type Source struct {
	Fetched <-chan kafkaio.Fetch
	Take    func(f kafkaio.Fetch) error
	// Held makes the source wait while Options.Held says the job does not
	// hold its input.
	Held bool
}

// Mail is a step another goroutine asks of the loop; its error ends the
// loop.
type Mail func() error

// Limits of Options: a select's cases are fixed, so the loop has a case
// for each source and writer it can have.
const (
	MaxSources = 3
	MaxWriters = 2
)

// Options configure the loop.
type Options struct {
	// Sources are taken as their fetches come, at most MaxSources.
	Sources []Source
	// Writers write the outputs the steps make, at most MaxWriters: each
	// is started after every step, and its results are taken as they
	// come; a write that failed ends the loop.
	Writers []*sink.Writer
	// Mail brings the steps other goroutines ask of the loop. Its closing
	// ends the loop, with no error, once the steps sent before are
	// taken: the end of a replay's input files, each batch of which is a
	// step.
	Mail <-chan Mail
	// Held, if set, reports whether the job holds its input now (the live
	// job's consumer group), and a channel that is closed when that may
	// have changed. While it does not, the sources marked Held and the
	// tick wait.
	Held func() (held bool, changed <-chan struct{})
	// Tick, if set, runs every TickInterval: processing time moves on
	// even when no record arrives. It is told when the next checkpoint is
	// due, to spread that checkpoint's writes.
	TickInterval time.Duration
	Tick         func(nextCheckpoint time.Time) error
	// Checkpoint, if set, runs after the step during which
	// CheckpointInterval passed since the last: at most one every
	// interval, never in the middle of a step.
	CheckpointInterval time.Duration
	Checkpoint         func() error
	// Stop runs when the loop's context ends; its result is the loop's.
	// The default value returns nil.
	Stop func() error
	// Finished, if set, ends the loop, with no error, once it reports
	// true before a step: a replay's every partition ended.
	Finished func() bool
	// Worked, if set, is told how long each step took, its checkpoint
	// included: time the loop could not take in fetches, which a merge's
	// clock leaves out so that the loop's own work does not count against
	// a partition's wait.
	Worked func(took time.Duration)
	// Now is the clock of the steps and the checkpoints. The default is
	// time.Now.
	Now func() time.Time
}

// EnsureDefaults fills in zero fields with their default values.
func (o *Options) EnsureDefaults() {
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate reports the options that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if len(o.Sources) > MaxSources {
		errs = append(errs, fmt.Errorf("driver: %d sources, at most %d", len(o.Sources), MaxSources))
	}
	for i, s := range o.Sources {
		if s.Fetched == nil || s.Take == nil {
			errs = append(errs, fmt.Errorf("driver: source %d needs its channel and what takes its fetches", i))
		}
		if s.Held && o.Held == nil {
			errs = append(errs, fmt.Errorf("driver: source %d waits while the input is not held, and nothing says when it is (Options.Held)", i))
		}
	}
	if len(o.Writers) > MaxWriters {
		errs = append(errs, fmt.Errorf("driver: %d writers, at most %d", len(o.Writers), MaxWriters))
	}
	if o.Tick != nil && o.TickInterval <= 0 {
		errs = append(errs, fmt.Errorf("driver: a tick every %v", o.TickInterval))
	}
	if o.Checkpoint != nil && o.CheckpointInterval <= 0 {
		errs = append(errs, fmt.Errorf("driver: a checkpoint every %v", o.CheckpointInterval))
	}
	return errors.Join(errs...)
}

// The steps the loop's select picks; stepNone only wakes it (for a due
// checkpoint, or a change of Held).
const (
	stepNone = iota
	stepFetch
	stepWritten
	stepMail
	stepTick
)

// Run runs the loop until ctx ends (then Stop), Finished says so, Mail is
// closed, or a step fails.
func Run(ctx context.Context, opts Options) error {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return err
	}
	var tick <-chan time.Time
	if opts.Tick != nil {
		t := time.NewTicker(opts.TickInterval)
		defer t.Stop()
		tick = t.C
	}
	var checkpoints *checkpointClock
	var checkpointWake <-chan time.Time
	if opts.Checkpoint != nil {
		checkpoints = newCheckpointClock(opts.CheckpointInterval, opts.Now())
		defer checkpoints.stop()
		checkpointWake = checkpoints.timer.C
	}
	var writers [MaxWriters]<-chan error
	for i, w := range opts.Writers {
		writers[i] = w.Done()
	}
	for {
		if opts.Finished != nil && opts.Finished() {
			return nil
		}
		held, heldChanged := true, (<-chan struct{})(nil)
		if opts.Held != nil {
			held, heldChanged = opts.Held()
		}
		// A source the options do not have, or that waits, has no
		// channel: its case never runs.
		var fetched [MaxSources]<-chan kafkaio.Fetch
		for i, s := range opts.Sources {
			if held || !s.Held {
				fetched[i] = s.Fetched
			}
		}
		ticked := tick
		if !held {
			ticked = nil
		}
		// The select only picks the step, so that its time is the step's,
		// not the wait's.
		var (
			step  int
			which int
			f     kafkaio.Fetch
			wrote error
			mail  Mail
			open  bool
		)
		select {
		case <-ctx.Done():
			if opts.Stop != nil {
				return opts.Stop()
			}
			return nil
		case <-heldChanged:
		case f = <-fetched[0]:
			step, which = stepFetch, 0
		case f = <-fetched[1]:
			step, which = stepFetch, 1
		case f = <-fetched[2]:
			step, which = stepFetch, 2
		case wrote = <-writers[0]:
			step, which = stepWritten, 0
		case wrote = <-writers[1]:
			step, which = stepWritten, 1
		case mail, open = <-opts.Mail:
			if !open {
				return nil
			}
			step = stepMail
		case <-ticked:
			step = stepTick
		case <-checkpointWake:
		}
		began := opts.Now()
		var err error
		switch step {
		case stepFetch:
			err = opts.Sources[which].Take(f)
		case stepWritten:
			err = opts.Writers[which].Finished(wrote)
		case stepMail:
			err = mail()
		case stepTick:
			err = opts.Tick(checkpoints.nextDue())
		}
		if err != nil {
			return err
		}
		if checkpoints != nil && checkpoints.due(opts.Now()) {
			if err := opts.Checkpoint(); err != nil {
				return err
			}
		}
		if opts.Worked != nil {
			opts.Worked(opts.Now().Sub(began))
		}
		for _, w := range opts.Writers {
			w.Start()
		}
	}
}

// checkpointClock says when a periodic checkpoint is due. The loop asks it
// after whatever it did, not only when its timer wins the loop's select:
// select picks at random among ready cases, so under steady input a
// checkpoint could fall several intervals behind (Kafka Streams likewise
// commits when the interval has passed after each round of processing).
// The timer only wakes an idle loop.
type checkpointClock struct {
	interval time.Duration
	next     time.Time
	timer    *time.Timer
}

// newCheckpointClock starts the clock at now: the first checkpoint is due
// an interval later.
func newCheckpointClock(interval time.Duration, now time.Time) *checkpointClock {
	return &checkpointClock{interval: interval, next: now.Add(interval), timer: time.NewTimer(interval)}
}

// due reports whether a checkpoint is due at now; if so, the next one is
// due an interval later.
func (c *checkpointClock) due(now time.Time) bool {
	if now.Before(c.next) {
		return false
	}
	c.next = now.Add(c.interval)
	c.timer.Reset(c.interval)
	return true
}

// stop stops the timer.
func (c *checkpointClock) stop() { c.timer.Stop() }

// nextDue is when the next checkpoint is due; the zero time when there
// are none.
func (c *checkpointClock) nextDue() time.Time {
	if c == nil {
		return time.Time{}
	}
	return c.next
}
