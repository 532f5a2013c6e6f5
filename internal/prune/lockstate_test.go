package prune_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

// TestNewestLock: the lock of a cluster's newest committed backup is the
// retention of its manifest's current version, read from the store. A
// store without Locker, or a bucket without object lock, reads nothing and
// is not an error; an older locked backup does not make the newest one
// locked; a bucket default retention locks; a newer unlocked version of the
// manifest over a locked one is not locked; a future-dated folder and an
// incomplete one are never the newest; a lock that has ended is not
// locked.
func TestNewestLock(t *testing.T) {
	ctx := context.Background()
	l := catalog.Layout{Prefix: "kubx-etcd-01"}
	const id = "etcd-a"
	now := time.Now().UTC()
	older := folder{cluster: id, at: now.Add(-16 * time.Hour), kind: catalog.KindScheduled}
	newest := folder{cluster: id, at: now.Add(-8 * time.Hour), kind: catalog.KindScheduled}
	manifest := func(f folder) string { return l.Key(id, f.name(), catalog.ManifestObject) }
	lockFor := func(st *memstore.Store, f folder, r store.Retention) {
		t.Helper()
		if err := st.SetRetention(ctx, manifest(f), "", r); err != nil {
			t.Fatal(err)
		}
	}
	gov := store.Retention{Mode: store.LockGovernance, Until: now.Add(72 * time.Hour).Truncate(time.Second)}

	t.Run("NoLocker", func(t *testing.T) {
		st := memstore.New()
		putGood(t, st, l, newest)
		for _, s := range []store.Store{st, plainStore{st}} {
			ls, err := catalog.NewestLock(ctx, s, l, id)
			if err != nil || ls != (catalog.LockState{}) {
				t.Fatalf("%T: %+v, %v; want the zero LockState and no error", s, ls, err)
			}
		}
	})

	t.Run("NoBackup", func(t *testing.T) {
		st := memstore.NewLocked(store.LockInfo{})
		ls, err := catalog.NewestLock(ctx, st, l, id)
		if err != nil || ls != (catalog.LockState{BucketLocked: true}) {
			t.Fatalf("%+v, %v; want BucketLocked only", ls, err)
		}
	})

	t.Run("NewestUnlocked", func(t *testing.T) {
		st := memstore.NewLocked(store.LockInfo{})
		putGood(t, st, l, older)
		lockFor(st, older, gov)
		putGood(t, st, l, newest)
		// An incomplete folder and a future-dated one, both newer.
		putObject(t, st, l.Key(id, catalog.BackupName(now.Add(-time.Hour), catalog.KindScheduled), catalog.SnapshotObjectZstd), []byte("x"))
		future := folder{cluster: id, at: now.Add(48 * time.Hour), kind: catalog.KindScheduled}
		putGood(t, st, l, future)
		lockFor(st, future, gov)
		ls, err := catalog.NewestLock(ctx, st, l, id)
		if err != nil || ls != (catalog.LockState{Backup: newest.name(), BucketLocked: true}) {
			t.Fatalf("%+v, %v; want %s not locked", ls, err, newest.name())
		}

		lockFor(st, newest, gov)
		ls, err = catalog.NewestLock(ctx, st, l, id)
		want := catalog.LockState{Backup: newest.name(), BucketLocked: true, Locked: true, Mode: store.LockGovernance, Until: gov.Until}
		if err != nil || ls != want {
			t.Fatalf("%+v, %v; want %+v", ls, err, want)
		}
		// The lock judged after it ended.
		ls, err = catalog.BackupLock(ctx, st, l, store.LockInfo{Enabled: true}, id, newest.name(), gov.Until.Add(time.Second))
		if err != nil || ls.Locked || ls.Mode != "" || !ls.Until.IsZero() {
			t.Fatalf("after the lock ended: %+v, %v; want not locked", ls, err)
		}
		// A newer version of the manifest, written without a retention
		// (a write-only credential can): the current version is unlocked.
		putObject(t, st, manifest(newest), manifestBody(t, newest))
		ls, err = catalog.NewestLock(ctx, st, l, id)
		if err != nil || ls.Locked || ls.Backup != newest.name() {
			t.Fatalf("over a newer unlocked version: %+v, %v; want not locked", ls, err)
		}
	})

	t.Run("BucketDefault", func(t *testing.T) {
		st := memstore.NewLocked(store.LockInfo{DefaultMode: store.LockCompliance, DefaultPeriod: 24 * time.Hour})
		putGood(t, st, l, newest)
		ls, err := catalog.NewestLock(ctx, st, l, id)
		if err != nil || !ls.Locked || ls.Mode != store.LockCompliance || ls.Until.Before(now.Add(23*time.Hour)) {
			t.Fatalf("%+v, %v; want locked by the bucket's default (COMPLIANCE, 24h)", ls, err)
		}
	})

	t.Run("RetentionUnreadable", func(t *testing.T) {
		st := memstore.NewLocked(store.LockInfo{})
		_, err := catalog.BackupLock(ctx, st, l, store.LockInfo{Enabled: true}, id, newest.name(), now)
		if !store.IsNotFound(err) || !strings.Contains(err.Error(), newest.name()) {
			t.Fatalf("a missing manifest: %v; want not found, naming the backup", err)
		}
	})
}

// plainStore hides the capabilities of the store it holds (no Ranger).
type plainStore struct{ store.Store }
