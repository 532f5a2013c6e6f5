package kube_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/escrow"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// escrowedBackupShim: until the backup writes the escrow itself, an
// encrypted backup.Run, then the escrow captured and stored, and the
// manifest written again naming it.
func escrowedBackupShim(t *testing.T, ctx context.Context, cl *kube.Client, fc kubetest.Cluster, st store.Store, layout catalog.Layout, rs seal.Recipients) *catalog.Manifest {
	t.Helper()
	br, err := backup.Run(ctx, backup.Options{ClusterID: fc.Name, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(fc.Etcd), Store: st, Layout: layout, Recipients: rs})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := cl.Clusters(ctx, fc.Name)
	if err != nil {
		t.Fatal(err)
	}
	list, problems, err := cl.CaptureEscrow(ctx, cs[0])
	if err != nil || len(problems) > 0 {
		t.Fatalf("capture: %v %v", problems, err)
	}
	ref, err := escrow.Store(ctx, st, layout, fc.Name, list, rs, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := br.Manifest
	m.Escrow = ref
	body, err := catalog.MarshalManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, layout.Key(fc.Name, m.Name, catalog.ManifestObject), bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	return m
}
