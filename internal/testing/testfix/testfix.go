// Package testfix wires the real test servers of internal/testenv to the
// project's own clients: a COS store on a MinIO bucket, an etcd connection
// config for a test cluster, and readers for stored backups; a test's
// bucket with the backups taken into it (StoreRig, plain or encrypted to
// age keys: NewAgeKey, RecipientsOf); the built CLI and how tests run it
// (Tool, RunTool, ToolEnv); a test logger and context (Logger, Context).
// Only _test files import it (it imports backup to take backups).
package testfix

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// StoreOption adjusts the cos.Config of a test store.
type StoreOption func(*cos.Config)

// Store returns a COS store on bucket of m, with m's credentials.
func Store(tb testing.TB, m *testenv.MinIO, bucket string, opts ...StoreOption) *cos.Store {
	tb.Helper()
	cfg := cos.Config{
		Endpoint: m.Endpoint, Region: m.Region, Bucket: bucket, CAFile: m.CAFile,
		Creds:      cos.Credentials{AccessKeyID: m.AccessKey, SecretAccessKey: m.SecretKey, Source: "test"},
		MaxRetries: 2, MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	st, err := cos.New(cfg)
	if err != nil {
		tb.Fatalf("cos.New: %v", err)
	}
	return st
}

// EtcdConfig is the etcdctl-style connection to a test cluster, with the
// client certificate when the cluster uses TLS.
func EtcdConfig(c *testenv.EtcdCluster) etcdconn.Config {
	cfg := etcdconn.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second}
	if c.PKI != nil {
		cfg.CACert, cfg.Cert, cfg.Key = c.PKI.CAFile, c.PKI.ClientCertFile, c.PKI.ClientKeyFile
	}
	return cfg
}

// ReadObject reads a whole object.
func ReadObject(tb testing.TB, st store.Store, key string) []byte {
	tb.Helper()
	rc, err := st.Get(context.Background(), key)
	if err != nil {
		tb.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		tb.Fatalf("read %s: %v", key, err)
	}
	return b
}

// SHA256 is the hex sha256 of b.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Decompress decodes a stored object.
func Decompress(tb testing.TB, b []byte, c objectio.Compression) []byte {
	tb.Helper()
	rc, err := objectio.NewDecoder(bytes.NewReader(b), c)
	if err != nil {
		tb.Fatal(err)
	}
	defer rc.Close()
	out, err := io.ReadAll(rc)
	if err != nil {
		tb.Fatalf("decompress: %v", err)
	}
	return out
}

// CheckSnapshot downloads a committed backup's snapshot through
// objectio.Open, which checks every checksum and size in the manifest and
// etcd's trailing hash, and returns etcdutl's status of the database
// (revision, key count). Encrypted backups are not read here.
func CheckSnapshot(tb testing.TB, st store.Store, layout catalog.Layout, m *catalog.Manifest) snapshot.Status {
	tb.Helper()
	key := layout.Key(m.ClusterID, m.Name, m.Snapshot.Object)
	r, err := objectio.Open(context.Background(), st, key, objectio.Expect{
		StoredSize: m.Snapshot.StoredSize, StoredSHA256: m.Snapshot.StoredSHA256,
		RawSize: m.Snapshot.RawSize, RawSHA256: m.Snapshot.RawSHA256, Compression: m.Snapshot.Compression, Snapshot: true})
	if err != nil {
		tb.Fatalf("stored snapshot: %v", err)
	}
	defer r.Close()
	path := filepath.Join(tb.TempDir(), "snapshot.db")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		tb.Fatalf("snapshot: %v", err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	status, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		tb.Fatalf("etcdutl snapshot status: %v", err)
	}
	return status
}

// ReadV2Export downloads and decodes a backup's v2 export through
// objectio.Open, checking its checksums against the manifest.
func ReadV2Export(tb testing.TB, st store.Store, layout catalog.Layout, m *catalog.Manifest) *catalog.V2Export {
	tb.Helper()
	if m.V2 == nil {
		tb.Fatalf("backup %s has no v2 export (%s)", m.Name, m.V2Skipped)
	}
	key := layout.Key(m.ClusterID, m.Name, m.V2.Object)
	r, err := objectio.Open(context.Background(), st, key, objectio.Expect{
		StoredSize: m.V2.StoredSize, StoredSHA256: m.V2.StoredSHA256,
		RawSize: objectio.UnknownSize, RawSHA256: m.V2.SHA256, Compression: m.V2.Compression})
	if err != nil {
		tb.Fatalf("v2 export: %v", err)
	}
	defer r.Close()
	raw, err := io.ReadAll(r)
	if err != nil {
		tb.Fatalf("v2 export: %v", err)
	}
	var exp catalog.V2Export
	if err := json.Unmarshal(raw, &exp); err != nil {
		tb.Fatal(err)
	}
	return &exp
}

// Keys lists every key under prefix.
func Keys(tb testing.TB, st store.Store, prefix string) []string {
	tb.Helper()
	objs, err := st.List(context.Background(), prefix)
	if err != nil {
		tb.Fatalf("list %s: %v", prefix, err)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	return keys
}

// Sums is every object under l's prefix on st, by key, and its sha256.
func Sums(tb testing.TB, st store.Store, l catalog.Layout) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for _, k := range Keys(tb, st, l.RootPrefix()) {
		out[k] = SHA256(ReadObject(tb, st, k))
	}
	return out
}

// DeleteUnder deletes every object under prefix of st ("" is the whole
// bucket): a site lost to its own credential.
func DeleteUnder(tb testing.TB, ctx context.Context, st store.Store, prefix string) {
	tb.Helper()
	objs, err := st.List(ctx, prefix)
	if err != nil {
		tb.Fatalf("list %s: %v", prefix, err)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	if err := st.Delete(ctx, keys); err != nil {
		tb.Fatalf("delete under %q: %v", prefix, err)
	}
}
