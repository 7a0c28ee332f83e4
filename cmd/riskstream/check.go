package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/riskstream/riskstream/rules"
	"github.com/spf13/cobra"
)

func newCheckCmd() *cobra.Command {
	var diff bool
	cmd := &cobra.Command{
		Use:   "check FILE | check --diff OLD NEW",
		Short: "Validate a rules file without running, or say what changing it would do",
		Long: `Validate a rules file without running: every problem is listed as
FILE:LINE: reason and the command fails. Settings that are valid but
probably not meant (a sliding window whose slide is larger than its size)
are listed as warnings on stderr; the file still passes.

With --diff, validate NEW and print what a job running OLD would do with
its state on reloading NEW (or restarting with it): the rules and heatmaps
kept with their state, restarted empty, removed with their state, and
added.`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case diff && len(args) != 2:
				return fmt.Errorf("check --diff takes two rules files, OLD and NEW, got %d: riskstream check --diff old.yaml new.yaml", len(args))
			case !diff && len(args) != 1:
				return fmt.Errorf("check takes one rules file, got %d (two are compared with --diff OLD NEW)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if diff {
				return checkDiff(cmd.OutOrStdout(), args[0], args[1])
			}
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
	cmd.Flags().BoolVar(&diff, "diff", false, "compare two rules files, OLD and NEW: print what reloading NEW in a job running OLD does to each rule's state")
	return cmd
}

// checkDiff prints what a job running the rules of oldPath does on
// reloading those of newPath: the same diff the engine makes.
func checkDiff(w io.Writer, oldPath, newPath string) error {
	old, err := rules.Load(oldPath)
	if err != nil {
		return err
	}
	cfg, err := rules.Load(newPath)
	if err != nil {
		return err
	}
	if err := rules.CheckReload(old, cfg); err != nil {
		return fmt.Errorf("%s cannot be reloaded over %s: %w", newPath, oldPath, err)
	}
	d := rules.DiffIdentities(old.Identities(), cfg.Identities())
	kept, restarted, removed, added := d.Groups()
	fmt.Fprintf(w, "%s -> %s: %d kept with their state, %d restarted empty, %d removed, %d added\n",
		oldPath, newPath, len(kept), len(restarted), len(removed), len(added))
	for _, id := range kept {
		fmt.Fprintf(w, "kept       %s\n", id)
	}
	for _, id := range restarted {
		fmt.Fprintf(w, "restarted  %s: its definition changed, its state starts empty\n", id)
	}
	for _, id := range removed {
		fmt.Fprintf(w, "removed    %s: its state is deleted\n", id)
	}
	for _, id := range added {
		fmt.Fprintf(w, "added      %s\n", id)
	}
	return nil
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
