// Package etcdconn turns the etcdctl-style connection flags (--endpoints,
// --cacert, --cert, --key, --dial-timeout) into etcd v3 clients and HTTPS
// clients for the v2 and /version endpoints. TLS verification is always on.
package etcdconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"

	"github.com/armada/etcd-recovery/internal/etcdinternals"
)

// Config is the connection to one etcd cluster.
type Config struct {
	Endpoints   []string
	CACert      string // PEM file; system roots when empty
	Cert        string // client certificate (mutual TLS)
	Key         string // client key
	DialTimeout time.Duration
}

// Validate checks the flags without touching the network.
func (c Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return errors.New("no etcd endpoints (--endpoints or ETCDCTL_ENDPOINTS)")
	}
	for _, ep := range c.Endpoints {
		if err := ValidateEndpoint(ep); err != nil {
			return err
		}
	}
	if (c.Cert == "") != (c.Key == "") {
		return errors.New("--cert and --key must be given together")
	}
	_, err := c.TLS()
	return err
}

// ValidateEndpoint checks one etcd client endpoint: http://host:port or
// https://host:port, or etcdctl's bare host:port (the scheme then follows
// the TLS flags). Anything else (another scheme, a path, user info, no
// port) is refused with the value named, before anything is dialled.
func ValidateEndpoint(ep string) error {
	bad := func(why string) error {
		return fmt.Errorf("--endpoints %q: %s: want http://host:port or https://host:port", RedactUserInfo(ep), why)
	}
	if ep == "" {
		return bad("empty endpoint")
	}
	if strings.TrimSpace(ep) != ep {
		return bad("leading or trailing space")
	}
	hostport := ep
	if scheme, rest, ok := strings.Cut(ep, "://"); ok {
		switch scheme {
		case "http", "https":
		default:
			return bad(fmt.Sprintf("unknown scheme %q", scheme))
		}
		u, err := url.Parse(ep)
		if err != nil {
			return bad("not a URL")
		}
		switch {
		case u.User != nil:
			return bad("user info is not allowed")
		case u.Opaque != "" || (u.Path != "" && u.Path != "/"):
			return bad("a path is not allowed")
		case u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(rest, "?#"):
			return bad("a query or fragment is not allowed")
		}
		hostport = u.Host
	} else if strings.Contains(ep, "/") || strings.Contains(ep, ":/") {
		return bad("not a URL")
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return bad("no host:port")
	}
	if host == "" {
		return bad("no host")
	}
	if strings.ContainsAny(host, " \t/?#@%") {
		return bad(fmt.Sprintf("invalid host %q", host))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return bad(fmt.Sprintf("invalid port %q", port))
	}
	return nil
}

// RedactUserInfo hides the user info of a URL-like value ("https://user:pass@host"
// becomes "https://REDACTED@host"), so that a value named in an error never
// carries a password.
func RedactUserInfo(v string) string {
	rest, scheme := v, ""
	if s, r, ok := strings.Cut(v, "://"); ok {
		scheme, rest = s+"://", r
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
		return scheme + "REDACTED" + rest[at:]
	}
	return v
}

// Secure reports whether the connection uses TLS: any TLS file is given or
// any endpoint is https.
func (c Config) Secure() bool {
	if c.CACert != "" || c.Cert != "" {
		return true
	}
	for _, ep := range c.Endpoints {
		if strings.HasPrefix(ep, "https://") {
			return true
		}
	}
	return false
}

// TLS builds the client TLS config, or nil for plain http.
func (c Config) TLS() (*tls.Config, error) {
	if !c.Secure() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CACert != "" {
		pem, err := os.ReadFile(c.CACert)
		if err != nil {
			return nil, fmt.Errorf("read --cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no PEM certificates", c.CACert)
		}
		cfg.RootCAs = pool
	}
	if c.Cert != "" {
		pair, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("load --cert/--key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// URL normalises an endpoint to a URL with a scheme: https when TLS is in
// use, http otherwise (etcdctl accepts bare host:port).
func (c Config) URL(ep string) string {
	if strings.Contains(ep, "://") {
		return ep
	}
	if c.Secure() {
		return "https://" + ep
	}
	return "http://" + ep
}

func (c Config) dialTimeout() time.Duration {
	if c.DialTimeout <= 0 {
		return 5 * time.Second
	}
	return c.DialTimeout
}

// Client opens a v3 client to the given endpoints (all of c.Endpoints when
// none are given). It does not wait for a connection: calls fail by their
// own context's deadline when the endpoints are down.
func (c Config) Client(ctx context.Context, endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = c.Endpoints
	}
	tlsCfg, err := c.TLS()
	if err != nil {
		return nil, err
	}
	eps := make([]string, len(endpoints))
	for i, ep := range endpoints {
		eps[i] = c.URL(ep)
	}
	return clientv3.New(clientv3.Config{
		Context:     ctx,
		Endpoints:   eps,
		TLS:         tlsCfg,
		DialTimeout: c.dialTimeout(),
		// Keep-alives notice a member that dies or freezes mid-stream.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		MaxCallRecvMsgSize:   64 << 20,
		Logger:               zap.NewNop(),
		// Fixed 1 MiB flow-control windows: without them gRPC's BDP
		// estimator grows the window to 16 MiB, and that much snapshot data
		// can pile up in memory while the upload applies back-pressure.
		DialOptions: []grpc.DialOption{
			grpc.WithInitialWindowSize(1 << 20),
			grpc.WithInitialConnWindowSize(1 << 20),
			// Receive into a pool that does not clear its buffers
			// (etcdinternals), and read the connection 256 KiB at a
			// time (gRPC's default is 32 KiB).
			experimental.WithBufferPool(etcdinternals.BufferPool()),
			grpc.WithReadBufferSize(256 << 10),
		},
	})
}

// HTTPClient is an HTTP client with the same TLS settings, for the v2 keys
// API and /version.
func (c Config) HTTPClient() (*http.Client, error) {
	tlsCfg, err := c.TLS()
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{
		DialContext:           (&net.Dialer{Timeout: c.dialTimeout()}).DialContext,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   c.dialTimeout(),
		ResponseHeaderTimeout: 30 * time.Second,
	}}, nil
}

// Host returns the host:port of an endpoint URL, for messages.
func Host(ep string) string {
	if u, err := url.Parse(ep); err == nil && u.Host != "" {
		return u.Host
	}
	return ep
}

// Diagnose explains why an endpoint does not answer, where gRPC only says
// "deadline exceeded": it dials the endpoint and, for TLS, completes a
// handshake with the same settings. It returns nil when both succeed.
func (c Config) Diagnose(ctx context.Context, ep string) error {
	u, err := url.Parse(c.URL(ep))
	if err != nil {
		return err
	}
	d := &net.Dialer{Timeout: c.dialTimeout()}
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return fmt.Errorf("dial %s: %w", u.Host, err)
	}
	defer conn.Close()
	if u.Scheme != "https" {
		if speaksTLS(ctx, conn, u.Hostname(), c.dialTimeout()) {
			return fmt.Errorf("%s answers with TLS: plain HTTP to a TLS port? use https://%s", u.Host, u.Host)
		}
		return nil
	}
	tlsCfg, err := c.TLS()
	if err != nil {
		return err
	}
	tlsCfg = tlsCfg.Clone()
	tlsCfg.ServerName = u.Hostname()
	tc := tls.Client(conn, tlsCfg)
	if dl, ok := ctx.Deadline(); ok {
		_ = tc.SetDeadline(dl)
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) || speaksPlainHTTP(ctx, d, u.Host) {
			return fmt.Errorf("TLS handshake with %s: the server does not speak TLS: https to a plain-HTTP port? use http://%s (%w)", u.Host, u.Host, err)
		}
		return fmt.Errorf("TLS handshake with %s: %w", u.Host, err)
	}
	// With mutual TLS the server may reject our certificate only after the
	// handshake: a one-byte read surfaces that alert.
	_ = tc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var b [1]byte
	if _, err := tc.Read(b[:]); err != nil && !IsTimeout(err) && !errors.Is(err, context.DeadlineExceeded) {
		if strings.Contains(err.Error(), "tls:") {
			return fmt.Errorf("TLS with %s: the server rejected our client certificate: %w", u.Host, err)
		}
	}
	return nil
}

// speaksTLS reports whether the server behind conn, dialled for plain
// HTTP, is a TLS server: it is sent a TLS ClientHello, and a TLS answer
// (a handshake, a certificate our roots do not trust, or a TLS alert) says
// so. Nothing is sent over the connection after the handshake, and no
// verification is turned off: a certificate that fails verification is
// itself the proof that the port speaks TLS. A server that answers with
// other bytes, closes the connection or does not answer in time is not
// taken for a TLS server.
func speaksTLS(ctx context.Context, conn net.Conn, host string, timeout time.Duration) bool {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	dl := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = conn.SetDeadline(dl)
	defer func() { _ = conn.SetDeadline(time.Time{}) }()
	err := tls.Client(conn, cfg).HandshakeContext(ctx)
	if err == nil {
		return true
	}
	var (
		rh    tls.RecordHeaderError
		alert tls.AlertError
		cv    *tls.CertificateVerificationError
		ua    x509.UnknownAuthorityError
		hn    x509.HostnameError
		ci    x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &rh):
		return false // the server answered, but not with TLS
	case errors.As(err, &cv), errors.As(err, &ua), errors.As(err, &hn), errors.As(err, &ci), errors.As(err, &alert):
		return true
	}
	// Go's TLS client reports alerts it receives as "remote error: tls: ...".
	return strings.Contains(err.Error(), "remote error: tls:")
}

// speaksPlainHTTP reports whether a server that failed a TLS handshake
// answers plain HTTP instead (etcd's plain listener just closes the
// connection on a ClientHello): a new connection is sent a GET /version,
// and an HTTP status line is the proof.
func speaksPlainHTTP(ctx context.Context, d *net.Dialer, hostport string) bool {
	conn, err := d.DialContext(ctx, "tcp", hostport)
	if err != nil {
		return false
	}
	defer conn.Close()
	dl := time.Now().Add(2 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = conn.SetDeadline(dl)
	if _, err := fmt.Fprintf(conn, "GET /version HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", hostport); err != nil {
		return false
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return false
	}
	return string(buf) == "HTTP/"
}

// IsTimeout reports whether err is (or wraps) a net.Error that timed out:
// a dial, read or TLS handshake past its deadline.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
