package testenv_test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// fakeGo writes a `go` command into a new directory and returns that
// directory: it logs each call to log, exits 0 for `go get` and `go mod`,
// and for `go build -o OUT` writes an executable OUT, except that it fails
// (as a full disk or a killed build would) once OUT's name is failOn.
func fakeGo(tb testing.TB, log, failOn string) string {
	tb.Helper()
	dir := tb.TempDir()
	script := `#!/usr/bin/env bash
echo "$*" >>` + log + `
if [[ $1 == build ]]; then
  while [[ $# -gt 0 && $1 != -o ]]; do shift; done
  out=$2
  if [[ "$(basename "$out")" == "` + failOn + `" ]]; then echo "fake go: no space left on device" >&2; exit 1; fi
  printf '#!/bin/sh\necho built\n' >"$out"; chmod +x "$out"
fi
exit 0
`
	if err := os.WriteFile(filepath.Join(dir, "go"), []byte(script), 0o755); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// A server whose build stops half way is never taken for a built one: the
// binaries land in a temporary directory that is renamed into place only
// once all of them are built; the next run builds it again, and the run
// after that finds it built and builds nothing.
func TestServerBuildHalfDoneIsNotBuilt(t *testing.T) {
	t.Parallel()
	root := testenv.RepoRoot(t)
	cache := t.TempDir()
	log := filepath.Join(t.TempDir(), "calls")
	ver := testenv.ServerVersion(t, "ETCD35_VERSION")
	run := func(failOn string) error {
		cmd := exec.Command(filepath.Join(root, "scripts", "test-servers.sh"), "etcd35")
		cmd.Env = append(os.Environ(), "TEST_SERVERS_DIR="+cache, "PATH="+fakeGo(t, log, failOn)+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		t.Logf("test-servers.sh etcd35 (failing on %q): %v\n%s", failOn, err, out)
		return err
	}
	final := filepath.Join(cache, "etcd-"+ver)

	if err := run("etcdutl"); err == nil {
		t.Fatal("a build that failed half way exited 0")
	}
	if _, err := os.Stat(final); !os.IsNotExist(err) {
		t.Fatalf("after a half-done build, %s exists (%v): a half-built server looks built", final, err)
	}
	if err := run("none"); err != nil {
		t.Fatalf("the build after a half-done one failed: %v", err)
	}
	for _, b := range []string{"etcd", "etcdctl", "etcdutl"} {
		if st, err := os.Stat(filepath.Join(final, b)); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s after a complete build: %v", b, err)
		}
	}
	if tmp, _ := filepath.Glob(final + ".tmp*"); len(tmp) > 0 {
		t.Errorf("a complete build left %v", tmp)
	}
	before, _ := os.ReadFile(log)
	if err := run("none"); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(log)
	if string(after) != string(before) {
		t.Errorf("a built server was built again: go was called with\n%s", strings.TrimPrefix(string(after), string(before)))
	}
}

// The cache is outside the clone, keyed by $TEST_SERVERS_DIR, else
// $XDG_CACHE_HOME, else $HOME/.cache; the scripts and the tests agree.
func TestServersDirOutsideTheClone(t *testing.T) {
	root := testenv.RepoRoot(t)
	home, xdg, over := t.TempDir(), t.TempDir(), t.TempDir()
	for _, c := range []struct {
		name, xdg, override, want string
	}{
		{"home", "", "", filepath.Join(home, ".cache", "etcd-recovery", "test-servers")},
		{"xdg", xdg, "", filepath.Join(xdg, "etcd-recovery", "test-servers")},
		{"override", xdg, over, over},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("HOME", home)
			t.Setenv("XDG_CACHE_HOME", c.xdg)
			t.Setenv("TEST_SERVERS_DIR", c.override)
			if got := testenv.ServersDir(t); got != c.want {
				t.Errorf("ServersDir = %s, want %s", got, c.want)
			}
			out, err := exec.Command(filepath.Join(root, "scripts", "servers-dir.sh")).Output()
			if err != nil || strings.TrimSpace(string(out)) != c.want {
				t.Errorf("scripts/servers-dir.sh = %q, %v; want %s", out, err, c.want)
			}
			if strings.HasPrefix(c.want, root+string(filepath.Separator)) {
				t.Errorf("the cache %s is inside the clone", c.want)
			}
		})
	}
}

// Freeze returns only once the server is stopped: a request sent right
// after it never gets an answer.
func TestMinIOFreezeIsSynchronous(t *testing.T) {
	t.Parallel()
	m := testenv.StartMinIO(t)
	for i := range 20 {
		m.Freeze()
		c := &http.Client{Timeout: 300 * time.Millisecond}
		resp, err := c.Get(m.Endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			t.Fatalf("freeze %d: the frozen MinIO answered %s", i, resp.Status)
		}
		m.Thaw()
	}
}
