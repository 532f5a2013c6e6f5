package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// smallTmpfs mounts a tmpfs of size bytes (root only) and unmounts it in
// Cleanup.
func smallTmpfs(tb testing.TB, size string) string {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("mounting a tmpfs needs root")
	}
	dir := filepath.Join(tb.TempDir(), "small")
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		tb.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	tb.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			tb.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

func dirEntries(tb testing.TB, dir string) []string {
	tb.Helper()
	var names []string
	filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil && p != dir {
			names = append(names, p)
		}
		return nil
	})
	return names
}

// spaceFixture is a backup of an 8 MiB database in MinIO.
type spaceFixture struct {
	etcd *testenv.EtcdCluster
	cos  []string
	m    *testenv.MinIO
	man  catalog.Manifest
}

func newSpaceFixture(t *testing.T, id string) *spaceFixture {
	t.Helper()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/configmaps/", 2000, 4096)
	m := testenv.SharedMinIO(t)
	f := &spaceFixture{etcd: c, m: m, cos: cosArgs(t, m, m.NewBucket(t), testenv.Prefix(t))}
	code, out, errOut := runCtx(t, context.Background(), concatArgs([]string{"backup", "--cluster-id", id, "-o", "json"}, clusterArgs(c), f.cos)...)
	if code != 0 {
		t.Fatalf("backup: exit %d\n%s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &f.man); err != nil {
		t.Fatal(err)
	}
	if f.man.Snapshot.RawSize < 6<<20 {
		t.Fatalf("the database is %d bytes: want more than the 4 MiB tmpfs", f.man.Snapshot.RawSize)
	}
	return f
}

// Every command that stages a snapshot checks, before it downloads
// anything, that where it stages it has room for the whole database, and
// fails at once naming the cluster, the step, the space needed and found,
// the path and the flag to change; nothing is left behind. (On the old
// code the dry run and restore verify failed halfway with ENOSPC.)
func TestRestoreFreeSpace(t *testing.T) {
	t.Parallel()
	const id = "space-c1"
	f := newSpaceFixture(t, id)
	small := smallTmpfs(t, "4m")
	ctx := context.Background()
	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	base := concatArgs([]string{"restore", "--cluster-id", id, "--no-live", "--initial-cluster", "r0=" + peer}, f.cos)
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"dry run --temp-dir", concatArgs(base, []string{"--dry-run", "--data-dir-root", filepath.Join(t.TempDir(), "d"), "--temp-dir", small}),
			[]string{"--temp-dir", "TMPDIR", "scratch volume"}},
		{"restore verify --temp-dir", concatArgs([]string{"restore", "verify", "--cluster-id", id, "--backup", f.man.Name, "--temp-dir", small},
			clusterArgs(f.etcd), f.cos), []string{"--temp-dir", "TMPDIR", "scratch volume"}},
		{"manual restore, data dirs on a small volume", concatArgs(base, []string{"--data-dir-root", filepath.Join(small, "data")}),
			[]string{"data dirs' volume", "--data-dir-root", "member r0's data dir"}},
		{"manual restore --temp-dir", concatArgs(base, []string{"--data-dir-root", filepath.Join(t.TempDir(), "d"), "--temp-dir", small}),
			[]string{"--temp-dir", "TMPDIR"}},
	}
	for _, tc := range cases {
		start := time.Now()
		code, out, errOut := runCtx(t, ctx, tc.args...)
		took := time.Since(start)
		t.Logf("%s: exit %d in %v:\n%s", tc.name, code, took.Round(time.Millisecond), errOut)
		if code != exitFailure {
			t.Errorf("%s: exit %d, want 1\n%s\n%s", tc.name, code, out, errOut)
			continue
		}
		want := append([]string{"cluster " + id, `step "check free space"`, "not enough free space in " + small,
			"need ", "found ", "checked before downloading"}, tc.want...)
		for _, s := range want {
			if !strings.Contains(errOut, s) {
				t.Errorf("%s: stderr does not say %q:\n%s", tc.name, s, errOut)
			}
		}
		if left := dirEntries(t, small); len(left) > 0 {
			t.Errorf("%s: left %v in %s", tc.name, left, small)
		}
	}
}

// With TMPDIR on a roomy disk, staging never touches /tmp: the dry run and
// restore verify pass with /tmp a read-only tmpfs (a mount namespace of
// their own), as in the toolkit pod whose /tmp is 16 MiB of memory.
func TestRestoreTMPDIRWithoutTmp(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Fatal("a mount namespace needs root: make test runs as root (and skips nothing)")
	}
	const id = "space-c2"
	f := newSpaceFixture(t, id)
	// Everything the tool reads lives outside /tmp, which it won't see.
	work, err := os.MkdirTemp("/var/tmp", "etcd-recovery-tmpdir-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	tool := filepath.Join(work, "etcd-recovery")
	copyFile(t, testfix.Tool(t), tool, 0o755)
	creds := filepath.Join(work, "creds")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"access_key_id": f.m.AccessKey, "secret_access_key": f.m.SecretKey} {
		if err := os.WriteFile(filepath.Join(creds, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cos := append([]string(nil), f.cos...)
	for i := range cos {
		if cos[i] == "--cos-credentials-dir" {
			cos[i+1] = creds
		}
	}
	scratch := filepath.Join(work, "scratch")
	if err := os.Mkdir(scratch, 0o700); err != nil {
		t.Fatal(err)
	}
	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	runs := [][]string{
		concatArgs([]string{"restore", "--cluster-id", id, "--no-live", "--initial-cluster", "r0=" + peer, "--dry-run",
			"--data-dir-root", filepath.Join(work, "data")}, cos),
		concatArgs([]string{"restore", "verify", "--cluster-id", id, "--backup", f.man.Name, "--expect-members", "1",
			"--bump-revision", "0", "--verify-timeout", "30s"}, clusterArgs(f.etcd), cos),
	}
	for _, args := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, "unshare", append([]string{"--mount", "--propagation", "private", "--", "sh", "-c",
			`mount -t tmpfs -o ro,size=4k tmpfs /tmp && exec "$0" "$@"`, tool}, args...)...)
		cmd.Env = append(os.Environ(), "TMPDIR="+scratch)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%v with TMPDIR=%s and /tmp read-only: %v\n%s", args[:2], scratch, err, out)
			continue
		}
		t.Logf("%v: ok with /tmp read-only", args[:2])
		// Off a terminal: no progress line (carriage returns) and no
		// ANSI escapes, on stdout or stderr.
		if strings.ContainsAny(string(out), "\r\x1b") {
			t.Errorf("%v: output off a terminal has a carriage return or an ANSI escape: %q", args[:2], out)
		}
		if left := dirEntries(t, scratch); len(left) > 0 {
			t.Errorf("%v: left %v in TMPDIR", args[:2], left)
		}
	}
	// The same dry run with TMPDIR on /tmp fails: the check is real.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", append([]string{"--mount", "--propagation", "private", "--", "sh", "-c",
		`mount -t tmpfs -o ro,size=4k tmpfs /tmp && exec "$0" "$@"`, tool}, runs[0]...)...)
	cmd.Env = append(os.Environ(), "TMPDIR=/tmp")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("dry run with TMPDIR=/tmp read-only passed:\n%s", out)
	}
}

func copyFile(tb testing.TB, from, to string, mode os.FileMode) {
	tb.Helper()
	in, err := os.Open(from)
	if err != nil {
		tb.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, mode)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		tb.Fatal(err)
	}
	if err := out.Close(); err != nil {
		tb.Fatal(err)
	}
}
