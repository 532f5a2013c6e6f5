package fleet_test

import (
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// TestRestoreAllPlanToTimeNoJournal: with --to-time, the plan is restore's
// own point-in-time selection for each cluster: a cluster with a backup
// but no journal reaching T is a failed row of the dry run, naming its
// step and cause (not a planned restore of its newest backup that fails
// only in the real run). Against a real kube-apiserver, MinIO and etcd.
func TestRestoreAllPlanToTimeNoJournal(t *testing.T) {
	t.Parallel()
	const ns = "kubx-etcd-75"
	s := newSmallWorld(t, ns)
	m, bucket, st, sa := s.m, s.bucket, s.st, s.sa
	ctx := testfix.Context(t, 3*time.Minute)
	layout := catalog.Layout{Prefix: ns + "/"}
	s.backedUp(t, ctx, "etcd-pt0", "127.0.19.50", 20, layout)
	rep, _ := fleet.RestoreAll(ctx, fleet.RestoreAllOptions{
		Namespaces: []fleet.RestoreAllNamespace{{Kube: sa, Store: st, Layout: layout}},
		ToTime:     time.Now().Add(-time.Second), DryRun: true, Parallel: 1, HealthTimeout: 2 * time.Second, ClusterTimeout: time.Minute,
		Template: kube.OperatorRestoreOptions{Bucket: bucket, Endpoint: m.Endpoint, ForcePathStyle: true, TempDir: t.TempDir()},
	})
	if rep == nil || len(rep.Clusters) != 1 {
		t.Fatalf("report %+v", rep)
	}
	row := rep.Clusters[0]
	if row.Outcome != fleet.OutcomeFailed || row.FailedStep == "" || !strings.Contains(strings.ToLower(row.Cause), "journal") {
		t.Errorf("a cluster without a journal reaching --to-time: %+v, want a failed row naming the journal", row)
	}
	t.Logf("row: outcome %s, step %q, cause %s", row.Outcome, row.FailedStep, row.Cause)
}
