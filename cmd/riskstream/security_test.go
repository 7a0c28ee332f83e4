package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testinput"

	"github.com/riskstream/riskstream/internal/testcert"
	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/spf13/cobra"
)

// TestSecurityFlags parses the --tls-* and --sasl-* flags as run and
// produce do, and checks the options they make or the error they give.
func TestSecurityFlags(t *testing.T) {
	certs := testcert.New(t)
	missing := filepath.Join(t.TempDir(), "nope.pem")
	for name, tc := range map[string]struct {
		args []string
		env  string // RISKSTREAM_SASL_PASSWORD
		want kafkaconn.Options
		err  []string // each in the error
	}{
		"none": {},
		"tls":  {args: []string{"--tls"}, want: kafkaconn.Options{TLS: kafkaconn.TLSOptions{Enabled: true}}},
		"every TLS flag": {
			args: []string{"--tls-ca", certs.CAFile, "--tls-cert", certs.ClientCert, "--tls-key", certs.ClientKey,
				"--tls-server-name", "kafka.internal", "--tls-insecure-skip-verify"},
			want: kafkaconn.Options{TLS: kafkaconn.TLSOptions{CAFile: certs.CAFile, CertFile: certs.ClientCert, KeyFile: certs.ClientKey,
				ServerName: "kafka.internal", InsecureSkipVerify: true}}},
		"password from the environment": {
			args: []string{"--tls", "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", "risk"}, env: "from-env",
			want: kafkaconn.Options{TLS: kafkaconn.TLSOptions{Enabled: true},
				SASL: kafkaconn.SASLOptions{Mechanism: "SCRAM-SHA-512", Username: "risk", Password: "from-env"}}},
		"password flag first": {
			args: []string{"--sasl-mechanism", "plain", "--sasl-username", "risk", "--sasl-password", "from-flag"}, env: "from-env",
			want: kafkaconn.Options{SASL: kafkaconn.SASLOptions{Mechanism: "plain", Username: "risk", Password: "from-flag"}}},
		"environment ignored without SASL": {env: "from-env"},

		"cert without key": {args: []string{"--tls-cert", certs.ClientCert},
			err: []string{"TLS and SASL flags: kafkaconn: TLS client certificate " + certs.ClientCert + " given without its key file"}},
		"unknown mechanism": {args: []string{"--sasl-mechanism", "gssapi", "--sasl-username", "u", "--sasl-password", "p"},
			err: []string{`unknown SASL mechanism "gssapi"`}},
		"no password anywhere": {args: []string{"--sasl-mechanism", "scram-sha-256", "--sasl-username", "u"},
			err: []string{"SASL SCRAM-SHA-256 needs a password"}},
		"username without mechanism": {args: []string{"--sasl-username", "u"},
			err: []string{"SASL username given without a SASL mechanism"}},
		"unreadable CA": {args: []string{"--tls-ca", missing}, err: []string{"TLS CA file: open " + missing}},
		"every problem": {args: []string{"--tls-ca", missing, "--tls-key", certs.ClientKey, "--sasl-mechanism", "md5"},
			err: []string{"without its certificate file", `unknown SASL mechanism "md5"`, "TLS CA file: open " + missing}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(passwordEnv, tc.env)
			var o kafkaconn.Options
			cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
			resolve := addSecurityFlags(cmd, &o)
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			err := resolve()
			if len(tc.err) > 0 {
				for _, w := range tc.err {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("want an error with %q, got %v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o != tc.want {
				t.Errorf("options %+v, want %+v", o, tc.want)
			}
		})
	}
}

// TestSecurityFlagsRefusedAtStart: run and produce refuse bad flags before
// they read rules, inputs or brokers; run refuses TLS and SASL for the
// embedded broker, which is plaintext.
func TestSecurityFlagsRefusedAtStart(t *testing.T) {
	t.Setenv(passwordEnv, "")
	_, err := run(t, "", "produce", "--tls-key", "k.pem", "missing.jsonl")
	if err == nil || !strings.Contains(err.Error(), "TLS client key k.pem given without its certificate file") {
		t.Errorf("produce: %v", err)
	}
	_, err = run(t, "", "run", "--rules", "missing.yaml", "--sasl-mechanism", "kerberos", "--sasl-username", "u")
	if err == nil || !strings.Contains(err.Error(), `unknown SASL mechanism "kerberos"`) {
		t.Errorf("run: %v", err)
	}
	_, err = run(t, "", "run", "--rules", "../../testdata/rules.yaml", "--state-dir", t.TempDir(), "--metrics-addr", "",
		"--tls-insecure-skip-verify")
	if err == nil || !strings.Contains(err.Error(), "TLS and SASL need --brokers") {
		t.Errorf("run on the embedded broker with TLS: %v", err)
	}
}

// startBrokerCommand runs `riskstream broker` with args until the test
// ends, and returns the address it listens on.
func startBrokerCommand(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := newRootCmd()
	logs := &testinput.LockedBuffer{}
	cmd.SetArgs(append([]string{"broker", "--addr", "127.0.0.1:0", "--partitions", "1"}, args...))
	cmd.SetErr(logs)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := regexp.MustCompile(`addr=(\S+)`).FindStringSubmatch(logs.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-done:
			t.Fatalf("broker: %v: %s", err, logs)
		default:
		}
	}
	t.Fatalf("the broker never said where it listens: %s", logs)
	return ""
}

// TestSecuredCommands: `broker` with TLS and a SCRAM user, `produce` and
// `run` against it with the flags, the password from the environment; the
// decisions come out. A wrong password is refused at start.
func TestSecuredCommands(t *testing.T) {
	certs := testcert.New(t)
	addr := startBrokerCommand(t, "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey,
		"--sasl-user", "scram-sha-512:risk:pa:ss")
	t.Setenv(passwordEnv, "pa:ss")
	secured := []string{"--brokers", addr, "--tls-ca", certs.CAFile, "--sasl-mechanism", "scram-sha-512", "--sasl-username", "risk"}

	var in strings.Builder
	for i := range 7 {
		fmt.Fprintf(&in, `{"id":"c%d","ts":%d,"user":"u1","api":"/pay","latency_ms":3}`+"\n", i, 1732150000000+int64(i)*1000)
	}
	if _, err := run(t, in.String(), append([]string{"produce", "-"}, secured...)...); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, in.String(), append([]string{"produce", "-", "--sasl-password", "wrong"}, secured...)...)
	if err == nil || !strings.Contains(err.Error(), `SASL SCRAM-SHA-512 as "risk" refused`) {
		t.Fatalf("a wrong password: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	job := newRootCmd()
	job.SetArgs(append([]string{"run", "--rules", "../../testdata/rules.yaml", "--state-dir", t.TempDir(), "--metrics-addr", "",
		"--checkpoint-interval", "50ms"}, secured...))
	job.SetErr(&testinput.LockedBuffer{})
	done := make(chan error, 1)
	go func() { done <- job.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	sec, err := kafkaconn.New(kafkaconn.Options{TLS: kafkaconn.TLSOptions{CAFile: certs.CAFile},
		SASL: kafkaconn.SASLOptions{Mechanism: "scram-sha-512", Username: "risk", Password: "pa:ss"}})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, m := range kafkatest.ReadMessages(t, sec.Dialer(), addr, "decisions", 0, 2, 30*time.Second) {
		keys = append(keys, string(m.Key))
	}
	if keys[0] != "c5" || keys[1] != "c6" {
		t.Errorf("decisions for %v, want c5 and c6", keys)
	}
}

func TestBrokerSecurityFlags(t *testing.T) {
	certs := testcert.New(t)
	missing := filepath.Join(t.TempDir(), "nope.pem")
	for name, tc := range map[string]struct {
		args []string
		want []string
	}{
		"cert without key":      {[]string{"--tls-cert", certs.ServerCert}, []string{"--tls-cert and --tls-key go together"}},
		"client CA without TLS": {[]string{"--tls-client-ca", certs.CAFile}, []string{"--tls-client-ca needs --tls-cert and --tls-key"}},
		"bad user":              {[]string{"--sasl-user", "plain:alice"}, []string{`--sasl-user "plain:alice": want MECHANISM:NAME:PASSWORD`}},
		"unknown mechanism":     {[]string{"--sasl-user", "md5:alice:pw"}, []string{`unknown SASL mechanism "md5"`}},
		"every problem": {[]string{"--tls-cert", missing, "--tls-key", certs.ServerKey, "--tls-client-ca", missing, "--sasl-user", "x"},
			[]string{"--tls-cert " + missing, "--tls-client-ca: open " + missing, `--sasl-user "x"`}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := run(t, "", append([]string{"broker", "--addr", "127.0.0.1:0"}, tc.args...)...)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("want an error with %q, got %v", w, err)
				}
			}
		})
	}
	// Mutual TLS: a client with the certificate gets in, one without does not.
	addr := startBrokerCommand(t, "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--tls-client-ca", certs.CAFile)
	check := func(o kafkaconn.Options) error {
		s, err := kafkaconn.New(o)
		if err != nil {
			t.Fatal(err)
		}
		return s.Check(context.Background(), []string{addr})
	}
	if err := check(kafkaconn.Options{TLS: kafkaconn.TLSOptions{CAFile: certs.CAFile, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}}); err != nil {
		t.Error(err)
	}
	if err := check(kafkaconn.Options{TLS: kafkaconn.TLSOptions{CAFile: certs.CAFile}}); err == nil {
		t.Error("a client without a certificate got in")
	}
}
