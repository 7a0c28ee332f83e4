// Package replay runs the engine over recorded inputs, files or a range
// of a Kafka topic, and writes the outputs to files: the same engine and,
// for a topic, the same merge of partitions as the live job, so that its
// outputs are the live job's record for record. It owns its goroutines
// (a reader, decode workers, a goroutine per shard) and the state folder
// of the run; the engine it drives does none of that.
package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/riskstream/riskstream/driver"
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/internal/parallel"
	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/memory"
	"github.com/riskstream/riskstream/observe"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/ruleslog"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/state"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// Options configure an offline run over recorded files.
type Options struct {
	// Config is the validated rules file. Required.
	Config *rules.Config
	// Inputs are .jsonl or .jsonl.gz files, or "-" for Stdin, read in order
	// as one stream. Either Inputs or Topic is required.
	Inputs []string
	// Topic, if set, is a Kafka topic read instead of files: its
	// partitions from From to To, through the merge the live job uses, so
	// that the replay takes the records in the live job's order. Each
	// record's Kafka timestamp is its reference time, as live.
	Topic string
	// Brokers are the Kafka bootstrap addresses of Topic.
	Brokers []string
	// Security is the TLS and SASL of the connections to Brokers.
	Security kafkaconn.Options
	// From and To bound what is read of Topic: from the start of each
	// partition to where it ended when the replay began, by default.
	From, To kafkaio.Position
	// RulesTopic, if set, is the rules topic of the distributed job that
	// read Topic (GROUP-rules): the replay takes its rules from there, the
	// first version in place of Config, and reloads each later one before
	// the record where the job's router began to route by it
	// (ruleslog), as the job did.
	RulesTopic string
	// OutDir receives decisions.jsonl, heatmaps.jsonl, late.jsonl and
	// dlq.jsonl; it is created if missing. The default value is "out".
	OutDir string
	// StateDir holds the Pebble state. The default value is a temporary
	// directory removed at the end.
	StateDir string
	// MemoryBytes is the memory budget: see memory.NewPlan. The default value
	// is DefaultMemory.
	MemoryBytes int64
	// CacheSlots overrides the number of decoded states the operators
	// keep, shared among the shards; see windows.Options.
	CacheSlots int
	// Shards is how many shards the window state is split into by key, each
	// processed on a goroutine of its own; outputs do not depend on it. The
	// default value is GOMAXPROCS.
	Shards int
	// Stdin is read for the input "-". The default value is os.Stdin.
	Stdin io.Reader
	// Progress receives a progress line about twice a second; nil is quiet.
	Progress io.Writer
	// Logger receives operational messages. The default value is
	// slog.Default().
	Logger *slog.Logger
	// Now is the wall clock, for progress and throughput only: replay
	// results never depend on it. The default value is time.Now.
	Now func() time.Time
}

// EnsureDefaults fills in zero fields with their default values.
func (o *Options) EnsureDefaults() {
	if o.OutDir == "" {
		o.OutDir = "out"
	}
	if o.Stdin == nil {
		o.Stdin = os.Stdin
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Shards <= 0 {
		o.Shards = runtime.GOMAXPROCS(0)
	}
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = memory.Default
	}
}

// Validate reports, all at once, the options that cannot work, input
// files that are missing or folders among them; Replay calls it after
// EnsureDefaults.
func (o *Options) Validate() error {
	var errs []error
	if (o.Config == nil) == (o.RulesTopic == "") {
		errs = append(errs, errors.New("replay: needs rules (Options.Config), or a distributed job's rules topic (Options.RulesTopic), not both"))
	}
	if o.RulesTopic != "" && o.Topic == "" {
		errs = append(errs, errors.New("replay: a rules topic is for a replay of a topic"))
	}
	if (len(o.Inputs) == 0) == (o.Topic == "") {
		errs = append(errs, errors.New("replay: needs either input files or a topic"))
	}
	if o.Topic != "" && len(o.Brokers) == 0 {
		errs = append(errs, errors.New("replay: a replay of a topic needs its brokers"))
	}
	for _, in := range o.Inputs {
		if in == "-" {
			continue
		}
		if fi, err := os.Stat(in); err != nil {
			errs = append(errs, fmt.Errorf("input: %w", err))
		} else if fi.IsDir() {
			errs = append(errs, fmt.Errorf("input %s is a folder: name the files in it", in))
		}
	}
	return errors.Join(errs...)
}

// Summary is what a replay did.
type Summary struct {
	engine.Stats
	// Sources is the clock skew seen per source, and how long each was
	// degraded.
	Sources []watermark.SourceSkew
	// Spilled and SpilledTimers count the states and the timers written
	// to Pebble because they did not fit the memory budget.
	Spilled, SpilledTimers int64
	Elapsed                time.Duration
	// Rules are the rules at the end: Config's, or the last version of the
	// rules topic.
	Rules *rules.Config
}

// EventsPerSecond is the throughput of the run.
func (s *Summary) EventsPerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Records) / s.Elapsed.Seconds()
}

// Run runs the engine over the inputs and writes the outputs to files.
// Invalid and late records are outputs, not failures: an error means the
// inputs, the output folder or the state could not be used.
func Run(ctx context.Context, opts Options) (_ *Summary, err error) {
	defer func() { err = state.Explain(err, false) }()
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	start := opts.Now()
	// Every log record of the run clears the progress line first.
	prog := observe.NewProgress(opts.Progress, opts.Now)
	opts.Logger = prog.Logger(opts.Logger)

	stateDir := opts.StateDir
	if stateDir == "" {
		dir, err := os.MkdirTemp("", "riskstream-replay-")
		if err != nil {
			return nil, fmt.Errorf("state: %w", err)
		}
		defer os.RemoveAll(dir)
		stateDir = dir
	}
	mem, err := memory.NewPlan(opts.MemoryBytes, opts.Shards)
	if err != nil {
		return nil, err
	}
	// One Pebble store per shard: a store's batch has one writer.
	dbs := make([]*state.DB, opts.Shards)
	backends := make([]slotstore.Backend, opts.Shards)
	for i := range dbs {
		db, err := state.Open(state.Options{
			Dir: filepath.Join(stateDir, fmt.Sprintf("shard-%d", i)), DisableWAL: true, Logger: opts.Logger,
			CacheBytes: mem.PebbleCache, BatchBytes: mem.BatchBytes,
		})
		if err != nil {
			return nil, err
		}
		defer db.Close()
		dbs[i], backends[i] = db, db
	}

	var versions *ruleslog.Log
	if opts.RulesTopic != "" {
		sec, err := kafkaconn.New(opts.Security)
		if err != nil {
			return nil, err
		}
		if versions, err = ruleslog.Read(ctx, opts.Brokers, sec, opts.RulesTopic); err != nil {
			return nil, err
		}
		opts.Config = versions.Versions[0]
	}
	files, err := sink.OpenFiles(opts.OutDir)
	if err != nil {
		return nil, err
	}
	defer files.Close()

	e, err := engine.NewSharded(engine.Options{
		Config: opts.Config, Output: files, MemoryBytes: mem.State, CacheSlots: opts.CacheSlots,
		Parallel: parallel.Do,
		OnSkewTransition: func(tr watermark.Transition) {
			observe.LogTransition(opts.Logger, tr)
			files.Transition(tr)
		},
	}, backends)
	if err != nil {
		return nil, err
	}

	if opts.Topic != "" {
		err = replayTopic(ctx, opts, e, prog, versions)
	} else {
		err = replayFiles(ctx, opts, e, mem, prog)
	}
	if err != nil {
		return nil, err
	}
	if err := e.Finish(); err != nil {
		return nil, err
	}
	prog.Done(e)
	for _, db := range dbs {
		if err := db.Commit(false); err != nil {
			return nil, err
		}
	}
	// Only a run that succeeded replaces the outputs of the one before.
	if err := files.Commit(); err != nil {
		return nil, err
	}
	sum := &Summary{Stats: e.Stats(), Sources: e.Sources(), Elapsed: opts.Now().Sub(start), Rules: e.Rules()}
	sum.Spilled, sum.SpilledTimers = e.Spilled()
	return sum, nil
}

// replayFiles runs the engine over the input files: a pipeline of
// goroutines reads, decodes and processes them, and the loop (driver.Run)
// merges each batch's outputs, in the files' order, as a step.
func replayFiles(ctx context.Context, opts Options, e *engine.Sharded, mem memory.Plan, prog *observe.Progress) error {
	// Stages: read (and gunzip); decode and key, a goroutine per core;
	// time, in order; one goroutine per shard; merge, on the loop. The
	// outputs' order is the files' order of records, whatever the stages'
	// timing.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Queues between stages are 2 deep: enough to ride out one stage's
	// hiccup, and every batch in flight is memory touched (a chunk of input
	// and its decoded records): deeper queues raised peak RSS at the same
	// speed. The free lists hold every chunk and batch that can be in
	// flight, so none is dropped and allocated again: fresh memory costs a
	// page fault per 4 KiB, which was a large part of replay's CPU
	// (BENCHMARKS.md).
	workers := runtime.GOMAXPROCS(0)
	// Where a chunk (and its batch) can be: the reader's current and next,
	// chunks 2, the dispatcher 1, work and the workers 2*workers, ordered
	// workers+1, timing 1, the slowest shard's queue and hands 3, merge 2,
	// merging 1.
	maxInFlight := 3*workers + 14
	chunks, freeChunks := make(chan *chunk, 2), make(chan *chunk, maxInFlight)
	steps, freeInFlight := make(chan driver.Mail, 2), make(chan *inFlight, maxInFlight)
	shardIn := make([]chan *inFlight, opts.Shards)
	var shards sync.WaitGroup
	for k, s := range e.Shards() {
		shardIn[k] = make(chan *inFlight, 2)
		shards.Go(func() { processShard(s, k, shardIn[k]) })
	}
	merge := func(b *inFlight) error {
		if b.c.err != nil {
			return fmt.Errorf("input %s: %w", b.c.file, b.c.err)
		}
		b.shards.Wait()
		if err := errors.Join(b.errs...); err != nil {
			return err
		}
		e.Merge(b.b, nil)
		recycle(freeChunks, b.c)
		select {
		case freeInFlight <- b:
		default:
		}
		prog.Update(e)
		return nil
	}
	go readInputs(ctx, opts.Inputs, opts.Stdin, mem.Chunk, chunks, freeChunks)
	go decodeChunks(ctx, e, workers, chunks, shardIn, steps, merge, freeInFlight)
	defer func() {
		// On an early return, stop the decoder and let the shards finish
		// before their stores close.
		cancel()
		for range steps {
		}
		shards.Wait()
	}()
	if err := driver.Run(ctx, driver.Options{Mail: steps}); err != nil {
		return err
	}
	// The decoder stops early, closing steps, only when ctx is done; the
	// shards may then still be at work.
	return ctx.Err()
}
