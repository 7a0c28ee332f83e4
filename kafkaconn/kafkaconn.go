// Package kafkaconn builds the security of riskstream's Kafka connections,
// TLS and SASL, in one place. Options say what the cluster requires; New
// checks them, reads the certificate files once, and returns a Security
// from which every Kafka connection of the job and of produce is made:
// Dialer for kafka-go's Conn-based code and consumer groups, Transport for
// its Writer and Client.
//
// The zero Options, and a nil *Security, are plaintext without
// authentication, as a development broker expects.
package kafkaconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// SASL mechanisms, as Kafka names them.
const (
	// Plain sends the username and password as they are: use it over TLS.
	Plain = "PLAIN"
	// ScramSHA256 proves the password without sending it (RFC 7677).
	ScramSHA256 = "SCRAM-SHA-256"
	// ScramSHA512 is SCRAM with SHA-512.
	ScramSHA512 = "SCRAM-SHA-512"
)

// Mechanisms lists the SASL mechanisms Options accept.
var Mechanisms = []string{Plain, ScramSHA256, ScramSHA512}

// DefaultDialTimeout is Options.DialTimeout's default: kafka-go's own
// default dialer's timeout.
const DefaultDialTimeout = 10 * time.Second

// Options describe how to reach a secured cluster. The zero value is
// plaintext without authentication.
type Options struct {
	// TLS configures encryption; off unless one of its fields is set.
	TLS TLSOptions
	// SASL configures authentication; off unless Mechanism is set.
	SASL SASLOptions
	// DialTimeout bounds connecting to a broker: the TCP connection, the
	// TLS handshake and the SASL exchange. The default value is
	// DefaultDialTimeout.
	DialTimeout time.Duration
}

// TLSOptions configure TLS to the brokers.
type TLSOptions struct {
	// Enabled turns TLS on. Setting any other field turns it on too. The
	// default value is false: plaintext.
	Enabled bool
	// CAFile is a PEM file of the certificate authorities that sign the
	// brokers' certificates. The default value is empty: the system's
	// roots, which managed clusters' certificates chain to.
	CAFile string
	// CertFile and KeyFile are the client's PEM certificate and private
	// key, for clusters that authenticate clients by certificate (mutual
	// TLS). Both or neither. The default value is empty: no client
	// certificate.
	CertFile, KeyFile string
	// ServerName is the name the brokers' certificates must carry. The
	// default value is empty: the host of each broker's address.
	ServerName string
	// InsecureSkipVerify accepts any broker certificate. It leaves the
	// connection open to an impostor: for tests only. The default value is
	// false.
	InsecureSkipVerify bool
}

// On reports whether TLS is turned on, explicitly or by another field.
func (t TLSOptions) On() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" ||
		t.ServerName != "" || t.InsecureSkipVerify
}

// SASLOptions configure SASL authentication.
type SASLOptions struct {
	// Mechanism is one of Mechanisms, in any case. The default value is
	// empty: no authentication.
	Mechanism string
	// Username and Password are the credentials. Both are required with a
	// Mechanism.
	Username, Password string
}

// mechanism returns the canonical name of o.Mechanism, or "" when it is
// not one of Mechanisms.
func (s SASLOptions) mechanism() string {
	for _, m := range Mechanisms {
		if strings.EqualFold(strings.TrimSpace(s.Mechanism), m) {
			return m
		}
	}
	return ""
}

// Validate reports every problem in o that can be seen without reading
// files, one per line, or nil.
func (o Options) Validate() error { return joinProblems(o.problems()) }

// joinProblems makes one error of problems, one per line, or nil.
func joinProblems(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	return errors.New("kafkaconn: " + strings.Join(problems, "\nkafkaconn: "))
}

func (o Options) problems() []string {
	var problems []string
	t := o.TLS
	if t.CertFile != "" && t.KeyFile == "" {
		problems = append(problems, fmt.Sprintf("TLS client certificate %s given without its key file", t.CertFile))
	}
	if t.KeyFile != "" && t.CertFile == "" {
		problems = append(problems, fmt.Sprintf("TLS client key %s given without its certificate file", t.KeyFile))
	}
	s := o.SASL
	switch {
	case s.Mechanism == "":
		if s.Username != "" {
			problems = append(problems, "SASL username given without a SASL mechanism")
		}
		if s.Password != "" {
			problems = append(problems, "SASL password given without a SASL mechanism")
		}
	case s.mechanism() == "":
		problems = append(problems, fmt.Sprintf("unknown SASL mechanism %q (want one of %s, in any case)",
			s.Mechanism, strings.Join(Mechanisms, ", ")))
	default:
		if s.Username == "" {
			problems = append(problems, fmt.Sprintf("SASL %s needs a username", s.mechanism()))
		}
		if s.Password == "" {
			problems = append(problems, fmt.Sprintf("SASL %s needs a password", s.mechanism()))
		}
	}
	if o.DialTimeout < 0 {
		problems = append(problems, fmt.Sprintf("negative dial timeout %v", o.DialTimeout))
	}
	return problems
}

// Security is the built form of Options: the TLS configuration with its
// certificates loaded, and the SASL mechanism. A nil *Security is
// plaintext without authentication. It is safe for concurrent use.
type Security struct {
	tls  *tls.Config
	mech sasl.Mechanism
	// user is the SASL username, for error messages.
	user    string
	timeout time.Duration
}

// New checks o and loads its certificate files. The error lists every
// problem, naming the files that could not be used. It returns a nil
// Security, plaintext, for Options that turn on neither TLS nor SASL and
// keep the default DialTimeout.
func New(o Options) (*Security, error) {
	problems := o.problems()
	if len(problems) == 0 && !o.TLS.On() && o.SASL.Mechanism == "" && o.DialTimeout == 0 {
		return nil, nil
	}
	s := &Security{user: o.SASL.Username, timeout: o.DialTimeout}
	if o.TLS.On() {
		t := o.TLS
		s.tls = &tls.Config{
			MinVersion:         tls.VersionTLS12,
			ServerName:         t.ServerName,
			InsecureSkipVerify: t.InsecureSkipVerify,
		}
		if t.CAFile != "" {
			pool, err := loadCA(t.CAFile)
			if err != nil {
				problems = append(problems, err.Error())
			}
			s.tls.RootCAs = pool
		}
		if t.CertFile != "" && t.KeyFile != "" {
			cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
			if err != nil {
				problems = append(problems, fmt.Sprintf("TLS client certificate %s and key %s: %v", t.CertFile, t.KeyFile, err))
			}
			s.tls.Certificates = []tls.Certificate{cert}
		}
	}
	switch m := o.SASL.mechanism(); m {
	case Plain:
		s.mech = plain.Mechanism{Username: o.SASL.Username, Password: o.SASL.Password}
	case ScramSHA256, ScramSHA512:
		if o.SASL.Username == "" || o.SASL.Password == "" {
			break // a problem already
		}
		algo := scram.SHA256
		if m == ScramSHA512 {
			algo = scram.SHA512
		}
		mech, err := scram.Mechanism(algo, o.SASL.Username, o.SASL.Password)
		if err != nil {
			// The username or password is not valid UTF-8 after SASLprep.
			problems = append(problems, fmt.Sprintf("SASL %s credentials: %v", m, err))
		}
		s.mech = mech
	}
	if err := joinProblems(problems); err != nil {
		return nil, err
	}
	return s, nil
}

// loadCA reads a PEM file of certificate authorities.
func loadCA(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("TLS CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("TLS CA file %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// TLS reports whether connections use TLS.
func (s *Security) TLS() bool { return s != nil && s.tls != nil }

// Mechanism is the SASL mechanism connections authenticate with, or ""
// for none.
func (s *Security) Mechanism() string {
	if s == nil || s.mech == nil {
		return ""
	}
	return s.mech.Name()
}

// String names the protocol as Kafka clients' security.protocol does,
// with the SASL mechanism: "PLAINTEXT", "SSL", "SASL_SSL/SCRAM-SHA-256".
func (s *Security) String() string {
	switch {
	case s.TLS() && s.Mechanism() != "":
		return "SASL_SSL/" + s.Mechanism()
	case s.TLS():
		return "SSL"
	case s.Mechanism() != "":
		return "SASL_PLAINTEXT/" + s.Mechanism()
	}
	return "PLAINTEXT"
}

// DialTimeout is how long connecting to a broker may take.
func (s *Security) DialTimeout() time.Duration {
	if s == nil || s.timeout == 0 {
		return DefaultDialTimeout
	}
	return s.timeout
}

// Dialer returns a new dialer for kafka-go's Conn-based code (DialLeader,
// DialContext) and ConsumerGroupConfig.Dialer, with s's security and dial
// timeout.
func (s *Security) Dialer() *kafka.Dialer {
	d := &kafka.Dialer{Timeout: s.DialTimeout(), DualStack: true}
	if s != nil {
		d.TLS, d.SASLMechanism = s.tls, s.mech
	}
	return d
}

// Transport returns a new transport, with connections of its own, for
// kafka-go's Writer and Client, with s's security and dial timeout. The
// caller may set its other fields before first use.
func (s *Security) Transport() *kafka.Transport {
	t := &kafka.Transport{DialTimeout: s.DialTimeout()}
	if s != nil {
		t.TLS, t.SASL = s.tls, s.mech
	}
	return t
}
