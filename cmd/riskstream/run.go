package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/memory"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/stream"
	"github.com/spf13/cobra"
)

func newRunCmd() *cobra.Command {
	var rulesFile, cpuProfile string
	opts := stream.RunOptions{Outputs: sink.DefaultTopics}
	var resolveSecurity func() error
	cmd := &cobra.Command{
		Use:   "run --rules FILE [--brokers HOST:PORT,...] [--state-dir DIR] [--metrics-addr :9464]",
		Short: "Run the live job on Kafka (without --brokers, on an embedded development broker)",
		Long: `Run the live job: consume the input topic, write decisions, heatmaps, late
and dlq records to their topics, and checkpoint state and offsets to
--state-dir. Without --brokers it starts an embedded development broker,
which is plaintext: the TLS and SASL flags then are refused.
` + securityHelp,
		Example: `  riskstream run --rules rules.yaml
  RISKSTREAM_SASL_PASSWORD=... riskstream run --rules rules.yaml \
    --brokers b-1.example.com:9096,b-2.example.com:9096 \
    --tls --sasl-mechanism scram-sha-512 --sasl-username riskstream`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := resolveSecurity(); err != nil {
				return err
			}
			if err := atLeastOne(cmd, "cache-slots", "shards"); err != nil {
				return err
			}
			if opts.Distributed && len(brokerList(opts.Brokers)) == 0 {
				return fmt.Errorf("--distributed needs --brokers: the instances share the job through a Kafka cluster")
			}
			if opts.RepartitionPartitions < 1 {
				return fmt.Errorf("--repartition-partitions must be at least 1, got %d", opts.RepartitionPartitions)
			}
			if opts.StandbyReplicas < 0 {
				return fmt.Errorf("--standby-replicas must not be negative, got %d", opts.StandbyReplicas)
			}
			if opts.StandbyReplicas == 0 {
				opts.StandbyReplicas = -1 // none, not the default
			}
			if opts.PartitionWait < 0 {
				return fmt.Errorf("--partition-wait must not be negative, got %v", opts.PartitionWait)
			}
			if opts.PartitionWait == 0 {
				opts.PartitionWait = -1 // no wait, not the default
			}
			if _, err := memory.NewPlan(opts.MemoryBytes, max(opts.Shards, 1)); err != nil {
				return fmt.Errorf("--memory: %w", err)
			}
			cfg, err := loadRules(rulesFile)
			if err != nil {
				return err
			}
			opts.Config = cfg
			if !cmd.Flags().Changed("state-dir") {
				slog.Info("state in the default folder (--state-dir)", "dir", opts.StateDir)
			}
			if opts.Brokers = brokerList(opts.Brokers); len(opts.Brokers) > 0 {
				setGCPercent()
				memory.SetLimit(opts.MemoryBytes)
			}
			// SIGINT/SIGTERM: stop fetching, drain, flush, checkpoint, exit 0;
			// a second one exits at once.
			ctx, stop := notifyStop(cmd.Context(), cmd.ErrOrStderr(), os.Exit)
			defer stop()
			reload, stopReload := notifyReload()
			defer stopReload()
			opts.ReloadRules = reload
			stopProfile, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			return stream.Run(ctx, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&rulesFile, "rules", "", "rules file (YAML); required")
	f.BoolVar(&opts.WatchRules, "watch-rules", true, "reload the rules file when it changes, as on SIGHUP, keeping the state of the rules whose definition is unchanged (with --distributed, for every instance)")
	addBrokersFlag(cmd, &opts.Brokers, "start an embedded broker on 127.0.0.1:9092")
	f.StringVar(&opts.Topic, "topic", stream.DefaultTopic, "input topic")
	f.StringVar(&opts.Group, "group", stream.DefaultGroup, "consumer group: joined to keep a second instance out (with --distributed, shared by the instances), and given the checkpointed offsets for lag tools")
	f.BoolVar(&opts.Distributed, "distributed", false, "share the job with the other instances of --group: one routes the input by key to the repartition topic, in the single job's order, and each holds the state of some of its partitions (docs/distributed.md); needs --brokers")
	f.IntVar(&opts.StandbyReplicas, "standby-replicas", 1, "with --distributed: standby copies of each repartition partition's state kept on other instances, which take it over without reading its whole changelog; 0 for none")
	f.IntVar(&opts.RepartitionPartitions, "repartition-partitions", stream.DefaultRepartitionPartitions, "with --distributed: partitions of the internal repartition and changelog topics, the most instances that hold state; fixed once the topics exist")
	f.StringVar(&opts.Outputs.Decisions, "decisions-topic", sink.Decisions, "output topic for decisions")
	f.StringVar(&opts.Outputs.Shadow, "shadow-decisions-topic", "", "output topic for the decisions of rules in mode shadow (default: the decisions topic, marked \"mode\": \"shadow\")")
	f.StringVar(&opts.Outputs.Heatmaps, "heatmaps-topic", sink.Heatmaps, "output topic for heatmaps")
	f.StringVar(&opts.Outputs.Late, "late-topic", sink.Late, "output topic for late events")
	f.StringVar(&opts.Outputs.DLQ, "dlq-topic", sink.DLQ, "output topic for invalid records")
	f.StringVar(&opts.StateDir, "state-dir", defaultStateDir(), "state folder: checkpointed window state and offsets (Pebble), and the embedded broker's data")
	f.StringVar(&opts.MetricsAddr, "metrics-addr", ":9464", "address serving /metrics, /healthz and /readyz (200 once restored and consuming); empty for none")
	f.StringVar(&opts.EmbeddedAddr, "broker-addr", broker.DefaultAddr, "where the embedded development broker listens, without --brokers (host:port; port 0 picks one)")
	f.BoolVar(&opts.AllowDroppedState, "allow-dropped-state", false, "start even if --rules removes or changes rules or heatmaps the state holds, deleting their state (refused otherwise)")
	f.BoolVar(&opts.ConsolePublic, "console-public", false, "serve the console at --metrics-addr to other machines too (by default only to this one: it shows keys)")
	f.DurationVar(&opts.CheckpointInterval, "checkpoint-interval", 0, "how often state and offsets are checkpointed (default 1s)")
	f.DurationVar(&opts.PartitionWait, "partition-wait", stream.DefaultPartitionWait, "how long an input partition with nothing to read holds back the others, so that records are taken in timestamp order across partitions whatever their arrival; 0 waits not at all (docs/design.md \"Order across partitions\")")
	opts.MemoryBytes = memory.Default
	f.Var(byteSize{&opts.MemoryBytes}, "memory", "memory budget: window state, Pebble's caches and data in flight share it, and it is the Go runtime's memory limit unless GOMEMLIMIT is set; what does not fit goes to Pebble on disk (e.g. 1GiB, 512MiB, 64MiB)")
	f.IntVar(&opts.Shards, "shards", 0, "split the window state by key into this many shards, updated in parallel (default: the number of CPUs); outputs do not depend on it")
	f.IntVar(&opts.CacheSlots, "cache-slots", 0, "expert: window states kept decoded, in front of the encoded ones (default: a quarter of the state's share of --memory, at 512 bytes a state)")
	f.IntVar(&opts.MetricLabelLimit, "metrics-label-limit", 100, "label values taken from the input (sources, heatmap keys) that metrics keep per label; later ones are counted as \"other\"")
	f.IntVar(&opts.MaxMessageBytes, "max-message-bytes", sink.DefaultMaxMessageBytes,
		"largest output message (key and value): longer dlq and late records are cut, other messages go to the dlq; at most the output topics' max.message.bytes less a margin")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile (go tool pprof) to this file, until the job stops")
	resolveSecurity = addSecurityFlags(cmd, &opts.Security)
	cmd.MarkFlagRequired("rules")
	return cmd
}

// defaultStateDir is run's --state-dir when none is given: one folder per
// user, whatever the working directory, so that a job restarted from
// elsewhere resumes from its checkpoint (and the embedded broker keeps its
// topics): $XDG_STATE_HOME/riskstream, else ~/.local/state/riskstream, the
// XDG base directory for state that outlives a run. Without a home it is
// riskstream-state in the working directory.
func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "riskstream")
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		return filepath.Join(home, ".local", "state", "riskstream")
	}
	return "riskstream-state"
}
