package kafkaconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/segmentio/kafka-go"
)

// Check connects to brokers one after the other, as every connection of
// the job will (TCP, the TLS handshake, SASL authentication), and asks the
// first that lets it in for the cluster's brokers. It returns nil then, or
// an error naming, for every broker, the step that failed.
//
// kafka-go reports a broker that hangs up as an EOF, and a broker that
// never answers as a timeout, at whatever request came next. Check, which
// knows the step, says what such a failure most likely means: a TLS
// listener reached in plaintext, a plaintext listener reached with TLS, a
// broker that requires SASL, or credentials it refused. Each broker takes
// at most the dial timeout.
func (s *Security) Check(ctx context.Context, brokers []string) error {
	if len(brokers) == 0 {
		return errors.New("kafkaconn: no brokers")
	}
	var errs []error
	for _, addr := range brokers {
		err := s.check(ctx, addr)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("kafkaconn: %w", err))
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

func (s *Security) check(ctx context.Context, addr string) (err error) {
	timeout := s.DialTimeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var nd net.Dialer
	raw, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		// The dial error repeats the address and the step: keep its cause.
		var op *net.OpError
		if errors.As(err, &op) {
			err = op.Err
		}
		var sys *os.SyscallError
		if errors.As(err, &sys) {
			err = sys.Err
		}
		return fmt.Errorf("connect to %s: %w", addr, err)
	}
	// kafka-go's Conn sets deadlines of its own; closing the connection
	// when ctx ends is what bounds every step.
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	defer stop()
	defer raw.Close()
	conn := raw
	// failed describes an error of a step after the TCP connection.
	failed := func(step string, err error, hint string) error {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %v", timeout)
		} else if !hungUp(err) {
			hint = ""
		}
		if hint != "" {
			hint = " (" + hint + ")"
		}
		return fmt.Errorf("%s with %s: %w%s", step, addr, err, hint)
	}

	if s.TLS() {
		cfg := s.tls
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return failed("TLS handshake", err, "is it a plaintext listener? TLS is on")
		}
		conn = tc
	}

	d := s.Dialer()
	d.TLS = nil // done above
	d.DialFunc = func(context.Context, string, string) (net.Conn, error) { return conn, nil }
	kc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() == nil {
			switch {
			case errors.Is(err, kafka.SASLAuthenticationFailed):
				return fmt.Errorf("SASL %s as %q refused by %s: wrong username or password: %w", s.Mechanism(), s.user, addr, err)
			case errors.Is(err, kafka.UnsupportedSASLMechanism):
				return fmt.Errorf("SASL with %s: the broker does not offer %s: %w", addr, s.Mechanism(), err)
			}
		}
		hint := "the broker hung up: does it offer SASL " + s.Mechanism() + "?"
		if !s.TLS() {
			hint = "the broker hung up: does it expect TLS (--tls)?"
		}
		return failed("SASL "+s.Mechanism(), err, hint)
	}
	defer kc.Close()
	if _, err := kc.Brokers(); err != nil {
		return failed("metadata request", err, s.hangUpHint())
	}
	return nil
}

// hangUpHint is what a broker hanging up on a request most likely means,
// given what s does.
func (s *Security) hangUpHint() string {
	switch {
	case !s.TLS() && s.Mechanism() == "":
		return "the broker hung up: does it expect TLS (--tls) or SASL (--sasl-mechanism)?"
	case !s.TLS():
		return "the broker hung up: does it expect TLS (--tls)?"
	case s.Mechanism() == "":
		return "the broker hung up: does it require SASL (--sasl-mechanism)?"
	}
	return "the broker hung up"
}

// hungUp reports whether err is the peer closing the connection.
func hungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, os.ErrDeadlineExceeded)
}

// RefusedHint says what to do when no broker accepted a connection (err),
// "" for any other error. defaultAddr, if not empty, is the development
// broker's address, tried as no broker was named.
func RefusedHint(err error, defaultAddr string) string {
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return ""
	}
	if defaultAddr != "" {
		return "nothing listens on " + defaultAddr + ", where 'riskstream run --rules FILE' (without --brokers) starts a development broker: start it first, or name your brokers with --brokers"
	}
	return "nothing listens there: check --brokers and that the brokers are up"
}
