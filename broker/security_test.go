package broker

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/testcert"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/plain"
)

// TestTLSAndUsers: a broker with TLS and SASL users lets in a client that
// does both, and no other.
func TestTLSAndUsers(t *testing.T) {
	certs := testcert.New(t)
	b, err := Start(Options{Addr: "127.0.0.1:0", Topics: map[string]int32{"t": 1}, TLS: certs.ServerConfig(false),
		Users: []User{{Mechanism: "plain", Name: "alice", Password: "pw"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clientTLS := &tls.Config{RootCAs: certs.Pool, MinVersion: tls.VersionTLS12}
	write := func(tr *kafka.Transport) error {
		defer tr.CloseIdleConnections()
		w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Transport: tr, Topic: "t", BatchTimeout: time.Millisecond}
		defer w.Close()
		return w.WriteMessages(ctx, kafka.Message{Value: []byte("v")})
	}
	if err := write(&kafka.Transport{TLS: clientTLS, SASL: plain.Mechanism{Username: "alice", Password: "pw"}}); err != nil {
		t.Fatalf("TLS and SASL: %v", err)
	}
	if err := write(&kafka.Transport{TLS: clientTLS, SASL: plain.Mechanism{Username: "alice", Password: "no"}}); err == nil {
		t.Error("a wrong password got in")
	}
	if err := write(&kafka.Transport{TLS: clientTLS}); err == nil {
		t.Error("a client without SASL got in")
	}
	if err := write(&kafka.Transport{SASL: plain.Mechanism{Username: "alice", Password: "pw"}}); err == nil {
		t.Error("a client without TLS got in")
	}
}

func TestUsersRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		u    User
		want string
	}{
		"unknown mechanism": {User{Mechanism: "GSSAPI", Name: "u", Password: "p"},
			`user "u": unknown SASL mechanism "GSSAPI" (want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)`},
		"no password": {User{Mechanism: "scram-sha-256", Name: "u"}, "a SCRAM-SHA-256 user needs a name and a password"},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := Start(Options{Addr: "127.0.0.1:0", Users: []User{tc.u}})
			if err == nil {
				b.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want %q, got %v", tc.want, err)
			}
		})
	}
}

// TestValidate: options that cannot work are reported all at once, before
// the broker listens.
func TestValidate(t *testing.T) {
	o := Options{Topics: map[string]int32{"requests": 0}, Users: []User{{Mechanism: "GSSAPI", Name: "u", Password: "p"}, {Mechanism: "plain", Name: "v"}}}
	o.EnsureDefaults()
	if o.Addr != DefaultAddr || o.Logger == nil {
		t.Fatalf("defaults: %+v", o)
	}
	err := o.Validate()
	for _, want := range []string{"topic requests with 0 partitions", `unknown SASL mechanism "GSSAPI"`, "a PLAIN user needs a name and a password"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to say %q", err, want)
		}
	}
	if err := (&Options{Topics: map[string]int32{"requests": 4}, Users: []User{{Mechanism: "scram-sha-512", Name: "u", Password: "p"}}}).Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

// TestSASLHandshakeAdvertised: with users, the broker advertises the SASL
// handshake from version 0, as Kafka does, which librdkafka needs to try
// SASL at all; other versions are kfake's.
func TestSASLHandshakeAdvertised(t *testing.T) {
	versions := func(o Options) map[int16]kafka.ApiVersion {
		t.Helper()
		o.Addr = "127.0.0.1:0"
		b, err := Start(o)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		conn, err := kafka.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		vs, err := conn.ApiVersions()
		if err != nil {
			t.Fatal(err)
		}
		m := map[int16]kafka.ApiVersion{}
		for _, v := range vs {
			m[v.ApiKey] = v
		}
		return m
	}
	const saslHandshake, saslAuthenticate, produce = 17, 36, 0
	plain := versions(Options{})
	sasl := versions(Options{Users: []User{{Mechanism: "SCRAM-SHA-256", Name: "u", Password: "p"}}})
	if h := plain[saslHandshake]; h.MinVersion != 1 || h.MaxVersion != 1 {
		t.Fatalf("kfake's own SaslHandshake versions changed: %+v; see advertiseSASLHandshakeV0", h)
	}
	if h := sasl[saslHandshake]; h.MinVersion != 0 || h.MaxVersion != 1 {
		t.Errorf("SaslHandshake with users: %+v, want versions 0 to 1", h)
	}
	if len(sasl) != len(plain) || sasl[saslAuthenticate] != plain[saslAuthenticate] || sasl[produce] != plain[produce] {
		t.Errorf("other versions differ:\n%v\n%v", plain, sasl)
	}
}
