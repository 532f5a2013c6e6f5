package kube

import (
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/restore"
)

// The table form of a finished restore via etcd-operator.
func TestOperatorRestoreTables(t *testing.T) {
	t.Parallel()
	rep := &OperatorRestoreReport{
		Namespace: "kubx-etcd-01", Cluster: "etcd-a", Backup: "20261122T112102.831Z-scheduled",
		Plan:   &restore.Plan{ClusterID: "etcd-a", Snapshot: &restore.SnapshotFacts{Revision: 42, LiveKeys: 7}},
		OldUID: "u1", OldSpec: map[string]any{"size": int64(3)},
		StagedKey: "p/restore/etcd-a/20261122T112102.831Z-scheduled/snapshot.db", StagedSHA256: "abc", StagedSize: 2048,
		Actions: []OperatorAction{{Verb: "stage", What: "uncompressed snapshot"},
			{Verb: "delete", What: "EtcdRestore kubx-etcd-01/etcd-a (uid r0) of an earlier restore: etcd-operator reported it succeeded"},
			{Verb: "create", What: "EtcdRestore kubx-etcd-01/etcd-a",
				Object: map[string]any{"kind": "EtcdRestore"}}, {Verb: "replace", What: "EtcdCluster kubx-etcd-01/etcd-a"}},
		NewUID: "u2", LastSeen: `restored etcdcluster (uid u2): phase "Running", 3/3 members ready`, Waited: 3 * time.Second,
		Endpoints: []string{"https://10.0.0.1:2379"},
		Verify:    &restore.VerifyReport{Verified: true, Checks: []restore.Check{{Name: restore.CheckHealthy, Status: restore.CheckPassed}}},
		Duration:  9 * time.Second,
		Replaced:  &ReplacedRestore{Name: "etcd-a", UID: "r0", Annotations: map[string]string{AnnotationClusterUID: "u0"}},
		Warnings:  []string{"cannot read secret kubx-etcd-01/s3 to check that etcd-operator can use it"},
	}
	var b strings.Builder
	if err := output.RenderAll(&b, output.FormatTable, rep.Tables(), rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Restore of etcdcluster kubx-etcd-01/etcd-a via etcd-operator\n", "revision >= 42 (the snapshot's", "size: 3",
		"stage: uncompressed snapshot (2.0 KiB, sha256 abc", "create: EtcdRestore kubx-etcd-01/etcd-a\n---\nkind: EtcdRestore",
		"Then etcd-operator will replace", "last seen: restored etcdcluster", "Rebuilt cluster: VERIFIED", "Restored and verified in 9s",
		"delete: EtcdRestore kubx-etcd-01/etcd-a (uid r0) of an earlier restore: etcd-operator reported it succeeded\n  annotations:\n    etcd-recovery.armada.ibm.com/etcdcluster-uid: u0\n",
		"WARNING: cannot read secret kubx-etcd-01/s3", "the next restore --via etcd-operator of this cluster deletes it"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
}
