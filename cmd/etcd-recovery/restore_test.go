package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// Bad restore flags are usage errors (exit 4) that say what is wrong, found
// before anything is contacted.
func TestRestoreCLIUsage(t *testing.T) {
	t.Parallel()
	cos := newCLIRig(t).cos
	ctx := context.Background()
	const two = "a=http://127.0.0.1:1,b=http://127.0.0.1:2"
	base := []string{"restore", "--cluster-id", "c1", "--initial-cluster", two}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"restore"}, "--cluster-id is required"},
		{[]string{"restore", "--cluster-id", "../x", "--initial-cluster", two}, "invalid cluster id"},
		{[]string{"restore", "--cluster-id", "c1"}, "--initial-cluster is required"},
		{[]string{"restore", "--cluster-id", "c1", "--initial-cluster", "a"}, "--initial-cluster"},
		{append(base, "--data-dir", "/tmp/one"), "{name}"},
		{append(base, "--data-dir", "/tmp/{name}", "--data-dir-root", "/tmp"), "exclusive"},
		{append(base, "--bump-revision", "5", "--mark-compacted=false"), "--mark-compacted"},
		{append(base, "--bump-revision", "0"), "--mark-compacted"},
		{append(base, "--name", "zz"), "not a member"},
		{append(base, "--name", "a"), "--initial-cluster-token"},
		{append(base, "--name", "a", "--initial-advertise-peer-urls", "http://127.0.0.1:9"), "do not match"},
		{append(base, "--initial-advertise-peer-urls", "http://127.0.0.1:1"), "needs --name"},
		{append(base, "--backup", "latest"), "not a backup name"},
		{append(base, "--dry-run", "--verify-endpoints", "http://127.0.0.1:3"), "dry run"},
		{append(base, "--endpoints", "127.0.0.1:5", "--cert", "/c.pem"), "--cert and --key"},
		{append(base, "-o", "xml"), "output format"},
		{append(base, "stray"), "unexpected argument"},
		{append(base, "--no-such-flag"), "no-such-flag"},
		{[]string{"restore", "v2"}, "--cluster-id is required"},
		{[]string{"restore", "v2", "--cluster-id", "c1", "--backup", "x"}, "not a backup name"},
		{[]string{"restore", "v2", "--cluster-id", "c1", "--bogus"}, "bogus"},
		{[]string{"restore", "verify", "--backup", "20261122T031500.123Z-manual"}, "--backup needs --cluster-id"},
		{[]string{"restore", "verify", "--backup", "20261122T031500.123Z-manual", "--manifest", "m.json"}, "exclusive"},
		{[]string{"restore", "verify", "--verify-timeout", "0s"}, "--verify-timeout"},
		// Member names are names, not paths.
		{[]string{"restore", "--cluster-id", "c1", "--initial-cluster", "../x=https://127.0.0.1:2380", "--data-dir-root", "/tmp/r"}, "../x"},
		{[]string{"restore", "--cluster-id", "c1", "--initial-cluster", "a/b=https://127.0.0.1:2380"}, "path separator"},
		{append(base, "--name", "../a"), "--name"},
		// Without endpoints, verify would wait for 127.0.0.1:2379 in silence.
		{[]string{"restore", "verify", "--expect-keys", "3"}, "--endpoints"},
		{append(base, "--timeout", "1m"), "--timeout is a dry run's overall deadline"},
		{append(base, "--wait-timeout", "1m"), "--wait-timeout goes with --via etcd-operator"},
		{append(base, "--dry-run", "--timeout", "0s"), "--timeout must be positive"},
	}
	for _, tc := range cases {
		start := time.Now()
		code, _, errOut := runCtx(t, ctx, concatArgs(tc.args, cos)...)
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("%v: a usage error took %v", tc.args, d)
		}
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, errOut, exitUsage, tc.want)
		}
	}
}

// The whole flow through the CLI: backup, a dry run that changes nothing
// and says what it would do, the restore, `restore verify` and `restore
// v2` twice.
func TestRestoreCLIFlow(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true, EnableV2: true})
	want := testenv.PutKeys(t, c.Client(t), "/registry/secrets/", 300, 32)
	v2 := testenv.PutV2Keys(t, c, 6)
	cr := newCLIRig(t)
	m, bucket, prefix, cos := cr.MinIO, cr.Bucket, cr.Layout.Prefix, cr.cos
	store := testfix.Store(t, m, bucket)
	ctx := context.Background()
	tlsArgs := []string{"--cacert", c.PKI.CAFile, "--cert", c.PKI.ClientCertFile, "--key", c.PKI.ClientKeyFile}

	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", "cli-r", "--kind", "scheduled", "-o", "json"}, clusterArgs(c), cos)...)
	if code != 0 {
		t.Fatalf("backup: exit %d\n%s", code, errOut)
	}
	var man catalog.Manifest
	if err := json.Unmarshal([]byte(out), &man); err != nil {
		t.Fatal(err)
	}

	peer := fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(t))
	client := fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(t))
	root := filepath.Join(t.TempDir(), "data")
	restoreArgs := concatArgs([]string{"restore", "--cluster-id", "cli-r", "--initial-cluster", "r0=" + peer, "--data-dir-root", root}, cos)
	listing := func() string { return strings.Join(testfix.Keys(t, store, prefix+"/"), "\n") }
	before := listing()

	// Dry run with the old member alive: it would snapshot it first.
	code, out, errOut = runCtx(t, ctx, concatArgs(restoreArgs, clusterArgs(c), []string{"--dry-run"})...)
	if code != 0 {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("restore --dry-run:\n%s", out)
	for _, s := range []string{"dry run: nothing was changed", "would be committed to COS first", "would be taken",
		man.Name, filepath.Join(root, "r0.etcd"), "would write", "--initial-cluster-token", "etcd 3.5."} {
		if !strings.Contains(out, s) {
			t.Errorf("dry-run output lacks %q:\n%s", s, out)
		}
	}
	// Without the survivor: the COS backup, verified by streaming.
	code, out, errOut = runCtx(t, ctx, concatArgs(restoreArgs, []string{"--dry-run", "--no-live"})...)
	if code != 0 {
		t.Fatalf("dry run --no-live: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("restore --dry-run --no-live:\n%s", out)
	for _, s := range []string{"Chosen: " + man.Name, "highest revision", "stored sha256", "etcd trailing hash", "passed"} {
		if !strings.Contains(out, s) {
			t.Errorf("dry-run output lacks %q:\n%s", s, out)
		}
	}
	if after := listing(); after != before {
		t.Fatalf("a dry run changed the bucket:\n%s\n---\n%s", before, after)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("a dry run created %s: %v", root, err)
	}

	// The restore, with the old member dead.
	c.Members[0].Kill()
	code, out, errOut = runCtx(t, ctx, concatArgs(restoreArgs, clusterArgs(c), []string{"--probe-timeout", "1s", "-o", "json"})...)
	if code != 0 {
		t.Fatalf("restore: exit %d\n%s\n%s", code, out, errOut)
	}
	var res restore.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("restore -o json: %v\n%s", err, out)
	}
	if res.Chosen == nil || res.Chosen.Name != man.Name || len(res.Members) != 1 || !res.Members[0].Restored || res.Snapshot.LiveKeys != int64(len(want)) {
		t.Fatalf("restore result: %+v", res)
	}
	mem := testenv.StartEtcdMember(t, testenv.MemberSpec{Version: testenv.V35, Name: "r0", DataDir: res.Members[0].DataDir,
		ClientURL: client, PeerURL: peer, InitialClusterToken: res.Token, PKI: c.PKI, EnableV2: true})
	mem.WaitReady(t)
	newArgs := concatArgs([]string{"--endpoints", client}, tlsArgs)

	code, out, errOut = runCtx(t, ctx, concatArgs([]string{"restore", "verify", "--cluster-id", "cli-r", "--backup", man.Name, "--expect-members", "1"}, newArgs, cos)...)
	t.Logf("restore verify:\n%s", out)
	if code != 0 || !strings.Contains(out, "VERIFIED") || !strings.Contains(out, fmt.Sprintf("%d live keys", len(want))) {
		t.Fatalf("restore verify: exit %d\n%s\n%s", code, out, errOut)
	}
	// Expecting the wrong count fails with exit 1 and says why.
	code, out, _ = runCtx(t, ctx, concatArgs([]string{"restore", "verify", "--expect-keys", "1", "--verify-timeout", "10s"}, newArgs)...)
	if code != exitFailure || !strings.Contains(out, "FAILED") {
		t.Fatalf("restore verify --expect-keys 1: exit %d\n%s", code, out)
	}

	v2run := func() restore.V2Report {
		t.Helper()
		code, out, errOut := runCtx(t, ctx, concatArgs([]string{"restore", "v2", "--cluster-id", "cli-r", "-o", "json"}, newArgs, cos)...)
		if code != 0 {
			t.Fatalf("restore v2: exit %d\n%s\n%s", code, out, errOut)
		}
		var rep restore.V2Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("restore v2 -o json: %v\n%s", err, out)
		}
		return rep
	}
	first := v2run()
	if first.Keys != len(v2) || first.Created != first.Keys+first.Dirs || first.Unchanged != 0 {
		t.Fatalf("restore v2: %+v", first)
	}
	second := v2run()
	if second.Created+second.Updated+second.Failed != 0 || second.Unchanged != first.Created {
		t.Fatalf("restore v2 twice: %+v", second)
	}
	code, table, _ := runCtx(t, ctx, concatArgs([]string{"restore", "v2", "--cluster-id", "cli-r"}, newArgs, cos)...)
	if code != 0 || !strings.Contains(table, "UNCHANGED") || !strings.Contains(table, man.Name) {
		t.Fatalf("restore v2 table: exit %d\n%s", code, table)
	}
}

// Member names through the CLI: "../x" in --initial-cluster is a
// usage error (exit 4) before anything happens: nothing is written next to
// the data dir root, or anywhere under its parent.
func TestRestoreCLIMemberNameNotAPath(t *testing.T) {
	t.Parallel()
	cos := newCLIRig(t).cos
	parent := t.TempDir()
	code, out, errOut := runCtx(t, context.Background(), concatArgs([]string{"restore", "--cluster-id", "c1", "--no-live",
		"--initial-cluster", "../x=https://127.0.0.1:2380", "--data-dir-root", filepath.Join(parent, "r")}, cos)...)
	if code != exitUsage || !strings.Contains(errOut, "../x") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Fatalf("a refused restore wrote %v", entries)
	}
}

// A signal during the write: SIGTERM to the real binary while it writes the data
// dirs stops the write and removes what it wrote: exit 130, no data dir.
// The binary's test failpoint holds the write after the first data dir,
// so the signal lands exactly there (--parallel 1: two still to come).
func TestRestoreCLISIGTERMDuringDataDirWrite(t *testing.T) {
	t.Parallel()
	tool := testfix.Tool(t)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/x/", 300, 64)
	cos := newCLIRig(t).cos
	ctx := context.Background()
	if code, _, errOut := runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", "sigterm-w"}, clusterArgs(c), cos)...); code != 0 {
		t.Fatalf("backup: exit %d\n%s", code, errOut)
	}
	var ic []string
	for i := range 3 {
		ic = append(ic, fmt.Sprintf("r%d=http://127.0.0.1:%d", i, testenv.FreePort(t)))
	}
	parent := t.TempDir()
	root := filepath.Join(parent, "data")
	fp := filepath.Join(t.TempDir(), "fp")
	cmd := exec.Command(tool, concatArgs([]string{"restore", "--cluster-id", "sigterm-w", "--no-live", "--parallel-data-dirs", "1",
		"--initial-cluster", strings.Join(ic, ","), "--data-dir-root", root}, cos)...)
	cmd.Env = append(os.Environ(), restore.FailpointEnv+"="+fp)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Wait for the failpoint: a member's data dir is written, the others
	// are not. The condition, polled; the process holds there.
	reached := ""
	for reached == "" {
		for _, nm := range []string{"r0", "r1", "r2"} {
			if _, err := os.Stat(fp + "." + nm); err == nil {
				reached = nm
			}
		}
		if reached != "" {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the restore ended before the write: %v\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := os.Stat(filepath.Join(root, reached+".etcd", "member", "snap", "db")); err != nil {
		t.Fatalf("at the failpoint, %s's data dir is not written: %v", reached, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := <-done
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitCanceled {
		t.Fatalf("want exit %d after SIGTERM during the write, got %v\n%s", exitCanceled, err, stderr.String())
	}
	var left []string
	_ = filepath.WalkDir(parent, func(p string, d os.DirEntry, err error) error {
		if p != parent {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 {
		t.Fatalf("a restore stopped during the write left %v\n%s", left, stderr.String())
	}
	if !strings.Contains(stderr.String(), "removed") {
		t.Errorf("stderr does not say the data dirs were removed:\n%s", stderr.String())
	}
}

// restore --dry-run has an overall deadline: against an object
// store that accepts connections and never answers, it ends (exit 1, not
// 0, not 130) within --timeout plus slack, and says so.
func TestRestoreCLIDryRunDeadline(t *testing.T) {
	t.Parallel()
	bh := testenv.StartBlackhole(t)
	const timeout = 3 * time.Second
	const slack = 30 * time.Second // process start, the abort, 2 busy cores
	start := time.Now()
	code, out, errOut := runCtx(t, context.Background(), "restore", "--cluster-id", "c1", "--no-live", "--dry-run", "--timeout", timeout.String(),
		"--initial-cluster", "r0=http://127.0.0.1:2380", "--data-dir-root", filepath.Join(t.TempDir(), "r"),
		"--cos-endpoint", bh.URL("http"), "--bucket", "b", "--cos-credentials-dir", credsDir(t, "id", "secret-value-123"))
	d := time.Since(start)
	if code != exitFailure || d > timeout+slack {
		t.Fatalf("dry run against a silent store: exit %d after %v (want %d within %v)\n%s\n%s", code, d, exitFailure, timeout+slack, out, errOut)
	}
	if !strings.Contains(errOut, "deadline") && !strings.Contains(errOut, "stalled") {
		t.Errorf("the error does not say why it stopped:\n%s", errOut)
	}
	t.Logf("after %v: %s", d, errOut)
}
