package restore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// storeRig is one test's bucket and prefix on the shared MinIO
// (testfix.StoreRig), with this package's own helpers.
type storeRig struct{ *testfix.StoreRig }

func newStoreRig(tb testing.TB) *storeRig {
	tb.Helper()
	return &storeRig{testfix.NewStoreRig(tb)}
}

// newMember is a member of a cluster to be rebuilt: its URLs on free ports.
type newMember struct {
	name, peerURL, clientURL string
}

// newCluster allocates URLs for n members and returns --initial-cluster.
func newCluster(tb testing.TB, n int, tls bool) (string, []newMember) {
	tb.Helper()
	scheme := "http"
	if tls {
		scheme = "https"
	}
	var ms []newMember
	var ic []string
	for i := range n {
		m := newMember{
			name:      fmt.Sprintf("r%d", i),
			peerURL:   fmt.Sprintf("%s://127.0.0.1:%d", scheme, testenv.FreePort(tb)),
			clientURL: fmt.Sprintf("%s://127.0.0.1:%d", scheme, testenv.FreePort(tb)),
		}
		ms = append(ms, m)
		ic = append(ic, m.name+"="+m.peerURL)
	}
	return strings.Join(ic, ","), ms
}

// startRestored starts every member on the data dirs a restore wrote, as a
// new cluster with the restore's token, and waits until it is healthy.
func startRestored(tb testing.TB, v testenv.Version, plan *restore.Plan, ms []newMember, pki *testenv.PKI, enableV2 bool) *testenv.EtcdCluster {
	tb.Helper()
	c := &testenv.EtcdCluster{Version: v, PKI: pki, Token: plan.Token, InitialCluster: plan.InitialCluster,
		Options: testenv.EtcdOptions{Version: v, Members: len(ms), TLS: pki != nil, PKI: pki, EnableV2: enableV2}}
	dirs := map[string]string{}
	for _, m := range plan.Members {
		dirs[m.Name] = m.DataDir
	}
	for _, m := range ms {
		if dirs[m.name] == "" {
			tb.Fatalf("the plan has no data dir for member %s", m.name)
		}
		c.Members = append(c.Members, testenv.StartEtcdMember(tb, testenv.MemberSpec{
			Version: v, Name: m.name, DataDir: dirs[m.name], ClientURL: m.clientURL, PeerURL: m.peerURL,
			InitialCluster: plan.InitialCluster, InitialClusterState: "new", InitialClusterToken: plan.Token,
			PKI: pki, EnableV2: enableV2,
		}))
	}
	c.WaitHealthy(tb)
	return c
}

// etcdConfigFor is the connection to started members.
func etcdConfigFor(pki *testenv.PKI, ms []newMember) etcdconn.Config {
	cfg := etcdconn.Config{DialTimeout: 2 * time.Second}
	for _, m := range ms {
		cfg.Endpoints = append(cfg.Endpoints, m.clientURL)
	}
	if pki != nil {
		cfg.CACert, cfg.Cert, cfg.Key = pki.CAFile, pki.ClientCertFile, pki.ClientKeyFile
	}
	return cfg
}

// allKeys reads every key of the cluster.
func allKeys(tb testing.TB, cli *clientv3.Client) (map[string]string, int64) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "", clientv3.WithFromKey())
	if err != nil {
		tb.Fatalf("get all keys: %v", err)
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out, resp.Header.Revision
}

// sameKeys compares two keyspaces and reports the first differences.
func sameKeys(tb testing.TB, got, want map[string]string) {
	tb.Helper()
	var diffs []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, "missing "+k)
		} else if g != v {
			diffs = append(diffs, "wrong value for "+k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, "unexpected "+k)
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		tb.Fatalf("%d keys differ (got %d keys, want %d), first: %v", len(diffs), len(got), len(want), diffs[:min(len(diffs), 10)])
	}
}

// treeState describes every file and dir under root: path, mode, size,
// mtime and content hash, to show that nothing changed.
func treeState(tb testing.TB, root string) []string {
	tb.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %v %d %s", path, info.Mode(), info.Size(), info.ModTime().Format(time.RFC3339Nano))
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			line += " " + hex.EncodeToString(s[:8])
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// selectBackup is the select stage of opts, resolved first as Run
// resolves them; plan is the plan it fills in.
func selectBackup(ctx context.Context, opts restore.Options, plan *restore.Plan) (*restore.Selection, error) {
	cfg, p, err := restore.Resolve(ctx, opts)
	*plan = *p
	if err != nil {
		return nil, err
	}
	return cfg.Select(ctx, plan)
}

// backedUp starts a one-member etcd 3.5 holding n keys under /x/ with
// values of size bytes, and takes a scheduled backup of it as id into a new
// storeRig. It returns the cluster, the rig, the backup's manifest and the
// keys written.
func backedUp(tb testing.TB, id string, n, size int) (*testenv.EtcdCluster, *storeRig, *catalog.Manifest, map[string]string) {
	tb.Helper()
	c := testenv.StartEtcd(tb, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	want := testenv.PutKeys(tb, c.Client(tb), "/x/", n, size)
	r := newStoreRig(tb)
	return c, r, r.TakeBackup(tb, c, id, catalog.KindScheduled), want
}
