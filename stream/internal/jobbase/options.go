package jobbase

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/riskstream/riskstream/memory"
	"github.com/riskstream/riskstream/produce"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/state"
)

// WriteBackPerTick is the least number of changed window states the live
// loop writes to Pebble every tick ahead of the checkpoint, which pauses
// the loop for what is left (BenchmarkCheckpoint; BENCHMARKS.md,
// "Checkpoint pause"); when more states change, each tick writes its share
// of those changed so far over the ticks left before the checkpoint.
const WriteBackPerTick = 256

// RetiredPerTick is how many stored states of rules a reload removed or
// changed the live loop deletes each tick: about 50,000 a second, each a
// small part of a tick.
const RetiredPerTick = 512

// TickInterval is how often the live loop moves processing time: merge
// waits, idle partitions, write-back.
const TickInterval = 10 * time.Millisecond

// StopOutputGrace is how long a stop waits for outputs the brokers do not
// acknowledge (an outage) before the job ends without its final
// checkpoint.
const StopOutputGrace = 10 * time.Second

// Options configure the live job, single or an instance of a distributed
// one (Distributed); stream names them RunOptions.
type Options struct {
	// Config is the validated rules file. Required.
	Config *rules.Config
	// WatchRules makes the live job reload its rules file (Config.File)
	// when the file changes (docs/rules.md "Changing the rules of a live
	// job"). The default value is false; the command sets it. Not with
	// Distributed.
	WatchRules bool
	// ReloadRules, if set, makes the live job reload its rules file each
	// time it receives (SIGHUP), whether or not the file changed. Not with
	// Distributed.
	ReloadRules <-chan struct{}
	// Brokers are Kafka bootstrap addresses. Empty starts the embedded
	// development broker on EmbeddedAddr.
	Brokers []string
	// Security is the TLS and SASL every connection to Brokers uses. The
	// default value is plaintext without authentication. The embedded
	// broker is plaintext: with it, Security must stay the zero value.
	Security kafkaconn.Options
	// EmbeddedAddr is where the embedded broker listens. The default value
	// is 127.0.0.1:9092.
	EmbeddedAddr string
	// Topic is the input topic. The default value is DefaultTopic.
	Topic string
	// Group is the consumer group the job joins and commits its
	// checkpointed offsets to. The default value is DefaultGroup.
	Group string
	// Outputs name the output topics. The default value is
	// sink.DefaultTopics.
	Outputs sink.Topics
	// StateDir holds the Pebble state (and the embedded broker's data).
	// Required.
	StateDir string
	// CheckpointInterval is how often state and offsets are checkpointed.
	// The default value is DefaultCheckpointInterval.
	CheckpointInterval time.Duration
	// PartitionDiscovery is how often the input topic is checked for new
	// partitions. The default value is DefaultPartitionDiscovery.
	PartitionDiscovery time.Duration
	// PartitionWait is how long a partition that has nothing buffered and
	// has read everything its broker had holds back a record of the
	// others, so that the order of records across partitions depends only
	// on the topic (order.Options.Wait), counted in the time the loop has
	// nothing else to do. The default value is DefaultPartitionWait; a
	// negative value waits not at all.
	PartitionWait time.Duration
	// Distributed makes the instance one of several sharing the job
	// through the consumer group Group (docs/distributed.md); it needs
	// Brokers. The default value is false: one instance owns the whole
	// input, and a second one is refused.
	Distributed bool
	// RepartitionPartitions is the partitions of a distributed job's
	// repartition and changelog topics: how many instances can hold state.
	// It cannot change once the topics exist. The default value is
	// DefaultRepartitionPartitions.
	RepartitionPartitions int
	// StandbyReplicas is how many standby copies of each repartition
	// partition's state a distributed job keeps on other instances, which
	// take the partition over without reading its whole changelog. The
	// default value is DefaultStandbyReplicas; negative keeps none.
	StandbyReplicas int
	// MetricsAddr serves /metrics, /healthz and /readyz (see readiness);
	// empty serves nothing.
	MetricsAddr string
	// AllowDroppedState starts on a checkpoint whose rules or heatmaps the
	// rules file removes or changes, deleting their state; without it such
	// a start is refused (a reload drops them without it).
	AllowDroppedState bool
	// ConsolePublic serves the console to clients on other machines too:
	// by default it answers only on loopback, as it shows keys.
	ConsolePublic bool
	// MemoryBytes is the memory budget: see memory.NewPlan. The default value
	// is DefaultMemory.
	MemoryBytes int64
	// CacheSlots overrides the number of decoded states kept: see
	// windows.Options.
	CacheSlots int
	// Shards is how many shards the window state is split into by key,
	// each updated on a goroutine of its own; outputs do not depend on it.
	// The default value is GOMAXPROCS.
	Shards int
	// MetricLabelLimit bounds the label values taken from the input that
	// the metrics keep per label (sources; each heatmap's keys): the first
	// ones seen get their own, the rest are counted under "other". The
	// default value is DefaultMetricLabelLimit.
	MetricLabelLimit int
	// MaxMessageBytes is the largest output message the job writes: see
	// sink.MaxMessageBytes. At least sink.MinMaxMessageBytes. The default
	// value is sink.DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Logger receives operational messages. The default value is
	// slog.Default().
	Logger *slog.Logger
	// Registry receives the job's metrics. The default value is a new
	// registry (never the global one).
	Registry *prometheus.Registry
	// Ready, if set, is called once the job consumes, with the brokers it
	// uses (tests use it to know the embedded broker's address).
	Ready func(brokers []string)
	// Now is the wall clock: processing time for the engine (idle
	// partitions, skew) and the merge's waits. The default value is
	// time.Now.
	Now func() time.Time
	// Testing holds what this module's tests and benchmarks set; the zero
	// value for everyone else.
	Testing Testing
}

// Testing is what tests and benchmarks set of a job's Options.
type Testing struct {
	// State holds the state store's filesystem and fault timings; Run
	// sets the rest.
	State state.Options
	// DecisionTimed, if set, receives the times of each decision of the
	// single job as its write is acknowledged, with when the write started
	// and was acknowledged (riskstream_decision_job_latency_seconds and
	// riskstream_decision_stage_seconds are made of them), on the output
	// writer's goroutine; CheckpointPaused, when each checkpoint held the
	// loop, on the loop's. For BenchmarkLive.
	DecisionTimed    func(t sink.DecisionTimes, written, acked int64)
	CheckpointPaused func(from, to int64)
	// HopAll sends every record of a distributed job through the
	// repartition topic, the local tasks' too, for the benchmark of the
	// hop's cost.
	HopAll bool
}

// DefaultPartitionWait is Options.PartitionWait's default: longer than
// the delivery skew between the partitions of a producer sending as fast
// as it can to a broker on a loaded machine (tens of milliseconds), short
// enough that a record of low-rate traffic waits at most a tenth of a
// second for the silent partitions.
const DefaultPartitionWait = 100 * time.Millisecond

// BehindWait is how long a partition known to have records the job has
// not fetched (its leader unreachable, the fetcher reconnecting) holds back
// the others: longer than the fetchers' reconnection backoff, so that a
// broker restart does not reorder records; past it the job goes on without
// the partition rather than stop.
const BehindWait = 30 * time.Second

// DefaultRepartitionPartitions is Options.RepartitionPartitions'
// default: room for a dozen instances, each holding one partition or more.
const DefaultRepartitionPartitions = 12

// Defaults of Options (and of replay.Options, where they share a field).
const (
	DefaultTopic              = produce.DefaultTopic // where produce sends
	DefaultGroup              = "riskstream"
	DefaultCheckpointInterval = time.Second
	DefaultPartitionDiscovery = 10 * time.Second
	DefaultMetricLabelLimit   = 100
	DefaultStandbyReplicas    = 1
)

// EnsureDefaults fills in zero fields with their default values.
func (o *Options) EnsureDefaults() {
	if o.EmbeddedAddr == "" {
		o.EmbeddedAddr = broker.DefaultAddr
	}
	if o.Topic == "" {
		o.Topic = DefaultTopic
	}
	if o.Group == "" {
		o.Group = DefaultGroup
	}
	if t := o.Outputs; t == (sink.Topics{Shadow: t.Shadow}) {
		o.Outputs = sink.DefaultTopics
		o.Outputs.Shadow = t.Shadow
	}
	if o.PartitionDiscovery <= 0 {
		o.PartitionDiscovery = DefaultPartitionDiscovery
	}
	if o.PartitionWait == 0 {
		o.PartitionWait = DefaultPartitionWait
	}
	if o.PartitionWait < 0 {
		o.PartitionWait = 0
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Shards <= 0 {
		o.Shards = runtime.GOMAXPROCS(0)
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = sink.DefaultMaxMessageBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = memory.Default
	}
	if o.MetricLabelLimit <= 0 {
		o.MetricLabelLimit = DefaultMetricLabelLimit
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.RepartitionPartitions <= 0 {
		o.RepartitionPartitions = DefaultRepartitionPartitions
	}
	switch {
	case o.StandbyReplicas == 0:
		o.StandbyReplicas = DefaultStandbyReplicas
	case o.StandbyReplicas < 0:
		o.StandbyReplicas = 0
	}
}

// Validate reports, all at once, the options that cannot work; Run calls
// it after EnsureDefaults. An error of security without brokers is
// ErrEmbeddedSecurity.
func (o *Options) Validate() error {
	var errs []error
	if o.Config == nil {
		errs = append(errs, errors.New("stream: run needs rules (Options.Config)"))
	}
	if o.StateDir == "" {
		errs = append(errs, errors.New("stream: run needs a state directory (Options.StateDir)"))
	}
	if o.MaxMessageBytes < sink.MinMaxMessageBytes {
		errs = append(errs, fmt.Errorf("stream: a maximum message size of %d bytes is less than the least, %d", o.MaxMessageBytes, sink.MinMaxMessageBytes))
	}
	if len(o.Brokers) == 0 && (o.Security.TLS.On() || o.Security.SASL.Mechanism != "") {
		errs = append(errs, ErrEmbeddedSecurity)
	}
	if o.Distributed && len(o.Brokers) == 0 {
		errs = append(errs, errors.New("stream: --distributed needs --brokers: the instances share the job through a Kafka cluster"))
	}
	return errors.Join(errs...)
}

// ErrEmbeddedSecurity is returned by stream.Run when Options ask for TLS or
// SASL without Brokers: the embedded development broker is plaintext, and
// a job that silently ignored the security it was given would be a
// surprise. Start `riskstream broker` or a real cluster and give its
// address.
var ErrEmbeddedSecurity = errors.New("stream: TLS and SASL need --brokers: the embedded development broker (started without --brokers) is plaintext only")

// StopBound is the longest a stop takes, whatever the brokers do: the
// wait for unacknowledged outputs (StopOutputGrace), the final checkpoint,
// and CloseGrace for the rest.
const StopBound = StopOutputGrace + CloseGrace + 5*time.Second

// CloseGrace is how long a stop waits for the job's goroutines and
// connections to end once the final checkpoint is done or given up: one
// blocked on a broker that does not answer is left behind, and the
// process exits without it.
const CloseGrace = 5 * time.Second
