package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// drillAllRig is a bucket prefix holding backups of several cluster ids,
// taken in-process from real etcd servers, and a bin dir with etcd-3.5 and
// etcd-3.6.
type drillAllRig struct {
	m              *testenv.MinIO
	bucket, prefix string
	cos            []string
	store          store.Store
	layout         catalog.Layout
	binDir         string
}

func newDrillAllRig(t *testing.T) *drillAllRig {
	t.Helper()
	m := testenv.SharedMinIO(t)
	r := &drillAllRig{m: m, bucket: m.NewBucket(t), prefix: testenv.Prefix(t), binDir: testenv.DrillBinDir(t, testenv.V35, testenv.V36)}
	r.cos = cosArgs(t, m, r.bucket, r.prefix)
	r.store, r.layout = testfix.Store(t, m, r.bucket), catalog.Layout{Prefix: r.prefix}
	return r
}

// backup takes a backup of c as cluster id (in-process) and returns its name.
func (r *drillAllRig) backup(t *testing.T, ctx context.Context, c *testenv.EtcdCluster, id string) string {
	t.Helper()
	code, _, errOut := runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", id}, clusterArgs(c), r.cos)...)
	if code != 0 {
		t.Fatalf("backup of %s: exit %d: %s", id, code, errOut)
	}
	entries, err := catalog.Inventory(ctx, r.store, r.layout, id)
	if err != nil || len(entries) == 0 || !entries[0].Committed {
		t.Fatalf("backup of %s: listing %+v: %v", id, entries, err)
	}
	return entries[0].Name
}

// drill runs the built binary's drill with the rig's COS flags and bin dir.
func (r *drillAllRig) drill(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, testfix.Tool(t), concatArgs([]string{"drill"}, args, r.cos)...)
	cmd.Env = append(os.Environ(), "ETCD_RECOVERY_ETCD_BIN_DIR="+r.binDir, "TMPDIR="+t.TempDir())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errOut.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, out.String(), errOut.String()
}

// drill --all in the prefix form through the binary: every cluster id under
// the prefix is drilled (self-consistency: no sources), two at a time; the
// cluster whose newest backup's snapshot object was damaged after it was
// committed fails at "verify backup" and is named with its backup; the
// good ones (etcd 3.5 and 3.6) pass; each drilled backup has its
// drill.json (the damaged one's says failed; its older good backup is left
// alone); a cluster with only an incomplete backup folder is listed as not
// drilled (no backup) with the reason, and is not a failure. -o table has
// one row per cluster and the error below it.
func TestCLIDrillAll(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeoutCLI(t, 3*time.Minute)
	r := newDrillAllRig(t)
	e35 := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	e36 := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V36, Members: 1, TLS: true})
	testenv.PutKeys(t, e35.Client(t), "/registry/pods/", 300, 64)
	testenv.PutKeys(t, e36.Client(t), "/registry/configmaps/", 300, 64)

	const good35, good36, broken, none = "all-a", "all-b", "all-c", "all-d"
	names := map[string]string{good35: r.backup(t, ctx, e35, good35), good36: r.backup(t, ctx, e36, good36)}
	older := r.backup(t, ctx, e35, broken)
	names[broken] = r.backup(t, ctx, e35, broken)
	if names[broken] <= older {
		t.Fatalf("second backup %s does not sort after %s", names[broken], older)
	}
	// Damage the newest backup of all-c after its commit: one byte of the
	// stored snapshot flipped, same size (so only the hashes can tell).
	m, err := catalog.LoadManifest(ctx, r.store, r.layout, broken, names[broken])
	if err != nil {
		t.Fatal(err)
	}
	key := r.layout.Key(broken, names[broken], m.Snapshot.Object)
	snap := testfix.ReadObject(t, r.store, key)
	snap[len(snap)/2] ^= 0xff
	if _, err := r.store.Put(ctx, key, bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	// all-d: a backup that never committed (its started marker only).
	if _, err := r.store.Put(ctx, r.layout.Key(none, catalog.NewBackupName(time.Now(), catalog.KindScheduled), catalog.StartedObject), strings.NewReader("started")); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	code, out, errOut := r.drill(t, ctx, "--all", "--parallel", "2", "--probe-timeout", "5s", "-o", "json")
	t.Logf("drill --all --parallel 2 of 3 clusters: %v", time.Since(start).Round(time.Millisecond))
	if code != 1 {
		t.Fatalf("drill --all: exit %d, want 1 (all-c's newest backup is damaged)\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	last := lastLine(errOut)
	for _, want := range []string{"drill of 1 cluster(s) failed", "cluster " + broken, names[broken], drill.CheckVerify, "sha256"} {
		if !strings.Contains(last, want) {
			t.Errorf("the error does not name %q: %s", want, last)
		}
	}
	for _, id := range []string{good35, good36, none} {
		if strings.Contains(last, id) {
			t.Errorf("the error names %s, which did not fail: %s", id, last)
		}
	}
	var rep fleet.DrillAllReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if rep.Parallel != 2 || rep.Prefix != r.prefix+"/" && rep.Prefix != r.prefix || len(rep.Clusters) != 4 ||
		strings.Join(rep.Failed, ",") != broken || strings.Join(rep.NoBackup, ",") != none {
		t.Fatalf("report: parallel %d prefix %q failed %v noBackup %v, %d clusters\n%s", rep.Parallel, rep.Prefix, rep.Failed, rep.NoBackup, len(rep.Clusters), out)
	}
	byID := map[string]drill.Result{}
	for i, c := range rep.Clusters {
		if want := []string{good35, good36, broken, none}[i]; c.Cluster != want {
			t.Errorf("cluster %d is %s, want %s (sorted)", i, c.Cluster, want)
		}
		byID[c.Cluster] = c
	}
	for _, id := range []string{good35, good36} {
		c := byID[id]
		if c.Result != fleet.DrillPassed || c.Backup != names[id] || c.Comparison != catalog.CompareSelf || c.Record == nil || !c.Record.Passed || c.Error != "" {
			t.Errorf("%s: %+v, want passed (self) of %s", id, c, names[id])
		}
	}
	if c := byID[good36]; c.Record != nil && !strings.HasPrefix(c.Record.EtcdVersion, "3.6") {
		t.Errorf("%s (an etcd 3.6 backup) drilled with etcd %s", good36, c.Record.EtcdVersion)
	}
	if c := byID[broken]; c.Result != fleet.DrillFailed || c.Backup != names[broken] || c.Record == nil || c.Record.Passed ||
		!strings.HasPrefix(c.Failed, drill.CheckVerify) || c.Step != drill.StepVerify {
		t.Errorf("%s: %+v, want failed at %q of %s", broken, c, drill.CheckVerify, names[broken])
	}
	if c := byID[none]; c.Result != fleet.DrillNoBackup || c.Record != nil || c.Backup != "" ||
		!strings.Contains(c.Reason, "no committed backup") || !strings.Contains(c.Reason, "1 incomplete") {
		t.Errorf("%s: %+v, want not drilled for want of a committed backup", none, c)
	}
	// --parallel 2: two drills at once, never three (each record's
	// interval ends before its slot is given to the next cluster).
	if n := maxOverlap(rep.Clusters); n != 2 {
		t.Errorf("at most %d drills ran at once, want 2 (--parallel 2)", n)
	}

	// The records in the store.
	for id, name := range names {
		rec, err := catalog.LoadDrill(ctx, r.store, r.layout, id, name)
		if err != nil || rec == nil {
			t.Errorf("%s/%s: drill.json %v %v", id, name, rec, err)
			continue
		}
		if rec.Passed != (id != broken) || rec.Backup != name {
			t.Errorf("%s/%s: drill.json passed=%v failed=%q", id, name, rec.Passed, rec.Failed)
		}
	}
	if rec, err := catalog.LoadDrill(ctx, r.store, r.layout, broken, older); rec != nil || err != nil {
		t.Errorf("%s's older backup %s was drilled too: %+v %v", broken, older, rec, err)
	}
	for _, k := range testfix.Keys(t, r.store, r.layout.ClusterPrefix(none)) {
		if strings.HasSuffix(k, "/"+catalog.DrillObject) {
			t.Errorf("a record was written for %s: %s", none, k)
		}
	}

	// One cluster without --endpoints: no source (not --endpoints' default
	// 127.0.0.1:2379), self-consistency only; the newest backup.
	code, out, errOut = r.drill(t, ctx, "--cluster-id", good36, "--no-record", "-o", "json")
	var one fleet.DrillAllReport
	if code != 0 || json.Unmarshal([]byte(out), &one) != nil || len(one.Clusters) != 1 {
		t.Fatalf("drill --cluster-id %s: exit %d\n%s\n%s", good36, code, out, errOut)
	}
	if c := one.Clusters[0]; c.Backup != names[good36] || c.Record == nil || c.Record.Comparison.Mode != catalog.CompareSelf ||
		!strings.Contains(c.Record.Comparison.Detail, "no source endpoints given") {
		t.Errorf("drill --cluster-id %s without --endpoints: %+v", good36, c.Record)
	}

	// -o table: one row per cluster, the error below the table. Again the
	// newest backups are drilled: all-c's, whose drill failed (restore
	// would set it aside), and a new backup of idle all-a at the revision
	// of its drilled one (restore would prefer the drilled one).
	newA := r.backup(t, ctx, e35, good35)
	code, out, errOut = r.drill(t, ctx, "--all", "--parallel", "3", "--no-record", "--probe-timeout", "5s")
	if code != 1 {
		t.Fatalf("drill --all -o table: exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	rows := map[string][]string{}
	var header []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(strings.NewReplacer("│", " ", "|", " ").Replace(l))
		if len(f) == 0 {
			continue
		}
		if f[0] == "CLUSTER" {
			header = f
		}
		if _, ok := byID[f[0]]; ok {
			rows[f[0]] = append(rows[f[0]], l)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if n := len([]rune(l)); n > 120 {
			t.Errorf("table line of %d columns (default tables fit 120): %s", n, l)
		}
	}
	if len(header) == 0 || len(rows) != 4 {
		t.Fatalf("table: header %v, rows for %d clusters:\n%s", header, len(rows), out)
	}
	for id, ls := range rows {
		want := map[string]string{good35: "passed", good36: "passed", broken: "FAILED", none: fleet.DrillNoBackup}[id]
		if len(ls) != 1 || !strings.Contains(ls[0], want) {
			t.Errorf("%s: rows %q, want one with %q", id, ls, want)
		}
		if name := map[string]string{good35: newA, good36: names[good36], broken: names[broken], none: "-"}[id]; len(ls) == 1 && !strings.Contains(ls[0], name) {
			t.Errorf("%s: row %q does not drill the newest backup %s", id, ls[0], name)
		}
	}
	for _, want := range []string{broken + ": drill of cluster " + broken, none + ": not drilled: no committed backup"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("below the table: no %q\n%s", want, out)
		}
	}
	t.Logf("drill --all -o table:\n%s", out)
}

// maxOverlap is the largest number of drill records whose [StartedAt,
// FinishedAt] intervals overlap.
func maxOverlap(cs []drill.Result) int {
	type ev struct {
		at time.Time
		d  int
	}
	var evs []ev
	for _, c := range cs {
		if c.Record != nil {
			evs = append(evs, ev{c.Record.StartedAt, 1}, ev{c.Record.FinishedAt, -1})
		}
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at.Equal(evs[j].at) {
			return evs[i].d < evs[j].d
		}
		return evs[i].at.Before(evs[j].at)
	})
	n, best := 0, 0
	for _, e := range evs {
		n += e.d
		best = max(best, n)
	}
	return best
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}

func ctxTimeoutCLI(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// etcdUnder are the pids of the processes whose working directory is
// under dir (the drill starts its etcd in its scratch dir), with their
// executable.
func etcdUnder(tb testing.TB, dir string) map[int]string {
	tb.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	out := map[int]string{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil || !strings.HasPrefix(cwd, dir+string(filepath.Separator)) {
			continue
		}
		exe, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		out[pid] = exe
	}
	return out
}

// alive tells whether pid is a process that has not exited (a zombie has).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// slowEtcdBinDir is a bin dir whose etcd-3.5 is the real etcd with a
// 3-second first election (no tick advance): the drill's etcd runs, not yet
// serving, for 3 s, so a test can interrupt a drill whose etcd is running.
func slowEtcdBinDir(t *testing.T) string {
	t.Helper()
	real, err := filepath.EvalSymlinks(testenv.EtcdBin(t, testenv.V35))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := "#!/bin/sh\n" +
		"if [ \"$1\" = --version ]; then exec " + real + " --version; fi\n" +
		"exec " + real + " \"$@\" --heartbeat-interval 100 --election-timeout 3000 --initial-election-tick-advance=false\n"
	if err := os.WriteFile(filepath.Join(dir, "etcd-3.5"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// SIGINT to `drill --all --parallel 2` while both drills' etcds run: exit
// 130, every etcd it started is gone, the scratch dir is empty and no
// drill.json was written.
func TestCLIDrillAllCancel(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeoutCLI(t, 3*time.Minute)
	r := newDrillAllRig(t)
	e := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	testenv.PutKeys(t, e.Client(t), "/registry/pods/", 300, 64)
	names := map[string]string{"cancel-a": r.backup(t, ctx, e, "cancel-a"), "cancel-b": r.backup(t, ctx, e, "cancel-b")}

	scratch := t.TempDir()
	cmd := exec.CommandContext(ctx, testfix.Tool(t), concatArgs([]string{"drill", "--all", "--parallel", "2", "--temp-dir", scratch}, r.cos)...)
	cmd.Env = append(os.Environ(), "ETCD_RECOVERY_ETCD_BIN_DIR="+slowEtcdBinDir(t), "TMPDIR="+t.TempDir())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Wait for both drills' etcd processes (the real etcd binary running
	// in a drill scratch dir), then interrupt.
	real35, err := filepath.EvalSymlinks(testenv.EtcdBin(t, testenv.V35))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]string{}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for n := 0; n < 2; {
		select {
		case err := <-done:
			t.Fatalf("drill --all ended before both etcds were seen (%v): %v\n%s\n%s", seen, err, out.String(), errOut.String())
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-tick.C:
		}
		n = 0
		for pid, exe := range etcdUnder(t, scratch) {
			seen[pid] = exe
			if exe == real35 {
				n++
			}
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	err = <-done
	t.Logf("exited %v after SIGINT", time.Since(sent).Round(time.Millisecond))
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("exit %v, want 130\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(errOut.String(), "SIGINT") || !strings.Contains(lastLine(errOut.String()), "cancelled") {
		t.Errorf("stderr does not say it was cancelled:\n%s", errOut.String())
	}
	if strings.Contains(errOut.String(), "drill finished") {
		t.Errorf("a drill finished before the SIGINT (the test must interrupt running drills):\n%s", errOut.String())
	}
	for pid, exe := range seen {
		if alive(pid) {
			t.Errorf("process %d (%s) started by the drill is still running", pid, exe)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if left := etcdUnder(t, scratch); len(left) > 0 {
		t.Errorf("processes still running in the scratch dir: %v", left)
	}
	ents, err := os.ReadDir(scratch)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left in the scratch dir: %s", e.Name())
	}
	for id, name := range names {
		if rec, err := catalog.LoadDrill(ctx, r.store, r.layout, id, name); rec != nil || err != nil {
			t.Errorf("%s/%s: a cancelled drill left a record: %+v %v", id, name, rec, err)
		}
	}
}

// drill --all's usage errors: exit 4, naming the flag, before anything is
// contacted.
func TestCLIDrillAllUsage(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeoutCLI(t, time.Minute)
	cos := []string{"--cos-endpoint", "http://127.0.0.1:9", "--bucket", "b"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--all", "--parallel", "0"}, "--parallel 0"},
		{[]string{"--all", "--cluster-id", "c1"}, "exclusive"},
		{[]string{"--all", "--backup", "20261123T031500.123Z-scheduled"}, "--backup"},
		{[]string{"--all", "--endpoints", "https://127.0.0.1:2379"}, "--endpoints are one cluster's"},
		{[]string{"--all", "--temp-dir", filepath.Join(t.TempDir(), "missing")}, "--temp-dir"},
	} {
		code, _, errOut := runCtx(t, ctx, concatArgs([]string{"drill"}, tc.args, cos)...)
		if code != 4 || !strings.Contains(errOut, tc.want) {
			t.Errorf("drill %v: exit %d, want 4 naming %q: %s", tc.args, code, tc.want, errOut)
		}
	}
}
