package drill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/version"
)

// EtcdBinDirEnv names the directory of the etcd servers drills run.
const EtcdBinDirEnv = "ETCD_RECOVERY_ETCD_BIN_DIR"

// versionMinor is "3.5" of "3.5.35" (or of "v3.5.35").
func versionMinor(v string) string {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return ""
	}
	return parts[0] + "." + parts[1]
}

var etcdVersionLine = regexp.MustCompile(`(?m)^etcd Version:\s*(\S+)`)

// findEtcd finds etcd-<minor> for a backup taken from serverVersion, in
// binDir or else in $PATH, and checks that the binary is of that minor
// version. It returns its path and its version.
func findEtcd(ctx context.Context, binDir, serverVersion string) (string, string, error) {
	minor := versionMinor(serverVersion)
	supported := strings.Join(Versions, " and ")
	if !slices.Contains(Versions, minor) {
		v := serverVersion
		if v == "" {
			v = "(none recorded in the manifest)"
		}
		return "", "", fmt.Errorf("the backup was taken from etcd %s: a drill runs the backup's own minor version and can run etcd %s only", v, supported)
	}
	name := "etcd-" + minor
	var path, where string
	if binDir != "" {
		where = fmt.Sprintf("%s (--etcd-bin-dir / %s)", binDir, EtcdBinDirEnv)
		p := filepath.Join(binDir, name)
		st, err := os.Stat(p)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", "", fmt.Errorf("no executable %s in %s: a drill of a backup of etcd %s needs it (drills run etcd %s)", name, where, serverVersion, supported)
		}
		path = p
	} else {
		where = "$PATH (no --etcd-bin-dir / " + EtcdBinDirEnv + " given)"
		p, err := exec.LookPath(name)
		if err != nil {
			return "", "", fmt.Errorf("no %s in %s: a drill of a backup of etcd %s needs it (drills run etcd %s)", name, where, serverVersion, supported)
		}
		path = p
	}
	vctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(vctx, path, "--version")
	// The deadline kills the process it started; a wrapper script's child
	// that still holds stdout must not hold the caller past it.
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("%s --version: %w", path, err)
	}
	m := etcdVersionLine.FindSubmatch(out)
	if m == nil {
		return "", "", fmt.Errorf("%s --version does not say its version: %q", path, firstLine(string(out)))
	}
	got := string(m[1])
	if versionMinor(got) != minor {
		return "", "", fmt.Errorf("%s (found in %s) is etcd %s, not %s: refusing it", path, where, got, minor)
	}
	return path, got, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// freeLoopbackPort is a port free on 127.0.0.1 now (listened on, closed).
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// etcdStart is how the drill's etcd is started.
type etcdStart struct {
	bin, dataDir, scratch string
	// peerURL is the member's peer URL in the restored data dir.
	peerURL string
	token   string
	dbSize  int64
	timeout time.Duration
	probe   time.Duration
	// memLimit is etcd's GOMEMLIMIT in bytes (0: none).
	memLimit int64
	log      *slog.Logger
	onStart  func(pid int, ports []int)
}

// etcdProc is the drill's running etcd.
type etcdProc struct {
	cmd       *exec.Cmd
	done      chan struct{}
	waitErr   error
	clientURL string
	logPath   string
	ports     []int
	// stopping: the drill is stopping it (a signal then is the drill's).
	stopping atomic.Bool
	cgMu     sync.Mutex
	cg       *memCgroup
}

// etcdStartError is etcd not serving; Cause is set when that was the
// node's fault (see exitCause).
type etcdStartError struct {
	err   error
	Cause string
}

func (e *etcdStartError) Error() string { return e.err.Error() }
func (e *etcdStartError) Unwrap() error { return e.err }

// startDrillEtcd starts etcd on the restored data dir, in its own process
// group, bound to loopback only (client and peer; no metrics listener), and
// waits, at most s.timeout, until it serves a linearizable read. When the
// ports chosen were taken in the meantime it retries with new ones. When
// etcd exits before serving, the error carries the tail of its log.
func startDrillEtcd(ctx context.Context, s etcdStart) (*etcdProc, error) {
	peerListen := s.peerURL
	for attempt := 0; ; attempt++ {
		p, err := launchEtcd(ctx, s, peerListen, attempt)
		if err == nil {
			return p, nil
		}
		var be *bindError
		if !errors.As(err, &be) || attempt >= 2 || ctx.Err() != nil {
			return nil, err
		}
		s.log.Warn("drill etcd could not bind its ports, retrying with new ones", "err", err)
		port, perr := freeLoopbackPort()
		if perr != nil {
			return nil, perr
		}
		// Only the listener moves: a single member never dials its own
		// peer URL.
		peerListen = fmt.Sprintf("http://127.0.0.1:%d", port)
	}
}

type bindError struct{ err error }

func (e *bindError) Error() string { return e.err.Error() }
func (e *bindError) Unwrap() error { return e.err }

func launchEtcd(ctx context.Context, s etcdStart, peerListen string, attempt int) (*etcdProc, error) {
	clientPort, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	logPath := filepath.Join(s.scratch, fmt.Sprintf("etcd-%d.log", attempt))
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	quota := max(int64(2)<<30, 2*s.dbSize+(1<<30))
	args := []string{
		"--name", "drill",
		"--data-dir", s.dataDir,
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerListen,
		"--initial-advertise-peer-urls", s.peerURL,
		"--initial-cluster", "drill=" + s.peerURL,
		"--initial-cluster-token", s.token,
		"--initial-cluster-state", "new",
		"--quota-backend-bytes", fmt.Sprint(quota),
		// A scratch copy: a crash loses nothing worth an fsync.
		"--unsafe-no-fsync",
		// One member on loopback: it need not wait etcd's default second
		// before it elects itself (the longest part of a small drill).
		"--heartbeat-interval", "10",
		"--election-timeout", "100",
		"--log-outputs", "stderr",
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.scratch
	cmd.Stdout, cmd.Stderr = logf, logf
	// Nothing of the tool's environment (credentials) goes to etcd, and no
	// ETCD_* variable changes its flags.
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + s.scratch}
	if s.memLimit > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("GOMEMLIMIT=%d", s.memLimit), "GOGC=50")
	}
	cmd.SysProcAttr = drillSysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.bin, err)
	}
	p := &etcdProc{cmd: cmd, done: make(chan struct{}), clientURL: clientURL, logPath: logPath,
		ports: []int{clientPort, portOf(peerListen)}}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	p.watchCgroup(cmd.Process.Pid)
	if s.onStart != nil {
		s.onStart(cmd.Process.Pid, p.ports)
	}
	s.log.Info("drill etcd started", "pid", cmd.Process.Pid, "client_url", clientURL, "peer_listen", peerListen)
	if err := p.waitServing(ctx, s.timeout, s.probe); err != nil {
		cause := p.exitCause()
		_ = p.stop()
		tail := p.logTail()
		if strings.Contains(tail, "address already in use") {
			return nil, &bindError{fmt.Errorf("%w: %s", err, tail)}
		}
		if tail != "" {
			err = fmt.Errorf("%w; etcd's log ends: %s", err, tail)
		}
		return nil, &etcdStartError{err: err, Cause: cause}
	}
	return p, nil
}

func portOf(u string) int {
	var port int
	if i := strings.LastIndex(u, ":"); i >= 0 {
		fmt.Sscan(u[i+1:], &port)
	}
	return port
}

// waitServing waits until etcd answers a linearizable read, it exits, the
// timeout passes or ctx ends.
func (p *etcdProc) waitServing(ctx context.Context, timeout, probe time.Duration) error {
	deadline := time.Now().Add(timeout)
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// Wait for the client port first: a gRPC client that finds it closed
	// backs off a second before it dials again.
	if err := p.waitListening(wctx); err != nil {
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errEtcdExited):
			return err
		}
		return fmt.Errorf("etcd did not serve within %s: %w", timeout, err)
	}
	cli, err := etcdconn.Config{Endpoints: []string{p.clientURL}, DialTimeout: probe}.Client(wctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	var last error
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			return fmt.Errorf("etcd exited before serving (%v)", p.waitErr)
		default:
		}
		rctx, rcancel := context.WithTimeout(wctx, min(probe, time.Second))
		_, err := cli.Get(rctx, "health", clientv3.WithCountOnly())
		rcancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("etcd exited before serving (%v)", p.waitErr)
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("etcd did not serve within %s (last error: %v)", timeout, last)
		case <-tick.C:
		}
	}
}

// errEtcdExited is the drill's etcd exiting before it served: the backup's
// fault (etcd refused the data), never a slow node.
var errEtcdExited = errors.New("etcd exited before serving")

// waitListening waits until etcd's client port accepts a connection, it
// exits or ctx ends.
func (p *etcdProc) waitListening(ctx context.Context) error {
	addr := strings.TrimPrefix(p.clientURL, "http://")
	var d net.Dialer
	for {
		p.watchCgroup(p.cmd.Process.Pid)
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.done:
			if p.waitErr == nil {
				return errEtcdExited
			}
			return fmt.Errorf("%w (%w)", errEtcdExited, p.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("its client port %s never accepted a connection (%v)", addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// logTail is the end of etcd's log: its last lines, at most 2000 bytes,
// the fatal or panic line first when there is one.
func (p *etcdProc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var cause string
	for _, l := range lines {
		if strings.HasPrefix(l, "panic:") || strings.Contains(l, `"level":"fatal"`) || strings.Contains(l, `"level":"panic"`) {
			cause = strings.TrimSpace(l)
			break
		}
	}
	tail := lines[max(0, len(lines)-6):]
	out := strings.Join(tail, " | ")
	if cause != "" && !slices.Contains(tail, cause) {
		out = cause + " | … | " + out
	}
	if len(out) > 2000 {
		out = out[:2000] + "…"
	}
	return string(bytes.ToValidUTF8([]byte(out), []byte("?")))
}

// stop ends etcd: SIGTERM to its process group, SIGKILL after 5 s, and
// waits for it. It is idempotent.
func (p *etcdProc) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.stopping.Store(true)
	signalGroup(p.cmd.Process, false)
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
	}
	signalGroup(p.cmd.Process, true)
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("etcd (pid %d) did not exit after SIGKILL", p.cmd.Process.Pid)
	}
}

// serverVersionTimeout bounds each `etcd-<minor> --version` of
// VersionReport.
const serverVersionTimeout = 5 * time.Second

// VersionReport is `etcd-recovery version`: the binary's versions
// (version.Build) and, for each minor version a drill runs, the etcd
// server it would run (in binDir, else $PATH) and the version that server
// reports (`--version`, each bounded by 5 s), or why there is none.
func VersionReport(ctx context.Context, binDir string) *version.Report {
	r := version.Build()
	for _, minor := range Versions {
		s := version.Server{Name: "etcd-" + minor}
		vctx, cancel := context.WithTimeout(ctx, serverVersionTimeout)
		path, v, err := findEtcd(vctx, binDir, minor)
		cancel()
		s.Path, s.Version = path, v
		if err != nil {
			s.Error = err.Error()
		}
		r.Servers = append(r.Servers, s)
	}
	return r
}
