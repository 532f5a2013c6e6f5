package etcdconn

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// diagnose runs Diagnose against one endpoint with a bound well above what
// a loopback dial and handshake take.
func diagnose(t *testing.T, cfg Config, ep string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cfg.Diagnose(ctx, ep)
}

// An http:// endpoint on a TLS port is named as such, with or without TLS
// files, instead of gRPC's deadline ("frozen or overloaded?").
func TestDiagnoseHTTPToTLSPort(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	tlsURL := c.Members[0].ClientURL
	httpURL := "http://" + strings.TrimPrefix(tlsURL, "https://")
	for name, cfg := range map[string]Config{
		"no TLS files":   {Endpoints: []string{httpURL}, DialTimeout: 2 * time.Second},
		"with TLS files": {Endpoints: []string{httpURL}, CACert: c.PKI.CAFile, Cert: c.PKI.ClientCertFile, Key: c.PKI.ClientKeyFile, DialTimeout: 2 * time.Second},
	} {
		err := diagnose(t, cfg, httpURL)
		if err == nil || !strings.Contains(err.Error(), "plain HTTP to a TLS port? use "+tlsURL) {
			t.Errorf("%s: Diagnose(%s) = %v, want the plain-HTTP-to-TLS diagnosis", name, httpURL, err)
		}
	}
}

// The other way round: https:// to a plain port says the server does not
// speak TLS; and http:// to a plain port is fine (no false diagnosis).
func TestDiagnoseTLSToPlainPort(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	httpURL := c.Members[0].ClientURL
	if err := diagnose(t, Config{Endpoints: []string{httpURL}, DialTimeout: 2 * time.Second}, httpURL); err != nil {
		t.Errorf("Diagnose(%s) of a healthy plain member = %v, want nil", httpURL, err)
	}
	pki := testenv.NewPKI(t)
	httpsURL := "https://" + strings.TrimPrefix(httpURL, "http://")
	err := diagnose(t, Config{Endpoints: []string{httpsURL}, CACert: pki.CAFile, DialTimeout: 2 * time.Second}, httpsURL)
	if err == nil || !strings.Contains(err.Error(), "does not speak TLS") || !strings.Contains(err.Error(), "use "+httpURL) {
		t.Errorf("Diagnose(%s) on a plain port = %v, want 'does not speak TLS ... use %s'", httpsURL, err, httpURL)
	}
}

// A member requiring client certificates rejects one from another CA; the
// diagnosis names that (on etcd 3.4, 3.5 and 3.6: TLS 1.2 fails in the
// handshake, TLS 1.3 only on the first read after it).
func TestDiagnoseRejectedClientCertificate(t *testing.T) {
	t.Parallel()
	for _, v := range []testenv.Version{testenv.V34, testenv.V35, testenv.V36} {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, Members: 1, TLS: true})
			other := testenv.NewPKI(t) // a different CA
			ep := c.Members[0].ClientURL
			cfg := Config{Endpoints: []string{ep}, CACert: c.PKI.CAFile, Cert: other.ClientCertFile, Key: other.ClientKeyFile, DialTimeout: 2 * time.Second}
			err := diagnose(t, cfg, ep)
			if err == nil || !strings.Contains(err.Error(), "the server rejected our client certificate") {
				t.Fatalf("Diagnose with a client certificate from another CA = %v, want 'the server rejected our client certificate'", err)
			}
			// The right certificate passes.
			good := Config{Endpoints: []string{ep}, CACert: c.PKI.CAFile, Cert: c.PKI.ClientCertFile, Key: c.PKI.ClientKeyFile, DialTimeout: 2 * time.Second}
			if err := diagnose(t, good, ep); err != nil {
				t.Fatalf("Diagnose with the right client certificate = %v", err)
			}
			// A server certificate from a CA we do not trust is named too.
			wrongCA := Config{Endpoints: []string{ep}, CACert: other.CAFile, Cert: c.PKI.ClientCertFile, Key: c.PKI.ClientKeyFile, DialTimeout: 2 * time.Second}
			if err := diagnose(t, wrongCA, ep); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
				t.Fatalf("Diagnose with the wrong --cacert = %v, want unknown authority", err)
			}
		})
	}
}
