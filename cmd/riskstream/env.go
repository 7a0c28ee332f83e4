package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envPrefix starts the name of the environment variable of every flag:
// --state-dir is RISKSTREAM_STATE_DIR.
const envPrefix = "RISKSTREAM_"

// envHelp is the part of every command's help about envName.
const envHelp = `Every flag can be set from the environment instead, as ` + envPrefix + ` and
its name in capitals with _ for - (--state-dir: ` + envPrefix + `STATE_DIR), or
the command's name and the flag's where their meaning differs between
commands (` + envPrefix + `GEN_RATE, ` + envPrefix + `PRODUCE_RATE, ` + envPrefix + `REPLAY_TOPIC);
a list flag takes a comma-separated list, a repeatable one a single
value. A flag given on the command line wins over its variable.`

// envName is the environment variable that sets the flag named name of
// the command named command.
func envName(command, name string) string {
	if ownEnv[command][name] {
		name = command + "-" + name
	}
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// ownEnv are the flags whose meaning differs from one command to another,
// by command: their variables name the command (RISKSTREAM_GEN_RATE), so
// that one exported for a command does not set another's (gen's event-
// time rate is not produce's send rate, and replay's --topic turns a
// replay of files into one of a topic).
var ownEnv = map[string]map[string]bool{"gen": {"rate": true}, "produce": {"rate": true}, "replay": {"topic": true}}

// notFromEnv are the flags applyEnv leaves alone: help and version ask
// for something else than a run, and --sasl-password's variable is read by
// addSecurityFlags, only with a SASL mechanism, so that a password
// exported for other commands does not stop a plaintext one.
var notFromEnv = map[string]bool{"help": true, "version": true, "sasl-password": true}

// applyEnv sets every flag of cmd (its parents' persistent ones included)
// not given on the command line from its environment variable, if set.
// It runs once the flags are parsed, before the command checks its
// required flags.
func applyEnv(cmd *cobra.Command) error {
	var errs []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || notFromEnv[f.Name] {
			return
		}
		v, ok := os.LookupEnv(envName(cmd.Name(), f.Name))
		if !ok {
			return
		}
		if err := cmd.Flags().Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Sprintf("$%s: %v", envName(cmd.Name(), f.Name), err))
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("environment: %s", strings.Join(errs, "; "))
	}
	return nil
}

// documentEnv appends each flag's variable to its usage, and envHelp to
// each command's help, for root and every command under it; call it once
// every flag is defined.
func documentEnv(root *cobra.Command) {
	seen := map[*pflag.Flag]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.PersistentFlags(), c.Flags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if !seen[f] && !strings.Contains(f.Usage, "$"+envName(c.Name(), f.Name)) {
					f.Usage += " [$" + envName(c.Name(), f.Name) + "]"
				}
				seen[f] = true
			})
		}
		long := c.Long
		if long == "" {
			long = c.Short + "."
		}
		c.Long = long + "\n\n" + envHelp
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// newLogger returns the logger of --log-level and --log-format, writing
// to w.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: want text or json, not %q", format)
}
