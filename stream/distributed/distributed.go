package distributed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/changelog"
	"github.com/riskstream/riskstream/checkpoint"
	"github.com/riskstream/riskstream/console"
	"github.com/riskstream/riskstream/driver"
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/parallel"
	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/memory"
	"github.com/riskstream/riskstream/observe"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/ruleslog"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/state"
	"github.com/riskstream/riskstream/stream/internal/jobbase"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows"
	"github.com/segmentio/kafka-go"
)

// markInterval is how often the router tells every repartition partition
// where the watermark is (Flink's watermark interval), when it moved;
// heartbeatMarks is how often it does when it did not.
const (
	markInterval   = 100 * time.Millisecond
	heartbeatMarks = time.Second
)

// hopBatchSize is how many messages of one repartition partition go in
// one request.
const hopBatchSize = 2000

// Distributed group timings: a member that stops heartbeating is taken
// for dead after distSessionTimeout; the others then have
// distRebalanceTimeout to checkpoint and join again.
const (
	distHeartbeat        = 500 * time.Millisecond
	distSessionTimeout   = 6 * time.Second
	distRebalanceTimeout = 30 * time.Second
)

// Run runs an instance of a distributed job, which stream.Run starts for
// options with Distributed: several instances share the job through one consumer group (docs/distributed.md). One
// reads every input partition, in the single job's order, and routes the
// records to a repartition topic by key (engine.Router); each holds the window
// state of the repartition partitions the group gives it (engine.Task),
// checkpointed to a changelog topic so that another instance can take
// them over.
func Run(ctx context.Context, opts jobbase.Options) error {
	j := &instance{Base: jobbase.Base{Opts: opts, Log: opts.Logger}, topics: kafkaio.InternalTopicsOf(opts.Group), localDone: make(chan error, 1),
		tasks: map[int]*ownedTask{}, history: ruleslog.NewLog()}
	defer j.close()
	for _, stage := range []func(context.Context) error{j.connect, j.lockState, j.loadRules, j.startOutputs, j.proposeOwnRules, j.joinGroup} {
		if err := stage(ctx); err != nil {
			return err
		}
	}
	return j.generations(ctx)
}

// instance is one instance of a distributed job: what Run runs.
type instance struct {
	jobbase.Base
	client     *kafka.Client
	topics     kafkaio.InternalTopics
	dm         *distMetrics
	hop        *sink.Kafka
	hopWriter  *sink.Writer
	router     *engine.Router
	cg         *kafka.ConsumerGroup
	balancer   *kafkaio.StickyBalancer
	generation int32
	buf        []byte
	// sent counts the messages for the repartition topic's partitions
	// since the metrics were last published: through the topic, and
	// handed to a task held here.
	sentTopic, sentLocal int64
	// working is apply's scratch: the tasks with fetches to apply;
	// fetches, the fetches taken at once.
	working     []*ownedTask
	fetches     []kafkaio.Fetch
	routerStats engine.RouterStats // last published

	// tasks are the repartition partitions held, kept open from one
	// generation to the next while the group gives them to this
	// instance.
	tasks map[int]*ownedTask
	// routing is the input this instance routes in this generation, nil
	// when another instance does.
	routing *routing

	inputFetched, repFetched chan kafkaio.Fetch
	lastMarks                time.Time

	// rules are the job's rules, of version rulesVersion, as read from the
	// rules topic up to rulesNext (rules.go); proposed, the
	// rules this instance proposed and has not seen taken; watch follows
	// its rules file; rulesFetched brings the rules topic's records.
	rules        *rules.Config
	ownRules     *rules.Config // this instance's file, as it started
	rulesWritten time.Time     // when the job's rules were written
	rulesVersion int64
	rulesNext    int64
	proposed     []byte
	watch        *jobbase.RulesWatch
	// history is what the rules topic holds, as read and written: every
	// version, and where the router switched to each.
	history      *ruleslog.Log
	rulesFetched chan kafkaio.Fetch
	ready        bool // Ready was called
	// follower reads the outputs back for the whole job's console.
	follower *outputFollower
	// standbys keep copies of partitions other instances hold, in this
	// generation.
	standbys *changelog.Standbys
	// healthDBs are the stores of the partitions held, for /healthz,
	// which reads them on the metrics server's goroutines.
	healthMu sync.Mutex
	// outMu is held by each output of a task (taskOutput), the router's
	// and the writer's: the tasks apply what the router handed them at
	// once, while the loop routes the next records (startLocal).
	outMu sync.Mutex
	// local are the tasks applying what startLocal gave them, which tell
	// localDone when they are done.
	local     []*ownedTask
	localDone chan error
	healthDBs []*state.DB
	// assigned is how many repartition partitions this generation
	// gives: the state's share of the memory plan is split among them.
	assigned int
}

// ownedTask is a repartition partition this instance holds.
type ownedTask struct {
	partition int
	// retiredReady says a checkpoint followed the task's last reload: the
	// stored state of the rules it removed may be deleted.
	retiredReady bool
	db           *state.DB
	task         *engine.Task
	log          changelog.Log
	// next is the next offset of the repartition partition to read.
	next int64
	// changelogEnd is where the changelog partition ended after this
	// instance's last checkpoint of it.
	changelogEnd int64
	// epoch is the generation its changelog writes carry: the group's
	// when it took the partition, or more than any in the changelog.
	epoch int32
	ends  []kafkaio.OutputEnd
	// published are the counts last added to the metrics, of the rules
	// publishedRules.
	published      engine.Stats
	publishedRules *rules.Config
	// out is the task's way to the job's outputs; handed are the messages
	// the router handed it directly, applied once the fetch they came in
	// is routed.
	out    *taskOutput
	handed []localMessage
	// applying are the messages handed before, which the task applies
	// while the router hands it the next (instance.startLocal).
	applying []localMessage
	// fetched are the fetches of the task's repartition partition being
	// applied, and msg the message being decoded from them.
	fetched []kafkaio.Fetch
	msg     engine.Message
	// throughTopic is, per input partition this instance routes, the
	// offset up to which the task must have applied the partition's
	// records and marks from the repartition topic before the router
	// hands it the next ones directly (local); direct says it has.
	throughTopic map[int32]int64
	direct       bool
}

// localMessage is a message handed to a task directly, with its record's
// reference time and, for a record, its event as the router decoded it.
type localMessage struct {
	msg engine.Message
	ref int64
	ev  *engine.Decoded
}

// taskOutput is a task's way to the job's one output, which the tasks that
// apply their local messages at once share: each call holds outMu, and
// the decisions keep the times of the task's record.
type taskOutput struct {
	jobbase.Output
	mu    *sync.Mutex
	times sink.DecisionTimes
}

func (o *taskOutput) Decision(d *windows.Decision) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.Output.Decision(d)
}

func (o *taskOutput) Heatmap(h *windows.HeatmapWindow) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.Output.Heatmap(h)
}

func (o *taskOutput) Late(raw []byte, wm int64, p *event.Provenance) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.Kafka.Late(raw, wm, p)
}

func (o *taskOutput) DLQ(raw []byte, reason string, p *event.Provenance) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.Kafka.DLQ(raw, reason, p)
}

// local reports whether the router may hand the task its next message
// directly, skipping the repartition topic: the task has applied
// everything that went to it through the topic, what a former router
// sent included. Before, it would apply a message handed to it before
// earlier ones the topic still held, or skip those as already applied.
func (t *ownedTask) local() bool {
	if t.direct {
		return true
	}
	for p, o := range t.throughTopic {
		if t.task.Applied(p) < o {
			return false
		}
	}
	// From here on the router hands it every message: no more go through
	// the topic.
	t.direct = true
	return true
}

func (j *instance) close() {
	j.standbys.Close()
	for _, t := range j.tasks {
		t.db.Close()
	}
	for i := len(j.Closers) - 1; i >= 0; i-- {
		j.Closers[i]()
	}
}

// connect checks the connection, reads the input topic's partitions, and
// creates or checks the internal topics.
func (j *instance) connect(ctx context.Context) error {
	var err error
	if j.Sec, err = kafkaconn.New(j.Opts.Security); err != nil {
		return err
	}
	if j.Mem, err = memory.NewPlan(j.Opts.MemoryBytes, 1); err != nil {
		return err
	}
	if err := j.Sec.Check(ctx, j.Opts.Brokers); err != nil {
		return fmt.Errorf("stream: brokers %v (%v): %w", j.Opts.Brokers, j.Sec, err)
	}
	j.client = &kafka.Client{Addr: kafka.TCP(j.Opts.Brokers...), Transport: j.Sec.Transport(), Timeout: 10 * time.Second}
	if _, err := kafkaio.ReadPartitions(ctx, j.Sec.Dialer(), j.Opts.Brokers[0], j.Opts.Topic); err != nil {
		return err
	}
	if err := kafkaio.CheckOutputTopics(ctx, j.client, j.Opts.Outputs); err != nil {
		return err
	}
	return kafkaio.EnsureInternalTopics(ctx, j.client, j.topics, j.Opts.RepartitionPartitions)
}

// lockState takes the state directory: two instances on one machine need
// a directory each.
func (j *instance) lockState(context.Context) error {
	if err := os.MkdirAll(j.Opts.StateDir, 0o700); err != nil {
		return err
	}
	lock, err := vfs.Default.Lock(filepath.Join(j.Opts.StateDir, "LOCK"))
	if err != nil {
		return fmt.Errorf("state directory %s: %w (is another riskstream running on this --state-dir?)", j.Opts.StateDir, err)
	}
	j.OnClose(func() { lock.Close() })
	return nil
}

// startOutputs serves the metrics and builds the sink, its writer and the
// router.
func (j *instance) startOutputs(ctx context.Context) error {
	o := j.Opts
	j.M = observe.NewMetrics(o.Registry, o.Config, o.MetricLabelLimit)
	j.dm = newDistMetrics(o.Registry)
	j.dm.rulesVersion.Set(float64(j.rulesVersion))
	// The console shows what this instance holds, and the whole job as
	// the output topics show it.
	var err error
	if o.Config.File != "" && (o.WatchRules || o.ReloadRules != nil) {
		j.watch = jobbase.NewRulesWatch(j.ownRules)
	}
	j.follower = newOutputFollower(ctx, j)
	if err = j.ServeConsole(j.health, j.follower.wanted); err != nil {
		return err
	}
	if j.WholeJob != nil {
		j.Log.Info("serving the console", "instance", j.M.URL+"/", "job", j.M.URL+"/job/", "metrics", j.M.URL+"/metrics")
	}
	j.StartSink(o.Brokers)
	j.Writer = sink.NewWriter(j.Out, sink.WriterOptions{Latency: j.M.Latency, Writing: &j.M.Ready.Writing, Lock: &j.outMu, Log: j.Log, Now: j.Opts.Now})
	j.OnClose(j.Writer.Close)
	// The repartition topic has a writer of its own: its messages, many
	// more than the outputs, go in large batches, and a write of outputs
	// does not wait behind them.
	j.hop = sink.NewKafka(o.Brokers, sink.Topics{}, sink.Transport(j.Sec.Transport()), sink.Logger(j.Log),
		sink.DirectTopics(j.topics.Repartition), sink.BatchSize(hopBatchSize))
	j.OnClose(func() { j.hop.Close() })
	j.hopWriter = sink.NewWriter(j.hop, sink.WriterOptions{Log: j.Log, Now: j.Opts.Now})
	j.OnClose(j.hopWriter.Close)
	j.Ends = kafkaio.NewEndTracker(j.client, o.Outputs.Names(), j.Out, j.Log)
	j.router, err = j.newRouter(o.Config)
	return err
}

// newRouter returns a router of the input by cfg, which logs and counts
// the sources' transitions.
func (j *instance) newRouter(cfg *rules.Config) (*engine.Router, error) {
	return engine.NewRouter(cfg, j.Opts.RepartitionPartitions, func(tr watermark.Transition) {
		observe.LogTransition(j.Log, tr)
		j.M.SourceTransition(tr.Source)
	})
}

// replaceRouter makes a new router by cfg the instance's, once what the
// last one counted is in the metrics.
func (j *instance) replaceRouter(cfg *rules.Config) error {
	r, err := j.newRouter(cfg)
	if err != nil {
		return err
	}
	j.publishRouter()
	j.router, j.routerStats = r, engine.RouterStats{}
	return nil
}

// joinGroup joins the consumer group for the input and repartition
// topics, unless an instance without --distributed holds it: that one
// reads the whole input itself.
func (j *instance) joinGroup(ctx context.Context) error {
	members, _, err := kafkaio.GroupMembers(ctx, j.client, j.Opts.Group)
	if err != nil {
		return err
	}
	for _, m := range members {
		// A member that is joining (the group rebalancing) shows no
		// topics yet.
		if len(m.MemberMetadata.Topics) > 0 && !slices.Contains(m.MemberMetadata.Topics, j.topics.Repartition) {
			busy := kafkaio.BusyError(j.Opts.Group, members)
			return fmt.Errorf("consumer group %q is held by a riskstream instance without --distributed (%v), which reads the whole input: stop it first or use another --group", busy.Group, busy.Members)
		}
	}
	j.balancer = &kafkaio.StickyBalancer{Undivided: j.Opts.Topic}
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID: j.Opts.Group, Brokers: j.Opts.Brokers, Topics: []string{j.Opts.Topic, j.topics.Repartition},
		Dialer: j.Sec.Dialer(), HeartbeatInterval: distHeartbeat, SessionTimeout: distSessionTimeout,
		RebalanceTimeout: distRebalanceTimeout, JoinGroupBackoff: kafkaio.RejoinBackoff,
		GroupBalancers: []kafka.GroupBalancer{j.balancer},
	})
	if err != nil {
		return fmt.Errorf("join group %s: %w", j.Opts.Group, err)
	}
	j.cg = cg
	j.OnClose(func() { cg.Close() })
	return nil
}

// generations runs one generation of the group after the other until the
// job stops.
func (j *instance) generations(ctx context.Context) error {
	for {
		gen, err := j.cg.Next(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, kafka.ErrGroupClosed):
			return fmt.Errorf("group %s: %w", j.Opts.Group, err)
		case err != nil:
			// A rebalance or a coordinator move while joining: the group
			// joins again on its own.
			j.Log.Debug("joining the group again", "group", j.Opts.Group, "err", err)
			continue
		}
		result := make(chan error, 1)
		// The group joins again only once this returns: the partitions
		// given up are checkpointed before another instance takes them.
		gen.Start(func(genCtx context.Context) { result <- j.runGeneration(ctx, genCtx, gen) })
		if err := <-result; err != nil {
			if ctx.Err() != nil {
				// Stopped while taking partitions: what was taken is
				// checkpointed already, what was not is another's.
				j.Log.Info("stopped while taking partitions", "err", err)
				return nil
			}
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// runGeneration takes the partitions the generation gives, processes them
// until it ends, then checkpoints them.
func (j *instance) runGeneration(ctx, genCtx context.Context, gen *kafka.Generation) error {
	j.generation = gen.ID
	j.dm.rebalances.Inc()
	if err := j.take(ctx, gen); err != nil {
		return err
	}
	// A partition never checkpointed is checkpointed before its first
	// record: killed before its first periodic checkpoint, this instance
	// leaves where the outputs ended, and whoever takes its partitions
	// does not write again what it wrote.
	for _, t := range j.tasks {
		if t.ends == nil {
			if err := j.checkpoint(ctx, gen); err != nil {
				return err
			}
			break
		}
	}
	readCtx, stopReading := context.WithCancel(genCtx)
	var reading sync.WaitGroup
	j.startFetchers(readCtx, &reading)
	j.M.Ready.Consuming(observe.FetchSources(j.Fetchers)...)
	j.M.Ready.TrackOnly(observe.FetchSources(j.Fetchers)...)
	if j.Opts.Ready != nil && !j.ready {
		j.ready = true
		j.Opts.Ready(j.Opts.Brokers)
	}
	err := j.loop(ctx, genCtx, gen)
	if ctx.Err() != nil {
		j.M.Ready.Stop()
	}
	stopReading()
	reading.Wait()
	j.M.Ready.TrackOnly() // until the next generation's fetchers start
	if err != nil {
		return err
	}
	// The generation ended (a rebalance) or the job stops: checkpoint
	// what this instance holds, so that whoever takes it next resumes
	// there.
	return j.checkpoint(ctx, gen)
}

// take opens the tasks of the repartition partitions the generation gives
// and restores the router of its input partitions, closing the tasks it
// no longer gives.
func (j *instance) take(ctx context.Context, gen *kafka.Generation) error {
	start := j.Opts.Now()
	j.healthMu.Lock()
	j.healthDBs = nil // some are closed below
	j.healthMu.Unlock()
	// The standby copies are this instance's to take over, or another's
	// to keep now.
	j.standbys.Close()
	j.standbys = nil
	mine := map[int]bool{}
	for _, a := range gen.Assignments[j.topics.Repartition] {
		mine[a.ID] = true
	}
	for k, t := range j.tasks {
		if !mine[k] {
			t.db.Close()
			delete(j.tasks, k)
		}
	}
	var ends [][]kafkaio.OutputEnd
	j.assigned = len(mine)
	for _, k := range slices.Sorted(maps.Keys(mine)) {
		t, err := j.openTask(ctx, k)
		if err != nil {
			return fmt.Errorf("repartition partition %d: %w", k, err)
		}
		j.tasks[k] = t
		ends = append(ends, t.ends)
	}
	// The input resumes from the router's checkpoint in the routers topic,
	// also when this instance routed it: it checkpointed it when the last
	// generation ended, and another may have routed it since.
	var inputs []int32
	for _, a := range gen.Assignments[j.Opts.Topic] {
		inputs = append(inputs, int32(a.ID))
	}
	slices.Sort(inputs)
	routers, err := j.readRoutersTopic(ctx)
	if err != nil {
		return err
	}
	routerEnds, err := j.startRouting(ctx, inputs, routers)
	if err != nil {
		return err
	}
	ends = append(ends, routerEnds)
	// What the router sent before reaches the tasks through the
	// repartition topic first (ownedTask.local).
	for _, t := range j.tasks {
		t.throughTopic, t.direct = map[int32]int64{}, false
		if j.routing != nil {
			for p, from := range j.routing.from {
				t.throughTopic[p] = max(from-1, -1)
			}
		}
	}
	// The rules the router routes by from here: the former router may have
	// taken them and died before it said so. Then the job's last ones,
	// unless it follows where the former router switched.
	if err := j.sendRules(); err != nil {
		return err
	}
	if err := j.catchUpRules(); err != nil {
		return err
	}
	// What the former holders wrote after their checkpoints is not
	// written again.
	written, err := j.Ends.Restore(ctx, j.Opts.Brokers, j.Sec, ends)
	if err != nil {
		return err
	}
	j.balancer.Held(j.Opts.Topic, ints(inputs))
	j.balancer.Held(j.topics.Repartition, slices.Sorted(maps.Keys(mine)))
	var standby []int
	if j.Opts.StandbyReplicas > 0 {
		if standby, err = j.standbyPartitions(ctx, gen); err != nil {
			j.Log.Warn("finding which partitions to keep standby copies of; none this generation", "err", err)
		}
		j.standbys = changelog.StartStandbys(standby, j.changelogOf, j.tasksDir(), j.storeOptions(), j.Log)
	}
	j.balancer.Held(kafkaio.StandbyTopic(j.topics.Repartition), standby)
	j.healthMu.Lock()
	for _, t := range j.tasks {
		j.healthDBs = append(j.healthDBs, t.db)
	}
	j.healthMu.Unlock()
	j.dm.ownedInputs.Set(float64(len(inputs)))
	j.dm.ownedPartitions.Set(float64(len(j.tasks)))
	j.Log.Info("took partitions", "generation", gen.ID, "input", inputs, "repartition", slices.Sorted(maps.Keys(mine)), "standby", standby,
		"took", j.Opts.Now().Sub(start).Round(time.Millisecond), "outputs_since_checkpoints", written)
	return nil
}

// openTask returns the task of repartition partition k: the one held in
// the last generation if nobody wrote its changelog since; else the local
// store, brought up to the changelog's last checkpoint (of those written
// since its own, if it has one, else from the changelog's start).
func (j *instance) openTask(ctx context.Context, k int) (t *ownedTask, err error) {
	log := j.changelogOf(k)
	end, err := log.End(ctx)
	if err != nil {
		return nil, err
	}
	if t, ok := j.tasks[k]; ok {
		if t.changelogEnd == end {
			return t, nil
		}
		t.db.Close() // another instance held it meanwhile
	}
	dir := filepath.Join(j.tasksDir(), strconv.Itoa(k))
	so := j.storeOptions()
	so.Dir = dir
	db, local, err := changelog.OpenStore(so, end)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			db.Close()
		}
	}()
	epoch := max(j.generation, local.Epoch)
	if local.End == end {
		j.Log.Info("a repartition partition's local store is current: nothing to restore", "partition", k, "at", end)
	} else {
		start := j.Opts.Now()
		pos, st, err := log.Restore(ctx, db, local, j.generation)
		if err != nil {
			return nil, fmt.Errorf("restore from %s/%d: %w", log.Topic, k, err)
		}
		if err := changelog.WritePosition(db, pos); err != nil {
			return nil, err
		}
		end, epoch = pos.End, pos.Epoch
		took := j.Opts.Now().Sub(start)
		j.dm.restoreSeconds.Observe(took.Seconds())
		j.dm.restoreBytes.Add(float64(st.Bytes))
		j.Log.Info("restored a repartition partition's state from its changelog", "partition", k, "records", st.Records,
			"bytes", st.Bytes, "from", max(local.End, 0), "rewritten", st.Repaired, "took", took.Round(time.Millisecond))
	}
	t = &ownedTask{partition: k, db: db, log: log, next: kafka.FirstOffset, changelogEnd: end, epoch: epoch,
		out: &taskOutput{mu: &j.outMu}}
	t.out.Output = jobbase.Output{Kafka: j.Out, M: j.M, Live: j.Console, Keys: j.DecisionKeys, Times: &t.out.times}
	m, ok, err := checkpoint.Read(db, checkpoint.TaskInputBeforeManifest(j.topics.Repartition, k))
	if err != nil {
		return nil, err
	}
	// The state resumes with the rules of its checkpoint, and takes the
	// job's later ones as the repartition topic brings them.
	cfg, version := j.rules, j.rulesVersion
	if ok {
		if cfg, version, err = checkpointRules(m.Engine, cfg, version); err != nil {
			return nil, fmt.Errorf("state in %s: %w", dir, err)
		}
	}
	t.task, err = engine.NewTask(engine.TaskOptions{Config: cfg, RulesVersion: version, Backend: db, Output: t.out,
		Partition: k, Partitions: j.Opts.RepartitionPartitions, Topic: j.Opts.Topic,
		CacheSlots: j.Opts.CacheSlots, MemoryBytes: j.Mem.State / int64(max(1, j.assigned))})
	if err != nil || !ok {
		return t, err
	}
	if err := t.task.Restore(m.Engine); err != nil {
		return nil, fmt.Errorf("state in %s: %w", dir, err)
	}
	for _, o := range m.Inputs {
		if o.Topic != j.topics.Repartition || o.Partition != int32(k) {
			return nil, fmt.Errorf("state in %s: its checkpoint is of %s partition %d, not %s partition %d", dir, o.Topic, o.Partition, j.topics.Repartition, k)
		}
		t.next = o.Offset
	}
	t.ends = kafkaio.EndsOf(m.Outputs)
	return t, nil
}

// checkpointRules returns the rules a task's checkpoint b was written
// with and their version; cfg and version, the job's, for a checkpoint
// that holds none (engine.TaskRules).
func checkpointRules(b []byte, cfg *rules.Config, version int64) (*rules.Config, int64, error) {
	v, source, err := engine.TaskRules(b)
	if err != nil || source == nil {
		return cfg, version, err
	}
	if v == version && bytes.Equal(source, cfg.Source) {
		return cfg, version, nil
	}
	c, err := rules.Parse(fmt.Sprintf("rules version %d", v), source)
	if err != nil {
		return nil, 0, fmt.Errorf("the rules of its checkpoint, version %d: %w", v, err)
	}
	return c, v, nil
}

// tasksDir holds the stores of the repartition partitions, held or
// standby, one folder each.
func (j *instance) tasksDir() string { return filepath.Join(j.Opts.StateDir, "tasks") }

// storeOptions are the options of a repartition partition's store, but
// its folder.
func (j *instance) storeOptions() state.Options {
	so := j.Opts.Testing.State
	so.AtomicCheckpoints, so.Logger = true, j.Log
	if so.CacheBytes == 0 {
		so.CacheBytes = max(8<<20, j.Mem.PebbleCache/int64(max(1, j.assigned)))
	}
	return so
}

// changelogOf returns the changelog of repartition partition k.
func (j *instance) changelogOf(k int) changelog.Log {
	return changelog.Log{Client: j.client, Brokers: j.Opts.Brokers, Dialer: j.Sec.Dialer(), Topic: j.topics.Changelog, Partition: k}
}

// startFetchers starts reading the input partitions routed and the
// repartition partitions held.
func (j *instance) startFetchers(ctx context.Context, reading *sync.WaitGroup) {
	j.inputFetched, j.repFetched, j.rulesFetched = make(chan kafkaio.Fetch, 16), make(chan kafkaio.Fetch, 16), make(chan kafkaio.Fetch, 1)
	j.Fetchers = j.Fetchers[:0]
	rulesFetcher := kafkaio.NewFetcher(kafkaio.FetcherOptions{Brokers: j.Opts.Brokers, Dialer: j.Sec.Dialer(), Topic: j.topics.Rules,
		From: j.rulesNext, Out: j.rulesFetched, Log: j.Log, Now: j.Opts.Now})
	reading.Go(func() { rulesFetcher.Run(ctx) })
	if j.routing != nil {
		for p, from := range j.routing.from {
			f := kafkaio.NewFetcher(kafkaio.FetcherOptions{Brokers: j.Opts.Brokers, Dialer: j.Sec.Dialer(), Topic: j.Opts.Topic,
				Partition: int(p), From: from, Out: j.inputFetched, Log: j.Log, Now: j.Opts.Now})
			j.Fetchers = append(j.Fetchers, f)
			reading.Go(func() { f.Run(ctx) })
		}
	}
	for k, t := range j.tasks {
		f := kafkaio.NewFetcher(kafkaio.FetcherOptions{Brokers: j.Opts.Brokers, Dialer: j.Sec.Dialer(), Topic: j.topics.Repartition,
			Partition: k, From: t.next, Out: j.repFetched, Log: j.Log, Now: j.Opts.Now})
		j.Fetchers = append(j.Fetchers, f)
		reading.Go(func() { f.Run(ctx) })
	}
}

// loop processes what the fetchers bring until the generation ends or the
// job stops: the loop (driver.Run) configured for an instance of a
// distributed job, which routes the input partitions it was given and
// applies the repartition partitions it holds.
func (j *instance) loop(ctx, genCtx context.Context, gen *kafka.Generation) (err error) {
	// The tasks the group may take away next are not left applying.
	defer func() { err = errors.Join(err, j.settleLocal()) }()
	runCtx, cancel := context.WithCancel(genCtx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	mail := make(chan driver.Mail, 1)
	go jobbase.ForwardReloads(runCtx, j.Opts.ReloadRules, mail, func() error {
		return j.settled(func() error { return j.watchRules(ctx, true) })
	})
	return driver.Run(runCtx, driver.Options{
		Sources: []driver.Source{
			{Fetched: j.inputFetched, Take: j.route},
			{Fetched: j.repFetched, Take: func(f kafkaio.Fetch) error { return j.settled(func() error { return j.apply(f) }) }},
			{Fetched: j.rulesFetched, Take: func(f kafkaio.Fetch) error { return j.settled(func() error { return j.followRules(f) }) }},
		},
		// The output writer's sink is written by the tasks too
		// (sink.WriterOptions.Lock).
		Writers:      []*sink.Writer{j.Writer, j.hopWriter},
		Mail:         mail,
		TickInterval: jobbase.TickInterval,
		Tick: func(time.Time) error {
			if err := j.settled(j.tick); err != nil {
				return err
			}
			return j.settled(func() error { return j.watchRules(ctx, false) })
		},
		CheckpointInterval: j.Opts.CheckpointInterval,
		Checkpoint:         func() error { return j.settled(func() error { return j.checkpoint(ctx, gen) }) },
		Worked:             j.worked,
		Now:                j.Opts.Now,
	})
}

// settled runs fn once the tasks applied what they were handed:
// everything but routing reads or changes the tasks.
func (j *instance) settled(fn func() error) error {
	if err := j.settleLocal(); err != nil {
		return err
	}
	return fn()
}

// worked counts a step of the loop that took took as the router's time
// away: the merge's clock does not count it (routing.mergeNow).
func (j *instance) worked(took time.Duration) {
	if j.routing != nil {
		j.routing.away += took
	}
}

// applyLocal has every task apply the messages the router handed it, and
// returns once they have.
func (j *instance) applyLocal() error {
	if err := j.startLocal(); err != nil {
		return err
	}
	return j.settleLocal()
}

// startLocal has every task apply the messages the router handed it, the
// tasks at once, each in the order they were handed, on goroutines of
// their own: the loop goes on routing meanwhile, and settleLocal waits for
// them. Nothing else on the loop may touch a task or the outputs while
// they apply. One apply is in flight at most: it first waits for the one
// before, and returns its errors.
func (j *instance) startLocal() error {
	if err := j.settleLocal(); err != nil {
		return err
	}
	if j.routing != nil {
		j.routing.flipDecoded()
	}
	work := j.local[:0]
	for _, t := range j.tasks {
		if len(t.handed) > 0 {
			t.handed, t.applying = t.applying[:0], t.handed
			work = append(work, t)
		}
	}
	j.local = work
	if len(work) == 0 {
		return nil
	}
	go func() {
		errs := make([]error, len(work))
		parallel.Do(len(work), func(i int) {
			t := work[i]
			for k := range t.applying {
				l := &t.applying[k]
				t.out.times = sink.DecisionTimes{Ref: l.ref}
				if err := j.applyOne(t, &l.msg, l.ev); err != nil {
					errs[i] = fmt.Errorf("input partition %d offset %d, handed to its state directly: %w", l.msg.Partition, l.msg.Offset, err)
					break
				}
			}
		})
		j.localDone <- errors.Join(errs...)
	}()
	return nil
}

// settleLocal waits for the tasks applying what startLocal gave them, if
// any, and returns their errors.
func (j *instance) settleLocal() error {
	if len(j.local) == 0 {
		return nil
	}
	err := <-j.localDone
	for _, t := range j.local {
		clear(t.applying) // drop the records' bytes
		t.applying = t.applying[:0]
		j.publishTask(t)
	}
	j.local = j.local[:0]
	return err
}

// applyAtOnce is the most fetches of repartition partitions apply takes
// at once.
const applyAtOnce = 64

// apply runs a fetch of a repartition partition through its task, with
// the fetches of the others already fetched: each task its own, the
// tasks at once, each on a goroutine.
func (j *instance) apply(f kafkaio.Fetch) error {
	fetches := append(j.fetches[:0], f)
	for more := true; more && len(fetches) < applyAtOnce; {
		select {
		case f := <-j.repFetched:
			fetches = append(fetches, f)
		default:
			more = false
		}
	}
	j.fetches = fetches
	work := j.working[:0]
	for _, f := range fetches {
		if t := j.tasks[int(f.Partition)]; t != nil {
			if len(t.fetched) == 0 {
				work = append(work, t)
			}
			t.fetched = append(t.fetched, f)
		} else {
			kafkaio.Recycle(f.Msgs)
		}
	}
	j.working = work
	errs := make([]error, len(work))
	parallel.Do(len(work), func(i int) { errs[i] = j.applyFetched(work[i]) })
	for _, t := range work {
		j.publishTask(t)
	}
	return errors.Join(errs...)
}

// applyFetched runs the fetches of t's repartition partition through t, in
// the order they came.
func (j *instance) applyFetched(t *ownedTask) error {
	defer func() {
		for _, f := range t.fetched {
			kafkaio.Recycle(f.Msgs)
		}
		clear(t.fetched)
		t.fetched = t.fetched[:0]
	}()
	for _, f := range t.fetched {
		for i := range f.Msgs {
			m := &f.Msgs[i]
			if err := engine.DecodeMessage(m.Value, &t.msg); err != nil {
				j.Log.Error("not a repartition message, skipped", "topic", m.Topic, "partition", m.Partition, "offset", m.Offset, "err", err)
				t.next = m.Offset + 1
				continue
			}
			t.out.times = sink.DecisionTimes{Ref: m.Time.UnixMilli()}
			if err := j.applyOne(t, &t.msg, nil); err != nil {
				return fmt.Errorf("repartition partition %d offset %d: %w", f.Partition, m.Offset, err)
			}
			t.next = m.Offset + 1
		}
	}
	return nil
}

// tick sends the marks due and writes some of the next checkpoint's state
// ahead.
func (j *instance) tick() error {
	nowT := j.Opts.Now()
	if err := j.routeTaken(); err != nil { // merge waits that ran out
		return err
	}
	if err := j.settleLocal(); err != nil { // what follows reads the tasks
		return err
	}
	if nowT.Sub(j.lastMarks) >= markInterval {
		j.lastMarks = nowT
		if err := j.sendMark(nowT); err != nil {
			return err
		}
		j.publishSent()
	}
	for _, t := range j.tasks {
		if err := t.db.Err(); err != nil {
			// A write Pebble could not complete, a stalled disk, a
			// corrupt file: the store takes no more writes.
			return err
		}
		if err := t.task.WriteBack(jobbase.WriteBackPerTick); err != nil {
			return err
		}
		if t.retiredReady {
			if _, _, err := t.task.DeleteRetired(jobbase.RetiredPerTick); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkpoint makes every repartition message and output acknowledged,
// then checkpoints each task held (its changelog first, then its store)
// and each input partition routed (the routers topic), then commits the
// offsets to the group for lag tools.
func (j *instance) checkpoint(ctx context.Context, gen *kafka.Generation) error {
	return j.Base.Checkpoint(instanceCheckpointer{j, ctx, gen}, j.hopWriter, j.Writer)
}

// instanceCheckpointer is a distributed instance's part in a checkpoint: the
// store and changelog of each repartition partition it holds, then its
// router's checkpoint, and the group of its generation.
type instanceCheckpointer struct {
	*instance
	ctx context.Context
	gen *kafka.Generation
}

// appliedRecords counts the records the states applied, not those the
// router routes again: the outputs written since the former holders'
// checkpoints are made again by the states, once they apply records past
// their own checkpoints, and the states skip as applied those they had
// (EndTracker.settle).
func (j *instance) AppliedRecords() int64 {
	var applied int64
	for _, t := range j.tasks {
		applied += t.task.Stats().Records
	}
	return applied
}

func (c instanceCheckpointer) Persist(ends []kafkaio.OutputEnd, durable func(commitOffsets func())) error {
	j, ctx := c.instance, c.ctx
	offsets := map[string]map[int]int64{j.Opts.Topic: {}, j.topics.Repartition: {}}
	held := slices.Sorted(maps.Keys(j.tasks))
	// Each partition's state goes to its store's pending writes, then to
	// its changelog, then to its store, at the same time as the others':
	// a checkpoint waits for the slowest, not for their sum.
	type written struct {
		end, bytes int64
		// failed is why the state could not be checkpointed at all; err,
		// why its checkpoint was not written.
		failed, err error
	}
	results := make([]written, len(held))
	var writing sync.WaitGroup
	for i, k := range held {
		t := j.tasks[k]
		writing.Go(func() {
			r := &results[i]
			cp, err := t.task.Checkpoint()
			if err == nil {
				m := checkpoint.Manifest{Engine: cp, Outputs: kafkaio.EndOffsets(ends),
					Inputs: []checkpoint.Offset{{Topic: j.topics.Repartition, Partition: int32(k), Offset: t.next}}}
				err = checkpoint.Write(t.db, &m)
			}
			if err != nil {
				r.failed = err
				return
			}
			r.err = j.retry(ctx, "changelog", func(ctx context.Context) (err error) {
				r.end, r.bytes, err = t.log.Write(ctx, t.db, t.epoch)
				return err
			})
			if r.err == nil {
				r.err = changelog.WritePosition(t.db, changelog.Position{End: r.end, Epoch: t.epoch})
			}
		})
	}
	writing.Wait()
	for _, r := range results {
		if r.failed != nil {
			return r.failed
		}
	}
	failed := false
	for i, k := range held {
		t, r := j.tasks[k], results[i]
		var tooLarge *ErrCheckpointTooLarge
		switch {
		case errors.As(r.err, &tooLarge) || errors.Is(r.err, state.ErrFailed):
			return r.err
		case r.err != nil:
			// The store's writes stay pending, for the next checkpoint.
			j.Log.Error("checkpoint not written: the previous one stays in force", "partition", k, "err", r.err)
			failed = true
			continue
		}
		j.dm.changelogBytes.Add(float64(r.bytes))
		t.changelogEnd, t.ends, t.retiredReady = r.end, ends, true
		if t.next >= 0 {
			offsets[j.topics.Repartition][k] = t.next
		}
	}
	if failed {
		// The router stays at its last checkpoint too: records handed to
		// a task directly since are in no topic, and a restart must route
		// them again.
		j.Log.Error("router checkpoints not written, as a partition's was not")
		return nil
	}
	recs, err := j.routerRecords(ends)
	if err != nil {
		return err
	}
	if len(recs) > 0 {
		// The router's event ids first: those it restores never lack one
		// of a record before the checkpoint.
		err := j.writeRouterIDs(ctx)
		var tooLarge *ErrCheckpointTooLarge
		switch {
		case errors.As(err, &tooLarge):
			return err
		case err != nil:
			j.Log.Error("router checkpoint not written, as its event ids were not: the previous one stays in force", "err", err)
			return nil
		}
		err = j.retry(ctx, "router checkpoint", func(ctx context.Context) error {
			_, err := kafkaio.Produce(ctx, j.client, j.topics.Routers, 0, recs)
			return err
		})
		if errors.As(err, &tooLarge) {
			return err
		}
		if err != nil {
			j.Log.Error("router checkpoint not written: the previous one stays in force", "err", err)
			return nil
		}
		j.routing.routerWritten()
		for p, o := range j.routing.merge.Offsets() {
			offsets[j.Opts.Topic][int(p)] = o
		}
	}
	durable(func() {
		if err := c.gen.CommitOffsets(offsets); err != nil {
			j.Log.Warn("committing offsets to the group, for lag tools; the checkpoint is not affected", "group", j.Opts.Group, "err", err)
		}
	})
	return nil
}

// health reports the stores of the partitions held and the brokers: nil
// while they work, else the first failure (/healthz): a store's, or a
// fetch or an output write the brokers left unanswered for
// observe.StallAfter, as the single job's.
func (j *instance) health() error {
	j.healthMu.Lock()
	defer j.healthMu.Unlock()
	for _, db := range j.healthDBs {
		if err := db.Health(); err != nil {
			return err
		}
	}
	return j.M.Ready.Stalled(j.Opts.Now())
}

// publishGauges sets the watermark gauge to the least watermark of the
// partitions held and the state's size to that of their stores, and the
// skews of the sources and the lags of the input partitions routed.
func (j *instance) PublishGauges() {
	least, bytes := watermark.Max, uint64(0)
	for _, t := range j.tasks {
		least = min(least, t.task.Watermark())
		bytes += t.db.DiskBytes()
	}
	if least > watermark.Min && least < watermark.Max {
		j.M.Watermark.Set(float64(least) / 1000)
	}
	j.M.SetStateBytes(bytes)
	j.M.Skews(j.router.Sources())
	j.M.Lags(j.Opts.Topic, j.Fetchers, j.router.Partition, j.NowMilli())
}

// ErrCheckpointTooLarge is returned when an internal topic refuses a
// checkpoint's record as too large: no retry can write it, and without it
// the partition could not be taken over, so the instance stops.
type ErrCheckpointTooLarge struct {
	What string
	Err  error
}

func (e *ErrCheckpointTooLarge) Error() string {
	return fmt.Sprintf("%s: a record of the checkpoint is larger than the topic takes (raise its max.message.bytes; the job makes its internal topics with %d): %v",
		e.What, kafkaio.ChangelogMaxMessageBytes, e.Err)
}

func (e *ErrCheckpointTooLarge) Unwrap() error { return e.Err }

// checkpointTimeout bounds how long a checkpoint's writes to Kafka are
// retried: a checkpoint at the end of a generation must be done before
// the group's rebalance timeout, and one that cannot be written leaves
// the previous one in force.
const checkpointTimeout = 20 * time.Second

// retry runs fn until it succeeds, with the output writer's backoffs, for
// up to checkpointTimeout: the brokers of the internal topics may be
// restarting.
func (j *instance) retry(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout)
	defer cancel()
	backoff := sink.WriteBackoffMin
	for {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if sink.TooLarge(err) {
			// Writing it again cannot help: the topic refuses a state
			// this large.
			return &ErrCheckpointTooLarge{What: what, Err: err}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: gave up after %v: %w", what, checkpointTimeout, err)
		}
		j.Log.Warn("writing a checkpoint, retrying", "what", what, "in", backoff, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, sink.WriteBackoffMax)
	}
}

// publishRouter adds what the router counted since last time to the
// metrics.
func (j *instance) publishRouter() {
	s := j.router.Stats()
	p := j.routerStats
	routed := func(s engine.RouterStats) int64 { return s.Records - s.Invalid - s.Unmatched - s.Late - s.Duplicates }
	j.M.Events.WithLabelValues("ok").Add(float64(routed(s) - routed(p)))
	j.M.Events.WithLabelValues("invalid").Add(float64(s.Invalid - p.Invalid))
	j.M.Events.WithLabelValues("unmatched").Add(float64(s.Unmatched - p.Unmatched))
	j.M.Events.WithLabelValues("late").Add(float64(s.Late - p.Late))
	j.M.Events.WithLabelValues("duplicate").Add(float64(s.Duplicates - p.Duplicates))
	j.dm.routed.Add(float64(s.Records - p.Records))
	j.dm.split.Add(float64(s.Split - p.Split))
	j.routerStats = s
	j.publishSent()
}

// publishSent adds the messages for the repartition topic's partitions
// sent since last time to the metrics.
func (j *instance) publishSent() {
	j.dm.throughTopic.Add(float64(j.sentTopic))
	j.dm.local.Add(float64(j.sentLocal))
	j.sentTopic, j.sentLocal = 0, 0
}

// publishTask adds what a task counted since last time to the metrics.
func (j *instance) publishTask(t *ownedTask) {
	s := t.task.Stats()
	p := t.published
	j.M.Events.WithLabelValues("late_in_state").Add(float64(s.Late - p.Late))
	// Counts follow rules by name through a reload (engine.Task.Stats).
	before := map[string]int64{}
	if t.publishedRules != nil {
		for i, r := range t.publishedRules.Rules {
			before[r.Name] = p.Decisions[i]
		}
	}
	cfg := t.task.Rules()
	for i, r := range cfg.Rules {
		j.M.AddDecisions(&r, s.Decisions[i]-before[r.Name])
	}
	t.published, t.publishedRules = s, cfg
}

// distMetrics are the metrics of a distributed job's own (docs/metrics.md).
type distMetrics struct {
	rebalances      prometheus.Counter
	restoreSeconds  prometheus.Histogram
	restoreBytes    prometheus.Counter
	changelogBytes  prometheus.Counter
	ownedInputs     prometheus.Gauge
	ownedPartitions prometheus.Gauge
	routed          prometheus.Counter
	split           prometheus.Counter
	// throughTopic and local count the messages for the repartition
	// topic's partitions sent through it and handed to a task held here.
	throughTopic, local prometheus.Counter
	// rulesVersion is the version of the job's rules the router routes
	// by.
	rulesVersion prometheus.Gauge
}

func newDistMetrics(reg prometheus.Registerer) *distMetrics {
	messages := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "riskstream_repartition_messages_total",
		Help: "Records and marks this instance sent the repartition topic's partitions: through the topic, or to a task it holds directly (local)."}, []string{"path"})
	assigned := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "riskstream_assigned_partitions",
		Help: "Partitions the consumer group gives this instance: of the input topic (routed) and of the repartition topic (whose state it holds)."}, []string{"topic"})
	m := &distMetrics{
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{Name: "riskstream_rebalances_total",
			Help: "Generations of the consumer group this instance took part in: one per rebalance."}),
		restoreSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "riskstream_restore_duration_seconds",
			Help:    "Time to restore a repartition partition's state from its changelog.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}),
		restoreBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "riskstream_restore_bytes_total",
			Help: "Bytes of changelog records read to restore state."}),
		changelogBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "riskstream_changelog_bytes_total",
			Help: "Bytes of state written to the changelog topic at checkpoints."}),
		throughTopic:    messages.WithLabelValues("topic"),
		local:           messages.WithLabelValues("local"),
		ownedInputs:     assigned.WithLabelValues("input"),
		ownedPartitions: assigned.WithLabelValues("repartition"),
		routed: prometheus.NewCounter(prometheus.CounterOpts{Name: "riskstream_routed_records_total",
			Help: "Input records routed to the repartition topic's partitions."}),
		split: prometheus.NewCounter(prometheus.CounterOpts{Name: "riskstream_late_split_sessions_total",
			Help: "Events late unless a session merges them, whose session rules and heatmaps hold their state in more than one partition: the first partition decides for all."}),
		rulesVersion: prometheus.NewGauge(prometheus.GaugeOpts{Name: "riskstream_rules_version",
			Help: "The version of the job's rules (its rules topic) this instance routes by."}),
	}
	reg.MustRegister(m.rebalances, m.restoreSeconds, m.restoreBytes, m.changelogBytes, assigned, m.routed, m.split, messages,
		m.rulesVersion)
	return m
}

// ints returns ps as ints, the group's partition numbers.
func ints(ps []int32) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = int(p)
	}
	return out
}

// sample is, for the console, what this instance of a distributed job
// holds now (epoch ms): the input partitions it routes, the state of the
// repartition partitions it holds, their decisions since it took them.
func (j *instance) Sample(now int64) console.Sample {
	rs := j.router.Stats()
	s := console.Sample{At: now, Records: rs.Records, Late: rs.Late, DLQ: rs.Invalid,
		TopKeys: j.DecisionKeys.Take(jobbase.ConsoleTopKeys), Sources: jobbase.SourceSamples(j.router.Sources())}
	// By rule name: during a reload the states may apply different
	// versions of the rules.
	counts := map[string]int64{}
	least := watermark.Max
	for _, t := range j.tasks {
		ts := t.task.Stats()
		for i, r := range t.task.Rules().Rules {
			counts[r.Name] += ts.Decisions[i]
		}
		s.Late += ts.Late
		s.StateBytes += int64(t.db.DiskBytes())
		least = min(least, t.task.Watermark())
	}
	for _, r := range j.Opts.Config.Rules {
		s.Decisions = append(s.Decisions, console.RuleCount{Rule: r.Name, Action: r.Action, Count: counts[r.Name]})
	}
	if least > watermark.Min && least < watermark.Max {
		s.Watermark = least
	}
	s.Partitions = jobbase.PartitionSamples(j.Opts.Topic, j.Fetchers, j.router.Partition, now)
	return s
}
