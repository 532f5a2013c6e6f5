package mdblocks

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// Fixture is a cluster's connection files and COS settings, as a toolkit
// pod has them mounted, and the placeholders that name them
// (runbooks/README.md's table).
type Fixture struct {
	ID     string
	PKI    *testenv.PKI
	MinIO  *testenv.MinIO
	Bucket string
	Layout catalog.Layout
	Store  store.Store
	Vars   map[string]string
}

// CopyFile copies a file (mode 0600).
func CopyFile(tb testing.TB, from, to string) {
	tb.Helper()
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, 0o600)
	}
	if err != nil {
		tb.Fatal(err)
	}
}

// NewFixture writes the client-TLS dir (pki's CA and client certificate),
// the members' TLS dir, the cos-credentials dir (etcd-operator's
// credentials/config files), and makes a bucket and prefix on the shared
// MinIO (the test binary's TestMain must call testenv.Main). Its Vars are
// <id>, <endpoints>, <tls-dir>, <member-tls-dir>, <cos-endpoint>,
// <cos-region>, <bucket>, <prefix> and <cos-credentials-dir>.
func NewFixture(t *testing.T, pki *testenv.PKI, endpoints []string) *Fixture {
	t.Helper()
	m := testenv.SharedMinIO(t)
	f := &Fixture{ID: "etcd-rb-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36), PKI: pki, MinIO: m, Bucket: m.NewBucket(t)}
	prefix := testenv.Prefix(t)
	f.Layout = catalog.Layout{Prefix: prefix}
	f.Store = testfix.Store(t, m, f.Bucket)
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "etcd-tls")
	memberTLS := filepath.Join(dir, "member-tls")
	creds := filepath.Join(dir, "cos-credentials")
	for _, d := range []string{tlsDir, memberTLS, creds} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	SetClientTLS(t, tlsDir, pki.CAFile, pki.ClientCertFile, pki.ClientKeyFile)
	for to, from := range map[string]string{"server.crt": pki.ServerCertFile, "server.key": pki.ServerKeyFile, "server-ca.crt": pki.CAFile,
		"peer.crt": pki.ServerCertFile, "peer.key": pki.ServerKeyFile, "peer-ca.crt": pki.CAFile} {
		CopyFile(t, from, filepath.Join(memberTLS, to))
	}
	// The carrier's cos-credentials secret, as mounted: etcd-operator's
	// credentials/config files (AWS shared-file format).
	for name, v := range kubetest.AWSSecretData(m.AccessKey, m.SecretKey, m.Region) {
		if err := os.WriteFile(filepath.Join(creds, name), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.Vars = map[string]string{
		"id":                  f.ID,
		"endpoints":           strings.Join(endpoints, ","),
		"tls-dir":             tlsDir,
		"member-tls-dir":      memberTLS,
		"cos-endpoint":        m.Endpoint,
		"cos-region":          m.Region,
		"bucket":              f.Bucket,
		"prefix":              prefix,
		"cos-credentials-dir": creds,
	}
	return f
}

// Backup takes a backup of c into the fixture's store (its id, bucket and
// prefix), with o's other options: a scheduled one, zstd-compressed,
// unless o says otherwise. An error fails the test.
func (f *Fixture) Backup(tb testing.TB, ctx context.Context, c *testenv.EtcdCluster, o backup.Options) *catalog.Manifest {
	tb.Helper()
	o.ClusterID, o.Etcd, o.Store, o.Layout = f.ID, testfix.EtcdConfig(c), f.Store, f.Layout
	if o.Kind == "" {
		o.Kind = catalog.KindScheduled
	}
	if o.Compression == "" {
		o.Compression = objectio.CompressZstd
	}
	res, err := backup.Run(ctx, o)
	if err != nil {
		tb.Fatalf("%s backup of %s: %v", o.Kind, f.ID, err)
	}
	return res.Manifest
}

// QuorumLost is the world of the quorum-loss runbook and the docs'
// restore: a 3-member mutual-TLS etcd 3.5 cluster with n keys of size
// bytes under prefix and nV2 legacy v2 keys, its Fixture with a scheduled
// backup (v2 included, zstd), 20 newer keys under /registry/late/ (in
// keys: only the survivor, member 0, holds them), then members 1 and 2
// killed.
func QuorumLost(t *testing.T, prefix string, n, size, nV2 int) (c *testenv.EtcdCluster, f *Fixture, keys, v2 map[string]string) {
	t.Helper()
	c = testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true, EnableV2: true})
	cli := c.Client(t)
	keys = testenv.PutKeys(t, cli, prefix, n, size)
	v2 = testenv.PutV2Keys(t, c, nV2)
	f = NewFixture(t, c.PKI, c.Endpoints())
	f.Backup(t, context.Background(), c, backup.Options{V2: backup.V2Auto})
	for k, v := range testenv.PutKeys(t, cli, "/registry/late/", 20, 100) {
		keys[k] = v // only in the survivor's data
	}
	c.Members[1].Kill()
	c.Members[2].Kill()
	return c, f, keys, v2
}

// SetClientTLS writes a client-TLS dir as the operator secret is mounted.
func SetClientTLS(tb testing.TB, dir, ca, cert, key string) {
	tb.Helper()
	CopyFile(tb, ca, filepath.Join(dir, "etcd-client-ca.crt"))
	CopyFile(tb, cert, filepath.Join(dir, "etcd-client.crt"))
	CopyFile(tb, key, filepath.Join(dir, "etcd-client.key"))
}

// NewMembers plans n new members on loopback ports: their placeholders
// (<name>, <client-url>, <peer-url>), --initial-cluster and client URLs.
func NewMembers(t *testing.T, n int) (members []map[string]string, initialCluster string, endpoints []string) {
	t.Helper()
	var ic []string
	for i := range n {
		name := fmt.Sprintf("r%d", i)
		client := fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(t))
		peer := fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(t))
		members = append(members, map[string]string{"name": name, "client-url": client, "peer-url": peer})
		ic = append(ic, name+"="+peer)
		endpoints = append(endpoints, client)
	}
	return members, strings.Join(ic, ","), endpoints
}

// ClusterAt is a client to members started by a block.
func ClusterAt(pki *testenv.PKI, endpoints []string) *testenv.EtcdCluster {
	c := &testenv.EtcdCluster{Version: testenv.V35, PKI: pki}
	for _, ep := range endpoints {
		c.Members = append(c.Members, &testenv.EtcdMember{ClientURL: ep})
	}
	return c
}

// CheckKeys compares every key of want with the cluster's value.
func CheckKeys(t *testing.T, cli *clientv3.Client, want map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	for k, v := range want {
		resp, err := cli.Get(ctx, k)
		if err != nil {
			t.Fatalf("get %s: %v", k, err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != v {
			got := ""
			if len(resp.Kvs) > 0 {
				got = string(resp.Kvs[0].Value)
				if len(got) > 20 {
					got = got[:20]
				}
			}
			t.Errorf("key %s: got %d values (%q...), want %q", k, len(resp.Kvs), got, v)
			if n++; n > 5 {
				t.FailNow()
			}
		}
	}
}

// CheckV2Keys reads every v2 key back through the restored cluster's v2 API.
func CheckV2Keys(t testing.TB, c *testenv.EtcdCluster, want map[string]string) {
	t.Helper()
	hc := testenv.V2HTTPClient(c)
	defer hc.CloseIdleConnections()
	for k, v := range want {
		resp, err := hc.Get(c.Members[0].ClientURL + "/v2/keys" + k + "?quorum=true")
		if err != nil {
			t.Fatalf("v2 GET %s: %v", k, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), strconv.Quote(v)) {
			t.Fatalf("v2 key %s after restore v2: %s %s, want value %q", k, resp.Status, b, v)
		}
	}
}
