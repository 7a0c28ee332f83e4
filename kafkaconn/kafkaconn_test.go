package kafkaconn

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/internal/testcert"
	"github.com/segmentio/kafka-go"
)

func TestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		o    Options
		want []string // each a line of the error; none for valid options
	}{
		"zero":       {},
		"tls alone":  {o: Options{TLS: TLSOptions{Enabled: true}}},
		"mutual TLS": {o: Options{TLS: TLSOptions{CertFile: "c.pem", KeyFile: "k.pem"}}},
		"cert without key": {o: Options{TLS: TLSOptions{CertFile: "c.pem"}},
			want: []string{"TLS client certificate c.pem given without its key file"}},
		"key without cert": {o: Options{TLS: TLSOptions{KeyFile: "k.pem"}},
			want: []string{"TLS client key k.pem given without its certificate file"}},
		"mechanism in any case": {o: Options{SASL: SASLOptions{Mechanism: "Scram-Sha-512", Username: "u", Password: "p"}}},
		"unknown mechanism": {o: Options{SASL: SASLOptions{Mechanism: "GSSAPI", Username: "u", Password: "p"}},
			want: []string{`unknown SASL mechanism "GSSAPI" (want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, in any case)`}},
		"mechanism without credentials": {o: Options{SASL: SASLOptions{Mechanism: "plain"}},
			want: []string{"SASL PLAIN needs a username", "SASL PLAIN needs a password"}},
		"credentials without mechanism": {o: Options{SASL: SASLOptions{Username: "u", Password: "p"}},
			want: []string{"SASL username given without a SASL mechanism", "SASL password given without a SASL mechanism"}},
		"every problem at once": {o: Options{TLS: TLSOptions{CertFile: "c.pem"}, SASL: SASLOptions{Mechanism: "x"}, DialTimeout: -1},
			want: []string{"without its key file", `unknown SASL mechanism "x"`, "negative dial timeout"}},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("valid options refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want %q, got no error", tc.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("want %d problems, got:\n%v", len(tc.want), err)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], "kafkaconn: ") || !strings.Contains(lines[i], w) {
					t.Errorf("problem %d: want %q, got %q", i, w, lines[i])
				}
			}
		})
	}
}

func TestNewLoadsFiles(t *testing.T) {
	certs := testcert.New(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	missing := filepath.Join(dir, "missing-ca.pem")

	s, err := New(Options{})
	if s != nil || err != nil {
		t.Fatalf("zero options: want a nil (plaintext) Security, got %v, %v", s, err)
	}
	if s.String() != "PLAINTEXT" || s.Dialer().TLS != nil || s.Transport().SASL != nil {
		t.Errorf("a nil Security must be plaintext: %v", s)
	}

	s, err = New(Options{TLS: TLSOptions{CAFile: certs.CAFile, CertFile: certs.ClientCert, KeyFile: certs.ClientKey},
		SASL: SASLOptions{Mechanism: "scram-sha-256", Username: "u", Password: "p"}})
	if err != nil {
		t.Fatal(err)
	}
	if s.String() != "SASL_SSL/SCRAM-SHA-256" {
		t.Errorf("String: %s", s)
	}
	d, tr := s.Dialer(), s.Transport()
	if d.TLS == nil || d.TLS.RootCAs == nil || len(d.TLS.Certificates) != 1 || d.SASLMechanism.Name() != "SCRAM-SHA-256" ||
		tr.TLS != d.TLS || tr.SASL.Name() != "SCRAM-SHA-256" || d.Timeout != DefaultDialTimeout || tr.DialTimeout != DefaultDialTimeout {
		t.Errorf("dialer %+v, transport %+v", d, tr)
	}
	if s.Transport() == tr {
		t.Error("each transport must have connections of its own")
	}

	for name, tc := range map[string]struct {
		o    Options
		want []string
	}{
		"missing CA": {o: Options{TLS: TLSOptions{CAFile: missing}},
			want: []string{"TLS CA file: open " + missing + ": no such file or directory"}},
		"CA not PEM": {o: Options{TLS: TLSOptions{CAFile: notPEM}}, want: []string{"TLS CA file " + notPEM + ": no PEM certificate in it"}},
		"key of another certificate": {o: Options{TLS: TLSOptions{CertFile: certs.ClientCert, KeyFile: certs.ServerKey}},
			want: []string{"TLS client certificate " + certs.ClientCert + " and key " + certs.ServerKey + ": tls: private key does not match public key"}},
		"both": {o: Options{TLS: TLSOptions{CAFile: missing, CertFile: notPEM, KeyFile: notPEM}},
			want: []string{missing, "TLS client certificate " + notPEM}},
		"static and file problems": {o: Options{TLS: TLSOptions{CAFile: missing, KeyFile: notPEM}, SASL: SASLOptions{Mechanism: "x"}},
			want: []string{"TLS client key " + notPEM + " given without its certificate file", `unknown SASL mechanism "x"`, missing}},
		"SCRAM credentials not UTF-8": {o: Options{SASL: SASLOptions{Mechanism: "scram-sha-512", Username: "u", Password: "\xff"}},
			want: []string{"SASL SCRAM-SHA-512 credentials"}},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := New(tc.o)
			if err == nil || s != nil {
				t.Fatalf("want an error, got %v", s)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("want %d problems, got:\n%v", len(tc.want), err)
			}
			for i, w := range tc.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("problem %d: want %q, got %q", i, w, lines[i])
				}
			}
		})
	}
}

// TestCheck connects to embedded brokers with and without TLS and SASL:
// the right settings get in, and each wrong one fails promptly with what
// is wrong.
func TestCheck(t *testing.T) {
	certs := testcert.New(t)
	start := func(o broker.Options) string {
		o.Addr = "127.0.0.1:0"
		o.Topics = map[string]int32{"t": 1}
		b, err := broker.Start(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return b.Addr()
	}
	plaintext := start(broker.Options{})
	tlsOnly := start(broker.Options{TLS: certs.ServerConfig(false)})
	mutual := start(broker.Options{TLS: certs.ServerConfig(true)})
	users := []broker.User{{Mechanism: "PLAIN", Name: "alice", Password: "pw"},
		{Mechanism: "scram-sha-256", Name: "bob", Password: "pw256"}, {Mechanism: "SCRAM-SHA-512", Name: "carol", Password: "pw512"}}
	saslSSL := start(broker.Options{TLS: certs.ServerConfig(false), Users: users})
	saslPlaintext := start(broker.Options{Users: users})

	ca := TLSOptions{CAFile: certs.CAFile}
	plain := SASLOptions{Mechanism: "plain", Username: "alice", Password: "pw"}
	for name, tc := range map[string]struct {
		addr string
		o    Options
		want string // in the error; empty for success
	}{
		"plaintext":                             {addr: plaintext},
		"TLS":                                   {addr: tlsOnly, o: Options{TLS: ca}},
		"TLS with the certificate's other name": {addr: tlsOnly, o: Options{TLS: TLSOptions{CAFile: certs.CAFile, ServerName: testcert.ServerName}}},
		"TLS skipping verification":             {addr: tlsOnly, o: Options{TLS: TLSOptions{InsecureSkipVerify: true}}},
		"mutual TLS":                            {addr: mutual, o: Options{TLS: TLSOptions{CAFile: certs.CAFile, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}}},
		"SASL PLAIN over TLS":                   {addr: saslSSL, o: Options{TLS: ca, SASL: plain}},
		"SCRAM-SHA-256 over TLS":                {addr: saslSSL, o: Options{TLS: ca, SASL: SASLOptions{Mechanism: "scram-sha-256", Username: "bob", Password: "pw256"}}},
		"SCRAM-SHA-512 over TLS":                {addr: saslSSL, o: Options{TLS: ca, SASL: SASLOptions{Mechanism: "scram-sha-512", Username: "carol", Password: "pw512"}}},
		"SCRAM-SHA-512 in plaintext":            {addr: saslPlaintext, o: Options{SASL: SASLOptions{Mechanism: "scram-sha-512", Username: "carol", Password: "pw512"}}},

		"wrong PLAIN password": {addr: saslSSL, o: Options{TLS: ca, SASL: SASLOptions{Mechanism: "plain", Username: "alice", Password: "no"}},
			want: `SASL PLAIN as "alice" refused by ` + saslSSL + `: wrong username or password`},
		"wrong SCRAM password": {addr: saslSSL, o: Options{TLS: ca, SASL: SASLOptions{Mechanism: "scram-sha-256", Username: "bob", Password: "no"}},
			want: `SASL SCRAM-SHA-256 as "bob" refused by ` + saslSSL},
		"user of another mechanism": {addr: saslSSL, o: Options{TLS: ca, SASL: SASLOptions{Mechanism: "scram-sha-512", Username: "bob", Password: "pw256"}},
			want: "SASL SCRAM-SHA-512"},
		"plaintext to TLS": {addr: tlsOnly,
			want: "does it expect TLS (--tls) or SASL (--sasl-mechanism)?"},
		"SASL without TLS to TLS": {addr: saslSSL, o: Options{SASL: plain},
			want: "SASL PLAIN with " + saslSSL + ": could not successfully authenticate to " + saslSSL +
				" with SASL: SASL handshake failed: EOF (the broker hung up: does it expect TLS (--tls)?)"},
		"no SASL to SASL": {addr: saslSSL, o: Options{TLS: ca},
			want: "does it require SASL (--sasl-mechanism)?"},
		"TLS to plaintext": {addr: plaintext, o: Options{TLS: ca, DialTimeout: time.Second},
			want: "TLS handshake with " + plaintext + ": no answer within 1s (is it a plaintext listener? TLS is on)"},
		"unknown authority": {addr: tlsOnly, o: Options{TLS: TLSOptions{Enabled: true}},
			want: "certificate signed by unknown authority"},
		"wrong server name": {addr: tlsOnly, o: Options{TLS: TLSOptions{CAFile: certs.CAFile, ServerName: "kafka.example.com"}},
			want: "not kafka.example.com"},
		"mutual TLS without a certificate": {addr: mutual, o: Options{TLS: ca},
			want: "with " + mutual},
		"nothing listening": {addr: "127.0.0.1:1", want: "connect to 127.0.0.1:1"},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := New(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			begin := time.Now()
			err = s.Check(context.Background(), []string{tc.addr})
			if took := time.Since(begin); took > s.DialTimeout()+time.Second {
				t.Errorf("took %v", took)
			}
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error with %q, got %v", tc.want, err)
			}
			t.Log(err)
		})
	}

	t.Run("first broker that answers", func(t *testing.T) {
		s, _ := New(Options{TLS: ca, SASL: plain})
		if err := s.Check(context.Background(), []string{"127.0.0.1:1", saslSSL}); err != nil {
			t.Fatal(err)
		}
		err := s.Check(context.Background(), []string{"127.0.0.1:1", tlsOnly})
		if err == nil || !strings.Contains(err.Error(), "connect to 127.0.0.1:1") || !strings.Contains(err.Error(), tlsOnly) {
			t.Fatalf("want both brokers' errors, got %v", err)
		}
	})
}

// TestDialerAndTransport writes a message through a Transport and reads it
// back through a Dialer, over TLS with SCRAM: the kafka-go connections the
// job makes carry the security, not only Check's.
func TestDialerAndTransport(t *testing.T) {
	certs := testcert.New(t)
	b, err := broker.Start(broker.Options{Addr: "127.0.0.1:0", Topics: map[string]int32{"t": 1}, TLS: certs.ServerConfig(false),
		Users: []broker.User{{Mechanism: "SCRAM-SHA-512", Name: "u", Password: "p"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := New(Options{TLS: TLSOptions{CAFile: certs.CAFile}, SASL: SASLOptions{Mechanism: "scram-sha-512", Username: "u", Password: "p"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := s.Transport()
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Transport: tr, Topic: "t", BatchTimeout: time.Millisecond}
	if err := w.WriteMessages(ctx, kafka.Message{Value: []byte("secret")}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	conn, err := s.Dialer().DialLeader(ctx, "tcp", b.Addr(), "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	m, err := conn.ReadMessage(1 << 20)
	if err != nil || string(m.Value) != "secret" {
		t.Fatalf("read back %q, %v", m.Value, err)
	}
}
