package main

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// blackHole is a TCP listener on loopback that accepts connections and
// never answers (a hung load balancer); closed with the test.
func blackHole(t *testing.T) string {
	t.Helper()
	port := testenv.FreePort(t)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// inspect's whole run is bounded (twice --timeout) even when the object
// store asked for backup freshness refuses connections or accepts them and
// never answers, and when the etcd endpoint does the same.
func TestInspectCLIOverallDeadline(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	creds := credsDir(t, "test-access-key", "test-secret-key")
	hole := blackHole(t)
	refused := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) // reserved by testenv, nothing listens
	const timeout = time.Second
	// Bound: the run's own cap (2 x --timeout) plus 3 s of slack for a busy machine.
	const bound = 2*timeout + 3*time.Second
	for name, tc := range map[string]struct {
		etcd []string
		cos  string
		code int
	}{
		"store never answers":         {inspectEtcdArgs(c), "http://" + hole, exitOK},
		"store refuses":               {inspectEtcdArgs(c), "http://" + refused, exitOK},
		"etcd and store never answer": {[]string{"--endpoints", "http://" + hole}, "http://" + hole, 3},
	} {
		args := concatArgs([]string{"inspect", "--probe-timeout", timeout.String(), "--cluster-id", "deadline",
			"--cos-endpoint", tc.cos, "--bucket", "b", "--cos-credentials-dir", creds, "--cos-max-retries", "5"}, tc.etcd)
		t0 := time.Now()
		code, out, errOut := runCtx(t, context.Background(), args...)
		took := time.Since(t0)
		t.Logf("%s: exit %d in %v", name, code, took.Round(time.Millisecond))
		if took > bound {
			t.Errorf("%s: inspect took %v, want at most %v (2 x --timeout %v + slack)", name, took, bound, timeout)
		}
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d\n%s\n%s", name, code, tc.code, out, errOut)
		}
	}
}

// An http:// endpoint on a TLS member is named as such, at once, instead of
// "frozen or overloaded?" after the timeout.
func TestInspectCLIHTTPToTLSPort(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	tlsURL := c.Members[0].ClientURL
	httpURL := "http://" + strings.TrimPrefix(tlsURL, "https://")
	const timeout = 5 * time.Second
	t0 := time.Now()
	code, out, errOut := runCtx(t, context.Background(), "inspect", "--probe-timeout", timeout.String(), "--endpoints", httpURL)
	took := time.Since(t0)
	t.Logf("exit %d in %v:\n%s", code, took, out)
	if code != 3 || !strings.Contains(out, "plain HTTP to a TLS port? use "+tlsURL) || strings.Contains(out, "frozen or overloaded") {
		t.Fatalf("inspect %s: exit %d, want 3 naming plain HTTP to a TLS port:\n%s\n%s", httpURL, code, out, errOut)
	}
	if took >= timeout {
		t.Errorf("took %v: the diagnosis should end the probe before its %v timeout", took, timeout)
	}
}

// A client certificate from another CA is named as rejected by the server.
func TestInspectCLIRejectedClientCertificate(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	other := testenv.NewPKI(t)
	code, out, errOut := runCtx(t, context.Background(), "inspect", "--probe-timeout", "5s", "--endpoints", c.Members[0].ClientURL,
		"--cacert", c.PKI.CAFile, "--cert", other.ClientCertFile, "--key", other.ClientKeyFile)
	if code != 3 || !strings.Contains(out, "the server rejected our client certificate") {
		t.Fatalf("exit %d, want 3 naming the rejected client certificate:\n%s\n%s", code, out, errOut)
	}
}
