package backup_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/internal/usage"
)

// checkLocked checks that every object of the backup has the manifest's
// retention.
func checkLocked(tb testing.TB, st store.Store, res *backup.Result, mode store.LockMode) {
	tb.Helper()
	m := res.Manifest
	if m.Lock == nil || m.Lock.Until.IsZero() {
		tb.Fatalf("manifest lock %+v, want one", m.Lock)
	}
	keys := testfix.Keys(tb, st, res.Prefix)
	if !slices.ContainsFunc(keys, func(k string) bool { return strings.HasSuffix(k, catalog.ManifestObject) }) || len(keys) < 3 {
		tb.Fatalf("backup objects %v: want the marker, the snapshot, the manifest", keys)
	}
	for _, k := range keys {
		r, err := st.(store.Locker).Retention(context.Background(), k, "")
		if err != nil {
			tb.Fatal(err)
		}
		if r.Mode != mode || r.Until.Sub(m.Lock.Until).Abs() > time.Second {
			tb.Fatalf("%s: retention %s until %s, want %s until %s", k, r.Mode, r.Until, mode, m.Lock.Until)
		}
	}
}

// --lock-mode on a bucket without object lock: a usage error (exit 4)
// before anything is written. On a locked bucket (memstore) every object
// has the retention LockPlan gives; a backup that fails later re-locks the
// cluster's newest backup (the store's clock moved a day and more).
func TestBackupLockMemstore(t *testing.T) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	ctx := context.Background()
	base := backup.Options{ClusterID: "c1", Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(c),
		Layout: catalog.Layout{Prefix: "p/"}, ProbeTimeout: 2 * time.Second, Log: testfix.DebugLogger(t),
		Lock: retention.LockPolicy{Mode: catalog.LockGovernanceMode}}

	plain := memstore.New()
	opts := base
	opts.Store = plain
	_, err := backup.Run(ctx, opts)
	var be *backup.Error
	if !errors.As(err, &be) || be.Step() != backup.StepLock || !usage.Is(err) || !strings.Contains(err.Error(), "has no object lock") {
		t.Fatalf("lock on an unlocked bucket: %v, want a usage error at %q", err, backup.StepLock)
	}
	if keys := testfix.Keys(t, plain, ""); len(keys) != 0 {
		t.Fatalf("objects written: %v", keys)
	}

	now := time.Date(2026, 3, 10, 3, 3, 0, 0, time.UTC)
	st := memstore.NewLocked(store.LockInfo{})
	st.Now = func() time.Time { return now }
	opts = base
	opts.Store, opts.Now = st, func() time.Time { return now }
	// With an escrow: it is locked as the backup that names it.
	key := testfix.NewAgeKey(t)
	list := testfix.EscrowList(t, c.PKI, "kubx-etcd-01", "c1")
	opts.Recipients = testfix.RecipientsOf(t, key)
	opts.Escrow = func(context.Context) (*catalog.EscrowList, []string, error) { return list, nil, nil }
	res, err := backup.Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkLocked(t, st, res, store.LockGovernance)
	if want := now.Add(23 * time.Hour); !res.Manifest.Lock.Until.Equal(want) || res.Manifest.Lock.Mode != catalog.LockGovernanceMode {
		t.Fatalf("manifest lock %+v, want governance until %s", res.Manifest.Lock, want)
	}
	if !res.Manifest.Escrow.Stored() {
		t.Fatalf("escrow %+v, want one stored", res.Manifest.Escrow)
	}
	escrowKey := opts.Layout.EscrowKey("c1", res.Manifest.Escrow.Address)
	if r, err := st.Retention(ctx, escrowKey, ""); err != nil || r.Mode != store.LockGovernance || !r.Until.Equal(res.Manifest.Lock.Until) {
		t.Fatalf("escrow %s: retention %+v, %v; want the backup's %s", escrowKey, r, err, res.Manifest.Lock.Until)
	}

	// A day and a half later, the CronJob's run fails: the newest backup is
	// re-locked to now + 23h.
	now = now.Add(36 * time.Hour)
	opts.Etcd.Endpoints = []string{"https://127.0.0.1:1"}
	if _, err := backup.Run(ctx, opts); err == nil {
		t.Fatal("backup of a dead endpoint succeeded")
	}
	want := now.Add(23 * time.Hour)
	// The escrow the newest backup names is re-locked with it.
	for _, k := range append(testfix.Keys(t, st, res.Prefix), escrowKey) {
		r, err := st.Retention(ctx, k, "")
		if err != nil || !r.Until.Equal(want) {
			t.Fatalf("%s after a failed run: retention %+v, %v; want until %s", k, r, err, want)
		}
	}

	// bucket-default: a bucket without a default retention is refused; one
	// with it records the default in the manifest, no explicit retention.
	opts.Etcd = testfix.EtcdConfig(c)
	opts.Escrow, opts.Recipients = nil, seal.Recipients{}
	opts.Lock.Mode = catalog.LockBucketDefault
	if _, err := backup.Run(ctx, opts); !usage.Is(err) || !strings.Contains(err.Error(), "no default retention") {
		t.Fatalf("bucket-default without a default retention: %v", err)
	}
	def := memstore.NewLocked(store.LockInfo{DefaultMode: store.LockGovernance, DefaultPeriod: 48 * time.Hour})
	def.Now = st.Now
	opts.Store = def
	res, err = backup.Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if l := res.Manifest.Lock; l == nil || l.Mode != catalog.LockBucketDefault || !l.Until.Equal(now.Add(48*time.Hour)) {
		t.Fatalf("bucket-default manifest lock %+v", l)
	}
	checkLocked(t, def, res, store.LockGovernance)
}

// A real backup of a real etcd into a MinIO bucket with object lock:
// every object has the retention, the manifest is create-only (a second
// create is refused), and prune exits 0, keeping the locked backup
// retention lets go as retained until its lock ends; with a short period
// the lock expires (waited for) and the next prune deletes it.
func TestBackupLockMinIO(t *testing.T) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true, EnableV2: true})
	m := testenv.SharedMinIO(t)
	st := testfix.Store(t, m, m.NewLockedBucket(t))
	ctx := context.Background()
	policy := retention.Policy{Recent: 1, IncompleteAfter: time.Hour, FutureTolerance: 5 * time.Minute}
	opts := backup.Options{ClusterID: "c1", Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(c),
		Store: st, Layout: catalog.Layout{Prefix: testenv.Prefix(t)}, ProbeTimeout: 2 * time.Second, Log: testfix.DebugLogger(t),
		Lock: retention.LockPolicy{Mode: catalog.LockGovernanceMode}, LockRetention: &policy}
	first, err := backup.Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkLocked(t, st, first, store.LockGovernance)
	if d := first.Manifest.Lock.Until.Sub(first.Manifest.StartedAt); d != 7*time.Hour {
		t.Fatalf("lock of a scheduled backup with recent 1: %s, want 8h - 1h", d)
	}
	mkey := opts.Layout.Key("c1", first.Manifest.Name, catalog.ManifestObject)
	if _, err := st.PutIfAbsent(ctx, mkey, strings.NewReader("garbage")); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create of the manifest: %v, want ErrExists", err)
	}

	second, err := backup.Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	popts := prune.PruneOptions{Store: st, Layout: opts.Layout, ClusterIDs: []string{"c1"}, Policy: policy, Log: testfix.DebugLogger(t)}
	rep, err := prune.Prune(ctx, popts)
	if err != nil {
		t.Fatalf("prune on a locked bucket: %v", err)
	}
	if rep.Retained != 1 || rep.Deleted != 0 || rep.Kept != 1 {
		t.Fatalf("prune: retained %d deleted %d kept %d, want 1 0 1", rep.Retained, rep.Deleted, rep.Kept)
	}
	a := rep.Clusters[0].Backups[1]
	if a.Name != first.Manifest.Name || a.Action != prune.ActionRetained || a.LockedUntil == nil ||
		a.LockedUntil.Sub(first.Manifest.Lock.Until).Abs() > time.Second || !strings.Contains(a.Reason, "retained until") {
		t.Fatalf("older backup: %+v", a)
	}
	_ = second

	// Short locks: 6s periods less 1s, expired after a wait.
	opts.Lock = retention.LockPolicy{Mode: catalog.LockGovernanceMode, Period: 6 * time.Second, Margin: time.Second}
	opts.ClusterID = "c2"
	popts.ClusterIDs = []string{"c2"}
	a1, err := backup.Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Run(ctx, opts); err != nil {
		t.Fatal(err)
	}
	popts.Now = time.Now()
	if !popts.Now.Before(a1.Manifest.Lock.Until) {
		t.Skipf("the backups took longer than the 5s lock; nothing to check")
	}
	rep, err = prune.Prune(ctx, popts)
	if err != nil || rep.Retained != 1 || rep.Deleted != 0 {
		t.Fatalf("prune while locked: %v; retained %d deleted %d", err, rep.Retained, rep.Deleted)
	}
	time.Sleep(time.Until(a1.Manifest.Lock.Until) + 1500*time.Millisecond)
	popts.Now = time.Now()
	rep, err = prune.Prune(ctx, popts)
	if err != nil || rep.Retained != 0 || rep.Deleted != 1 {
		t.Fatalf("prune after the lock expired: %v; retained %d deleted %d", err, rep.Retained, rep.Deleted)
	}
	if _, err := st.Get(ctx, opts.Layout.Key("c2", a1.Manifest.Name, catalog.ManifestObject)); !store.IsNotFound(err) {
		t.Fatalf("manifest of the expired backup: %v, want not found", err)
	}
}
