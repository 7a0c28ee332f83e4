package main

import (
	"os"
	"strings"

	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/stream"
	"github.com/spf13/cobra"
)

func newRunCmd() *cobra.Command {
	var rulesFile, brokers, cpuProfile string
	opts := stream.RunOptions{Outputs: sink.DefaultTopics}
	cmd := &cobra.Command{
		Use:   "run --rules FILE [--brokers HOST:PORT,...] [--state-dir DIR] [--metrics-addr :9464]",
		Short: "Run the live job on Kafka (without --brokers, on an embedded development broker)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := rules.Load(rulesFile)
			if err != nil {
				return err
			}
			opts.Config = cfg
			if brokers != "" {
				opts.Brokers = strings.Split(brokers, ",")
				setGCPercent()
			}
			// SIGINT/SIGTERM: stop fetching, drain, flush, checkpoint, exit 0;
			// a second one exits at once.
			ctx, stop := notifyStop(cmd.Context(), cmd.ErrOrStderr(), os.Exit)
			defer stop()
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
	f.StringVar(&brokers, "brokers", "", "Kafka bootstrap brokers, comma-separated (default: start an embedded broker on 127.0.0.1:9092)")
	f.StringVar(&opts.Topic, "topic", "requests", "input topic")
	f.StringVar(&opts.Group, "group", "riskstream", "consumer group: joined to keep a second instance out, and given the checkpointed offsets for lag tools")
	f.StringVar(&opts.Outputs.Decisions, "decisions-topic", sink.Decisions, "output topic for decisions")
	f.StringVar(&opts.Outputs.Heatmaps, "heatmaps-topic", sink.Heatmaps, "output topic for heatmaps")
	f.StringVar(&opts.Outputs.Late, "late-topic", sink.Late, "output topic for late events")
	f.StringVar(&opts.Outputs.DLQ, "dlq-topic", sink.DLQ, "output topic for invalid records")
	f.StringVar(&opts.StateDir, "state-dir", "riskstream-state", "state folder (Pebble; the embedded broker's data too)")
	f.StringVar(&opts.MetricsAddr, "metrics-addr", ":9464", "address serving /metrics and /healthz; empty for none")
	f.DurationVar(&opts.CheckpointInterval, "checkpoint-interval", 0, "how often state and offsets are checkpointed (default 1s)")
	f.IntVar(&opts.CacheSlots, "cache-slots", 0, "window states kept decoded in memory (default 1048576)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile (go tool pprof) to this file, until the job stops")
	cmd.MarkFlagRequired("rules")
	return cmd
}
