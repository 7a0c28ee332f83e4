package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/memory"
	"github.com/riskstream/riskstream/replay"
	"github.com/riskstream/riskstream/rules"
	"github.com/spf13/cobra"
)

// startCPUProfile writes a CPU profile to path until stop is called; an
// empty path profiles nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func newReplayCmd() *cobra.Command {
	var rulesFile string
	opts := replay.Options{}
	var progress, cpuProfile, from, to string
	var report bool
	var resolveSecurity func() error
	cmd := &cobra.Command{
		Use:   "replay (--rules FILE | --rules-topic TOPIC) [--out DIR] (INPUT... | --brokers HOST:PORT --topic TOPIC [--from POS] [--to POS])",
		Short: "Run the job offline over recorded .jsonl or .jsonl.gz files (- for stdin), or over a Kafka topic",
		Long: `Run the job offline, writing its outputs to files in --out.

The input is recorded files, read in order as one stream, or a Kafka topic
(--brokers, --topic): its partitions are merged by record timestamp as the
live job merges them, so a replay of what the live job read makes the live
job's decisions, id for id. --from and --to bound what is read of the
topic: an offset in every partition (1500), offsets per partition
(0=1500,3=1720) or an RFC 3339 time (2026-11-24T10:00:00Z, the first record
at or after it). By default it reads from the start of each partition to
where it ended when the replay began.
` + securityHelp,
		Example: `  riskstream replay --rules testdata/rules.yaml --out out testdata/requests.jsonl.gz
  riskstream gen --events 100000 | riskstream replay --rules testdata/rules.yaml -
  riskstream replay --rules rules.yaml --brokers localhost:9092 --topic requests --from 2026-11-24T10:00:00Z`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := resolveSecurity(); err != nil {
				return err
			}
			if err := atLeastOne(cmd, "shards", "cache-slots"); err != nil {
				return err
			}
			opts.Brokers = brokerList(opts.Brokers)
			switch {
			case opts.Topic == "" && len(args) == 0:
				return errors.New("name the input files, or a topic with --brokers and --topic")
			case opts.Topic != "" && len(args) > 0:
				return fmt.Errorf("input files %v and --topic %s: replay reads one or the other", args, opts.Topic)
			case opts.Topic != "" && len(opts.Brokers) == 0:
				return errors.New("--topic needs --brokers")
			case opts.Topic == "" && (from != "" || to != ""):
				return errors.New("--from and --to are for a replay of a topic (--topic)")
			case (rulesFile == "") == (opts.RulesTopic == ""):
				return errors.New("name the rules: --rules FILE, or --rules-topic GROUP-rules for a distributed job's, not both")
			case opts.RulesTopic != "" && opts.Topic == "":
				return errors.New("--rules-topic is for a replay of a topic (--topic)")
			}
			var err error
			if opts.From, err = kafkaio.ParsePosition(from); err != nil {
				return fmt.Errorf("--from: %w", err)
			}
			if opts.To, err = kafkaio.ParsePosition(to); err != nil {
				return fmt.Errorf("--to: %w", err)
			}
			if _, err := memory.NewPlan(opts.MemoryBytes, 1); err != nil {
				return fmt.Errorf("--memory: %w", err)
			}
			setGCPercent()
			memory.SetLimit(opts.MemoryBytes)
			if rulesFile != "" {
				if opts.Config, err = loadRules(rulesFile); err != nil {
					return err
				}
			}
			opts.Inputs, opts.Stdin = args, cmd.InOrStdin()
			switch progress {
			case "auto":
				if isTerminal(os.Stderr) {
					opts.Progress = cmd.ErrOrStderr()
				}
			case "on":
				opts.Progress = cmd.ErrOrStderr()
			case "off":
			default:
				return fmt.Errorf("--progress: want auto, on or off, not %q", progress)
			}
			stopProfile, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			sum, err := replay.Run(cmd.Context(), opts)
			if err != nil {
				return err
			}
			printSummary(cmd.OutOrStdout(), sum.Rules, opts.OutDir, sum)
			if report {
				path, err := writeReport(opts.OutDir, "")
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "report    %s\n", path)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&rulesFile, "rules", "", "rules file (YAML); required, but with --rules-topic")
	f.StringVar(&opts.RulesTopic, "rules-topic", "", "with --topic: the rules topic of the distributed job that read it (GROUP-rules), whose versions the replay takes in place of --rules, each reloaded where the job's router began to route by it")
	f.StringVar(&opts.OutDir, "out", "out", "output folder, created if missing")
	f.StringVar(&opts.StateDir, "state-dir", "", "Pebble state folder (default: a temporary folder, removed at the end)")
	opts.MemoryBytes = memory.Default
	f.Var(byteSize{&opts.MemoryBytes}, "memory", "memory budget: window state, Pebble's caches and data in flight share it, and it is the Go runtime's memory limit unless GOMEMLIMIT is set; what does not fit goes to Pebble on disk (e.g. 1GiB, 512MiB, 64MiB)")
	f.IntVar(&opts.CacheSlots, "cache-slots", 0, "expert: window states kept decoded, in front of the encoded ones (default: a quarter of the state's share of --memory, at 512 bytes a state)")
	f.IntVar(&opts.Shards, "shards", 0, "split the window state by key into this many shards, processed in parallel (default: the number of CPUs); outputs do not depend on it")
	f.StringVar(&progress, "progress", "auto", "progress line on stderr: auto (on a terminal), on, off")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile (go tool pprof) to this file")
	f.BoolVar(&report, "report", false, "also write report.html, the outputs drawn as one HTML page (riskstream report), in --out")
	addBrokersFlag(cmd, &opts.Brokers, "none: the input is files")
	f.StringVar(&opts.Topic, "topic", "", "replay this Kafka topic (with --brokers) instead of files")
	f.StringVar(&from, "from", "", "where the replay of --topic starts: OFFSET, PARTITION=OFFSET,... or an RFC 3339 time (default: each partition's start)")
	f.StringVar(&to, "to", "", "where the replay of --topic ends, excluded: OFFSET, PARTITION=OFFSET,... or an RFC 3339 time (default: each partition's end when the replay begins)")
	resolveSecurity = addSecurityFlags(cmd, &opts.Security)
	return cmd
}

// atLeastOne refuses an integer flag given a value below 1; left out, the
// flag keeps its default.
func atLeastOne(cmd *cobra.Command, names ...string) error {
	var errs []error
	for _, name := range names {
		if !cmd.Flags().Changed(name) {
			continue
		}
		if v, err := cmd.Flags().GetInt(name); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", name, err))
		} else if v < 1 {
			errs = append(errs, fmt.Errorf("--%s must be at least 1, got %d", name, v))
		}
	}
	return errors.Join(errs...)
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func printSummary(w io.Writer, cfg *rules.Config, outDir string, s *replay.Summary) {
	dups := ""
	if s.Duplicates > 0 {
		dups = fmt.Sprintf(", duplicate %d", s.Duplicates)
	}
	fmt.Fprintf(w, "records   %d (accepted %d, unmatched %d, late %d, invalid %d%s)\n",
		s.Records, s.Accepted, s.Unmatched, s.Late, s.Invalid, dups)
	for i, r := range cfg.Rules {
		if r.Mode == rules.Shadow {
			fmt.Fprintf(w, "decisions %-24s %d (shadow)\n", r.Name, s.Decisions[i])
		} else {
			fmt.Fprintf(w, "decisions %-24s %d\n", r.Name, s.Decisions[i])
		}
	}
	fmt.Fprintf(w, "heatmap windows fired %d\n", s.WindowsFired)
	for _, src := range s.Sources {
		if src.Transitions > 0 || src.Degraded {
			fmt.Fprintf(w, "skewed    %-24s degraded %v in %d transitions, skew now %v\n",
				src.Source, src.DegradedFor, src.Transitions, src.Skew)
		}
	}
	if s.Retimed > 0 {
		fmt.Fprintf(w, "re-timed  %d events windowed by reference time\n", s.Retimed)
	}
	if s.SourcesForgotten > 0 {
		fmt.Fprintf(w, "sources   %d forgotten by the skew tracker to stay within skew.max_sources\n", s.SourcesForgotten)
	}
	if s.Spilled > 0 || s.SpilledTimers > 0 {
		fmt.Fprintf(w, "spilled   %d states and %d timers to Pebble, beyond --memory\n", s.Spilled, s.SpilledTimers)
	}
	fmt.Fprintf(w, "elapsed   %.3fs, %.0f events/s\n", s.Elapsed.Seconds(), s.EventsPerSecond())
	fmt.Fprintf(w, "outputs   %s/{decisions,heatmaps,late,dlq,skew}.jsonl\n", outDir)
}
