package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/stream"
	"github.com/spf13/cobra"
)

func newBrokerCmd() *cobra.Command {
	var (
		o          broker.Options
		topic      string
		partitions int32
		sec        brokerSecurity
	)
	cmd := &cobra.Command{
		Use:   "broker [--addr 127.0.0.1:9092] [--data-dir DIR]",
		Short: "Run the embedded development broker alone",
		Long: `Run the Kafka-compatible development broker that 'riskstream run' embeds
when it has no --brokers, as a process of its own, with the input topic and
the default output topics. Point 'run' and 'produce' at it with --brokers,
e.g. to measure the CPU of each process apart (scripts/bench-live). It is
not a production broker.

With --tls-cert and --tls-key it accepts TLS connections only; with
--sasl-user, only clients that authenticate as one of the users: a local
stand-in for a secured cluster, to try run's and produce's --tls-* and
--sasl-* flags against.`,
		Example: `  riskstream broker --tls-cert server.pem --tls-key server-key.pem \
    --sasl-user scram-sha-256:riskstream:secret`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := sec.apply(&o); err != nil {
				return err
			}
			t := sink.DefaultTopics
			o.Topics = map[string]int32{topic: partitions, t.Decisions: 1, t.Heatmaps: 1, t.Late: 1, t.DLQ: 1}
			b, err := broker.Start(o)
			if err != nil {
				return err
			}
			defer b.Close()
			slog.Warn("development broker, not for production", "addr", b.Addr(), "data", o.DataDir)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Addr, "addr", broker.DefaultAddr, "address to listen on (host:port; port 0 picks one)")
	f.StringVar(&o.DataDir, "data-dir", "", "where to keep topics and offsets (default: in memory)")
	f.StringVar(&topic, "topic", stream.DefaultTopic, "input topic to create")
	f.Int32Var(&partitions, "partitions", 4, "partitions of the input topic (as the broker 'run' embeds)")
	f.StringVar(&sec.cert, "tls-cert", "", "PEM server certificate: accept TLS connections only (with --tls-key)")
	f.StringVar(&sec.key, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&sec.clientCA, "tls-client-ca", "", "PEM certificate authorities: require client certificates they signed (mutual TLS)")
	f.StringArrayVar(&sec.users, "sasl-user", nil, "require SASL: a user as MECHANISM:NAME:PASSWORD, MECHANISM one of plain, scram-sha-256, scram-sha-512 (repeatable)")
	return cmd
}

// brokerSecurity holds the broker command's TLS and SASL flags.
type brokerSecurity struct {
	cert, key, clientCA string
	users               []string
}

// apply sets o's TLS and Users from the flags, reporting every problem.
func (s *brokerSecurity) apply(o *broker.Options) error {
	var errs []error
	switch {
	case s.cert != "" && s.key != "":
		cert, err := tls.LoadX509KeyPair(s.cert, s.key)
		if err != nil {
			errs = append(errs, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", s.cert, s.key, err))
		}
		o.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	case s.cert != "" || s.key != "":
		errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
	}
	if s.clientCA != "" {
		if o.TLS == nil {
			errs = append(errs, errors.New("--tls-client-ca needs --tls-cert and --tls-key"))
		} else if pem, err := os.ReadFile(s.clientCA); err != nil {
			errs = append(errs, fmt.Errorf("--tls-client-ca: %w", err))
		} else {
			o.TLS.ClientCAs = x509.NewCertPool()
			o.TLS.ClientAuth = tls.RequireAndVerifyClientCert
			if !o.TLS.ClientCAs.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("--tls-client-ca %s: no PEM certificate in it", s.clientCA))
			}
		}
	}
	for _, u := range s.users {
		parts := strings.SplitN(u, ":", 3)
		if len(parts) != 3 {
			errs = append(errs, fmt.Errorf("--sasl-user %q: want MECHANISM:NAME:PASSWORD", u))
			continue
		}
		o.Users = append(o.Users, broker.User{Mechanism: parts[0], Name: parts[1], Password: parts[2]})
	}
	return errors.Join(errs...)
}
