package main

import (
	"fmt"
	"log/slog"

	"github.com/riskstream/riskstream/rules"
	"github.com/spf13/cobra"
)

func newCheckCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a rules file without running",
		Long: `Validate a rules file without running: every problem is listed as
FILE:LINE: reason and the command fails. Settings that are valid but
probably not meant (a sliding window whose slide is larger than its size)
are listed as warnings on stderr; the file still passes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := rules.Load(args[0])
			if err != nil {
				return err
			}
			for _, w := range cfg.Warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok: %d rules, %d heatmaps, fingerprint %s\n",
				args[0], len(cfg.Rules), len(cfg.Heatmaps), cfg.Fingerprint()[:12])
			return nil
		},
	}
}

// loadRules reads and validates the rules file of a job, logging its
// warnings before the job starts.
func loadRules(path string) (*rules.Config, error) {
	cfg, err := rules.Load(path)
	if err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings {
		slog.Warn("rules: " + w.String())
	}
	return cfg, nil
}
