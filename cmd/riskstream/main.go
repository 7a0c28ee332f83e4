// Command riskstream is the stream processing job for real-time risk
// control: see README.md and the SPEC. This file only wires the commands.
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "riskstream:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	var level string
	root := &cobra.Command{
		Use:           "riskstream",
		Short:         "Event-time windows, decisions and latency heatmaps over request events",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var l slog.Level
			if err := l.UnmarshalText([]byte(level)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: l})))
			return nil
		},
	}
	root.PersistentFlags().StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	root.AddCommand(newCheckCmd(), newRunCmd(), newGenCmd(), newReplayCmd(), newProduceCmd(), newBrokerCmd())
	return root
}
