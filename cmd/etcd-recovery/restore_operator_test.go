package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/restore"
)

// Flag checks of restore --via etcd-operator, before anything is contacted
// (the run against a real kube-apiserver is kube's
// TestOperatorRestore, which runs the built binary).
func TestRestoreViaOperatorUsage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cos := []string{"--cos-endpoint", "http://127.0.0.1:1", "--bucket", "b"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"restore", "--via", "velero", "--cluster", "etcd-a"}, `--via "velero": the only one is etcd-operator`},
		{[]string{"restore", "--via", "etcd-operator"}, "--cluster NAME (the EtcdCluster) is required"},
		{[]string{"restore", "--cluster", "etcd-a"}, `--via "": the only one is etcd-operator`},
		{[]string{"restore", "--via", "etcd-operator", "--cluster", "../x"}, "--cluster:"},
		{[]string{"restore", "--via", "etcd-operator", "--cluster", "etcd-a", "--initial-cluster", "m0=https://10.0.0.1:2380"}, "--initial-cluster does not apply"},
		{[]string{"restore", "--via", "etcd-operator", "--cluster", "etcd-a", "--endpoints", "https://10.0.0.1:2379"}, "--endpoints does not apply"},
		{[]string{"restore", "--via", "etcd-operator", "--cluster", "etcd-a", "--verify-endpoints", "https://10.0.0.1:2379"}, "--verify-endpoints does not apply"},
		{[]string{"restore", "--via", "etcd-operator", "--cluster", "etcd-a", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"restore", "--via", "etcd-operator", "--cluster", "etcd-a", "--backup", "nope"}, "--backup:"},
		{[]string{"restore", "--cluster-id", "c1", "--initial-cluster", "m0=https://10.0.0.1:2380", "--timeout", "1m"}, "--timeout is a dry run's overall deadline"},
	} {
		code, out, errOut := runCtx(t, ctx, append(tc.args, cos...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q (stdout %q), want exit %d and %q", tc.args, code, errOut, out, exitUsage, tc.want)
		}
	}
	// Without --bucket or --cos-endpoint: the operator must be told both.
	code, _, errOut := runCtx(t, ctx, "restore", "--via", "etcd-operator", "--cluster", "etcd-a", "--cos-endpoint", "http://127.0.0.1:1")
	if code != exitUsage || !strings.Contains(errOut, "--bucket is required") {
		t.Errorf("no bucket: exit %d, %q", code, errOut)
	}
	code, _, errOut = runCtx(t, ctx, "restore", "--via", "etcd-operator", "--cluster", "etcd-a", "--bucket", "b")
	if code != exitUsage || !strings.Contains(errOut, "--cos-endpoint is required") {
		t.Errorf("no endpoint: exit %d, %q", code, errOut)
	}
}

// The table form of a finished restore via etcd-operator.
func TestRenderOperatorRestore(t *testing.T) {
	rep := &kube.OperatorRestoreReport{
		Namespace: "kubx-etcd-01", Cluster: "etcd-a", Backup: "20261122T112102.831Z-scheduled",
		Plan:   &restore.Plan{ClusterID: "etcd-a", Snapshot: &restore.SnapshotFacts{Revision: 42, LiveKeys: 7}},
		OldUID: "u1", OldSpec: map[string]any{"size": int64(3)},
		StagedKey: "p/restore/etcd-a/20261122T112102.831Z-scheduled/snapshot.db", StagedSHA256: "abc", StagedSize: 2048,
		Actions: []kube.OperatorAction{{Verb: "stage", What: "uncompressed snapshot"},
			{Verb: "delete", What: "EtcdRestore kubx-etcd-01/etcd-a (uid r0) of an earlier restore: etcd-operator reported it succeeded"},
			{Verb: "create", What: "EtcdRestore kubx-etcd-01/etcd-a",
				Object: map[string]any{"kind": "EtcdRestore"}}, {Verb: "replace", What: "EtcdCluster kubx-etcd-01/etcd-a"}},
		NewUID: "u2", LastSeen: `restored etcdcluster (uid u2): phase "Running", 3/3 members ready`, Waited: 3 * time.Second,
		Endpoints: []string{"https://10.0.0.1:2379"},
		Verify:    &restore.VerifyReport{Verified: true, Checks: []restore.Check{{Name: restore.CheckHealthy, Status: restore.CheckPassed}}},
		Duration:  9 * time.Second,
		Replaced:  &kube.ReplacedRestore{Name: "etcd-a", UID: "r0", Annotations: map[string]string{kube.AnnotationClusterUID: "u0"}},
		Warnings:  []string{"cannot read secret kubx-etcd-01/s3 to check that etcd-operator can use it"},
	}
	var b strings.Builder
	if err := renderOperatorRestore(&b, output.FormatTable, rep, nil); err != nil {
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
