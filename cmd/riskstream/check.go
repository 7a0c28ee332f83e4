package main

import (
	"fmt"

	"github.com/riskstream/riskstream/rules"
	"github.com/spf13/cobra"
)

func newCheckCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a rules file without running",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := rules.Load(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok: %d rules, %d heatmaps, fingerprint %s\n",
				args[0], len(cfg.Rules), len(cfg.Heatmaps), cfg.Fingerprint()[:12])
			return nil
		},
	}
}
