package main

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/riskstream/riskstream/gen"
	"github.com/spf13/cobra"
)

func newGenCmd() *cobra.Command {
	o := gen.DefaultOptions()
	var out string
	var clocks []string
	var userDist string
	cmd := &cobra.Command{
		Use:   "gen [flags]",
		Short: "Write a deterministic synthetic workload as JSONL",
		Long: `Write a deterministic synthetic workload of request events as JSONL:
users (Zipf or uniform), devices, APIs, channels, merchants, regions, lognormal latencies,
payment bursts and device scraping that trip the example rules, an optional
attack phase of payments that trip them for most events, out-of-order
delivery, a few late and invalid records, and ingest_ts per record. The same
flags always produce the same bytes.`,
		Example: `  riskstream gen --events 2000000 --users 100000 --out /tmp/big.jsonl.gz
  riskstream gen --clock gw-1:step=+200ms@30s --clock gw-2:drift=100
  riskstream gen --events 4000000 --users 10000000 --user-dist uniform --devices-per-user 1 --amount-share 1
  riskstream gen --events 2000000 --users 100000 --attack-duration 100s --attack-share 0.8`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.UserDist = gen.UserDist(userDist)
			for _, c := range clocks {
				clk, err := gen.ParseClock(c)
				if err != nil {
					return fmt.Errorf("--clock: %w", err)
				}
				o.Clocks = append(o.Clocks, clk)
			}
			if err := o.Validate(); err != nil {
				return err
			}
			w, closeFn, err := createOutput(out, cmd.OutOrStdout())
			if err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			st, err := gen.Generate(w, o)
			if cerr := closeFn(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			clocks := make([]string, len(o.Clocks))
			for i, c := range o.Clocks {
				clocks[i] = c.String()
			}
			slog.Info("generated", "records", st.Records, "invalid", st.Invalid, "late", st.Late,
				"bursts", st.Bursts, "scrapes", st.Scrapes, "attack", st.Attack, "clocks", clocks, "out", out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "out", "o", "-", "output file (.gz compresses); - is stdout")
	f.Uint64Var(&o.Seed, "seed", o.Seed, "random seed")
	f.IntVar(&o.Events, "events", o.Events, "records to write, invalid ones included")
	f.IntVar(&o.Users, "users", o.Users, "user population")
	f.StringVar(&userDist, "user-dist", string(o.UserDist), "how normal traffic picks users: zipf (a few hot) or uniform")
	f.IntVar(&o.DevicesPerUser, "devices-per-user", o.DevicesPerUser, "devices of each user (0: 1-3, fixed per user)")
	f.IntVar(&o.Sources, "sources", o.Sources, "gateway nodes stamping ts (gw-0...)")
	f.Int64Var(&o.Start, "start", o.Start, "epoch ms of the first event")
	f.Float64Var(&o.Rate, "rate", o.Rate, "events per second of event time")
	f.DurationVar(&o.Jitter, "jitter", o.Jitter, "transport delay, uniform in [0, jitter)")
	f.DurationVar(&o.Batching, "batching", o.Batching, "producer batching interval per source (0: none)")
	f.Float64Var(&o.LateFraction, "late", o.LateFraction, "share of background records delivered 35-90 s after they happen, among the traffic of then")
	f.Float64Var(&o.InvalidFraction, "invalid", o.InvalidFraction, "share of invalid records")
	f.Float64Var(&o.BurstRate, "bursts", o.BurstRate, "payment bursts per second of event time")
	f.Float64Var(&o.ScrapeRate, "scrapes", o.ScrapeRate, "device scraping sessions per second of event time")
	f.Float64Var(&o.AmountShare, "amount-share", o.AmountShare, "share of requests other than /pay that carry an amount too")
	f.Float64Var(&o.RFC3339Fraction, "rfc3339", o.RFC3339Fraction, "share of records with an RFC 3339 ts")
	f.DurationVar(&o.AttackStart, "attack-start", o.AttackStart, "start of the attack phase, in event time after --start")
	f.DurationVar(&o.AttackDuration, "attack-duration", o.AttackDuration, "length of the attack phase (0: no attack)")
	f.Float64Var(&o.AttackShare, "attack-share", o.AttackShare, "share of background requests in the attack phase that are attack payments")
	f.IntVar(&o.AttackUsers, "attack-users", o.AttackUsers, "attacking users, spread over the population")
	f.StringArrayVar(&clocks, "clock", nil, "clock error of a source, e.g. gw-1:offset=20ms, gw-2:step=+200ms@30s, gw-3:drift=100 (repeatable)")
	return cmd
}

// createOutput opens path for writing ("-" is stdout), gzip-compressed when
// it ends in .gz; the returned function flushes and closes it.
func createOutput(path string, stdout io.Writer) (io.Writer, func() error, error) {
	var w io.Writer = stdout
	closeFile := func() error { return nil }
	if path != "-" {
		f, err := os.Create(path)
		if err != nil {
			return nil, nil, err
		}
		w, closeFile = f, f.Close
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if !strings.HasSuffix(path, ".gz") {
		return bw, func() error {
			if err := bw.Flush(); err != nil {
				closeFile()
				return err
			}
			return closeFile()
		}, nil
	}
	zw := gzip.NewWriter(bw)
	return zw, func() error {
		err := zw.Close()
		if ferr := bw.Flush(); err == nil {
			err = ferr
		}
		if cerr := closeFile(); err == nil {
			err = cerr
		}
		return err
	}, nil
}
