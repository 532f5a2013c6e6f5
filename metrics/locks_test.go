package metrics_test

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/metrics"
)

// lockManifest is a made-up committed backup's manifest (the exporter
// reads manifests and object sizes, never a snapshot's bytes).
func lockManifest(cluster string, at time.Time) *catalog.Manifest {
	return &catalog.Manifest{
		Format: catalog.ManifestFormat, ClusterID: cluster, Name: catalog.NewBackupName(at, catalog.KindScheduled), Kind: catalog.KindScheduled,
		StartedAt: at, FinishedAt: at.Add(20 * time.Second), ServerVersion: "3.5.35",
		Source:         catalog.Member{Name: "m0", ID: "8e9e05c52164694d", Endpoint: "https://10.0.0.1:2379"},
		Snapshot:       catalog.SnapshotInfo{Object: catalog.SnapshotObjectZstd, Compression: objectio.CompressZstd, RawSize: 4096, RawSHA256: strings.Repeat("ab", 32), StoredSize: 64, StoredSHA256: strings.Repeat("cd", 32)},
		RevisionBefore: 100, RevisionAfter: 100, ToolVersion: "test",
	}
}

// TestExporterLocks takes the exporter's real scrape of a MinIO bucket
// created with object lock (store only, so every cluster id with backups
// is a cluster): etcd-locked's newest backup has a GOVERNANCE retention
// (its manifest's, set as backup --lock-mode sets it), etcd-unlocked's
// newest has none while an older one is locked, and etcd-overwritten's
// newest manifest was locked and then overwritten by a newer, unlocked
// version (what a write-only credential can do). The gauges say so, the
// bucket's gauge is 1, `promtool check metrics` passes, and `promtool test
// rules` on the scrape fires EtcdBackupUnlocked for etcd-unlocked and
// etcd-overwritten only. The same backups in a bucket without object lock
// give etcd_recovery_bucket_object_lock 0, no lock series and no alert.
func TestExporterLocks(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 3*time.Minute)
	m := testenv.SharedMinIO(t)
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	now := time.Now().UTC()
	until := now.Add(2 * time.Hour).Truncate(time.Second)
	gov := store.Retention{Mode: store.LockGovernance, Until: until}

	world := func(t *testing.T, st store.Store, lock bool) {
		t.Helper()
		for _, c := range []struct {
			cluster                   string
			olderLocked, newestLocked bool
			overwriteNewest           bool
		}{
			{"etcd-locked", false, true, false},
			{"etcd-unlocked", true, false, false},
			{"etcd-overwritten", false, true, true},
		} {
			older := copyBackup(t, st, layout, lockManifest(c.cluster, now.Add(-9*time.Hour)), c.cluster, now.Add(-9*time.Hour), catalog.KindScheduled)
			newest := copyBackup(t, st, layout, lockManifest(c.cluster, now.Add(-time.Hour)), c.cluster, now.Add(-time.Hour), catalog.KindScheduled)
			if !lock {
				continue
			}
			l := st.(store.Locker)
			for m, locked := range map[*catalog.Manifest]bool{older: c.olderLocked, newest: c.newestLocked} {
				if locked {
					if err := l.SetRetention(ctx, layout.Key(c.cluster, m.Name, catalog.ManifestObject), "", gov); err != nil {
						t.Fatal(err)
					}
				}
			}
			if c.overwriteNewest {
				b, err := catalog.MarshalManifest(newest)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := st.Put(ctx, layout.Key(c.cluster, newest.Name, catalog.ManifestObject), bytes.NewReader(b)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// refresh: the world on st (lock: a bucket with object lock), one
	// refresh, its scrape checked by promtool and parsed; the bucket's
	// object lock is exported as 1 with lock, else 0.
	refresh := func(t *testing.T, st store.Store, lock bool) ([]byte, map[string]*dto.MetricFamily) {
		t.Helper()
		world(t, st, lock)
		exp := refreshed(t, ctx, metrics.Options{Store: st, Layout: layout, Interval: time.Hour, Deadline: 30 * time.Second,
			Now: func() time.Time { return now }})
		_, body := scrape(t, exp)
		cmd := exec.CommandContext(ctx, testenv.Promtool(t), "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool check metrics: %v\n%s\nscrape:\n%s", err, out, body)
		}
		mfs, err := parseText(body)
		if err != nil {
			t.Fatal(err)
		}
		want := 0.0
		if lock {
			want = 1
		}
		if v, ok := value(mfs, metrics.NameBucketObjectLock); !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", metrics.NameBucketObjectLock, v, ok, want)
		}
		return body, mfs
	}

	t.Run("LockedBucket", func(t *testing.T) {
		t.Parallel()
		body, mfs := refresh(t, testfix.Store(t, m, m.NewLockedBucket(t)), true)
		for cluster, want := range map[string]float64{"etcd-locked": float64(until.Unix()), "etcd-unlocked": 0, "etcd-overwritten": 0} {
			if v, ok := value(mfs, metrics.NameBackupLockedUntil, "cluster", cluster); !ok || v != want {
				t.Errorf("%s{cluster=%q} = %v (present %v), want %v", metrics.NameBackupLockedUntil, cluster, v, ok, want)
			}
		}
		if v, ok := value(mfs, metrics.NameRefreshErrors, "step", metrics.StepReadLocks); !ok || v != 0 {
			t.Errorf("%s{step=%q} = %v (present %v), want 0", metrics.NameRefreshErrors, metrics.StepReadLocks, v, ok)
		}
		promtoolScrape(t, body, nil, now, map[string][]string{"EtcdBackupUnlocked": {"etcd-overwritten", "etcd-unlocked"}}, nil)
	})

	t.Run("UnlockedBucket", func(t *testing.T) {
		t.Parallel()
		body, mfs := refresh(t, testfix.Store(t, m, m.NewBucket(t)), false)
		if mf := mfs[metrics.NameBackupLockedUntil]; mf != nil {
			t.Errorf("%s on a bucket without object lock: %v", metrics.NameBackupLockedUntil, mf)
		}
		promtoolScrape(t, body, nil, now, map[string][]string{"EtcdBackupUnlocked": {}}, nil)
	})
}
