package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdOptions configures StartEtcd.
type EtcdOptions struct {
	Version           Version // required
	Members           int     // default 3
	TLS               bool    // mutual TLS for clients and peers (https URLs, --client-cert-auth, --peer-client-cert-auth)
	PKI               *PKI    // used when TLS; created when nil
	EnableV2          bool    // --enable-v2=true; 3.4 and 3.5 only (fails the test on 3.6)
	QuotaBackendBytes int64   // --quota-backend-bytes when > 0
	IP                string  // listen IP, default "127.0.0.1"; any 127.0.0.x
	ExtraArgs         []string
}

// MemberSpec describes one etcd member process for StartEtcdMember.
type MemberSpec struct {
	Version             Version // required
	Name                string  // required
	DataDir             string  // required; may already hold a member (e.g. made by `etcdutl snapshot restore`)
	ClientURL           string  // required, http://IP:port or https://IP:port
	PeerURL             string  // required, same scheme as ClientURL
	InitialCluster      string  // default Name=PeerURL
	InitialClusterState string  // "new" (default) or "existing"
	InitialClusterToken string  // default "etcd-cluster", etcd's own default
	PKI                 *PKI    // required when the URLs are https; mutual TLS for clients and peers
	EnableV2            bool
	QuotaBackendBytes   int64
	ExtraArgs           []string
	LogFile             string // default <tb.TempDir()>/<Name>.log; appended to across restarts
}

// EtcdMember is one etcd server process. Its lifetime is bound to the test
// that created it: it is killed by that test's cleanup.
type EtcdMember struct {
	Name      string
	ClientURL string
	PeerURL   string
	DataDir   string
	LogFile   string
	Version   Version

	spec MemberSpec
	bin  string

	procSlot
}

// EtcdCluster is a set of etcd members started together by StartEtcd.
type EtcdCluster struct {
	Version        Version
	Members        []*EtcdMember
	PKI            *PKI   // nil without TLS
	Token          string // --initial-cluster-token
	InitialCluster string // --initial-cluster
	Options        EtcdOptions
}

// StartEtcd starts a new etcd cluster, all members at once, and waits until
// every member answers a linearizable Get. The members are killed, and on
// failure their log tails printed, when tb's test ends.
func StartEtcd(tb testing.TB, opts EtcdOptions) *EtcdCluster {
	tb.Helper()
	opts.Version.check(tb)
	bin := EtcdBin(tb, opts.Version)
	if opts.Members == 0 {
		opts.Members = 3
	}
	if opts.Members < 0 {
		tb.Fatalf("testenv: EtcdOptions.Members = %d", opts.Members)
	}
	if opts.IP == "" {
		opts.IP = "127.0.0.1"
	}
	ip := net.ParseIP(opts.IP)
	if ip == nil || ip.To4() == nil || !ip.IsLoopback() {
		tb.Fatalf("testenv: EtcdOptions.IP %q is not an IPv4 loopback address", opts.IP)
	}
	if opts.EnableV2 && !opts.Version.HasV2() {
		tb.Fatalf("testenv: EnableV2 requested on etcd %s, which has no v2 API", opts.Version)
	}
	scheme := "http"
	if opts.TLS {
		scheme = "https"
		if opts.PKI == nil {
			var extra []net.IP
			if !ip.Equal(net.IPv4(127, 0, 0, 1)) {
				extra = append(extra, ip)
			}
			opts.PKI = NewPKI(tb, extra...)
		} else if !opts.PKI.ServerValidFor(ip) {
			tb.Fatalf("testenv: the PKI's server certificate is not valid for %s: pass it to NewPKI's extraIPs", ip)
		}
	} else {
		opts.PKI = nil
	}

	c := &EtcdCluster{
		Version: opts.Version,
		PKI:     opts.PKI,
		Token:   "testenv-" + randHex(8),
		Options: opts,
	}
	dir := tb.TempDir()
	var specs []MemberSpec
	var ic []string
	for i := range opts.Members {
		name := fmt.Sprintf("m%d", i)
		host := opts.IP
		s := MemberSpec{
			Version:             opts.Version,
			Name:                name,
			DataDir:             filepath.Join(dir, name+".etcd"),
			ClientURL:           fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(host, strconv.Itoa(freePort(tb, host)))),
			PeerURL:             fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(host, strconv.Itoa(freePort(tb, host)))),
			InitialClusterState: "new",
			InitialClusterToken: c.Token,
			PKI:                 opts.PKI,
			EnableV2:            opts.EnableV2,
			QuotaBackendBytes:   opts.QuotaBackendBytes,
			ExtraArgs:           opts.ExtraArgs,
			LogFile:             filepath.Join(dir, name+".log"),
		}
		specs = append(specs, s)
		ic = append(ic, name+"="+s.PeerURL)
	}
	c.InitialCluster = strings.Join(ic, ",")
	for i := range specs {
		specs[i].InitialCluster = c.InitialCluster
		m := newEtcdMember(tb, specs[i], bin)
		if err := m.launch(specs[i].InitialClusterState); err != nil {
			tb.Fatalf("testenv: %v", err)
		}
		c.Members = append(c.Members, m)
	}
	if err := c.waitReady(startTimeout); err != nil {
		tb.Fatalf("testenv: etcd %s cluster did not become healthy within %v: %v", opts.Version, startTimeout, err)
	}
	return c
}

// StartEtcdMember starts one etcd member process as described by spec and
// waits until it listens on its client URL (not until it is ready: a member
// of a new multi-member cluster only becomes ready once a quorum runs; use
// WaitReady). The data dir may already exist, for instance one made by a
// snapshot restore. The member is killed when tb's test ends.
func StartEtcdMember(tb testing.TB, spec MemberSpec) *EtcdMember {
	tb.Helper()
	return StartEtcdMembers(tb, spec)[0]
}

// StartEtcdMembers starts every member at once, as a cluster's pods start,
// and then waits for each to listen: StartEtcdMember one after the other
// waits for each member's backend to load before the next one starts.
func StartEtcdMembers(tb testing.TB, specs ...MemberSpec) []*EtcdMember {
	tb.Helper()
	var ms []*EtcdMember
	for _, spec := range specs {
		m := launchMember(tb, spec)
		ms = append(ms, m)
	}
	for _, m := range ms {
		if err := m.waitListening(startTimeout); err != nil {
			tb.Fatalf("testenv: %v", err)
		}
	}
	return ms
}

// launchMember checks spec and starts its etcd without waiting for it.
func launchMember(tb testing.TB, spec MemberSpec) *EtcdMember {
	tb.Helper()
	spec.Version.check(tb)
	bin := EtcdBin(tb, spec.Version)
	if spec.Name == "" || spec.DataDir == "" || spec.ClientURL == "" || spec.PeerURL == "" {
		tb.Fatalf("testenv: MemberSpec needs Name, DataDir, ClientURL and PeerURL: %+v", spec)
	}
	for _, u := range []string{spec.ClientURL, spec.PeerURL} {
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Port() == "" {
			tb.Fatalf("testenv: MemberSpec URL %q: want http(s)://IP:port", u)
		}
		if (pu.Scheme == "https") != (spec.PKI != nil) {
			tb.Fatalf("testenv: MemberSpec URL %q: https URLs need a PKI and a PKI needs https URLs", u)
		}
	}
	if spec.EnableV2 && !spec.Version.HasV2() {
		tb.Fatalf("testenv: EnableV2 requested on etcd %s, which has no v2 API", spec.Version)
	}
	if spec.InitialCluster == "" {
		spec.InitialCluster = spec.Name + "=" + spec.PeerURL
	}
	if spec.InitialClusterState == "" {
		spec.InitialClusterState = "new"
	}
	if spec.LogFile == "" {
		spec.LogFile = filepath.Join(tb.TempDir(), spec.Name+".log")
	}
	m := newEtcdMember(tb, spec, bin)
	if err := m.launch(spec.InitialClusterState); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return m
}

func newEtcdMember(tb testing.TB, spec MemberSpec, bin string) *EtcdMember {
	tb.Helper()
	m := &EtcdMember{
		Name:      spec.Name,
		ClientURL: spec.ClientURL,
		PeerURL:   spec.PeerURL,
		DataDir:   spec.DataDir,
		LogFile:   spec.LogFile,
		Version:   spec.Version,
		spec:      spec,
		bin:       bin,
	}
	tb.Cleanup(func() {
		m.close()
		if tb.Failed() {
			logTail(tb, fmt.Sprintf("etcd %s member %s", m.Version, m.Name), m.LogFile)
		}
	})
	return m
}

func (m *EtcdMember) args(state string) []string {
	s := m.spec
	a := []string{
		"--name=" + s.Name,
		"--data-dir=" + s.DataDir,
		"--listen-client-urls=" + s.ClientURL,
		"--advertise-client-urls=" + s.ClientURL,
		"--listen-peer-urls=" + s.PeerURL,
		"--initial-advertise-peer-urls=" + s.PeerURL,
		"--initial-cluster=" + s.InitialCluster,
		"--initial-cluster-state=" + state,
		"--heartbeat-interval=100",
		"--election-timeout=1000",
		// 3.4 defaults to the capnslog logger; zap gives the same log format on every version.
		"--logger=zap",
		"--log-outputs=stderr",
		"--log-level=info",
	}
	if s.InitialClusterToken != "" {
		a = append(a, "--initial-cluster-token="+s.InitialClusterToken)
	}
	if s.PKI != nil {
		peerCert, peerKey, peerCA := s.PKI.peerFiles()
		a = append(a,
			"--cert-file="+s.PKI.ServerCertFile,
			"--key-file="+s.PKI.ServerKeyFile,
			"--trusted-ca-file="+s.PKI.CAFile,
			"--client-cert-auth=true",
			"--peer-cert-file="+peerCert,
			"--peer-key-file="+peerKey,
			"--peer-trusted-ca-file="+peerCA,
			"--peer-client-cert-auth=true",
		)
	}
	if s.EnableV2 {
		a = append(a, "--enable-v2=true")
	}
	if s.QuotaBackendBytes > 0 {
		a = append(a, "--quota-backend-bytes="+strconv.FormatInt(s.QuotaBackendBytes, 10))
	}
	return append(a, s.ExtraArgs...)
}

// launch starts the process without waiting for it.
func (m *EtcdMember) launch(state string) error {
	return m.procSlot.launch("etcd member "+m.Name, func() (*proc, error) {
		return startProc("etcd "+m.Name, m.bin, m.args(state), childEnv(), m.LogFile)
	})
}

// errIfExited returns an error when the member's process is gone.
func (m *EtcdMember) errIfExited() error {
	p := m.current()
	if p == nil {
		return fmt.Errorf("etcd member %s is not running", m.Name)
	}
	if p.exited() {
		return fmt.Errorf("etcd member %s exited: %s", m.Name, p.exitError())
	}
	return nil
}

func (m *EtcdMember) waitListening(timeout time.Duration) error {
	u, _ := url.Parse(m.ClientURL)
	deadline := time.Now().Add(timeout)
	for {
		if err := m.errIfExited(); err != nil {
			return err
		}
		conn, err := net.DialTimeout("tcp", u.Host, 500*time.Millisecond)
		if err == nil {
			conn.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd member %s does not listen on %s after %v: %v", m.Name, u.Host, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReady waits until a linearizable Get through this member alone succeeds.
func (m *EtcdMember) waitReady(ctx context.Context) error {
	cli, err := newEtcdClient([]string{m.ClientURL}, m.tlsConfig())
	if err != nil {
		return err
	}
	defer cli.Close()
	var lastErr error
	for {
		if err := m.errIfExited(); err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Get(actx, "testenv-health-probe")
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd member %s (%s) not ready: %v", m.Name, m.ClientURL, lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (m *EtcdMember) tlsConfig() *tls.Config {
	if m.spec.PKI == nil {
		return nil
	}
	return m.spec.PKI.ClientTLS()
}

// PKI returns the member's PKI, nil without TLS.
func (m *EtcdMember) PKI() *PKI { return m.spec.PKI }

// WaitReady waits until the member answers a linearizable Get (which needs a
// quorum of the cluster running).
func (m *EtcdMember) WaitReady(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := m.waitReady(ctx); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
}

// Start restarts a stopped or killed member on its existing data dir with the
// same name, URLs and flags (and --initial-cluster-state=existing), and waits
// until it listens on its client URL. Call WaitReady or the cluster's
// WaitHealthy to wait until it serves.
func (m *EtcdMember) Start(tb testing.TB) {
	tb.Helper()
	if err := m.launch("existing"); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	if err := m.waitListening(startTimeout); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
}

// Kill sends SIGKILL (after SIGCONT if frozen) and waits for the process.
func (m *EtcdMember) Kill() { m.current().kill() }

// Stop sends SIGTERM and waits for the process to exit (SIGKILL after 20s).
func (m *EtcdMember) Stop() { m.current().stop() }

// Freeze suspends the process with SIGSTOP.
func (m *EtcdMember) Freeze() { m.current().freeze() }

// Thaw resumes a frozen process with SIGCONT.
func (m *EtcdMember) Thaw() { m.current().thaw() }

// Running reports whether the process is alive (frozen counts as alive).
func (m *EtcdMember) Running() bool { return m.current().running() }

// PID returns the process id of the current (or last) process, 0 if none.
func (m *EtcdMember) PID() int { return m.current().pid() }

// Client returns a client connected to this member only, closed when tb's
// test ends.
func (m *EtcdMember) Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	cli, err := newEtcdClient([]string{m.ClientURL}, m.tlsConfig())
	if err != nil {
		tb.Fatalf("testenv: etcd client for %s: %v", m.ClientURL, err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// Endpoints returns the members' client URLs.
func (c *EtcdCluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// TLS returns a new client TLS config for the cluster, nil without TLS.
func (c *EtcdCluster) TLS() *tls.Config {
	if c.PKI == nil {
		return nil
	}
	return c.PKI.ClientTLS()
}

// Client returns a client connected to all members (with TLS when enabled),
// closed when tb's test ends.
func (c *EtcdCluster) Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	cli, err := newEtcdClient(c.Endpoints(), c.TLS())
	if err != nil {
		tb.Fatalf("testenv: etcd client: %v", err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// WaitHealthy waits until every member runs and answers a linearizable Get.
func (c *EtcdCluster) WaitHealthy(tb testing.TB) {
	tb.Helper()
	if err := c.waitReady(startTimeout); err != nil {
		tb.Fatalf("testenv: etcd %s cluster not healthy within %v: %v", c.Version, startTimeout, err)
	}
}

func (c *EtcdCluster) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make([]error, len(c.Members))
	var wg sync.WaitGroup
	for i, m := range c.Members {
		wg.Go(func() { errs[i] = m.waitReady(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Leader returns the member that currently is the raft leader.
func (c *EtcdCluster) Leader(tb testing.TB) *EtcdMember {
	tb.Helper()
	cli, err := newEtcdClient(c.Endpoints(), c.TLS())
	if err != nil {
		tb.Fatalf("testenv: etcd client: %v", err)
	}
	defer cli.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		for _, m := range c.Members {
			if !m.Running() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := cli.Status(ctx, m.ClientURL)
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return m
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testenv: no etcd leader found within %v", startTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Member returns the member with the given name, failing the test if none.
func (c *EtcdCluster) Member(tb testing.TB, name string) *EtcdMember {
	tb.Helper()
	for _, m := range c.Members {
		if m.Name == name {
			return m
		}
	}
	tb.Fatalf("testenv: no etcd member %q", name)
	return nil
}

func newEtcdClient(endpoints []string, tlsCfg *tls.Config) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         tlsCfg,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}
