// Package testenv starts real servers (etcd 3.4/3.5/3.6, MinIO, kube-apiserver) on
// loopback for integration tests. Nothing here is a fake: every helper runs
// the binaries built by scripts/test-servers.sh (`make test-servers`).
//
// Every helper takes a testing.TB and fails the test (never skips) when a
// server binary is missing or a server does not come up. Every process is
// started in its own process group with Pdeathsig=SIGKILL, is killed by a
// tb.Cleanup registered when it is created, and writes its output to a log
// file in the test's temp dir; when the test fails, the tail of each log is
// printed.
//
// Clusters and servers use their own ports and directories, so tests using
// this package may call t.Parallel().
//
// Packages whose tests use SharedMinIO must call Main from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
package testenv

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Timeouts used while waiting for servers. Generous because the test machines
// are small and shared.
const (
	startTimeout = 30 * time.Second // a server or cluster becoming ready
	stopTimeout  = 20 * time.Second // graceful stop before SIGKILL
	logTailLines = 40
)

// ---------------------------------------------------------------------------
// Locating binaries.

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error

	envOnce sync.Once
	envVals map[string]string
	envErr  error
)

// repoRoot walks up from the working directory to the directory holding go.mod.
func repoRoot() (string, error) {
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			rootErr = err
			return
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				rootDir = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				rootErr = fmt.Errorf("no go.mod found above the working directory")
				return
			}
			dir = parent
		}
	})
	return rootDir, rootErr
}

// RepoRoot returns the repository root (the directory holding go.mod, found by
// walking up from the working directory).
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	root, err := repoRoot()
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return root
}

// FindRepoRoot is RepoRoot outside a test: the directory holding go.mod,
// or an error.
func FindRepoRoot() (string, error) { return repoRoot() }

// serverVersions parses scripts/test-servers.env, the single source of truth
// for the server versions.
func serverVersions() (map[string]string, error) {
	envOnce.Do(func() {
		root, err := repoRoot()
		if err != nil {
			envErr = err
			return
		}
		path := filepath.Join(root, "scripts", "test-servers.env")
		f, err := os.Open(path)
		if err != nil {
			envErr = err
			return
		}
		defer f.Close()
		vals := map[string]string{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			line = strings.TrimPrefix(line, "export ")
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			if i := strings.Index(v, " #"); i >= 0 {
				v = strings.TrimSpace(v[:i])
			}
			v = strings.Trim(v, `"'`)
			vals[strings.TrimSpace(k)] = v
		}
		if err := sc.Err(); err != nil {
			envErr = fmt.Errorf("reading %s: %w", path, err)
			return
		}
		envVals = vals
	})
	return envVals, envErr
}

// ServerVersion returns a value from scripts/test-servers.env, such as
// ServerVersion(tb, "ETCD35_VERSION").
func ServerVersion(tb testing.TB, key string) string {
	tb.Helper()
	vals, err := serverVersions()
	if err != nil {
		tb.Fatalf("testenv: reading scripts/test-servers.env: %v", err)
	}
	v := vals[key]
	if v == "" {
		tb.Fatalf("testenv: scripts/test-servers.env has no %s", key)
	}
	return v
}

// serversDir is scripts/servers-dir.sh in Go: $TEST_SERVERS_DIR, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/etcd-recovery/test-servers. The cache is
// outside the clone, so a fresh checkout (CI's case) reuses what an earlier
// run on the machine built.
func serversDir() (string, error) {
	if d := os.Getenv("TEST_SERVERS_DIR"); d != "" {
		return d, nil
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("the test-server cache: no $TEST_SERVERS_DIR, $XDG_CACHE_HOME or home directory: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "etcd-recovery", "test-servers"), nil
}

// ServersDir returns the cache of server binaries: $TEST_SERVERS_DIR, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/etcd-recovery/test-servers.
func ServersDir(tb testing.TB) string {
	tb.Helper()
	d, err := serversDir()
	if err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	return d
}

// requireExecutable fails the test when path is not an executable file.
func requireExecutable(tb testing.TB, what, path string) string {
	tb.Helper()
	if err := checkExecutable(path); err != nil {
		tb.Fatalf("missing test server %s (%v): run `make test-servers`", what, err)
	}
	return path
}

// debianTool is the executable name that scripts/test-servers.sh unpacked
// from a Debian package: <test-server cache>/name-debian-$versionVar/name,
// the version of scripts/test-servers.env. The test fails without it.
func debianTool(tb testing.TB, name, versionVar string) string {
	tb.Helper()
	dir := filepath.Join(ServersDir(tb), name+"-debian-"+ServerVersion(tb, versionVar))
	return requireExecutable(tb, name, filepath.Join(dir, name))
}

func checkExecutable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// Version is an etcd minor version the tests run against.
type Version string

const (
	V34 Version = "3.4" // Debian's etcd-server package
	V35 Version = "3.5"
	V36 Version = "3.6"
)

// AllVersions lists every etcd version the tests can run.
var AllVersions = []Version{V34, V35, V36}

// HasV2 reports whether this etcd version can serve the v2 API and store
// (with --enable-v2): true for 3.4 and 3.5, false for 3.6.
func (v Version) HasV2() bool { return v == V34 || v == V35 }

// HasEtcdutl reports whether the version ships etcdutl (3.5 and later).
func (v Version) HasEtcdutl() bool { return v == V35 || v == V36 }

func (v Version) String() string { return string(v) }

func (v Version) check(tb testing.TB) {
	tb.Helper()
	switch v {
	case V34, V35, V36:
	case "":
		tb.Fatalf("testenv: etcd version not set")
	default:
		tb.Fatalf("testenv: unknown etcd version %q (want one of %v)", string(v), AllVersions)
	}
}

// etcdDir returns the cache directory holding the binaries for v.
func etcdDir(tb testing.TB, v Version) string {
	tb.Helper()
	v.check(tb)
	switch v {
	case V34:
		return filepath.Join(ServersDir(tb), "etcd-debian-"+ServerVersion(tb, "ETCD34_DEBIAN_VERSION"))
	case V35:
		return filepath.Join(ServersDir(tb), "etcd-"+ServerVersion(tb, "ETCD35_VERSION"))
	default:
		return filepath.Join(ServersDir(tb), "etcd-"+ServerVersion(tb, "ETCD36_VERSION"))
	}
}

// EtcdBin returns the path of the etcd server binary for v.
func EtcdBin(tb testing.TB, v Version) string {
	tb.Helper()
	return requireExecutable(tb, "etcd "+string(v), filepath.Join(etcdDir(tb, v), "etcd"))
}

// EtcdctlBin returns the path of the etcdctl binary for v.
// DrillBinDir is a new directory holding the etcd servers of the versions
// given as a drill finds them, etcd-<minor> (linked to the test servers);
// with no version, a bin dir without etcd.
func DrillBinDir(tb testing.TB, versions ...Version) string {
	tb.Helper()
	dir := tb.TempDir()
	for _, v := range versions {
		if err := os.Symlink(EtcdBin(tb, v), filepath.Join(dir, "etcd-"+string(v))); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

func EtcdctlBin(tb testing.TB, v Version) string {
	tb.Helper()
	return requireExecutable(tb, "etcdctl "+string(v), filepath.Join(etcdDir(tb, v), "etcdctl"))
}

// EtcdutlBin returns the path of the etcdutl binary for v (3.5 and 3.6 only;
// 3.4 has no etcdutl and fails the test).
func EtcdutlBin(tb testing.TB, v Version) string {
	tb.Helper()
	v.check(tb)
	if !v.HasEtcdutl() {
		tb.Fatalf("testenv: etcd %s has no etcdutl (3.5 and 3.6 only)", v)
	}
	return requireExecutable(tb, "etcdutl "+string(v), filepath.Join(etcdDir(tb, v), "etcdutl"))
}

// MinIOBin returns the path of the MinIO server binary.
func MinIOBin(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(ServersDir(tb), "minio-"+ServerVersion(tb, "MINIO_VERSION"))
	return requireExecutable(tb, "minio", filepath.Join(dir, "minio"))
}

// ---------------------------------------------------------------------------
// Process-level lifetime (shared servers).

var (
	mainMu       sync.Mutex
	mainActive   bool
	mainCleanups []func(failed bool)
)

// Main runs the tests, then stops the servers shared by the whole test binary
// (SharedMinIO) and removes their directories, then exits with the tests'
// exit code. Call it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// Each of before runs first, once Main is active (so it may register
// cleanups with AtMainExit), before any test: for work a test would
// otherwise do inside its own deadline, such as building a binary.
func Main(m *testing.M, before ...func()) {
	mainMu.Lock()
	mainActive = true
	mainMu.Unlock()

	for _, f := range before {
		f()
	}
	code := m.Run()

	mainMu.Lock()
	cleanups := mainCleanups
	mainCleanups = nil
	mainActive = false
	mainMu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i](code != 0)
	}
	os.Exit(code)
}

// AtMainExit registers f to run when Main returns from m.Run, after the
// tests and before the process exits; failed says whether a test failed.
// It reports false when the package's TestMain does not call Main, so a
// caller that creates something outside t.TempDir can refuse to leak it.
func AtMainExit(f func(failed bool)) bool { return addMainCleanup(f) }

// addMainCleanup registers f to run when Main returns from m.Run. It reports
// false when Main is not running the tests.
func addMainCleanup(f func(failed bool)) bool {
	mainMu.Lock()
	defer mainMu.Unlock()
	if !mainActive {
		return false
	}
	mainCleanups = append(mainCleanups, f)
	return true
}
