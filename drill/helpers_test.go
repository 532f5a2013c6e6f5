package drill_test

import (
	"context"
	"fmt"
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

// storeRig is one test's bucket and prefix on the shared MinIO (as
// restore's tests have it).
type storeRig struct {
	minio  *testenv.MinIO
	bucket string
	store  *cos.Store
	layout catalog.Layout
}

func newStoreRig(tb testing.TB) *storeRig {
	tb.Helper()
	m := testenv.SharedMinIO(tb)
	bucket := m.NewBucket(tb)
	return &storeRig{minio: m, bucket: bucket, store: testfix.Store(tb, m, bucket), layout: catalog.Layout{Prefix: testenv.Prefix(tb)}}
}

// takeBackup commits a backup of c.
func (r *storeRig) takeBackup(tb testing.TB, c *testenv.EtcdCluster, id string, kind catalog.Kind) *catalog.Manifest {
	tb.Helper()
	res, err := backup.Run(context.Background(), backup.Options{
		ClusterID: id, Kind: kind, Etcd: testfix.EtcdConfig(c), Store: r.store, Layout: r.layout,
		ProbeTimeout: 3 * time.Second, Log: testLogger(tb),
	})
	if err != nil {
		tb.Fatalf("backup: %v", err)
	}
	// Names have millisecond precision: keep two backups apart.
	time.Sleep(5 * time.Millisecond)
	return res.Manifest
}

// bucketListing is every object in the bucket: key, size and time.
func (r *storeRig) bucketListing(tb testing.TB) []string {
	tb.Helper()
	objs, err := r.store.List(context.Background(), "")
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, fmt.Sprintf("%s %d %s", o.Key, o.Size, o.LastModified.Format(time.RFC3339Nano)))
	}
	return out
}

func (r *storeRig) snapshotKey(m *catalog.Manifest) string {
	return r.layout.Key(m.ClusterID, m.Name, m.Snapshot.Object)
}

func (r *storeRig) putObject(tb testing.TB, key string, b []byte) {
	tb.Helper()
	if _, err := r.store.Put(context.Background(), key, strings.NewReader(string(b))); err != nil {
		tb.Fatalf("put %s: %v", key, err)
	}
}

func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func ctxTimeout(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}
