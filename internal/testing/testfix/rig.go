package testfix

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// StoreRig is one test's bucket and prefix on the shared MinIO, and the
// backups taken into it (restore's and drill's tests).
type StoreRig struct {
	MinIO  *testenv.MinIO
	Bucket string
	Store  *cos.Store
	Layout catalog.Layout
}

// NewStoreRig makes a new bucket on the shared MinIO and a prefix named
// after the test.
func NewStoreRig(tb testing.TB) *StoreRig {
	tb.Helper()
	m := testenv.SharedMinIO(tb)
	bucket := m.NewBucket(tb)
	return &StoreRig{MinIO: m, Bucket: bucket, Store: Store(tb, m, bucket), Layout: catalog.Layout{Prefix: testenv.Prefix(tb)}}
}

// TakeBackup commits a backup of c.
func (r *StoreRig) TakeBackup(tb testing.TB, c *testenv.EtcdCluster, id string, kind catalog.Kind) *catalog.Manifest {
	tb.Helper()
	res, err := backup.Run(context.Background(), backup.Options{
		ClusterID: id, Kind: kind, Etcd: EtcdConfig(c), Store: r.Store, Layout: r.Layout,
		ProbeTimeout: 3 * time.Second, Log: Logger(tb),
	})
	if err != nil {
		tb.Fatalf("backup: %v", err)
	}
	// Names have millisecond precision: keep two backups apart.
	time.Sleep(5 * time.Millisecond)
	return res.Manifest
}

// TakeEncrypted commits a manual backup of c encrypted to rs.
func (r *StoreRig) TakeEncrypted(tb testing.TB, c *testenv.EtcdCluster, id string, rs seal.Recipients) *catalog.Manifest {
	tb.Helper()
	res, err := backup.Run(context.Background(), backup.Options{
		ClusterID: id, Kind: catalog.KindManual, Etcd: EtcdConfig(c), Store: r.Store, Layout: r.Layout,
		ProbeTimeout: 3 * time.Second, Recipients: rs, Log: Logger(tb),
	})
	if err != nil {
		tb.Fatalf("encrypted backup: %v", err)
	}
	m := res.Manifest
	if !m.Encryption.Encrypted() || !seal.IsSealedKey(m.Snapshot.Object) {
		tb.Fatalf("backup %s is not encrypted: %+v, object %s", m.Name, m.Encryption, m.Snapshot.Object)
	}
	time.Sleep(5 * time.Millisecond) // names have millisecond precision
	return m
}

// BucketListing is every object in the bucket: key, size and time.
func (r *StoreRig) BucketListing(tb testing.TB) []string {
	tb.Helper()
	objs, err := r.Store.List(context.Background(), "")
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, fmt.Sprintf("%s %d %s", o.Key, o.Size, o.LastModified.Format(time.RFC3339Nano)))
	}
	return out
}

// SnapshotKey is the key of m's snapshot object.
func (r *StoreRig) SnapshotKey(m *catalog.Manifest) string {
	return r.Layout.Key(m.ClusterID, m.Name, m.Snapshot.Object)
}

// PutObject writes b at key.
func (r *StoreRig) PutObject(tb testing.TB, key string, b []byte) {
	tb.Helper()
	if _, err := r.Store.Put(context.Background(), key, strings.NewReader(string(b))); err != nil {
		tb.Fatalf("put %s: %v", key, err)
	}
}

// Logger is a logger at level info writing to the test's log.
func Logger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Context is a context that times out after d and is cancelled when the
// test ends.
func Context(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// AgeKey is a fresh age X25519 key pair: the identity (as restore loads
// it) and the recipient (as backup encrypts to it).
type AgeKey struct {
	IDs *seal.Identities
	Pub string
}

// NewAgeKey generates an AgeKey.
func NewAgeKey(tb testing.TB) AgeKey {
	tb.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		tb.Fatal(err)
	}
	ids, err := seal.ParseIdentities(strings.NewReader(id.String()+"\n"), "test identity")
	if err != nil {
		tb.Fatal(err)
	}
	return AgeKey{IDs: ids, Pub: id.Recipient().String()}
}

// AgeIdentityFile writes a new age identity into dir (an --identity-file)
// and returns its path and the identity's recipient.
func AgeIdentityFile(tb testing.TB, dir string) (path, recipient string) {
	tb.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		tb.Fatal(err)
	}
	path = filepath.Join(dir, "identity.txt")
	if err := os.WriteFile(path, []byte(id.String()+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path, id.Recipient().String()
}

// RecipientsOf is the recipients of keys, parsed as backup parses them.
func RecipientsOf(tb testing.TB, keys ...AgeKey) seal.Recipients {
	tb.Helper()
	var vs []string
	for _, k := range keys {
		vs = append(vs, k.Pub)
	}
	rs, err := seal.ParseRecipients(vs)
	if err != nil {
		tb.Fatal(err)
	}
	return rs
}
