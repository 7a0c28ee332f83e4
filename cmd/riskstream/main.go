// Command riskstream is the stream processing job for real-time risk
// control: see README.md and the SPEC. This file only wires the commands.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// gcPercent is the garbage collector's target, unless GOGC is set, for
// replay and the live job on an external broker, whose heap is mostly
// long-lived window state, and for produce (see there). Go's default of 100
// collected eight times over a 2M-event replay while the state grew (a
// tenth of the CPU, and more in write barriers), three times at 400; the
// live job's CPU per event at 200,000 events/s went from 6.8 to 5.5 µs. The
// embedded broker's process keeps the default: its fetch answers are large
// short-lived buffers, and at 400 it faulted in and cleared fresh memory
// for them instead of reusing it, more than doubling its CPU. Set
// GOMEMLIMIT in containers.
const gcPercent = 400

func setGCPercent() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

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
	root.AddCommand(newCheckCmd(), newRunCmd(), newGenCmd(), newReplayCmd(), newProduceCmd(), newBrokerCmd(), newHealthcheckCmd())
	return root
}
