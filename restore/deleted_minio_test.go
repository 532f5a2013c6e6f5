package restore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// Issue 26's disaster, against MinIO: a bucket with object lock (default
// GOVERNANCE retention) and versioning; a real etcd backed up twice; then
// the toolkit's own credential deletes every object (delete markers) and
// overwrites every manifest with garbage. list shows no live backup, list
// --include-deleted shows both; restore, with no flag, rebuilds from the
// newest backup's versions, and the rebuilt keyspace is identical to the
// source's (key, value, create and mod revision, version, lease); a drill
// with --include-deleted passes, compared with the source.
func TestRestoreAfterEveryBackupDeletedAndOverwritten(t *testing.T) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	m := testenv.SharedMinIO(t)
	bucket := m.NewLockedBucket(t)
	if _, err := m.S3(t).PutObjectLockConfiguration(&s3.PutObjectLockConfigurationInput{
		Bucket: aws.String(bucket),
		ObjectLockConfiguration: &s3.ObjectLockConfiguration{
			ObjectLockEnabled: aws.String(s3.ObjectLockEnabledEnabled),
			Rule:              &s3.ObjectLockRule{DefaultRetention: &s3.DefaultRetention{Mode: aws.String("GOVERNANCE"), Days: aws.Int64(1)}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	r := &storeRig{&testfix.StoreRig{MinIO: m, Bucket: bucket, Store: testfix.Store(t, m, bucket), Layout: catalog.Layout{Prefix: testenv.Prefix(t)}}}
	const id = "vandalised"
	ctx := testfix.Context(t, 4*time.Minute)

	testenv.PutKeys(t, cli, "/a/", 50, 16)
	first := r.TakeBackup(t, c, id, catalog.KindScheduled)
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("/leased/%02d", i), "v", clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.PutKeys(t, cli, "/a/", 30, 16) // overwrites: versions > 1
	testenv.PutKeys(t, cli, "/b/", 40, 16)
	if _, err := cli.Delete(ctx, "/b/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	testenv.PutKeys(t, cli, "/c/", 40, 16)
	want := fullDump(t, cli)
	newest := r.TakeBackup(t, c, id, catalog.KindScheduled)

	// The destructive credential: every object deleted (markers), then
	// every manifest overwritten with garbage.
	keys := testfix.Keys(t, r.Store, r.Layout.ClusterPrefix(id))
	if err := r.Store.Delete(ctx, keys); err != nil {
		t.Fatalf("delete on a locked bucket: %v", err)
	}
	for _, b := range []*catalog.Manifest{first, newest} {
		r.PutObject(t, r.Layout.Key(id, b.Name, catalog.ManifestObject), []byte("ransom note: pay up"))
	}

	lr, err := prune.List(ctx, prune.ListOptions{Store: r.Store, Layout: r.Layout, ClusterID: id, Policy: retention.DefaultPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range lr.Rows {
		if row.Status == "committed" {
			t.Errorf("list shows a live committed backup: %+v", row)
		}
	}
	lr, err = prune.List(ctx, prune.ListOptions{Store: r.Store, Layout: r.Layout, ClusterID: id, Policy: retention.DefaultPolicy(), IncludeDeleted: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(lr.Rows) != 2 || lr.Rows[0].Name != newest.Name || lr.Rows[1].Name != first.Name {
		t.Fatalf("list --include-deleted: %+v", lr.Rows)
	}
	for _, row := range lr.Rows {
		if row.Status != prune.VersionDeleted || !row.Deleted || !row.Overwritten || row.Lock == nil || row.Lock.Mode != "governance" {
			t.Errorf("list --include-deleted row %s: status %s deleted %v overwritten %v lock %+v", row.Name, row.Status, row.Deleted, row.Overwritten, row.Lock)
		}
	}
	t.Logf("list --include-deleted:\n%s", strings.Join(tableLines(lr), "\n"))

	// restore, no flag: no live backup checks out, so the versions are used.
	ic, ms := newCluster(t, 1, false)
	res, err := restore.Run(ctx, restore.Options{NoLive: true,
		ClusterID: id, Store: r.Store, Layout: r.Layout,
		Targets:      restore.Targets{InitialCluster: ic, DataDir: filepath.Join(t.TempDir(), "etcd-{name}")},
		BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, Log: testfix.Logger(t),
	})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if res.Chosen.Name != newest.Name || !res.Chosen.FromVersions || res.Chosen.Versions[newest.Snapshot.Object] == "" ||
		!strings.Contains(res.Reason, "read from the object versions") {
		t.Fatalf("chose %s (fromVersions %v, versions %v) because %q; want %s from versions", res.Chosen.Name, res.Chosen.FromVersions, res.Chosen.Versions, res.Reason, newest.Name)
	}
	nc := startRestored(t, testenv.V35, &res.Plan, ms, nil, false)
	got := fullDump(t, nc.Client(t))
	if len(got) != len(want) {
		t.Errorf("restored %d keys, the source has %d", len(got), len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("key %s: restored %q, source %q", k, g, w)
		}
	}

	// drill --include-deleted proves the newest backup from its versions.
	rec, err := drill.Run(testfix.Context(t, 3*time.Minute), drill.Options{ClusterID: id, Store: r.Store, Layout: r.Layout,
		EtcdBinDir: testenv.DrillBinDir(t, testenv.V35), ScratchDir: t.TempDir(), StartTimeout: time.Minute, ProbeTimeout: 10 * time.Second,
		Source: testfix.EtcdConfig(c), IncludeDeleted: true, Log: testfix.Logger(t)})
	if err != nil {
		t.Fatalf("drill --include-deleted: %v", err)
	}
	if !rec.Passed || rec.Backup != newest.Name {
		t.Fatalf("drill: passed %v backup %s failed %q", rec.Passed, rec.Backup, rec.Failed)
	}
}

// fullDump is every key: value, create and mod revision, version and lease.
func fullDump(tb testing.TB, cli *clientv3.Client) map[string]string {
	tb.Helper()
	resp, err := cli.Get(context.Background(), "\x00", clientv3.WithFromKey())
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = fmt.Sprintf("value=%q create=%d mod=%d version=%d lease=%x", kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return out
}

func tableLines(lr *prune.ListResult) []string {
	t := lr.Tables()[0]
	lines := []string{strings.Join(t.Header, " | ")}
	for _, row := range t.Rows {
		lines = append(lines, strings.Join(row, " | "))
	}
	return lines
}

// The v2 keys come back from a deleted backup too: its export is read at
// the version the backup wrote, and the report says so. Without a
// versioned bucket's versions there would be nothing to restore from.
func TestRestoreV2FromDeletedBackup(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, EnableV2: true})
	v2 := testenv.PutV2Keys(t, c, 6)
	m := testenv.SharedMinIO(t)
	bucket := m.NewVersionedBucket(t)
	r := &storeRig{&testfix.StoreRig{MinIO: m, Bucket: bucket, Store: testfix.Store(t, m, bucket), Layout: catalog.Layout{Prefix: testenv.Prefix(t)}}}
	const id = "v2-deleted"
	bk := r.TakeBackup(t, c, id, catalog.KindScheduled)
	if bk.V2 == nil {
		t.Fatal("the backup has no v2 export")
	}
	ctx := testfix.Context(t, 2*time.Minute)
	keys := testfix.Keys(t, r.Store, r.Layout.ClusterPrefix(id))
	if err := r.Store.Delete(ctx, keys); err != nil {
		t.Fatal(err)
	}
	r.PutObject(t, r.Layout.Key(id, bk.Name, bk.V2.Object), []byte("overwritten"))

	nc := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, EnableV2: true})
	rep, err := restore.RestoreV2(ctx, restore.V2Options{ClusterID: id, Store: r.Store, Layout: r.Layout,
		Etcd: testfix.EtcdConfig(nc), Log: testfix.Logger(t)})
	if err != nil {
		t.Fatalf("restore v2 from the versions: %v", err)
	}
	if !rep.FromVersions || rep.Version == "" || rep.Backup != bk.Name || rep.Keys != len(v2) || rep.Failed != 0 {
		t.Fatalf("restore v2: %+v; want every key of %s, read from its versions", rep, bk.Name)
	}
	for k, v := range v2 {
		if n := testenv.GetV2Key(t, nc, k); n == nil || n.Value != v {
			t.Fatalf("v2 key %s = %+v, want %q", k, n, v)
		}
	}
}
