package restore_test

// The faults a restore must survive, each against real etcd and
// MinIO: keys on leases expiring after the restore, a missing snapshot
// object, member names used as paths, a cancel during the data-dir write,
// a dry run as strict as the real run, the choice by revision, all-or-none
// data dirs, a survivor whose snapshot cannot be committed, one member per
// run, and restore v2's expired and updated keys.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/restore/survivor"
)

// runOpts are the options of a restore of id from r into root (no
// survivor).
func (r *storeRig) runOpts(tb testing.TB, id, ic, root string) restore.Options {
	return restore.Options{Survivor: survivor.Backup{},
		ClusterID: id, Store: r.Store, Layout: r.Layout, NoLive: true,
		Targets:      restore.Targets{InitialCluster: ic, DataDirRoot: root},
		BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, Log: testfix.Logger(tb),
	}
}

// entriesUnder lists every path under root (not root itself).
func entriesUnder(tb testing.TB, root string) []string {
	tb.Helper()
	var out []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if p != root {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// Item 5: a key on a lease is in the backup; once the restored cluster
// runs, etcd expires it. `restore verify` must still pass, any time later:
// the keys without a lease match exactly, the leased one is reported as
// expired. (Before the fix: "live key count: N live keys, the snapshot
// has N+1", FAILED.)
func TestRestoreVerifyAfterLeasedKeysExpire(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	ctx := testfix.Context(t, 3*time.Minute)
	want := testenv.PutKeys(t, cli, "/registry/pods/", 50, 32)
	lease, err := cli.Grant(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	const leasedKey = "/registry/masterleases/10.0.0.1"
	if _, err := cli.Put(ctx, leasedKey, "ip", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	r := newStoreRig(t)
	const id = "leases"
	m := r.TakeBackup(t, c, id, catalog.KindScheduled)
	c.Members[0].Kill()

	ic, ms := newCluster(t, 1, false)
	res, err := restore.Run(ctx, r.runOpts(t, id, ic, t.TempDir()))
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if res.Snapshot.LiveKeys != int64(len(want))+1 || res.Snapshot.LeasedKeys != 1 {
		t.Fatalf("snapshot facts %+v: want %d live keys, 1 on a lease", res.Snapshot, len(want)+1)
	}
	nc := startRestored(t, testenv.V35, &res.Plan, ms, nil, false)
	ncli := nc.Client(t)
	// Wait until etcd has expired the lease (its TTL restarts when the new
	// leader is elected): the condition, not a sleep.
	for {
		resp, err := ncli.Get(ctx, leasedKey)
		if err != nil {
			t.Fatalf("get %s: %v", leasedKey, err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the leased key never expired")
		case <-time.After(200 * time.Millisecond):
		}
	}
	got, _ := allKeys(t, ncli)
	sameKeys(t, got, want)

	chk, err := restore.CheckCluster(ctx, restore.ClusterCheckOptions{
		VerifyOptions: restore.VerifyOptions{Etcd: etcdConfigFor(nil, ms), Timeout: time.Minute, ExpectedMembers: 1},
		ClusterID:     id, Store: r.Store, Layout: r.Layout, Backup: m.Name,
		BumpRevision: restore.DefaultBumpRevision, TempDir: t.TempDir(),
	})
	if err != nil || !chk.Verified {
		t.Fatalf("restore verify after the lease expired: %v %+v", err, chk)
	}
	if chk.LeasedKeys != 0 || chk.SnapshotLeasedKeys == nil || *chk.SnapshotLeasedKeys != 1 || chk.UnleasedKeys != int64(len(want)) {
		t.Fatalf("report %+v: want 0 leased keys now, 1 in the snapshot, %d without a lease", chk.VerifyReport, len(want))
	}
	var info *restore.Check
	for i, ck := range chk.Checks {
		if ck.Name == restore.CheckLeasedKeys {
			info = &chk.Checks[i]
		}
	}
	if info == nil || info.Status != restore.CheckInfo || !strings.Contains(info.Detail, "1 expired") {
		t.Fatalf("checks %+v: want the leased key reported as expired", chk.Checks)
	}

	// A key without a lease missing is still a failure.
	if _, err := ncli.Delete(ctx, "/registry/pods/00000007"); err != nil {
		t.Fatal(err)
	}
	chk, err = restore.CheckCluster(ctx, restore.ClusterCheckOptions{
		VerifyOptions: restore.VerifyOptions{Etcd: etcdConfigFor(nil, ms), Timeout: time.Minute},
		ClusterID:     id, Store: r.Store, Layout: r.Layout, Backup: m.Name,
		BumpRevision: restore.DefaultBumpRevision, TempDir: t.TempDir(),
	})
	var ve *restore.VerifyError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), restore.CheckUnleasedKeys) {
		t.Fatalf("a deleted key without a lease: %v %+v", err, chk)
	}
}

// Item 6: the newest backup's snapshot object is gone. It is refused like
// a corrupt backup, naming it and the next good one. A store that fails
// (5xx, stall) is not called a corrupt backup.
func TestRestoreMissingSnapshotObject(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	r := newStoreRig(t)
	const id = "missing"
	testenv.PutKeys(t, cli, "/a/", 50, 16)
	older := r.TakeBackup(t, c, id, catalog.KindScheduled)
	testenv.PutKeys(t, cli, "/b/", 50, 16)
	newest := r.TakeBackup(t, c, id, catalog.KindScheduled)
	ctx := testfix.Context(t, 2*time.Minute)
	ic, _ := newCluster(t, 3, false)

	t.Run("store errors are not a corrupt backup", func(t *testing.T) {
		for _, k := range []faults.Kind{faults.ServerError, faults.Stall} {
			fs := faults.Wrap(r.Store)
			fs.Inject(faults.Fault{Op: faults.OpGet, Key: r.SnapshotKey(newest), Kind: k, Delay: 100 * time.Millisecond})
			opts := r.runOpts(t, id, ic, filepath.Join(t.TempDir(), "data"))
			opts.Store = fs
			_, err := restore.Run(ctx, opts)
			var be *restore.BackupError
			var re *restore.Error
			if err == nil || errors.As(err, &be) || !errors.As(err, &re) || re.Step() != restore.StepVerifyBackup {
				t.Fatalf("%v on the snapshot read: %v; want a store error at %q, not a corrupt backup", k, err, restore.StepVerifyBackup)
			}
			if k == faults.Stall && !errors.Is(err, store.ErrStalled) {
				t.Errorf("stall: %v does not say the store stalled", err)
			}
			t.Logf("%v: %v", k, err)
		}
	})

	t.Run("404", func(t *testing.T) {
		if err := r.Store.Delete(ctx, []string{r.SnapshotKey(newest)}); err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(t.TempDir(), "data")
		opts := r.runOpts(t, id, ic, root)
		opts.Backup = newest.Name // without it the listing sets it aside as damaged
		res, err := restore.Run(ctx, opts)
		var be *restore.BackupError
		if !errors.As(err, &be) {
			t.Fatalf("restore of a backup whose snapshot is gone: %v; want a BackupError", err)
		}
		msg := err.Error()
		if be.Backup != newest.Name || be.Next != older.Name || !strings.Contains(msg, "--backup "+older.Name) || !strings.Contains(msg, "missing") {
			t.Fatalf("error %q: want it to name %s as missing its snapshot and %s as the next good backup", msg, newest.Name, older.Name)
		}
		if res.Candidates[0].Status != "failed verification" || res.Candidates[1].Status != "verified" {
			t.Errorf("candidates %+v", res.Candidates)
		}
		if left := entriesUnder(t, filepath.Dir(root)); len(left) != 0 {
			t.Errorf("a refused restore left %v", left)
		}
		t.Logf("refused: %v", err)
	})
}

// Item 8: member names are etcd names, never paths: "../x" is refused
// before anything happens, and data dirs stay inside --data-dir-root.
func TestRestoreMemberNamesAreNotPaths(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"../x", "..", "a/b", `a\b`, "/abs", ".hidden", "-x", "a b", "x..y"} {
		ic := name + "=http://127.0.0.1:2380"
		if _, err := restore.ValidateTargets(restore.Targets{InitialCluster: ic, DataDirRoot: "/tmp/r"}); err == nil {
			t.Errorf("--initial-cluster %q accepted", ic)
		}
		ic = "ok=http://127.0.0.1:2380," + name + "=http://127.0.0.1:2381"
		if _, err := restore.ValidateTargets(restore.Targets{InitialCluster: ic, Name: name, DataDirRoot: "/tmp/r",
			InitialAdvertisePeerURLs: nil}); err == nil {
			t.Errorf("--name %q accepted", name)
		}
	}
	for _, name := range []string{"r0", "etcd-0.example", "m_1", "A9"} {
		if _, err := restore.ValidateTargets(restore.Targets{InitialCluster: name + "=http://127.0.0.1:2380", DataDirRoot: "/tmp/r"}); err != nil {
			t.Errorf("--initial-cluster %s: %v", name, err)
		}
	}
	// Through Run: refused at validation, nothing written anywhere.
	parent := t.TempDir()
	root := filepath.Join(parent, "r")
	r := newStoreRig(t)
	_, err := restore.Run(context.Background(), r.runOpts(t, "names", "../x=http://127.0.0.1:2380", root))
	var re *restore.Error
	if !errors.As(err, &re) || re.Step() != restore.StepValidate || !strings.Contains(err.Error(), "../x") {
		t.Fatalf("restore with member ../x: %v", err)
	}
	if left := entriesUnder(t, parent); len(left) != 0 {
		t.Fatalf("left %v", left)
	}
}

// Item 11: a cancel while the data dirs are written stops the write and
// removes what it wrote (and moves a dir it moved aside back): all or
// none. The hook cancels right after the first member is written, with
// the others still to come (--parallel 1).
func TestRestoreCancelDuringDataDirWrite(t *testing.T) {
	t.Parallel()
	_, r, _, _ := backedUp(t, "cancel-write", 200, 64)
	ic, _ := newCluster(t, 3, false)
	parent := t.TempDir()
	root := filepath.Join(parent, "data")
	// r2's dir is in the way: --force moves it aside, the cancel moves it back.
	keep := filepath.Join(root, "r2.etcd", "member", "keep")
	if err := os.MkdirAll(filepath.Dir(keep), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keep, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := treeState(t, root)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := r.runOpts(t, "cancel-write", ic, root)
	opts.Parallel, opts.Force = 1, true
	var written atomic.Int32
	ctx = restore.WithMemberWritten(ctx, func(_ context.Context, m restore.Member) {
		if written.Add(1) == 1 {
			cancel()
		}
	})
	res, err := restore.Run(ctx, opts)
	var re *restore.Error
	if !errors.Is(err, context.Canceled) || !errors.As(err, &re) || re.Step() != restore.StepWrite {
		t.Fatalf("cancelled during the write: %v", err)
	}
	if written.Load() != 1 {
		t.Fatalf("%d data dirs written after the cancel: the write went on", written.Load())
	}
	for _, m := range res.Members {
		if m.Restored {
			t.Errorf("member %s reported written", m.Name)
		}
	}
	// Only r2's old dir, back in place and unchanged, in the root: no
	// data dir, no moved-aside copy, no temp snapshot.
	// (The root's own mtime changes: entries came and went.)
	if after := treeState(t, root); strings.Join(after[1:], "\n") != strings.Join(before[1:], "\n") {
		t.Fatalf("the data dir root changed:\n%s\n---\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
	if left := entriesUnder(t, parent); len(left) != 4 { // data, r2.etcd, member, keep
		t.Fatalf("left %v", left)
	}
}

// Item 12: the dry run runs every check of the real run. An inflated
// manifest revision (the database is below it) is refused by both; a
// target that cannot be written (its parent is a file; a read-only mount
// when one can be made) is a problem for both, found before anything.
func TestRestoreDryRunAsStrictAsRealRun(t *testing.T) {
	t.Parallel()
	const id = "strict"
	c, r, good, _ := backedUp(t, id, 100, 16)
	testenv.PutKeys(t, c.Client(t), "/y/", 10, 16)
	inflated := r.TakeBackup(t, c, id, catalog.KindScheduled)
	ctx := testfix.Context(t, 2*time.Minute)
	ic, _ := newCluster(t, 1, false)

	// Inflate the newest manifest's revision, as a bug or a hand edit would.
	mkey := r.Layout.Key(id, inflated.Name, catalog.ManifestObject)
	var raw map[string]any
	if err := json.Unmarshal(testfix.ReadObject(t, r.Store, mkey), &raw); err != nil {
		t.Fatal(err)
	}
	raw["revisionBefore"] = inflated.Revision() + 1000
	raw["revisionAfter"] = inflated.Revision() + 1000
	b, _ := json.Marshal(raw)
	r.PutObject(t, mkey, b)

	for _, dry := range []bool{true, false} {
		t.Run(fmt.Sprintf("inflated revision dry=%v", dry), func(t *testing.T) {
			scratch := t.TempDir()
			root := filepath.Join(t.TempDir(), "data")
			opts := r.runOpts(t, id, ic, root)
			opts.DryRun, opts.ScratchDir = dry, scratch
			opts.Backup = inflated.Name // without it restore falls back to the good one
			res, err := restore.Run(ctx, opts)
			var be *restore.BackupError
			if !errors.As(err, &be) || be.Backup != inflated.Name || be.Next != good.Name || !strings.Contains(err.Error(), "below the manifest") {
				t.Fatalf("restore (dry run %v) of a backup with an inflated revision: %v; want it refused, naming %s", dry, err, good.Name)
			}
			if res.Chosen == nil || strings.Contains(res.Chosen.Status, "verified") && res.Candidates[0].Status != "failed verification" {
				t.Errorf("chosen %+v candidates %+v", res.Chosen, res.Candidates)
			}
			if left := entriesUnder(t, scratch); len(left) != 0 {
				t.Errorf("the dry run left %v in its scratch dir", left)
			}
			if _, err := os.Stat(root); !os.IsNotExist(err) {
				t.Errorf("the data dir root exists: %v", err)
			}
		})
	}

	// A regular file where a parent dir should be: root cannot stop
	// that, unlike a chmod.
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	roots := map[string]string{"parent is a file": filepath.Join(file, "data")}
	if ro := readOnlyMount(t); ro != "" {
		roots["read-only mount"] = filepath.Join(ro, "data")
	}
	for name, root := range roots {
		for _, dry := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s dry=%v", name, dry), func(t *testing.T) {
				before := r.BucketListing(t)
				opts := r.runOpts(t, id, ic, root)
				opts.DryRun, opts.Backup = dry, good.Name
				res, err := restore.Run(ctx, opts)
				var re *restore.Error
				if !errors.As(err, &re) || re.Step() != restore.StepDataDirs || !strings.Contains(err.Error(), "cannot be written") {
					t.Fatalf("restore (dry run %v) into %s: %v; want a data dir problem", dry, root, err)
				}
				if res.Members[0].Problem == "" {
					t.Errorf("member %+v: no problem recorded", res.Members[0])
				}
				if after := r.BucketListing(t); strings.Join(after, "\n") != strings.Join(before, "\n") {
					t.Errorf("the bucket changed")
				}
				t.Logf("%v", err)
			})
		}
	}
}

// readOnlyMount mounts a read-only tmpfs for the test, or returns "" when
// this process may not mount (tests run as root in a container that
// usually can't).
func readOnlyMount(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		tb.Logf("no read-only mount (%v: %s): only the file-parent case runs", err, strings.TrimSpace(string(out)))
		return ""
	}
	tb.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	return dir
}

// The choice is by revision, not time: an older backup with the higher
// revision wins over a newer one with a lower revision (a backup of a
// cluster rebuilt without a bump, or of another member), and the restored
// data is the older backup's.
func TestRestoreChoosesHighestRevisionNotNewest(t *testing.T) {
	t.Parallel()
	big := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	want := testenv.PutKeys(t, big.Client(t), "/big/", 300, 16)
	small := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, small.Client(t), "/small/", 5, 16)
	r := newStoreRig(t)
	const id = "by-revision"
	high := r.TakeBackup(t, big, id, catalog.KindScheduled)
	low := r.TakeBackup(t, small, id, catalog.KindScheduled) // newer, lower revision
	if !(high.Revision() > low.Revision()) || !low.StartedAt.After(high.StartedAt) {
		t.Fatalf("setup: high %s rev %d, low %s rev %d", high.Name, high.Revision(), low.Name, low.Revision())
	}
	ctx := testfix.Context(t, 2*time.Minute)
	ic, ms := newCluster(t, 1, false)
	res, err := restore.Run(ctx, r.runOpts(t, id, ic, t.TempDir()))
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if res.Chosen.Name != high.Name || res.Candidates[0].Name != high.Name || res.Candidates[1].Name != low.Name ||
		!strings.Contains(res.Reason, "highest revision") {
		t.Fatalf("chose %s because %q (candidates %+v); want %s, the older with the higher revision", res.Chosen.Name, res.Reason, res.Candidates, high.Name)
	}
	nc := startRestored(t, testenv.V35, &res.Plan, ms, nil, false)
	got, _ := allKeys(t, nc.Client(t))
	sameKeys(t, got, want)
}

// All or none: the third member's write fails (a file appeared where its
// data dir goes, after the checks); the two written before it are removed
// and the file, not the run's, is left alone.
func TestRestoreAllOrNoneWhenAMemberFails(t *testing.T) {
	t.Parallel()
	_, r, _, _ := backedUp(t, "all-or-none", 100, 16)
	ic, _ := newCluster(t, 3, false)
	root := t.TempDir()
	opts := r.runOpts(t, "all-or-none", ic, "")
	opts.DataDirRoot, opts.DataDir, opts.Parallel = "", filepath.Join(root, "{name}"), 1
	// After the second data dir is written, a file appears where the last
	// member's goes. (The order members are written in is not fixed.)
	var mu sync.Mutex
	written := map[string]bool{}
	var last string
	afterWritten := func(_ context.Context, m restore.Member) {
		mu.Lock()
		defer mu.Unlock()
		if written[m.Name] = true; len(written) != 2 {
			return
		}
		for _, nm := range []string{"r0", "r1", "r2"} {
			if !written[nm] {
				last = nm
			}
		}
		if err := os.WriteFile(filepath.Join(root, last), []byte("in the way"), 0o600); err != nil {
			t.Error(err)
		}
	}
	res, err := restore.Run(restore.WithMemberWritten(testfix.Context(t, 2*time.Minute), afterWritten), opts)
	var re *restore.Error
	if !errors.As(err, &re) || re.Step() != restore.StepWrite || last == "" || !strings.Contains(err.Error(), "member "+last) {
		t.Fatalf("restore with r2's write failing: %v", err)
	}
	for _, m := range res.Members {
		if m.Restored {
			t.Errorf("member %s reported written", m.Name)
		}
	}
	if left := entriesUnder(t, root); len(left) != 1 || left[0] != filepath.Join(root, last) {
		t.Fatalf("left %v; want only the file the test put in the way", left)
	}
}

// A survivor that answers but whose snapshot cannot be committed (the
// store refuses writes) stops the restore: nothing is written, and the
// error says so and how to go on without it.
func TestRestoreSurvivorSnapshotNotCommitted(t *testing.T) {
	t.Parallel()
	c, r, _, _ := backedUp(t, "survivor-fails", 100, 16)
	before := r.BucketListing(t)
	fs := faults.Wrap(r.Store)
	fs.Inject(faults.Fault{Op: faults.OpPut, Kind: faults.ServerError})
	ic, _ := newCluster(t, 3, false)
	parent := t.TempDir()
	opts := r.runOpts(t, "survivor-fails", ic, filepath.Join(parent, "data"))
	opts.Store, opts.NoLive, opts.Old, opts.ProbeTimeout = fs, false, testfix.EtcdConfig(c), 2*time.Second
	_, err := restore.Run(testfix.Context(t, 2*time.Minute), opts)
	var re *restore.Error
	if !errors.As(err, &re) || re.Step() != restore.StepSurvivor || !strings.Contains(err.Error(), "--no-live") {
		t.Fatalf("restore with the survivor snapshot failing: %v", err)
	}
	if fs.CountCalls(faults.OpGet, "snapshot.db.zst") != 0 {
		t.Errorf("the restore went on to read a backup")
	}
	if left := entriesUnder(t, parent); len(left) != 0 {
		t.Errorf("left %v", left)
	}
	if after := r.BucketListing(t); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("the bucket changed:\n%v\n%v", before, after)
	}
}

// One member per run (--name, e.g. one per host): three runs with the
// same backup and token make data dirs that form one working three-member
// cluster, verified.
func TestRestoreOneMemberPerRun(t *testing.T) {
	t.Parallel()
	c, r, m, want := backedUp(t, "per-host", 200, 16)
	c.Members[0].Kill()
	ic, ms := newCluster(t, 3, false)
	ctx := testfix.Context(t, 3*time.Minute)
	const token = "per-host-restore-1"
	var plans []*restore.Result
	dirs := map[string]string{}
	for _, nm := range ms {
		opts := r.runOpts(t, "per-host", ic, "")
		opts.DataDirRoot, opts.Name, opts.DataDir = "", nm.name, filepath.Join(t.TempDir(), "etcd") // another host's disk
		opts.Backup, opts.Token = m.Name, token
		res, err := restore.Run(ctx, opts)
		if err != nil {
			t.Fatalf("restore of %s: %v", nm.name, err)
		}
		if len(res.Members) != 1 || res.Members[0].Name != nm.name || !res.Members[0].Restored || res.Token != token {
			t.Fatalf("restore of %s: %+v", nm.name, res.Members)
		}
		dirs[nm.name] = res.Members[0].DataDir
		plans = append(plans, res)
	}
	// The members start from their own runs' dirs.
	plan := plans[0].Plan
	plan.Members = nil
	for _, nm := range ms {
		plan.Members = append(plan.Members, restore.Member{Name: nm.name, DataDir: dirs[nm.name]})
	}
	nc := startRestored(t, testenv.V35, &plan, ms, nil, false)
	rep, err := restore.VerifyRebuilt(ctx, restore.VerifyOptions{Etcd: etcdConfigFor(nil, ms), Timeout: time.Minute,
		MinRevision: plans[0].MinRevision, ExpectedKeys: plans[0].Snapshot.LiveKeys, ExpectedMembers: 3})
	if err != nil {
		t.Fatalf("verify: %v %+v", err, rep)
	}
	got, _ := allKeys(t, nc.Client(t))
	sameKeys(t, got, want)
}

// restore v2 skips keys whose TTL ran out since the backup, and updates
// (counting them) keys the cluster holds with another value.
func TestRestoreV2ExpiredAndUpdated(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, EnableV2: true})
	v2 := testenv.PutV2Keys(t, c, 12)
	r := newStoreRig(t)
	m := r.TakeBackup(t, c, "v2-ttl", catalog.KindScheduled)
	exp := testfix.ReadV2Export(t, r.Store, r.Layout, m)
	var ttlKey string
	for _, n := range exp.Nodes {
		if n.TTL > 0 {
			ttlKey = n.Key
		}
	}
	if ttlKey == "" {
		t.Fatal("the export has no key with a TTL")
	}
	// The new cluster already holds one key, with another value.
	nc := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, EnableV2: true})
	var changed string
	for k := range v2 {
		if k != ttlKey {
			changed = k
			break
		}
	}
	hc := testenv.V2HTTPClient(nc)
	req, _ := http.NewRequest(http.MethodPut, nc.Endpoints()[0]+"/v2/keys"+changed, strings.NewReader(url.Values{"value": {"stale"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	// Restored after the TTL key's expiry: an injected clock, no waiting.
	later := time.Now().Add((testenv.V2KeyTTL + 60) * time.Second)
	rep, err := restore.RestoreV2(testfix.Context(t, time.Minute), restore.V2Options{ClusterID: "v2-ttl", Store: r.Store, Layout: r.Layout,
		Backup: m.Name, Etcd: testfix.EtcdConfig(nc), Now: func() time.Time { return later }, Log: testfix.Logger(t)})
	if err != nil {
		t.Fatalf("restore v2: %v", err)
	}
	// Unchanged: the dirs the stale key's PUT created (its root, d<i>,
	// s<j>); everything else is created.
	if rep.Expired != 1 || rep.Updated != 1 || rep.Keys != len(v2) || rep.Unchanged != 3 || rep.Created != rep.Keys+rep.Dirs-5 || rep.Failed != 0 {
		t.Fatalf("restore v2: %+v; want 1 expired, 1 updated, 3 dirs unchanged, the rest created", rep)
	}
	actions := map[string]string{}
	for _, ch := range rep.Changes {
		actions[ch.Key] = ch.Action
	}
	if actions[ttlKey] != restore.V2Expired || actions[changed] != restore.V2Updated {
		t.Fatalf("changes %+v", rep.Changes)
	}
	if n := testenv.GetV2Key(t, nc, changed); n == nil || n.Value != v2[changed] {
		t.Fatalf("updated key %s = %+v, want %q", changed, n, v2[changed])
	}
	gr, err := hc.Get(nc.Endpoints()[0] + "/v2/keys" + ttlKey + "?quorum=true")
	if err != nil {
		t.Fatal(err)
	}
	gr.Body.Close()
	if gr.StatusCode != http.StatusNotFound {
		t.Fatalf("GET the expired key %s: %s; want 404: it must not be written", ttlKey, gr.Status)
	}
}
