package prune_test

import (
	"context"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// rig is a real etcd cluster and a MinIO bucket with its own prefix, for
// the tests that take a real backup (backup --prune, prune during a
// backup), as in the backup package's tests.
type rig struct{ *testfix.BackupRig }

func newRig(tb testing.TB, c *testenv.EtcdCluster, m *testenv.MinIO) *rig {
	tb.Helper()
	return &rig{testfix.NewBackupRig(tb, c, m)}
}

// storeRig is a bucket of the shared MinIO with the test's own prefix, and
// the time the test starts at.
func storeRig(tb testing.TB) (store.Store, catalog.Layout, time.Time) {
	tb.Helper()
	sr := testfix.NewStoreRig(tb)
	return sr.Store, sr.Layout, time.Now().UTC()
}

// lockedStoreRig is storeRig on a bucket with object lock.
func lockedStoreRig(tb testing.TB) (*cos.Store, catalog.Layout, time.Time) {
	tb.Helper()
	m := testenv.SharedMinIO(tb)
	return testfix.Store(tb, m, m.NewLockedBucket(tb)), catalog.Layout{Prefix: testenv.Prefix(tb)}, time.Now().UTC()
}

// orphanPasses claims kubx-etcd-01's prefix in st at now and returns the
// options of an orphan pass there at a time: live are its EtcdClusters,
// none is restoring, the grace is the shortest.
func orphanPasses(tb testing.TB, st store.Store, l catalog.Layout, now time.Time, live ...string) func(at time.Time) prune.OrphanOptions {
	tb.Helper()
	if _, _, err := prune.ClaimPrefix(context.Background(), st, l, "kubx-etcd-01", now); err != nil {
		tb.Fatal(err)
	}
	return func(at time.Time) prune.OrphanOptions {
		return prune.OrphanOptions{Store: st, Layout: l, Namespace: "kubx-etcd-01", Grace: prune.MinOrphanGrace, Now: at,
			Clusters: func(context.Context) ([]string, error) { return live, nil },
			Restores: func(context.Context) (map[string][]string, error) { return nil, nil }}
	}
}

// orphanOf is the report's orphan of cluster id, nil when none.
func orphanOf(rep *prune.OrphanReport, id string) *prune.Orphan {
	for i := range rep.Orphans {
		if rep.Orphans[i].ClusterID == id {
			return &rep.Orphans[i]
		}
	}
	return nil
}
