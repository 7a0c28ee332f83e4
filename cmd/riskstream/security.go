package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/spf13/cobra"
)

// passwordEnv holds the SASL password when --sasl-password is not given,
// so that it need not appear in ps or a shell's history.
const passwordEnv = "RISKSTREAM_SASL_PASSWORD"

// securityHelp is the part of a Kafka command's help about the flags of
// addSecurityFlags.
const securityHelp = `
A secured cluster (any managed Kafka) needs --tls and/or --sasl-*. --tls
alone verifies the brokers against the system's certificate authorities,
--tls-ca against others; any --tls-* flag implies --tls. SASL mechanisms:
plain, scram-sha-256, scram-sha-512. The password is read from
$` + passwordEnv + ` unless --sasl-password is given. A wrong
password or a TLS mismatch stops the command at start, saying which.`

// addSecurityFlags registers the --tls-* and --sasl-* flags on cmd, bound
// to o. The function it returns completes o once the flags are parsed (the
// password from the environment) and checks it, certificate files
// included; call it first thing in RunE.
func addSecurityFlags(cmd *cobra.Command, o *kafkaconn.Options) (resolve func() error) {
	f := cmd.Flags()
	f.BoolVar(&o.TLS.Enabled, "tls", false, "connect to the brokers over TLS (implied by any other --tls-* flag)")
	f.StringVar(&o.TLS.CAFile, "tls-ca", "", "PEM file of the certificate authorities that sign the brokers' certificates (default: the system's)")
	f.StringVar(&o.TLS.CertFile, "tls-cert", "", "PEM client certificate, for clusters that authenticate clients by certificate (with --tls-key)")
	f.StringVar(&o.TLS.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&o.TLS.ServerName, "tls-server-name", "", "name the brokers' certificates must carry (default: the host of each broker address)")
	f.BoolVar(&o.TLS.InsecureSkipVerify, "tls-insecure-skip-verify", false, "accept any broker certificate (open to impostors: for tests only)")
	f.StringVar(&o.SASL.Mechanism, "sasl-mechanism", "", "SASL mechanism: plain, scram-sha-256 or scram-sha-512 (default: no SASL)")
	f.StringVar(&o.SASL.Username, "sasl-username", "", "SASL username")
	f.StringVar(&o.SASL.Password, "sasl-password", "", "SASL password (default: $"+passwordEnv+", which keeps it out of ps)")
	return func() error {
		if o.SASL.Mechanism != "" && !f.Changed("sasl-password") {
			o.SASL.Password = os.Getenv(passwordEnv)
		}
		if _, err := kafkaconn.New(*o); err != nil {
			return fmt.Errorf("TLS and SASL flags: %w", err)
		}
		if o.SASL.Mechanism != "" && !o.TLS.On() {
			msg := "SASL without TLS: the connections are not encrypted"
			if strings.EqualFold(strings.TrimSpace(o.SASL.Mechanism), kafkaconn.Plain) {
				msg = "SASL PLAIN without TLS: the password travels in clear text"
			}
			slog.Warn(msg + " (add --tls if the brokers offer it)")
		}
		if o.TLS.InsecureSkipVerify {
			slog.Warn("--tls-insecure-skip-verify: the brokers' certificates are not checked")
		}
		return nil
	}
}
