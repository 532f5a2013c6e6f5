package fleet_test

import (
	"context"
	"testing"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// smallWorld is what the small restore-all tests share: one namespace on
// a kube-apiserver of its own with the deploy RBAC, a bucket of the
// shared MinIO, and the toolkit service account's client.
type smallWorld struct {
	w      *kubetest.RBACWorld
	ns     string
	m      *testenv.MinIO
	bucket string
	st     store.Store
	sa     *kube.Client
}

func newSmallWorld(t testing.TB, ns string) *smallWorld {
	t.Helper()
	s := &smallWorld{w: kubetest.StartRBACWorld(t, ns), ns: ns, m: testenv.SharedMinIO(t)}
	s.bucket = s.m.NewBucket(t)
	s.st = testfix.Store(t, s.m, s.bucket)
	sa, err := kube.New(kube.Config{Rest: s.w.K.RestConfig(kubetest.SAToken(t, s.w.Admin, ns, "etcd-recovery-toolkit")), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	s.sa = sa
	return s
}

// backedUp adds an EtcdCluster name (one member on ip, with per-cluster
// access and keys keys under /registry/k) and takes one scheduled backup
// of it under layout.
func (s *smallWorld) backedUp(t testing.TB, ctx context.Context, name, ip string, keys int, layout catalog.Layout) kubetest.Cluster {
	t.Helper()
	fc := kubetest.AddEtcdCluster(t, s.w.Admin, s.w.Dyn, s.ns, name, testenv.EtcdOptions{IP: ip, Members: 1})
	kubetest.PerClusterAccess(t, s.w.A, s.ns, fc.Name)
	testenv.PutKeys(t, fc.Etcd.Client(t), "/registry/k", keys, 128)
	if _, err := backup.Run(ctx, backup.Options{ClusterID: fc.Name, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(fc.Etcd), Store: s.st, Layout: layout}); err != nil {
		t.Fatal(err)
	}
	return fc
}
