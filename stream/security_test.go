package stream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/produce"

	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/internal/testcert"
	"github.com/riskstream/riskstream/kafkaconn"
)

// securedBroker starts the embedded broker on a free loopback port with
// the job's topics, TLS from certs (when given) and SASL users.
func securedBroker(t testing.TB, certs *testcert.Set, users ...broker.User) string {
	t.Helper()
	o := broker.Options{
		Addr:   "127.0.0.1:0",
		Topics: map[string]int32{"requests": 2, "decisions": 1, "heatmaps": 1, "late": 1, "dlq": 1},
		Users:  users,
	}
	if certs != nil {
		o.TLS = certs.ServerConfig(false)
	}
	b, err := broker.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addr()
}

// payBurst writes seven /pay events of one user, a second apart, to a
// file: the bundled rules deny the 6th and 7th (more than 5 in 60 s).
func payBurst(t testing.TB) string {
	t.Helper()
	var b strings.Builder
	for i := range 7 {
		fmt.Fprintf(&b, `{"id":"s%d","ts":%d,"user":"u1","api":"/pay","latency_ms":3}`+"\n", i, 1732150000000+int64(i)*1000)
	}
	path := filepath.Join(t.TempDir(), "burst.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// readSecured reads n messages of partition 0 of topic with sec's dialer.
func readSecured(t testing.TB, sec kafkaconn.Options, addr, topic string, n int) []string {
	t.Helper()
	s, err := kafkaconn.New(sec)
	if err != nil {
		t.Fatal(err)
	}
	return kafkatest.Values(kafkatest.ReadMessages(t, s.Dialer(), addr, topic, 0, n, 30*time.Second))
}

// TestSecuredCluster runs produce and the live job against brokers that
// require TLS, SASL PLAIN over TLS, and SCRAM: the records go in, and the
// decisions come out.
func TestSecuredCluster(t *testing.T) {
	certs := testcert.New(t)
	ca := kafkaconn.TLSOptions{CAFile: certs.CAFile}
	for name, tc := range map[string]struct {
		users []broker.User
		sec   kafkaconn.Options
	}{
		"TLS": {sec: kafkaconn.Options{TLS: ca}},
		"SASL PLAIN over TLS": {users: []broker.User{{Mechanism: "PLAIN", Name: "risk", Password: "p1"}},
			sec: kafkaconn.Options{TLS: ca, SASL: kafkaconn.SASLOptions{Mechanism: "plain", Username: "risk", Password: "p1"}}},
		"SCRAM-SHA-256 over TLS": {users: []broker.User{{Mechanism: "SCRAM-SHA-256", Name: "risk", Password: "p256"}},
			sec: kafkaconn.Options{TLS: ca, SASL: kafkaconn.SASLOptions{Mechanism: "scram-sha-256", Username: "risk", Password: "p256"}}},
		"SCRAM-SHA-512 over TLS": {users: []broker.User{{Mechanism: "SCRAM-SHA-512", Name: "risk", Password: "p512"}},
			sec: kafkaconn.Options{TLS: ca, SASL: kafkaconn.SASLOptions{Mechanism: "SCRAM-SHA-512", Username: "risk", Password: "p512"}}},
	} {
		t.Run(name, func(t *testing.T) {
			addr := securedBroker(t, certs, tc.users...)
			st, err := produce.Run(context.Background(), produce.Options{File: payBurst(t), Brokers: []string{addr}, Security: tc.sec, Key: "user"})
			if err != nil || st.Records != 7 {
				t.Fatalf("produce: %+v, %v", st, err)
			}
			stop := startJob(t, RunOptions{Brokers: []string{addr}, Security: tc.sec, CheckpointInterval: 50 * time.Millisecond})
			got := readSecured(t, tc.sec, addr, "decisions", 2)
			stop()
			if !strings.HasPrefix(got[0], `{"id":"s5/pay-burst"`) || !strings.HasPrefix(got[1], `{"id":"s6/pay-burst"`) {
				t.Fatalf("decisions:\n%s", strings.Join(got, "\n"))
			}
		})
	}
}

// TestSecurityRefused: produce and the job, given the wrong security for
// a cluster, stop promptly with what is wrong instead of retrying an EOF;
// a restart, which reads its outputs before it joins the group, too.
func TestSecurityRefused(t *testing.T) {
	certs := testcert.New(t)
	saslSSL := securedBroker(t, certs, broker.User{Mechanism: "SCRAM-SHA-512", Name: "risk", Password: "right"})
	plaintext := securedBroker(t, nil)
	ca := kafkaconn.TLSOptions{CAFile: certs.CAFile}
	file := payBurst(t)
	right := kafkaconn.Options{TLS: ca, SASL: kafkaconn.SASLOptions{Mechanism: "scram-sha-512", Username: "risk", Password: "right"}}
	for name, tc := range map[string]struct {
		addr       string
		sec, right kafkaconn.Options
		want       string
	}{
		"wrong password": {addr: saslSSL, right: right, sec: kafkaconn.Options{TLS: ca,
			SASL: kafkaconn.SASLOptions{Mechanism: "scram-sha-512", Username: "risk", Password: "wrong"}},
			want: `SASL SCRAM-SHA-512 as "risk" refused by ` + saslSSL + `: wrong username or password`},
		"plaintext client, TLS broker": {addr: saslSSL, right: right,
			want: "(PLAINTEXT): kafkaconn: metadata request with " + saslSSL + ": EOF (the broker hung up: does it expect TLS (--tls) or SASL (--sasl-mechanism)?)"},
		"TLS client, plaintext broker": {addr: plaintext, sec: kafkaconn.Options{TLS: ca, DialTimeout: time.Second},
			want: "(SSL): kafkaconn: TLS handshake with " + plaintext + ": no answer within 1s (is it a plaintext listener? TLS is on)"},
	} {
		t.Run(name, func(t *testing.T) {
			check := func(what string, err error, took time.Duration) {
				t.Helper()
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: want an error with %q, got %v", what, tc.want, err)
				}
				// Bounded by the dial timeout, not retried.
				if took > 5*time.Second {
					t.Errorf("%s: failed after %v", what, took)
				}
			}
			start := time.Now()
			_, err := produce.Run(context.Background(), produce.Options{File: file, Brokers: []string{tc.addr}, Security: tc.sec})
			check("produce", err, time.Since(start))
			start = time.Now()
			err = Run(context.Background(), RunOptions{Config: testinput.Rules(t), Brokers: []string{tc.addr}, Security: tc.sec, StateDir: t.TempDir()})
			check("run", err, time.Since(start))
			stateDir := t.TempDir()
			startJob(t, RunOptions{Brokers: []string{tc.addr}, Security: tc.right, StateDir: stateDir})()
			start = time.Now()
			err = Run(context.Background(), RunOptions{Config: testinput.Rules(t), Brokers: []string{tc.addr}, Security: tc.sec, StateDir: stateDir})
			check("restart", err, time.Since(start))
		})
	}
}

// TestEmbeddedBrokerRefusesSecurity: the embedded broker is plaintext, so
// security options without brokers are an error, not silently dropped.
func TestEmbeddedBrokerRefusesSecurity(t *testing.T) {
	err := Run(context.Background(), RunOptions{Config: testinput.Rules(t), StateDir: t.TempDir(), EmbeddedAddr: "127.0.0.1:0",
		Security: kafkaconn.Options{SASL: kafkaconn.SASLOptions{Mechanism: "plain", Username: "u", Password: "p"}}})
	if !errors.Is(err, ErrEmbeddedSecurity) {
		t.Fatalf("want ErrEmbeddedSecurity, got %v", err)
	}
	err = Run(context.Background(), RunOptions{Config: testinput.Rules(t), StateDir: t.TempDir(), Brokers: []string{"127.0.0.1:1"},
		Security: kafkaconn.Options{SASL: kafkaconn.SASLOptions{Mechanism: "kerberos"}}})
	if err == nil || !strings.Contains(err.Error(), `unknown SASL mechanism "kerberos"`) {
		t.Fatalf("bad options must fail first: %v", err)
	}
}

// TestKcatSecured proves that a client we did not write reaches a TLS and
// SCRAM broker with the same settings as the job: kcat produces the
// requests and consumes the decisions. Without kcat it is skipped.
func TestKcatSecured(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (apt-get install kcat)")
	}
	certs := testcert.New(t)
	addr := securedBroker(t, certs, broker.User{Mechanism: "SCRAM-SHA-256", Name: "risk", Password: "s3cret"})
	sec := kafkaconn.Options{TLS: kafkaconn.TLSOptions{CAFile: certs.CAFile},
		SASL: kafkaconn.SASLOptions{Mechanism: "scram-sha-256", Username: "risk", Password: "s3cret"}}
	args := func(more ...string) []string {
		return append([]string{"-b", addr, "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-256",
			"-X", "sasl.username=risk", "-X", "sasl.password=s3cret", "-X", "ssl.ca.location=" + certs.CAFile}, more...)
	}
	in, err := os.ReadFile(payBurst(t))
	if err != nil {
		t.Fatal(err)
	}
	produce := exec.Command(kcat, args("-P", "-t", "requests", "-p", "0")...)
	produce.Stdin = bytes.NewReader(in)
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v: %s", err, out)
	}
	stop := startJob(t, RunOptions{Brokers: []string{addr}, Security: sec, CheckpointInterval: 50 * time.Millisecond})
	defer stop()
	var got []byte
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		consume := exec.Command(kcat, args("-C", "-t", "decisions", "-o", "beginning", "-e", "-q", "-f", "%k\n")...)
		if got, err = consume.Output(); err == nil && bytes.Count(got, []byte("\n")) >= 2 {
			break
		}
	}
	if string(got) != "s5\ns6\n" {
		t.Fatalf("kcat read the decisions' keys %q (%v)", got, err)
	}
	// And kcat with a wrong password is refused, as the job is (the embedded
	// broker hangs up on it).
	bad := exec.Command(kcat, append(args("-L", "-m", "2"), "-X", "sasl.password=wrong")...)
	if out, err := bad.CombinedOutput(); err == nil || !bytes.Contains(out, []byte("SASL authentication error")) {
		t.Fatalf("kcat with a wrong password: %v:\n%s", err, out)
	}
}
