package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/sink"
	"github.com/spf13/cobra"
)

func newBrokerCmd() *cobra.Command {
	var (
		o          broker.Options
		topic      string
		partitions int32
	)
	cmd := &cobra.Command{
		Use:   "broker [--addr 127.0.0.1:9092] [--data-dir DIR]",
		Short: "Run the embedded development broker alone",
		Long: `Run the Kafka-compatible development broker that 'riskstream run' embeds
when it has no --brokers, as a process of its own, with the input topic and
the default output topics. Point 'run' and 'produce' at it with --brokers,
e.g. to measure the CPU of each process apart (scripts/bench-live). It is
not a production broker.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t := sink.DefaultTopics
			o.Topics = map[string]int32{topic: partitions, t.Decisions: 1, t.Heatmaps: 1, t.Late: 1, t.DLQ: 1}
			b, err := broker.Start(o)
			if err != nil {
				return err
			}
			defer b.Close()
			slog.Warn("development broker, not for production", "addr", b.Addr(), "data", o.DataDir)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Addr, "addr", broker.DefaultAddr, "address to listen on (host:port; port 0 picks one)")
	f.StringVar(&o.DataDir, "data-dir", "", "where to keep topics and offsets (default: in memory)")
	f.StringVar(&topic, "topic", "requests", "input topic to create")
	f.Int32Var(&partitions, "partitions", 4, "partitions of the input topic (as the broker 'run' embeds)")
	return cmd
}
