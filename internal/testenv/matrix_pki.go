package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// MatrixPKIOptions configures NewMatrixPKI.
type MatrixPKIOptions struct {
	// ServerExpired makes the server/peer certificate one that expired an
	// hour ago (valid from two days ago).
	ServerExpired bool
}

// MatrixPKI is a PKI whose CA key is kept, so that a test can issue more
// certificates from the same CA (an expired client certificate).
type MatrixPKI struct {
	*PKI
	caKey *ecdsa.PrivateKey
}

// NewMatrixPKI makes a CA, a server/peer certificate for loopback (expired
// with ServerExpired) and a valid client certificate, as NewPKI does.
func NewMatrixPKI(tb testing.TB, opts MatrixPKIOptions) *MatrixPKI {
	tb.Helper()
	dir := tb.TempDir()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "etcd-recovery-matrix-ca " + randHex(4)},
		NotBefore:             now.Add(-72 * time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatal(err)
	}
	p := &MatrixPKI{PKI: &PKI{
		Dir:            dir,
		CAFile:         filepath.Join(dir, "ca.crt"),
		ServerCertFile: filepath.Join(dir, "server.crt"),
		ServerKeyFile:  filepath.Join(dir, "server.key"),
		ClientCertFile: filepath.Join(dir, "client.crt"),
		ClientKeyFile:  filepath.Join(dir, "client.key"),
		CA:             ca,
		ServerIPs:      []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
	}, caKey: caKey}
	if err := writePEM(p.CAFile, "CERTIFICATE", caDER, 0o644); err != nil {
		tb.Fatal(err)
	}
	nb, na := now.Add(-time.Hour), now.Add(365*24*time.Hour)
	if opts.ServerExpired {
		nb, na = now.Add(-48*time.Hour), now.Add(-time.Hour)
	}
	p.issue(tb, &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "etcd-recovery-matrix-server"},
		NotBefore:    nb, NotAfter: na,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"},
		IPAddresses: p.ServerIPs,
	}, p.ServerCertFile, p.ServerKeyFile)
	p.IssueClient(tb, false, p.ClientCertFile, p.ClientKeyFile)
	p.caPool = x509.NewCertPool()
	p.caPool.AddCert(ca)
	if p.clientCert, err = tls.LoadX509KeyPair(p.ClientCertFile, p.ClientKeyFile); err != nil {
		tb.Fatal(err)
	}
	return p
}

// IssueClient writes a client certificate (CN ClientCommonName) from this
// CA, expired an hour ago when expired is true.
func (p *MatrixPKI) IssueClient(tb testing.TB, expired bool, certFile, keyFile string) {
	tb.Helper()
	now := time.Now()
	nb, na := now.Add(-time.Hour), now.Add(365*24*time.Hour)
	if expired {
		nb, na = now.Add(-48*time.Hour), now.Add(-time.Hour)
	}
	p.issue(tb, &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: ClientCommonName},
		NotBefore:    nb, NotAfter: na,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, certFile, keyFile)
}

func (p *MatrixPKI) issue(tb testing.TB, tmpl *x509.Certificate, certFile, keyFile string) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.CA, &key.PublicKey, p.caKey)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := writePEM(keyFile, "EC PRIVATE KEY", keyDER, 0o600); err != nil {
		tb.Fatal(err)
	}
}
