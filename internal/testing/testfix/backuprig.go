package testfix

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// BackupRig is a real etcd cluster and a MinIO bucket with its own prefix,
// for the tests that take real backups (backup's, and prune's backup
// --prune and prune-during-a-backup tests).
type BackupRig struct {
	Cluster *testenv.EtcdCluster
	MinIO   *testenv.MinIO
	Store   *cos.Store
	Layout  catalog.Layout
}

// NewBackupRig makes a new bucket on m (the shared MinIO when m is nil)
// and a prefix named after the test, for backups of c.
func NewBackupRig(tb testing.TB, c *testenv.EtcdCluster, m *testenv.MinIO, opts ...StoreOption) *BackupRig {
	tb.Helper()
	if m == nil {
		m = testenv.SharedMinIO(tb)
	}
	return &BackupRig{Cluster: c, MinIO: m, Store: Store(tb, m, m.NewBucket(tb), opts...), Layout: catalog.Layout{Prefix: testenv.Prefix(tb)}}
}

// Options are the options of a scheduled backup of cluster id on the rig,
// logging at debug level into the test's log.
func (r *BackupRig) Options(tb testing.TB, id string) backup.Options {
	return backup.Options{
		ClusterID: id, Kind: catalog.KindScheduled, Etcd: EtcdConfig(r.Cluster),
		Store: r.Store, Layout: r.Layout, ProbeTimeout: 2 * time.Second, Log: DebugLogger(tb),
	}
}

// Listed returns the committed backups of id, failing on a listing error.
func (r *BackupRig) Listed(tb testing.TB, id string) []catalog.Listed {
	tb.Helper()
	l, err := catalog.ListBackups(context.Background(), r.Store, r.Layout, id)
	if err != nil {
		tb.Fatalf("list: %v", err)
	}
	return l
}

// DebugLogger logs at debug level into the test's log.
func DebugLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// NewestSince is cluster's newest committed backup started after since, of
// kind unless kind is ""; it fails tb when there is none.
func NewestSince(tb testing.TB, ctx context.Context, st store.Store, layout catalog.Layout, cluster string, kind catalog.Kind, since time.Time) *catalog.Manifest {
	tb.Helper()
	list, err := catalog.ListBackups(ctx, st, layout, cluster)
	if err != nil {
		tb.Fatal(err)
	}
	var best *catalog.Manifest
	for _, l := range list {
		if l.Manifest != nil && (kind == "" || l.Manifest.Kind == kind) && l.Manifest.StartedAt.After(since) && (best == nil || l.Manifest.StartedAt.After(best.StartedAt)) {
			best = l.Manifest
		}
	}
	if best == nil {
		if kind == "" {
			tb.Fatalf("%s: no backup committed since %v", cluster, since)
		}
		tb.Fatalf("%s: no committed %s backup", cluster, kind)
	}
	return best
}
