package restore_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/restore/survivor"
)

// Each etcd version starts from data dirs restored for it: a backup of a
// 3-member cluster of that version, every member dead, restored into three
// new data dirs, started with that version's binary, verified by Run itself
// (--verify-endpoints) and read back key by key.
func TestRestoreEtcdVersions(t *testing.T) {
	for _, v := range testenv.AllVersions {
		t.Run(string(v), func(t *testing.T) {
			c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, TLS: true})
			cli := c.Client(t)
			want := testenv.PutKeys(t, cli, "/registry/configmaps/", 400, 48)
			for k, val := range testenv.PutKeys(t, cli, "/registry/configmaps/", 50, 48) { // overwrites
				want[k] = val
			}
			ctx := testfix.Context(t, 3*time.Minute)
			for i := 100; i < 130; i++ {
				k := fmt.Sprintf("/registry/configmaps/%08d", i)
				if _, err := cli.Delete(ctx, k); err != nil {
					t.Fatal(err)
				}
				delete(want, k)
			}
			_, oldRev := allKeys(t, cli)
			r := newStoreRig(t)
			m := r.TakeBackup(t, c, "ver-"+strings.ReplaceAll(string(v), ".", ""), catalog.KindScheduled)
			if !strings.HasPrefix(m.ServerVersion, string(v)+".") {
				t.Fatalf("backup server version %q, want %s.x", m.ServerVersion, v)
			}
			for _, mem := range c.Members {
				mem.Kill()
				if err := os.RemoveAll(mem.DataDir); err != nil {
					t.Fatal(err)
				}
			}

			ic, ms := newCluster(t, 3, true)
			res, err := restore.Run(ctx, restore.Options{Survivor: survivor.Backup{},
				ClusterID: m.ClusterID, Store: r.Store, Layout: r.Layout,
				Old: testfix.EtcdConfig(c), ProbeTimeout: time.Second,
				Targets:      restore.Targets{InitialCluster: ic, DataDirRoot: t.TempDir()},
				BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true,
				Log: testfix.Logger(t),
			})
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			nc := startRestored(t, v, &res.Plan, ms, c.PKI, false)
			if err := res.CheckRebuilt(ctx, restore.VerifyOptions{Etcd: etcdConfigFor(c.PKI, ms), Timeout: time.Minute}); err != nil {
				t.Fatalf("restore: %v", err)
			}
			if res.Chosen.Name != m.Name || res.Survivor.Backup != "" || res.Survivor.Skipped == "" {
				t.Fatalf("chose %s (survivor %+v), want the COS backup %s and no survivor", res.Chosen.Name, res.Survivor, m.Name)
			}
			if res.Snapshot.LiveKeys != int64(len(want)) {
				t.Errorf("snapshot live keys %d, want %d", res.Snapshot.LiveKeys, len(want))
			}
			if res.Verify == nil || !res.Verify.Verified || res.TotalToVerified <= 0 {
				t.Fatalf("not verified: %+v", res.Verify)
			}
			for _, mh := range res.Verify.Members {
				if !strings.HasPrefix(mh.Version, string(v)+".") {
					t.Errorf("member %s runs %s, want %s", mh.Name, mh.Version, v)
				}
			}
			got, rev := allKeys(t, nc.Client(t))
			sameKeys(t, got, want)
			if rev < oldRev+restore.DefaultBumpRevision {
				t.Errorf("revision %d after restore, want >= %d + bump", rev, oldRev)
			}
			// Writes work, and a watch from before the bump is compacted.
			if _, err := nc.Client(t).Put(ctx, "/after-restore", "x"); err != nil {
				t.Fatalf("put after restore: %v", err)
			}
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			defer wcancel()
			wr := <-nc.Client(t).Watch(wctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(oldRev))
			if wr.CompactRevision == 0 {
				t.Errorf("a watch from the old revision %d was not told it is compacted: %+v", oldRev, wr)
			}
		})
	}
}
