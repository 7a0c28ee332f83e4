package main

import (
	"log/slog"
	"strings"

	"github.com/riskstream/riskstream/produce"
	"github.com/riskstream/riskstream/sink"
	"github.com/spf13/cobra"
)

func newProduceCmd() *cobra.Command {
	var (
		o               produce.Options
		resolveSecurity func() error
	)
	cmd := &cobra.Command{
		Use:   "produce [flags] FILE",
		Short: "Publish a JSONL file of events to Kafka",
		Long: `Publish a file of events (.jsonl, .jsonl.gz, or - for stdin) to Kafka, one
message per line, keyed by the --key attribute. The record timestamp is the
event's ingest_ts when it has one, so a recorded capture replays faithfully,
else the send time. Invalid lines are sent as they are: the job's dlq takes
them. A line larger than --max-message-bytes, or that the broker refuses as
too large for the topic, is not sent: it is reported by file and line, the
rest is sent, and produce exits non-zero at the end. Without --brokers it
publishes to the embedded broker that 'riskstream run' starts on
127.0.0.1:9092.

--retime plays a capture recorded long ago as live traffic: every ts and
ingest_ts is shifted by one offset so that the first record's (its
ingest_ts, else its ts) is now, and each record is sent when the wall
clock reaches its shifted ingest_ts (or ts), at the pace it was recorded,
unless --rate is given. Times relative to each other are kept; windows,
aligned to the epoch, fall elsewhere in the traffic, so decisions may
differ a little from a replay of the file. The job's latency, watermark
lag and skew metrics then read as they would live, not as the capture's
age. Without --retime the records go as recorded (a faithful replay).
` + securityHelp,
		Example: `  riskstream produce --retime testdata/requests.jsonl.gz
  riskstream gen --events 100000 | riskstream produce --rate 5000 -
  riskstream produce --brokers kafka-1:9092,kafka-2:9092 --key user /tmp/big.jsonl.gz
  RISKSTREAM_SASL_PASSWORD=... riskstream produce --brokers b-1.example.com:9096 \
    --tls --sasl-mechanism scram-sha-512 --sasl-username riskstream events.jsonl`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := resolveSecurity(); err != nil {
				return err
			}
			// Its heap is small, the records in flight, and it allocates
			// each line: at Go's default target it collects many times a
			// second at a high rate (BENCHMARKS.md).
			setGCPercent()
			o.Brokers = brokerList(o.Brokers)
			o.File = args[0]
			o.Stdin = cmd.InOrStdin()
			st, err := produce.Run(cmd.Context(), o)
			if err != nil && st.Records+st.TooLarge+st.Failed == 0 {
				return err
			}
			slog.Info("produced", "records", st.Records, "with_ingest_ts", st.WithIngestTS,
				"keyless", st.Keyless, "too_large", st.TooLarge, "failed", st.Failed,
				"topic", o.Topic, "elapsed", st.Elapsed.Round(1e6), "retimed_by", st.RetimedBy)
			return err
		},
	}
	f := cmd.Flags()
	addBrokersFlag(cmd, &o.Brokers, "the embedded broker that 'riskstream run' starts on 127.0.0.1:9092")
	f.StringVar(&o.Topic, "topic", produce.DefaultTopic, "topic to publish to")
	f.StringVar(&o.Key, "key", produce.DefaultKey, "attribute whose value is the message key")
	f.Float64Var(&o.Rate, "rate", 0, "records per second, steady (0: as fast as possible, or with --retime at the recorded pace)")
	f.BoolVar(&o.Retime, "retime", false, "shift every ts and ingest_ts so that the first record is now, keeping their spacing, and send at the recorded pace (unless --rate)")
	f.IntVar(&o.MaxMessageBytes, "max-message-bytes", sink.DefaultMaxMessageBytes,
		"largest message (key and value) sent; a longer line is reported and not sent")
	resolveSecurity = addSecurityFlags(cmd, &o.Security)
	return cmd
}

// addBrokersFlag registers --brokers on cmd, bound to dst: bootstrap
// addresses, comma-separated or the flag repeated, the same for every
// command. def says what leaving it out means.
func addBrokersFlag(cmd *cobra.Command, dst *[]string, def string) {
	cmd.Flags().StringSliceVar(dst, "brokers", nil, "Kafka bootstrap brokers, HOST:PORT, comma-separated or repeated (default: "+def+")")
}

// brokerList drops the blanks around and between the addresses of
// --brokers ("a:9092, b:9092", a trailing comma).
func brokerList(addrs []string) []string {
	out := addrs[:0]
	for _, a := range addrs {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
