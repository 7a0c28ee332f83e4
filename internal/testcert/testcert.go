// Package testcert makes throwaway certificates for tests of TLS to Kafka:
// a certificate authority, a server certificate it signed for the loopback
// addresses, and a client certificate for mutual TLS. Nothing is kept
// between runs; no key is committed to the repository.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ServerName is a DNS name the server certificate carries besides
// localhost, 127.0.0.1 and ::1, for tests of a server name that differs
// from the address dialled.
const ServerName = "broker.riskstream.test"

// Set is a certificate authority with a server and a client certificate,
// written as PEM files.
type Set struct {
	// CAFile is the authority's certificate.
	CAFile string
	// ServerCert and ServerKey are the server's certificate and key files.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are the client's certificate and key files.
	ClientCert, ClientKey string
	// Pool holds the authority's certificate.
	Pool *x509.CertPool
	// Server is the server's certificate with its key.
	Server tls.Certificate
}

// ServerConfig returns a server TLS configuration presenting the server
// certificate. With clientAuth it also requires a client certificate
// signed by the authority.
func (s *Set) ServerConfig(clientAuth bool) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{s.Server}, MinVersion: tls.VersionTLS12}
	if clientAuth {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = s.Pool
	}
	return c
}

// New makes a fresh set in a temporary directory of t.
func New(t testing.TB) *Set {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "riskstream test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	s := &Set{Pool: x509.NewCertPool()}
	s.Pool.AddCert(ca)
	s.CAFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)

	leaf := func(serial int64, name string, usage x509.ExtKeyUsage, server bool) (certFile, keyFile string, cert tls.Certificate) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if server {
			tmpl.DNSNames = []string{"localhost", ServerName}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile = writePEM(t, dir, name+".pem", "CERTIFICATE", der)
		keyFile = writePEM(t, dir, name+"-key.pem", "PRIVATE KEY", keyDER)
		cert, err = tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		return certFile, keyFile, cert
	}
	s.ServerCert, s.ServerKey, s.Server = leaf(2, "server", x509.ExtKeyUsageServerAuth, true)
	s.ClientCert, s.ClientKey, _ = leaf(3, "client", x509.ExtKeyUsageClientAuth, false)
	return s
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
