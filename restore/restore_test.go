package restore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/restore/survivor"
)

// The quorum-loss scenario: a 3-member TLS cluster with thousands of keys
// (overwritten, deleted, some on a lease) and v2 keys, backed up to COS,
// then written to again. Two members die with their data dirs. The restore
// snapshots the survivor first and picks it (it is newer than the COS
// backup); three new members start on the restored dirs; every key is
// back, the revision never went back, and the v2 keys come back with
// `restore v2`, which is idempotent.
func TestRestoreQuorumLostFromSurvivor(t *testing.T) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, EnableV2: true})
	cli := c.Client(t)
	ctx := testfix.Context(t, 5*time.Minute)
	want := testenv.PutKeys(t, cli, "/registry/pods/", 3000, 64)
	for k, v := range testenv.PutKeys(t, cli, "/registry/pods/", 600, 64) { // overwrite the first 600
		want[k] = v
	}
	if _, err := cli.Delete(ctx, "/registry/pods/00001000", clientv3.WithRange("/registry/pods/00001300")); err != nil {
		t.Fatal(err)
	}
	for i := 1000; i < 1300; i++ {
		delete(want, fmt.Sprintf("/registry/pods/%08d", i))
	}
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		k, v := fmt.Sprintf("/registry/leases/kube-node-lease/n%03d", i), fmt.Sprintf("holder-%d", i)
		if _, err := cli.Put(ctx, k, v, clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	v2keys := testenv.PutV2Keys(t, c, 40)

	r := newStoreRig(t)
	const id = "kubx-etcd-07"
	cosBackup := r.TakeBackup(t, c, id, catalog.KindScheduled)

	// Written after the last backup: only the survivor has these.
	for k, v := range testenv.PutKeys(t, cli, "/registry/events/", 200, 32) {
		want[k] = v
	}
	if _, err := cli.Delete(ctx, "/registry/pods/00002000"); err != nil {
		t.Fatal(err)
	}
	delete(want, "/registry/pods/00002000")
	_, oldRev := allKeys(t, cli)

	// Quorum lost: two members and their data are gone.
	surv := c.Members[0]
	for _, m := range c.Members[1:] {
		m.Kill()
		if err := os.RemoveAll(m.DataDir); err != nil {
			t.Fatal(err)
		}
	}

	ic, ms := newCluster(t, 3, true)
	root := t.TempDir()
	res, err := restore.Run(ctx, restore.Options{Survivor: survivor.Backup{},
		ClusterID: id, Store: r.Store, Layout: r.Layout,
		Old: testfix.EtcdConfig(c), ProbeTimeout: 2 * time.Second,
		Targets:      restore.Targets{InitialCluster: ic, DataDirRoot: root},
		BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true,
		Log: testfix.Logger(t),
	})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if res.Survivor.Backup == "" || res.Survivor.Member != surv.Name {
		t.Fatalf("survivor %+v: want a pre-restore snapshot of %s", res.Survivor, surv.Name)
	}
	if res.Chosen.Name != res.Survivor.Backup || res.Chosen.Kind != catalog.KindPreRestore {
		t.Fatalf("chose %s (%s), want the survivor snapshot %s", res.Chosen.Name, res.Chosen.Kind, res.Survivor.Backup)
	}
	if !strings.Contains(res.Reason, "surviving member") || !strings.Contains(res.Reason, cosBackup.Name) {
		t.Errorf("reason %q does not say why", res.Reason)
	}
	if len(res.Candidates) != 2 || res.Candidates[1].Name != cosBackup.Name {
		t.Errorf("candidates %+v", res.Candidates)
	}
	m, err := catalog.LoadManifest(ctx, r.Store, r.Layout, id, res.Survivor.Backup)
	if err != nil || m.Kind != catalog.KindPreRestore || m.Source.Name != surv.Name {
		t.Fatalf("survivor backup manifest %+v: %v", m, err)
	}
	if res.Snapshot == nil || res.Snapshot.LiveKeys != int64(len(want)) || res.Snapshot.Revision < oldRev {
		t.Fatalf("snapshot facts %+v, want %d live keys and revision >= %d", res.Snapshot, len(want), oldRev)
	}
	for _, ck := range res.Checks {
		if ck.Status != restore.CheckPassed {
			t.Errorf("check %+v", ck)
		}
	}
	if len(res.Checks) < 4 {
		t.Errorf("checks %+v", res.Checks)
	}
	if res.TokenGenerated == false || res.Token == "" {
		t.Errorf("token %q generated=%v", res.Token, res.TokenGenerated)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 3 {
		t.Errorf("the data dir root holds %v, want the three data dirs and no temp file", entries)
	}
	surv.Kill()

	nc := startRestored(t, testenv.V35, &res.Plan, ms, c.PKI, true)
	newCfg := etcdConfigFor(c.PKI, ms)
	rep, err := restore.VerifyRebuilt(ctx, restore.VerifyOptions{Etcd: newCfg, Timeout: time.Minute,
		MinRevision: res.MinRevision, ExpectedKeys: res.Snapshot.LiveKeys, ExpectedMembers: 3})
	if err != nil {
		t.Fatalf("verify: %v (%+v)", err, rep)
	}
	got, rev := allKeys(t, nc.Client(t))
	sameKeys(t, got, want)
	if rev < oldRev+restore.DefaultBumpRevision {
		t.Fatalf("revision %d, want >= %d (old %d + bump): revisions went back", rev, oldRev+restore.DefaultBumpRevision, oldRev)
	}
	// The lease came back with its keys.
	lr, err := nc.Client(t).TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil || lr.TTL <= 0 || len(lr.Keys) != 40 {
		t.Errorf("lease after restore: %+v %v", lr, err)
	}

	// The standalone verify agrees, from the backup itself.
	chk, err := restore.CheckCluster(ctx, restore.ClusterCheckOptions{
		VerifyOptions: restore.VerifyOptions{Etcd: newCfg, Timeout: time.Minute, ExpectedMembers: 3},
		ClusterID:     id, Store: r.Store, Layout: r.Layout, Backup: res.Chosen.Name,
		BumpRevision: restore.DefaultBumpRevision, TempDir: t.TempDir(),
	})
	if err != nil || !chk.Verified || chk.Snapshot.LiveKeys != int64(len(want)) {
		t.Fatalf("restore verify: %v %+v", err, chk)
	}

	// v2: the keys come back, then a second run changes nothing.
	v2opts := restore.V2Options{ClusterID: id, Store: r.Store, Layout: r.Layout, Etcd: newCfg, Log: testfix.Logger(t)}
	v2rep, err := restore.RestoreV2(ctx, v2opts)
	if err != nil {
		t.Fatalf("restore v2: %v", err)
	}
	if v2rep.Backup != res.Chosen.Name || v2rep.Keys != len(v2keys) || v2rep.Created != v2rep.Keys+v2rep.Dirs || v2rep.Updated+v2rep.Failed+v2rep.Unchanged != 0 {
		t.Fatalf("restore v2: %+v", v2rep)
	}
	for k, v := range v2keys {
		if n := testenv.GetV2Key(t, nc, k); n.Value != v {
			t.Fatalf("v2 %s = %q, want %q", k, n.Value, v)
		}
	}
	ttlKey := ""
	for _, n := range testfix.ReadV2Export(t, r.Store, r.Layout, m).Nodes {
		if n.TTL > 0 {
			ttlKey = n.Key
		}
	}
	if n := testenv.GetV2Key(t, nc, ttlKey); ttlKey == "" || n.TTL <= 0 || n.TTL > testenv.V2KeyTTL {
		t.Errorf("v2 TTL key %q: %+v", ttlKey, n)
	}
	again, err := restore.RestoreV2(ctx, v2opts)
	if err != nil {
		t.Fatalf("restore v2 again: %v", err)
	}
	if again.Created != 0 || again.Updated != 0 || again.Unchanged != v2rep.Keys+v2rep.Dirs || len(again.Changes) != 0 {
		t.Fatalf("second restore v2 changed something: %+v", again)
	}
}

// With every member dead, the newest COS backup is chosen: the highest
// revision, and of two at the same revision the later one.
func TestRestoreAllDeadNewestBackup(t *testing.T) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35})
	cli := c.Client(t)
	r := newStoreRig(t)
	const id = "all-dead"
	testenv.PutKeys(t, cli, "/a/", 100, 16)
	old := r.TakeBackup(t, c, id, catalog.KindScheduled)
	want := testenv.PutKeys(t, cli, "/b/", 100, 16)
	for k, v := range testenv.PutKeys(t, cli, "/a/", 100, 16) {
		want[k] = v
	}
	tied := r.TakeBackup(t, c, id, catalog.KindScheduled)
	newest := r.TakeBackup(t, c, id, catalog.KindManual) // same revision, later
	if tied.Revision() != newest.Revision() || old.Revision() >= tied.Revision() {
		t.Fatalf("revisions %d %d %d", old.Revision(), tied.Revision(), newest.Revision())
	}
	for _, m := range c.Members {
		m.Kill()
		os.RemoveAll(m.DataDir)
	}
	ic, ms := newCluster(t, 3, false)
	ctx := testfix.Context(t, 3*time.Minute)
	res, err := restore.Run(ctx, restore.Options{Survivor: survivor.Backup{},
		ClusterID: id, Store: r.Store, Layout: r.Layout, Old: testfix.EtcdConfig(c), ProbeTimeout: time.Second,
		Targets:      restore.Targets{InitialCluster: ic, DataDir: filepath.Join(t.TempDir(), "etcd-{name}")},
		BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, Log: testfix.Logger(t),
	})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if res.Chosen.Name != newest.Name || !strings.Contains(res.Reason, "ties with "+tied.Name) {
		t.Fatalf("chose %s because %q; want %s (ties with %s)", res.Chosen.Name, res.Reason, newest.Name, tied.Name)
	}
	if res.Survivor.Backup != "" || !strings.Contains(res.Survivor.Skipped, "no member") {
		t.Fatalf("survivor %+v", res.Survivor)
	}
	listing := testfix.Keys(t, r.Store, r.Layout.ClusterPrefix(id))
	for _, k := range listing {
		if strings.Contains(k, string(catalog.KindPreRestore)) {
			t.Fatalf("a pre-restore backup was written with no survivor: %s", k)
		}
	}
	for _, m := range res.Members {
		if !strings.HasSuffix(m.DataDir, "etcd-"+m.Name) {
			t.Errorf("data dir %s for %s", m.DataDir, m.Name)
		}
	}
	nc := startRestored(t, testenv.V35, &res.Plan, ms, nil, false)
	got, _ := allKeys(t, nc.Client(t))
	sameKeys(t, got, want)
}

// A flipped byte and a truncated object in a backup named with --backup
// are both refused, naming the backup and the next-newest one that passes;
// nothing is written. (Without --backup, restore sets damaged backups
// aside and falls back by itself: select_fallback_test.go.)
func TestRestoreRefusesCorruptBackups(t *testing.T) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	r := newStoreRig(t)
	const id = "corrupt"
	var bs []*catalog.Manifest
	for i := range 3 {
		testenv.PutKeys(t, cli, fmt.Sprintf("/k%d/", i), 200, 64)
		bs = append(bs, r.TakeBackup(t, c, id, catalog.KindScheduled))
	}
	orig := map[string][]byte{}
	for _, m := range bs {
		orig[m.Name] = testfix.ReadObject(t, r.Store, r.SnapshotKey(m))
	}
	flip := func(b []byte) []byte {
		out := append([]byte(nil), b...)
		out[len(out)/2] ^= 0x40
		return out
	}
	truncate := func(b []byte) []byte { return append([]byte(nil), b[:len(b)*2/3]...) }
	ic, _ := newCluster(t, 3, false)
	ctx := testfix.Context(t, 3*time.Minute)

	cases := []struct {
		name    string
		damage  map[int]func([]byte) []byte
		force   string // --backup
		refused int
		next    int // -1: none
	}{
		{"flipped byte", map[int]func([]byte) []byte{2: flip}, bs[2].Name, 2, 1},
		{"truncated", map[int]func([]byte) []byte{2: truncate}, bs[2].Name, 2, 1},
		{"newest two damaged", map[int]func([]byte) []byte{2: flip, 1: truncate}, bs[2].Name, 2, 0},
		{"forced backup truncated", map[int]func([]byte) []byte{1: truncate}, bs[1].Name, 1, 0},
		{"all damaged", map[int]func([]byte) []byte{0: flip, 1: truncate, 2: truncate}, bs[2].Name, 2, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i, m := range bs {
				b := orig[m.Name]
				if f := tc.damage[i]; f != nil {
					b = f(b)
				}
				r.PutObject(t, r.SnapshotKey(m), b)
			}
			before := r.BucketListing(t)
			root := t.TempDir()
			_, err := restore.Run(ctx, restore.Options{Survivor: survivor.Backup{},
				ClusterID: id, Store: r.Store, Layout: r.Layout, NoLive: true, Backup: tc.force,
				Targets:      restore.Targets{InitialCluster: ic, DataDirRoot: root},
				BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, Log: testfix.Logger(t),
			})
			var be *restore.BackupError
			if !errors.As(err, &be) {
				t.Fatalf("restore of a damaged backup: %v; want a BackupError", err)
			}
			msg := err.Error()
			if be.Backup != bs[tc.refused].Name || !strings.Contains(msg, bs[tc.refused].Name) || !strings.Contains(msg, id) {
				t.Errorf("error names %s: %s; want %s", be.Backup, msg, bs[tc.refused].Name)
			}
			switch {
			case tc.next < 0 && be.Next != "":
				t.Errorf("next good backup %s, want none: %s", be.Next, msg)
			case tc.next >= 0 && (be.Next != bs[tc.next].Name || !strings.Contains(msg, "--backup "+bs[tc.next].Name)):
				t.Errorf("next good backup %q, want %s: %s", be.Next, bs[tc.next].Name, msg)
			}
			if entries, _ := os.ReadDir(root); len(entries) != 0 {
				t.Errorf("a refused restore left %v in the data dir root", entries)
			}
			if after := r.BucketListing(t); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Errorf("the bucket changed")
			}
			t.Logf("refused: %v", err)
		})
	}
}

// A non-empty data dir is refused before anything happens (not even the
// survivor snapshot); --force moves it aside and keeps it.
func TestRestoreDataDirInTheWay(t *testing.T) {
	const id = "dirs"
	c, r, _, want := backedUp(t, id, 100, 16)
	ic, ms := newCluster(t, 1, false)
	root := t.TempDir()
	dir := filepath.Join(root, "r0.etcd")
	if err := os.MkdirAll(filepath.Join(dir, "member", "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "member", "wal", "keep.wal"), []byte("old data"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := restore.Options{Survivor: survivor.Backup{},
		ClusterID: id, Store: r.Store, Layout: r.Layout, Old: testfix.EtcdConfig(c), ProbeTimeout: 2 * time.Second,
		Targets:      restore.Targets{InitialCluster: ic, DataDirRoot: root},
		BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, Log: testfix.Logger(t),
	}
	ctx := testfix.Context(t, 3*time.Minute)
	before, tree := r.BucketListing(t), treeState(t, root)
	_, err := restore.Run(ctx, opts)
	var re *restore.Error
	if !errors.As(err, &re) || re.Step() != restore.StepDataDirs || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("non-empty data dir: %v", err)
	}
	if strings.Join(r.BucketListing(t), "\n") != strings.Join(before, "\n") {
		t.Fatal("a refused restore changed the bucket (took a survivor snapshot?)")
	}
	if strings.Join(treeState(t, root), "\n") != strings.Join(tree, "\n") {
		t.Fatal("a refused restore changed the data dirs")
	}

	opts.Force = true
	res, err := restore.Run(ctx, opts)
	if err != nil {
		t.Fatalf("restore --force: %v", err)
	}
	moved := res.Members[0].MovedTo
	if !regexp.MustCompile(`/r0\.etcd\.moved-\d{8}T\d{6}Z$`).MatchString(moved) {
		t.Fatalf("moved to %q", moved)
	}
	if b, err := os.ReadFile(filepath.Join(moved, "member", "wal", "keep.wal")); err != nil || string(b) != "old data" {
		t.Fatalf("the moved-aside dir lost its files: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "member", "snap", "db")); err != nil {
		t.Fatalf("no restored db: %v", err)
	}
	c.Members[0].Kill()
	nc := startRestored(t, testenv.V35, &res.Plan, ms, nil, false)
	got, _ := allKeys(t, nc.Client(t))
	sameKeys(t, got, want)
}

// A dry run changes nothing: not the bucket (no survivor snapshot), not the
// data dirs (even one --force would move); it says what it would do.
func TestRestoreDryRunChangesNothing(t *testing.T) {
	const id = "dry"
	c, r, m, _ := backedUp(t, id, 100, 16)
	testenv.PutKeys(t, c.Client(t), "/y/", 10, 16)
	ic, _ := newCluster(t, 3, false)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "r1.etcd", "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "r1.etcd", "member", "x"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := testfix.Context(t, 2*time.Minute)
	before, tree := r.BucketListing(t), treeState(t, root)
	check := func(t *testing.T) {
		t.Helper()
		if after := r.BucketListing(t); strings.Join(after, "\n") != strings.Join(before, "\n") {
			t.Fatalf("a dry run changed the bucket:\n%v\n%v", before, after)
		}
		if after := treeState(t, root); strings.Join(after, "\n") != strings.Join(tree, "\n") {
			t.Fatalf("a dry run changed the data dirs:\n%v\n%v", tree, after)
		}
		if entries, _ := os.ReadDir(filepath.Dir(root)); len(entries) == 0 {
			t.Fatal("?")
		}
	}
	opts := restore.Options{Survivor: survivor.Backup{},
		ClusterID: id, Store: r.Store, Layout: r.Layout, Old: testfix.EtcdConfig(c), ProbeTimeout: 2 * time.Second,
		Targets:      restore.Targets{InitialCluster: ic, DataDirRoot: root},
		BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, Force: true, DryRun: true, Log: testfix.Logger(t),
	}
	t.Run("survivor", func(t *testing.T) {
		res, err := restore.Run(ctx, opts)
		if err != nil {
			t.Fatalf("dry run: %v", err)
		}
		check(t)
		if !res.Survivor.Planned || res.Survivor.Member != c.Members[0].Name || !res.Chosen.Planned {
			t.Fatalf("survivor %+v chosen %+v: want a planned survivor snapshot", res.Survivor, res.Chosen)
		}
		if !strings.Contains(res.Reason, "would be taken") {
			t.Errorf("reason %q", res.Reason)
		}
		for _, ck := range res.Checks {
			if ck.Status != restore.CheckPlanned {
				t.Errorf("check %+v, want planned", ck)
			}
		}
		if res.Members[1].State != restore.DirNonEmpty || !strings.Contains(res.Members[1].MovedTo, ".moved-") {
			t.Errorf("member r1: %+v", res.Members[1])
		}
	})
	t.Run("no-live", func(t *testing.T) {
		o := opts
		o.NoLive = true
		res, err := restore.Run(ctx, o)
		if err != nil {
			t.Fatalf("dry run: %v", err)
		}
		check(t)
		if res.Chosen.Name != m.Name || res.Survivor.Skipped != "--no-live" {
			t.Fatalf("chose %+v", res.Chosen)
		}
		passed := 0
		for _, ck := range res.Checks {
			if ck.Status == restore.CheckPassed {
				passed++
			}
		}
		// The four stream checks and the database's, as in the real run.
		if passed != 5 || res.Snapshot == nil || res.Snapshot.LiveKeys != 100 {
			t.Errorf("checks %+v, snapshot %+v: want the four stream checks and the database's passed", res.Checks, res.Snapshot)
		}
	})
	t.Run("refused dir", func(t *testing.T) {
		o := opts
		o.Force, o.NoLive = false, true
		res, err := restore.Run(ctx, o)
		if err == nil || res == nil || len(res.Problems) != 1 || res.Chosen == nil {
			t.Fatalf("dry run with a dir in the way: %v %+v", err, res)
		}
		check(t)
	})
}

// cancelOnProgress cancels the run once the download has started.
type cancelOnProgress struct{ cancel context.CancelFunc }

func (p cancelOnProgress) Update(n int64) {
	if n > 0 {
		p.cancel()
	}
}
func (cancelOnProgress) Done() {}

// Cancelled mid-download: the error says so, and nothing is left behind,
// not even the temp file.
func TestRestoreCancelled(t *testing.T) {
	_, r, _, _ := backedUp(t, "cancel", 2000, 512)
	ic, _ := newCluster(t, 3, false)
	root := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := restore.Run(ctx, restore.Options{Survivor: survivor.Backup{},
		ClusterID: "cancel", Store: r.Store, Layout: r.Layout, NoLive: true,
		Targets:      restore.Targets{InitialCluster: ic, DataDirRoot: filepath.Join(root, "data")},
		BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, Log: testfix.Logger(t),
		Progress: func(string) restore.Progress { return cancelOnProgress{cancel} },
	})
	var re *restore.Error
	if !errors.Is(err, context.Canceled) || !errors.As(err, &re) || re.Step() != restore.StepVerifyBackup {
		t.Fatalf("cancelled restore: %v", err)
	}
	var left []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if p != root && p != filepath.Join(root, "data") {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Fatalf("a cancelled restore left %v", left)
	}
}

// A backup taken right after deletions and a physical compaction: the
// deleted key is not counted, the database's revision is read right (the
// larger of the last key's and the compaction's), and the rebuilt cluster
// is above the old revision.
func TestRestoreAfterCompactedDelete(t *testing.T) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	ctx := testfix.Context(t, 2*time.Minute)
	if _, err := cli.Put(ctx, "/keep", "v"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := cli.Put(ctx, "/gone", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	del, err := cli.Delete(ctx, "/gone")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	r := newStoreRig(t)
	m := r.TakeBackup(t, c, "compacted", catalog.KindScheduled)
	if m.Revision() != del.Header.Revision {
		t.Fatalf("backup revision %d, want %d", m.Revision(), del.Header.Revision)
	}
	c.Members[0].Kill()
	ic, ms := newCluster(t, 1, false)
	res, err := restore.Run(ctx, restore.Options{Survivor: survivor.Backup{},
		ClusterID: "compacted", Store: r.Store, Layout: r.Layout, NoLive: true,
		Targets:      restore.Targets{InitialCluster: ic, DataDirRoot: t.TempDir()},
		BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, Log: testfix.Logger(t),
	})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	nc := startRestored(t, testenv.V35, &res.Plan, ms, nil, false)
	if err := res.CheckRebuilt(ctx, restore.VerifyOptions{Etcd: etcdConfigFor(nil, ms), Timeout: time.Minute}); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if res.Snapshot.LiveKeys != 1 || res.Snapshot.CompactRevision != del.Header.Revision || res.Snapshot.StoreRevision() != m.Revision() {
		t.Fatalf("snapshot facts %+v (store revision %d), backup revision %d", res.Snapshot, res.Snapshot.StoreRevision(), m.Revision())
	}
	got, rev := allKeys(t, nc.Client(t))
	sameKeys(t, got, map[string]string{"/keep": "v"})
	if rev <= m.Revision()+restore.DefaultBumpRevision/2 {
		t.Fatalf("revision %d after restore", rev)
	}
}
