package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// ClientCommonName is the CN of the client certificate made by NewPKI.
const ClientCommonName = "etcd-recovery-test"

// PKI is a throwaway certificate authority with one server/peer certificate
// and one client certificate, written as PEM files in a temp dir.
type PKI struct {
	Dir            string
	CAFile         string
	ServerCertFile string // EKU ServerAuth+ClientAuth; used for etcd client and peer listeners
	ServerKeyFile  string
	ClientCertFile string // EKU ClientAuth, CN ClientCommonName
	ClientKeyFile  string
	// PeerCertFile, PeerKeyFile and PeerCAFile, when set, are the peer
	// listener's (LoadPKI of a namespace's -peer-tls secret); else the
	// server's certificate and CAFile serve peers too.
	PeerCertFile, PeerKeyFile, PeerCAFile string

	CA        *x509.Certificate
	ServerIPs []net.IP // IP SANs of the server certificate

	caKey      *ecdsa.PrivateKey // kept: tests may issue more certificates
	caPool     *x509.CertPool
	clientCert tls.Certificate
}

// pkiOptions tunes newPKI.
type pkiOptions struct {
	extraIPs []net.IP
	// serverExpired makes the server/peer certificate one that expired an
	// hour ago (valid from two days ago).
	serverExpired bool
}

// NewPKI creates a new CA (ECDSA P-256) and a server/peer certificate valid
// for localhost, 127.0.0.1, ::1 and extraIPs, and a client certificate. Every
// call makes a different CA, so a second PKI is "the wrong CA" for the first.
func NewPKI(tb testing.TB, extraIPs ...net.IP) *PKI {
	tb.Helper()
	p, err := newPKI(tb.TempDir(), pkiOptions{extraIPs: extraIPs})
	if err != nil {
		tb.Fatalf("testenv: creating PKI: %v", err)
	}
	return p
}

func newPKI(dir string, opts pkiOptions) (*PKI, error) {
	now := time.Now()
	notBefore, notAfter := now.Add(-time.Hour), now.Add(365*24*time.Hour)
	serverNB, serverNA := notBefore, notAfter
	if opts.serverExpired {
		serverNB, serverNA = now.Add(-48*time.Hour), now.Add(-time.Hour)
	}

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "etcd-recovery-test-ca " + randHex(4), Organization: []string{"etcd-recovery tests"}},
		NotBefore:             now.Add(-72 * time.Hour), // covers expired certificates it issues
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	ips := []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}
	for _, ip := range opts.extraIPs {
		if !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}

	p := &PKI{
		Dir:            dir,
		CAFile:         filepath.Join(dir, "ca.crt"),
		ServerCertFile: filepath.Join(dir, "server.crt"),
		ServerKeyFile:  filepath.Join(dir, "server.key"),
		ClientCertFile: filepath.Join(dir, "client.crt"),
		ClientKeyFile:  filepath.Join(dir, "client.key"),
		CA:             ca,
		ServerIPs:      ips,
		caKey:          caKey,
	}
	if err := writePEM(p.CAFile, "CERTIFICATE", caDER, 0o644); err != nil {
		return nil, err
	}

	if err := p.issue(&x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "etcd-recovery-test-server", Organization: []string{"etcd-recovery tests"}},
		NotBefore:    serverNB,
		NotAfter:     serverNA,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  ips,
	}, p.ServerCertFile, p.ServerKeyFile); err != nil {
		return nil, err
	}
	if err := p.issueClient(false, p.ClientCertFile, p.ClientKeyFile); err != nil {
		return nil, err
	}

	p.caPool = x509.NewCertPool()
	p.caPool.AddCert(ca)
	p.clientCert, err = tls.LoadX509KeyPair(p.ClientCertFile, p.ClientKeyFile)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// PKIFiles are the PEM files of a PKI made elsewhere (an EtcdCluster's
// TLS secrets, written to files): LoadPKI.
type PKIFiles struct {
	CA, ServerCert, ServerKey string // required
	PeerCA, PeerCert, PeerKey string // optional: the peer listener's
	ClientCert, ClientKey     string // required: ClientTLS presents it
}

// LoadPKI is a PKI of existing files (no CA key: it issues nothing). Its
// ServerIPs are the server certificate's IP SANs. It returns an error
// rather than failing a test: the restore operator stand-in calls it
// from its own goroutine.
func LoadPKI(f PKIFiles) (*PKI, error) {
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(caPEM)
	if blk == nil {
		return nil, fmt.Errorf("%s: no PEM certificate", f.CA)
	}
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.CA, err)
	}
	srvPEM, err := os.ReadFile(f.ServerCert)
	if err != nil {
		return nil, err
	}
	sblk, _ := pem.Decode(srvPEM)
	if sblk == nil {
		return nil, fmt.Errorf("%s: no PEM certificate", f.ServerCert)
	}
	srv, err := x509.ParseCertificate(sblk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.ServerCert, err)
	}
	p := &PKI{Dir: filepath.Dir(f.CA), CAFile: f.CA, ServerCertFile: f.ServerCert, ServerKeyFile: f.ServerKey,
		ClientCertFile: f.ClientCert, ClientKeyFile: f.ClientKey,
		PeerCertFile: f.PeerCert, PeerKeyFile: f.PeerKey, PeerCAFile: f.PeerCA,
		CA: ca, ServerIPs: srv.IPAddresses, caPool: x509.NewCertPool()}
	p.caPool.AddCert(ca)
	if p.clientCert, err = tls.LoadX509KeyPair(f.ClientCert, f.ClientKey); err != nil {
		return nil, err
	}
	return p, nil
}

// peerFiles are the peer listener's certificate, key and CA.
func (p *PKI) peerFiles() (cert, key, ca string) {
	cert, key, ca = p.ServerCertFile, p.ServerKeyFile, p.CAFile
	if p.PeerCertFile != "" && p.PeerKeyFile != "" {
		cert, key = p.PeerCertFile, p.PeerKeyFile
	}
	if p.PeerCAFile != "" {
		ca = p.PeerCAFile
	}
	return cert, key, ca
}

// IssueClient writes another client certificate (CN ClientCommonName) from
// this CA, one that expired an hour ago when expired is true.
func (p *PKI) IssueClient(tb testing.TB, expired bool, certFile, keyFile string) {
	tb.Helper()
	if err := p.issueClient(expired, certFile, keyFile); err != nil {
		tb.Fatalf("testenv: issuing a client certificate: %v", err)
	}
}

func (p *PKI) issueClient(expired bool, certFile, keyFile string) error {
	now := time.Now()
	nb, na := now.Add(-time.Hour), now.Add(365*24*time.Hour)
	if expired {
		nb, na = now.Add(-48*time.Hour), now.Add(-time.Hour)
	}
	return p.issue(&x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: ClientCommonName, Organization: []string{"etcd-recovery tests"}},
		NotBefore:    nb,
		NotAfter:     na,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, certFile, keyFile)
}

// IssueServer writes another server/peer certificate from this CA, for the
// same names as ServerCertFile (a rotated certificate: same CA, new key).
func (p *PKI) IssueServer(tb testing.TB, certFile, keyFile string) {
	tb.Helper()
	now := time.Now()
	if err := p.issue(&x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "etcd-recovery-test-server", Organization: []string{"etcd-recovery tests"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  p.ServerIPs,
	}, certFile, keyFile); err != nil {
		tb.Fatalf("testenv: issuing a server certificate: %v", err)
	}
}

// issue signs tmpl with the CA and writes the certificate and a new key.
func (p *PKI) issue(tmpl *x509.Certificate, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.CA, &key.PublicKey, p.caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writePEM(keyFile, "EC PRIVATE KEY", keyDER, 0o600)
}

// ClientTLS returns a new TLS config trusting the CA and presenting the
// client certificate.
func (p *PKI) ClientTLS() *tls.Config {
	return &tls.Config{
		RootCAs:      p.caPool,
		Certificates: []tls.Certificate{p.clientCert},
		MinVersion:   tls.VersionTLS12,
	}
}

// CAPool returns a pool holding only this PKI's CA.
func (p *PKI) CAPool() *x509.CertPool { return p.caPool }

// ServerValidFor reports whether the server certificate has ip as a SAN.
func (p *PKI) ServerValidFor(ip net.IP) bool {
	return slices.ContainsFunc(p.ServerIPs, ip.Equal)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err)
	}
	return n
}

// randHex returns 2*n random hex digits.
func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return fmt.Sprintf("%x", b)
}
