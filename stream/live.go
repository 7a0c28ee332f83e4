package stream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/checkpoint"
	"github.com/riskstream/riskstream/driver"
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/internal/parallel"
	"github.com/riskstream/riskstream/job"
	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/memory"
	"github.com/riskstream/riskstream/observe"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/state"
	"github.com/riskstream/riskstream/stream/distributed"
	"github.com/riskstream/riskstream/stream/internal/jobbase"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows/slotstore"
	"github.com/segmentio/kafka-go"
)

// Run is the live job: it consumes every partition of the input topic from
// the checkpointed offsets, merges them in timestamp order, runs the
// engine, writes the outputs to Kafka and checkpoints state and offsets
// together. It returns nil when ctx is cancelled after a final flush and
// checkpoint (SIGINT/SIGTERM). A failure of the state store (a full or
// stalled disk, a corrupt file) ends it at once with one error saying what
// to do. docs/design.md maps its goroutines and the order of its writes.
func Run(ctx context.Context, opts RunOptions) (err error) {
	defer func() { err = state.Explain(err, true) }()
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return err
	}
	if opts.Distributed {
		return distributed.Run(ctx, opts)
	}
	j := &liveJob{Base: jobbase.Base{Opts: opts, Log: opts.Logger}, started: opts.Now()}
	defer j.close()
	for _, stage := range []func(context.Context) error{
		j.openState, j.startBroker, j.startOutputs, j.restore, j.verifyState, j.checkBrokers, j.skipWritten, j.joinGroup, j.startFetching,
	} {
		if err := stage(ctx); err != nil {
			return err
		}
	}
	return j.run(ctx)
}

// liveJob is the live job's state between its stages: Run calls each
// stage once, in order, then loop until the job ends. Everything here is
// owned by the goroutine that runs Run; the fetchers, the output writer,
// the group member and Pebble's commits run on goroutines of their own
// and reach it only through channels (docs/design.md).
type liveJob struct {
	jobbase.Base
	db      *state.DB
	brokers []string
	e       *engine.Sharded
	member  *kafkaio.GroupMember
	// loop takes the input's records in order through e, whose shards
	// process each batch: shard 0 on the loop's goroutine, each other on
	// its own (shardIn, shardDone).
	loop      *job.Loop
	shardIn   []chan *engine.Batch
	shardDone []chan error

	// fetched carries what the fetchers fetched to the loop.
	fetched     chan kafkaio.Fetch
	readCtx     context.Context
	stopReading context.CancelFunc
	reading     sync.WaitGroup
	journal     *job.Journal
	// times are those of the record whose outputs the engine is making.
	times sink.DecisionTimes
	// journalMissed is how many runs followed the merge missed, as last
	// logged.
	journalMissed int
	// away is how long the loop could not take in fetches since started:
	// it worked (processing, ticking, checkpointing), or the group was not
	// held (between two of its generations, when it takes in nothing). The
	// merge's clock leaves it out, so that neither counts against a
	// partition's wait: the loop's own work delays the fetchers' next
	// records too on a loaded machine, and a fetch that was in flight when
	// the group went is taken in only once it is held again. unheldSince
	// is when the loop last saw the group not held, zero while held.
	started     time.Time
	away        time.Duration
	unheldSince time.Time

	// watch follows the rules file, nil when it is not reloaded; hup
	// asks the next tick to reload it; retiredDeleted counts the stored
	// states deleted so far of the rules a reload or a restart removed or
	// changed.
	watch          *jobbase.RulesWatch
	hup            bool
	retiredDeleted int

	// restored is whether there was a checkpoint to restore, and
	// checkpointEnds where the outputs ended at it (none: unknown, or no
	// checkpoint).
	restored       bool
	checkpointEnds []kafkaio.OutputEnd
	commitFailed   chan error
}

// close runs the closers, the last registered first, within jobbase.CloseGrace
// of the first: one that does not end by then (a connection or a write to
// brokers that do not answer, which kafka-go waits for for minutes) is
// left behind after a second, so that a stop ends within jobbase.StopBound and
// the state is still closed.
func (j *liveJob) close() {
	deadline := j.Opts.Now().Add(jobbase.CloseGrace)
	for i := len(j.Closers) - 1; i >= 0; i-- {
		done := make(chan struct{})
		go func() {
			defer close(done)
			j.Closers[i]()
		}()
		wait := time.NewTimer(max(deadline.Sub(j.Opts.Now()), time.Second))
		select {
		case <-done:
		case <-wait.C:
			j.Log.Warn("left behind a part of the job that did not end within the stop's grace (brokers that do not answer)",
				"grace", jobbase.CloseGrace)
		}
		wait.Stop()
	}
}

// mergeNow is the merge's clock in ms: the time since the job started
// less the time the loop was away from the fetchers (see away).
func (j *liveJob) mergeNow() int64 { return (j.Opts.Now().Sub(j.started) - j.away).Milliseconds() }

// worked counts a step of the loop that took took as away.
func (j *liveJob) worked(took time.Duration) { j.away += took }

// noteHeld notes whether the group is held now, for the merge's clock:
// the time from when it is first seen not held until it is seen held
// again counts as away.
func (j *liveJob) noteHeld(held bool) {
	switch {
	case !held && j.unheldSince.IsZero():
		j.unheldSince = j.Opts.Now()
	case held && !j.unheldSince.IsZero():
		j.away += j.Opts.Now().Sub(j.unheldSince)
		j.unheldSince = time.Time{}
	}
}

// openState opens the state store. Pebble locks its directory: a second
// job on the same state refuses to start instead of corrupting it.
func (j *liveJob) openState(context.Context) error {
	var err error
	if j.Sec, err = kafkaconn.New(j.Opts.Security); err != nil {
		return err
	}
	if j.Mem, err = memory.NewPlan(j.Opts.MemoryBytes, j.Opts.Shards); err != nil {
		return err
	}
	so := j.Opts.Testing.State
	so.Dir, so.AtomicCheckpoints, so.Logger = filepath.Join(j.Opts.StateDir, "state"), true, j.Log
	if so.CacheBytes == 0 {
		so.CacheBytes = j.Mem.PebbleCache
	}
	db, err := state.Open(so)
	if errors.Is(err, state.ErrFailed) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w (is another riskstream running on this --state-dir?)", err)
	}
	j.db = db
	j.OnClose(func() { db.Close() })
	return nil
}

// startBroker starts the embedded development broker when no brokers are
// given.
func (j *liveJob) startBroker(context.Context) error {
	j.brokers = j.Opts.Brokers
	if len(j.brokers) > 0 {
		return nil
	}
	o := j.Opts
	topics := map[string]int32{o.Topic: 4}
	for _, t := range o.Outputs.Names() {
		topics[t] = 1
	}
	b, err := broker.Start(broker.Options{
		Addr:    o.EmbeddedAddr,
		DataDir: filepath.Join(o.StateDir, "broker"),
		Topics:  topics,
		Logger:  j.Log,
	})
	if err != nil {
		return fmt.Errorf("embedded broker: %w", err)
	}
	j.OnClose(b.Close)
	j.brokers = []string{b.Addr()}
	j.Log.Warn("no --brokers: started an embedded Kafka-compatible broker for development, not for production",
		"addr", b.Addr(), "data", filepath.Join(o.StateDir, "broker"))
	return nil
}

// startOutputs serves the metrics and builds the sink and the engine.
func (j *liveJob) startOutputs(context.Context) error {
	o := j.Opts
	j.M = observe.NewMetrics(o.Registry, o.Config, o.MetricLabelLimit)
	observe.RegisterStateMetrics(o.Registry, j.db)
	if o.Config.File != "" && (o.WatchRules || o.ReloadRules != nil) {
		j.watch = jobbase.NewRulesWatch(o.Config)
	}
	var err error
	if err = j.ServeConsole(j.health, nil); err != nil {
		return err
	}
	j.StartSink(j.brokers)
	j.Ends = kafkaio.NewEndTracker(&kafka.Client{Addr: kafka.TCP(j.brokers...), Transport: j.Sec.Transport(), Timeout: 10 * time.Second},
		o.Outputs.Names(), j.Out, j.Log)
	// The shards write their state through parts of the one store, so
	// that a checkpoint of all of them is one atomic batch.
	parts, err := j.db.Parts(o.Shards)
	if err != nil {
		return err
	}
	backends := make([]slotstore.Backend, len(parts))
	for i, p := range parts {
		backends[i] = p
	}
	j.e, err = engine.NewSharded(engine.Options{
		Config: o.Config, Output: jobbase.Output{Kafka: j.Out, M: j.M, Live: j.Console, Keys: j.DecisionKeys, Times: &j.times}, MemoryBytes: j.Mem.State, CacheSlots: o.CacheSlots,
		Checkpoints: true, Parallel: parallel.Do,
		OnSkewTransition: func(tr watermark.Transition) {
			observe.LogTransition(j.Log, tr)
			j.M.SourceTransition(tr.Source)
		},
	}, backends)
	if err != nil {
		return err
	}
	for _, s := range j.e.Shards()[1:] {
		in, done := make(chan *engine.Batch), make(chan error)
		j.shardIn, j.shardDone = append(j.shardIn, in), append(j.shardDone, done)
		go func() {
			for b := range in {
				done <- s.Process(b)
			}
		}()
		j.OnClose(func() { close(in) })
	}
	j.loop, err = job.New(job.Options{
		Engine: j.e, Topic: o.Topic,
		PartitionWait: o.PartitionWait.Milliseconds(), BehindWait: jobbase.BehindWait.Milliseconds(),
		OnWaitTimeout: j.WaitTimedOut,
		Process:       j.processShards,
	})
	return err
}

// processShards runs a batch on every shard at once: the first on the
// loop's goroutine, the others on theirs.
func (j *liveJob) processShards(b *engine.Batch) error {
	for _, in := range j.shardIn {
		in <- b
	}
	errs := []error{j.e.Shards()[0].Process(b)}
	for _, done := range j.shardDone {
		errs = append(errs, <-done)
	}
	return errors.Join(errs...)
}

// restore loads the last checkpoint, if any: the engine's state, the input
// offsets, and where the outputs ended.
func (j *liveJob) restore(context.Context) error {
	m, ok, err := checkpoint.Read(j.db, checkpoint.SingleInputsBeforeManifest(j.Opts.Topic))
	if err != nil || !ok {
		return err
	}
	j.restored = true
	if err := j.loop.Restore(&m); err != nil {
		return fmt.Errorf("state in %s: %w (give each input its own --state-dir)", j.Opts.StateDir, err)
	}
	if d := j.e.Restored(); d.Changed() {
		if err := refuseDropped(d, j.Opts); err != nil {
			return err
		}
		jobbase.LogDiff(j.Log, "rules changed since the checkpoint", d, "file", j.Opts.Config.File)
	}
	j.Log.Info("resuming from checkpoint", "offsets", j.loop.Offsets(), "watermark", j.e.Watermark())
	j.checkpointEnds = kafkaio.EndsOf(m.Outputs)
	return nil
}

// refuseDropped refuses a start whose rules remove or change rules or
// heatmaps of the checkpoint d was restored from, unless
// o.AllowDroppedState: their state would be deleted, and a restart
// pointed at the wrong rules file is more often a mistake than a change
// (Flink refuses such a savepoint without --allowNonRestoredState). A
// reload is a deliberate act, and drops them.
func refuseDropped(d rules.Diff, o RunOptions) error {
	dropped := jobbase.DroppedState(d)
	if len(dropped) == 0 || o.AllowDroppedState {
		return nil
	}
	return fmt.Errorf("the state in %s was written with rules that %s removes or changes: %s; "+
		"their state would be deleted. Start with the rules file the state was written with to keep it, "+
		"or add --allow-dropped-state to delete it", o.StateDir, o.Config.File, strings.Join(dropped, ", "))
}

// health is what /healthz reports: the state store's health, then
// brokers that leave the input's fetches or the outputs' writes
// unanswered.
func (j *liveJob) health() error {
	if err := j.db.Health(); err != nil {
		return err
	}
	return j.M.Ready.Stalled(j.Opts.Now())
}

// verifyState checks the checksums of every table of the state on a
// goroutine of its own while the job runs (state.DB.Verify): Pebble
// checks a block only when it reads it, and a job could run healthy for
// hours on a corrupt block it had not read. The job is not ready until it
// is done; a corrupt table stops the job, as a read of it would.
func (j *liveJob) verifyState(context.Context) error {
	checked := prometheus.NewCounter(prometheus.CounterOpts{Name: "riskstream_state_tables_verified_total",
		Help: "Tables of the state whose checksums were verified since the job started."})
	verified := prometheus.NewGauge(prometheus.GaugeOpts{Name: "riskstream_state_verified",
		Help: "1 once the checksums of every table the state had at start are verified, else 0."})
	j.Opts.Registry.MustRegister(checked, verified)
	start := j.Opts.Now()
	ctx, cancel := context.WithCancel(context.Background())
	var verifying sync.WaitGroup
	j.M.Ready.Verifying()
	verifying.Go(func() {
		err := j.db.Verify(ctx, func(n, tables int) {
			checked.Inc()
			j.M.Ready.Verified(n, tables)
		})
		switch {
		case err == nil:
			j.M.Ready.Verified(0, 0)
			verified.Set(1)
			j.Log.Info("verified the checksums of the state's tables", "took", j.Opts.Now().Sub(start).Round(time.Millisecond))
		case ctx.Err() == nil && !errors.Is(err, state.ErrFailed):
			// Not a corrupt table (which fails the store, and the job with
			// it): the tables stay unverified, and the job not ready.
			j.Log.Warn("could not verify the state's tables", "err", err)
		}
	})
	j.OnClose(verifying.Wait)
	j.OnClose(cancel)
	return nil
}

// skipWritten reads what the outputs hold past the restored checkpoint's
// ends, which the sink does not write again, once the output topics are
// known to exist.
func (j *liveJob) skipWritten(ctx context.Context) error {
	if err := kafkaio.CheckOutputTopics(ctx, j.Ends.Client(), j.Opts.Outputs); err != nil {
		return err
	}
	n, err := j.Ends.Restore(ctx, j.brokers, j.Sec, [][]kafkaio.OutputEnd{j.checkpointEnds})
	if n > 0 {
		j.Log.Info("outputs written after the checkpoint are not written again", "messages", n)
	}
	return err
}

// checkBrokers checks the connection to the brokers before anything else
// uses it (skipWritten, then joinGroup): a wrong password or a TLS
// mismatch fails here, saying so, rather than as an EOF from whichever
// client connects first. The state, local, is read first.
func (j *liveJob) checkBrokers(ctx context.Context) error {
	if err := j.Sec.Check(ctx, j.brokers); err != nil {
		return fmt.Errorf("stream: brokers %v (%v): %w", j.brokers, j.Sec, err)
	}
	return nil
}

// joinGroup joins the consumer group, which it keeps on a goroutine of its
// own.
func (j *liveJob) joinGroup(ctx context.Context) error {
	instance, err := kafkaio.InstanceID(j.db)
	if err != nil {
		return err
	}
	j.member, err = kafkaio.JoinGroup(ctx, j.brokers, j.Sec, j.Opts.Group, j.Opts.Topic, instance, j.Log, j.Opts.Now)
	if err != nil {
		return err
	}
	j.OnClose(j.member.Close)
	keepCtx, stopKeeping := context.WithCancel(context.Background())
	var keeping sync.WaitGroup
	keeping.Go(func() { j.member.Keep(keepCtx) })
	j.OnClose(keeping.Wait)
	j.OnClose(stopKeeping)
	return nil
}

// startFetching starts a fetcher for every partition of the input topic
// and the output writer.
func (j *liveJob) startFetching(ctx context.Context) error {
	partitions, err := kafkaio.ReadPartitions(ctx, j.Sec.Dialer(), j.brokers[0], j.Opts.Topic)
	if err != nil {
		return err
	}
	j.journal = job.NewJournal(j.db)
	if j.restored {
		n, err := j.journal.Load(j.loop)
		if err != nil {
			return err
		}
		if n > 0 {
			j.Log.Info("taking the records past the checkpoint in the order the run before took them, which waits that ran out had decided", "runs", n)
		}
	}
	j.fetched = make(chan kafkaio.Fetch, 16)
	j.readCtx, j.stopReading = context.WithCancel(ctx)
	j.OnClose(j.reading.Wait)
	j.OnClose(j.stopReading)
	j.addFetchers(partitions)
	j.M.Ready.Consuming(observe.FetchSources(j.Fetchers)...)
	if j.Opts.Ready != nil {
		j.Opts.Ready(j.brokers)
	}
	args := []any{"topic", j.Opts.Topic, "partitions", len(partitions), "brokers", j.brokers, "partition_wait", j.Opts.PartitionWait}
	if j.M.URL != "" {
		args = append(args, "console", j.M.URL+"/", "metrics", j.M.URL+"/metrics")
	}
	j.Log.Info("consuming", args...)

	// Outputs are written by their own goroutine, in order, while the loop
	// goes on: a decision leaves as soon as it exists, and what is made
	// while a write is in flight goes out together in the next one.
	j.Writer = sink.NewWriter(j.Out, sink.WriterOptions{Latency: j.M.Latency, JobLatency: j.M.JobLatency,
		Stages: j.M.DecisionStages, Timed: j.Opts.Testing.DecisionTimed, Writing: &j.M.Ready.Writing, Log: j.Log, Now: j.Opts.Now})
	j.OnClose(j.Writer.Close)
	// A stop waits for the outputs a while, then gives up on them: the job
	// ends with an error and no checkpoint covers them, so the next run
	// makes them again.
	stopWaiting := context.AfterFunc(ctx, func() { time.AfterFunc(jobbase.StopOutputGrace, j.Writer.StopRetrying) })
	j.OnClose(func() { stopWaiting() })
	// A checkpoint is committed and synced on another goroutine (the loop
	// goes on meanwhile), and only then are its offsets given to the
	// group. Wait for the commit in flight before leaving, while the group
	// member is still open.
	j.commitFailed = make(chan error, 1)
	j.OnClose(func() { j.db.Wait() })
	return nil
}

// addFetchers starts fetching each partition not read yet, from its
// checkpointed offset or the beginning. It runs at start and then
// periodically, so partitions added to the topic are picked up.
func (j *liveJob) addFetchers(partitions []int) {
	now := j.NowMilli()
	for _, p := range partitions {
		start, added := j.loop.AddPartition(int32(p), now)
		if !added {
			continue
		}
		f := kafkaio.NewFetcher(kafkaio.FetcherOptions{Brokers: j.brokers, Dialer: j.Sec.Dialer(), Topic: j.Opts.Topic,
			Partition: p, From: start, Out: j.fetched, Log: j.Log, Now: j.Opts.Now})
		j.Fetchers = append(j.Fetchers, f)
		j.M.Ready.Track(f)
		j.reading.Go(func() { f.Run(j.readCtx) })
	}
}

// run processes what the fetchers bring until the job ends, ticking
// processing time and checkpointing on the way: the loop (driver.Run)
// configured for one instance that holds the whole input.
func (j *liveJob) run(ctx context.Context) error {
	if !j.restored {
		// A first run checkpoints before it takes a record: killed before
		// its first periodic checkpoint, it restarts knowing where the
		// outputs ended, and does not write again what it wrote.
		if err := j.checkpoint(true); err != nil {
			return err
		}
	}
	mail := make(chan driver.Mail, 4)
	hear, stopHearing := context.WithCancel(ctx)
	defer stopHearing()
	go j.forwardFailure(hear, mail)
	// A reload is done at the next tick, which comes only while the group
	// is held.
	go jobbase.ForwardReloads(hear, j.Opts.ReloadRules, mail, func() error { j.hup = true; return nil })
	go j.discover(hear, mail)
	return driver.Run(ctx, driver.Options{
		// While the group is not held (between two of its generations),
		// nothing is processed: another instance may hold it by now.
		Sources: []driver.Source{{Fetched: j.fetched, Held: true, Take: func(f kafkaio.Fetch) error {
			j.push(f)
			return j.process()
		}}},
		Held: func() (bool, <-chan struct{}) {
			held, changed := j.member.Held()
			j.noteHeld(held)
			return held, changed
		},
		Writers: []*sink.Writer{j.Writer},
		Mail:    mail,
		// Processing time moves idle partitions' watermarks and fires
		// windows even when no record arrives, and ends the merge's waits.
		TickInterval:       jobbase.TickInterval,
		Tick:               j.tick,
		CheckpointInterval: j.Opts.CheckpointInterval,
		Checkpoint:         func() error { return j.checkpoint(false) },
		Stop:               j.stop,
		Worked:             j.worked,
		Now:                j.Opts.Now,
	})
}

// forwardFailure sends the loop the first failure other goroutines
// report, which ends it: the group lost, a commit or the store failed.
func (j *liveJob) forwardFailure(ctx context.Context, mail chan<- driver.Mail) {
	var failed driver.Mail
	select {
	case <-ctx.Done():
		return
	case err := <-j.member.Lost:
		failed = func() error { return err }
	case err := <-j.commitFailed:
		failed = func() error { return err }
	case <-j.db.Failed():
		// A write Pebble could not complete, a stalled disk, a corrupt
		// file: the store takes no more writes.
		failed = j.db.Err
	}
	select {
	case mail <- failed:
	case <-ctx.Done():
	}
}

// push hands a fetch to the loop.
func (j *liveJob) push(f kafkaio.Fetch) { j.loop.Push(f, j.mergeNow()) }

// process runs the engine over every record the merge gives now, handing
// the outputs to the writer as they come: the records are decoded and
// timed here, their window state updated by every shard at once, and
// their outputs merged back into the order of one engine.
func (j *liveJob) process() error {
	// Everything fetched so far goes into the merge first: time the loop
	// spent processing must not make a wait run out while the partition's
	// next records sat in the channel.
	for more := true; more; {
		select {
		case f := <-j.fetched:
			j.push(f)
		default:
			more = false
		}
	}
	popped := j.Opts.Now()
	n, runs := j.loop.Take(j.mergeNow())
	if n == 0 {
		return nil
	}
	// Durable before any output of these records exists.
	if err := j.journal.Write(runs); err != nil {
		return err
	}
	poppedNS, made := popped.UnixNano(), int64(0)
	return j.loop.Run(popped.UnixMilli(), func(ref, arrived int64) {
		if made == 0 { // the shards are done: the outputs are merged
			made = j.Opts.Now().UnixNano()
		}
		// A decision's latency is measured from its record's timestamp;
		// what the records before made goes out at once.
		j.times = sink.DecisionTimes{Ref: ref, Arrived: arrived, Popped: poppedNS, Made: made}
		j.Writer.Start()
	})
}

// tick moves processing time: merge waits that ran out, idle partitions'
// watermarks, and some of the next checkpoint's writes, which is due at
// nextCheckpoint.
func (j *liveJob) tick(nextCheckpoint time.Time) error {
	if err := j.process(); err != nil {
		return err
	}
	switch {
	case j.watch == nil:
	case j.hup:
		j.hup = false
		if err := j.reloadRules("SIGHUP", true); err != nil {
			return err
		}
	case j.Opts.WatchRules && j.watch.Changed(j.Opts.Now()):
		if err := j.reloadRules("file changed", false); err != nil {
			return err
		}
	}
	if err := j.loop.Tick(j.NowMilli()); err != nil {
		return err
	}
	deleted, left, err := j.e.DeleteRetired(jobbase.RetiredPerTick)
	if err != nil {
		return err
	}
	j.retiredDeleted += deleted
	if left == 0 && j.retiredDeleted > 0 {
		j.Log.Info("deleted the stored state of the rules a reload or a restart removed or changed", "states", j.retiredDeleted)
		j.retiredDeleted = 0
	}
	// Spread the next checkpoint's writes over the interval: it pauses
	// the loop for what is left.
	ticksLeft := max(1, int(nextCheckpoint.Sub(j.Opts.Now())/jobbase.TickInterval))
	return j.e.WriteBack(max(jobbase.WriteBackPerTick, (j.e.Changed()+ticksLeft-1)/ticksLeft))
}

// discover lists the input topic's partitions every
// jobbase.Options.PartitionDiscovery, off the loop (a broker that does not
// answer must not hold the records of the others, or a stop), until ctx
// ends, and has the loop start fetching those added.
func (j *liveJob) discover(ctx context.Context, mail chan<- driver.Mail) {
	every := time.NewTicker(j.Opts.PartitionDiscovery)
	defer every.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-every.C:
		}
		ps, err := kafkaio.ReadPartitions(ctx, j.Sec.Dialer(), j.brokers[0], j.Opts.Topic)
		if err != nil {
			if ctx.Err() == nil {
				j.Log.Warn("listing partitions", "topic", j.Opts.Topic, "err", err)
			}
			continue
		}
		found := func() error {
			n := len(j.Fetchers)
			if j.addFetchers(ps); len(j.Fetchers) > n {
				j.Log.Info("reading new partitions", "topic", j.Opts.Topic, "partitions", len(j.Fetchers))
			}
			return nil
		}
		select {
		case mail <- found:
		case <-ctx.Done():
			return
		}
	}
}

// stop ends the job cleanly: fetching stops, what was fetched and can be
// taken in order is processed, then flushed and checkpointed, so that a
// clean stop loses and repeats nothing. What the merge still holds back is
// fetched again by the next run.
func (j *liveJob) stop() error {
	j.M.Ready.Stop()
	j.stopReading()
	// process takes in what the fetchers had sent.
	if held, _ := j.member.Held(); held {
		if err := j.process(); err != nil {
			return err
		}
	}
	if err := j.checkpoint(true); err != nil {
		return err
	}
	j.Log.Info("stopped after a final checkpoint", "offsets", j.loop.Offsets())
	return nil
}

// checkpoint checkpoints the job (jobbase.Base.checkpoint). A durable one (the
// first run's first, the final one) is, and its offsets are the group's,
// when it returns; the others are committed on another goroutine, and
// their offsets given to the group once durable.
func (j *liveJob) checkpoint(durable bool) error {
	return j.Base.Checkpoint(liveCheckpointer{j, durable}, j.Writer)
}

// liveCheckpointer is the single job's part in a checkpoint: its one store,
// which holds its journal of the merge's order too. wait makes the loop
// wait for the commit (a durable checkpoint).
type liveCheckpointer struct {
	*liveJob
	wait bool
}

func (j *liveJob) AppliedRecords() int64 { return j.e.Stats().Records }

func (c liveCheckpointer) Persist(ends []kafkaio.OutputEnd, durable func(commitOffsets func())) error {
	j := c.liveJob
	m, err := j.loop.Checkpoint()
	if err != nil {
		return err
	}
	m.Outputs = kafkaio.EndOffsets(ends)
	if err := checkpoint.Write(j.db, &m); err != nil {
		return err
	}
	if err := j.journal.Checkpoint(j.loop); err != nil {
		return err
	}
	if missed := j.loop.Missed(); missed > j.journalMissed {
		j.Log.Warn("the records past the checkpoint were not all taken in the order the run before took them: records it read are gone or changed; an output made again with another value is not written (riskstream_output_duplicates_changed_total)",
			"runs", missed-j.journalMissed)
		j.journalMissed = missed
	}
	offsets := maps.Clone(j.loop.Offsets())
	commitOffsets := func() {
		if len(offsets) > 0 { // none before the first record
			j.member.CommitOrWarn(offsets, j.Opts.Group, j.Log)
		}
	}
	if c.wait {
		if err := j.db.Commit(true); err != nil {
			return err
		}
		durable(commitOffsets)
		return nil
	}
	j.db.CommitAsync(func(err error) {
		if err != nil {
			// The first failure is enough to stop the job.
			select {
			case j.commitFailed <- err:
			default:
			}
			return
		}
		durable(commitOffsets)
	})
	return nil
}

func (j *liveJob) PublishGauges() {
	j.M.Update(j.e, j.db)
	j.M.Lags(j.Opts.Topic, j.Fetchers, j.e.PartitionWatermark, j.NowMilli())
}
