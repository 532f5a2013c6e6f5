package prune_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// rig is a real etcd cluster and a MinIO bucket with its own prefix, for
// the tests that take a real backup (backup --prune, prune during a
// backup). The backup package's tests have the same rig.
type rig struct {
	cluster *testenv.EtcdCluster
	minio   *testenv.MinIO
	store   *cos.Store
	layout  catalog.Layout
}

func newRig(tb testing.TB, c *testenv.EtcdCluster, m *testenv.MinIO) *rig {
	tb.Helper()
	if m == nil {
		m = testenv.SharedMinIO(tb)
	}
	return &rig{cluster: c, minio: m, store: testfix.Store(tb, m, m.NewBucket(tb)), layout: catalog.Layout{Prefix: testenv.Prefix(tb)}}
}

// options are the backup options of cluster id on the rig.
func (r *rig) options(tb testing.TB, id string) backup.Options {
	return backup.Options{
		ClusterID: id, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(r.cluster),
		Store: r.store, Layout: r.layout, ProbeTimeout: 2 * time.Second, Log: testLogger(tb),
	}
}

// listed returns the committed backups of id, failing on a listing error.
func (r *rig) listed(tb testing.TB, id string) []catalog.Listed {
	tb.Helper()
	l, err := catalog.ListBackups(context.Background(), r.store, r.layout, id)
	if err != nil {
		tb.Fatalf("list: %v", err)
	}
	return l
}

// testLogger logs at debug level into the test's log.
func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
