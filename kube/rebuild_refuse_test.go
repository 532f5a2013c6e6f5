package kube_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// TestRebuildRefusesUnusableEscrow: a backup that names no usable escrow
// (written before escrow existed; state none, no recipient) is refused by
// RebuildRestore at the escrow step, naming the backup, its state and its
// problems, before the API server is contacted (the client here points
// nowhere).
func TestRebuildRefusesUnusableEscrow(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	m := testenv.SharedMinIO(t)
	st := testfix.Store(t, m, m.NewBucket(t))
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	const id = "etcd-noescrow"
	run := func(o backup.Options) string {
		t.Helper()
		o.ClusterID, o.Kind, o.Etcd, o.Store, o.Layout = id, catalog.KindScheduled, testfix.EtcdConfig(c), st, layout
		res, err := backup.Run(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return res.Manifest.Name
	}
	old := run(backup.Options{})
	none := run(backup.Options{NoEscrow: "no recipient: the backup is not encrypted and no --escrow-recipient is given"})
	kc, err := kube.New(kube.Config{Rest: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "kubx-etcd-99"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		backup, escrowFrom string
		want               []string
	}{
		{old, "", []string{"backup " + old + " has no usable escrow", "written before escrow existed", "--escrow-from"}},
		{none, "", []string{"backup " + none + " has no usable escrow", "state none", "no recipient"}},
		{none, old, []string{"backup " + old + " has no usable escrow", "name a backup whose escrow is present"}},
	} {
		_, err := kube.RebuildRestore(ctx, kube.RebuildRestoreOptions{EscrowFrom: tc.escrowFrom, Restore: kube.OperatorRestoreOptions{
			Kube: kc, Cluster: id, Backup: tc.backup, Store: st, Layout: layout, Bucket: "b", Endpoint: m.Endpoint}})
		if err == nil {
			t.Fatalf("%s: no error", tc.backup)
		}
		for _, w := range append(tc.want, `step "`+kube.RRStepEscrow+`"`, "kubx-etcd-99/"+id) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s (escrow from %q): %v\nwant %q in it", tc.backup, tc.escrowFrom, err, w)
			}
		}
	}
}
