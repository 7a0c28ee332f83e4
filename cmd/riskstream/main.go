// Command riskstream is the stream processing job for real-time risk
// control: see README.md and docs/. This file only wires the commands.
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
// long-lived window state, and for produce (see there). At Go's default of
// 100 the collector runs again and again while the state grows, which
// stays live: wasted CPU and write barriers (BENCHMARKS.md). The embedded
// broker's process keeps the default: its fetch answers are large
// short-lived buffers, and at 400 it faulted in and cleared fresh memory
// for them instead of reusing it. --memory sets the memory limit that
// keeps GOGC 400 from growing the heap past the budget.
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
	var level, format string
	root := &cobra.Command{
		Use:           "riskstream",
		Short:         "Event-time windows, decisions and latency heatmaps over request events",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd); err != nil {
				return err
			}
			l, err := newLogger(cmd.ErrOrStderr(), level, format)
			if err != nil {
				return err
			}
			slog.SetDefault(l)
			return nil
		},
	}
	root.PersistentFlags().StringVar(&level, "log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&format, "log-format", "text", "log format on stderr: text (key=value) or json (one object a line)")
	root.AddCommand(newCheckCmd(), newRunCmd(), newGenCmd(), newReplayCmd(), newProduceCmd(), newBrokerCmd(), newVersionCmd(), newHealthcheckCmd(), newReportCmd())
	documentEnv(root)
	return root
}
