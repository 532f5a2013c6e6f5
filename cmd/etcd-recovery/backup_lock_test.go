package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// backup --lock-mode through the CLI: on a bucket without object lock it
// exits 4 before snapshotting, naming the bucket; on a locked MinIO bucket
// (ETCD_RECOVERY_LOCK_MODE, as the CronJob gets it from the ConfigMap) the
// manifest records the lock; prune exits 0; a bad mode exits 4.
func TestCLIBackupLockMode(t *testing.T) {
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	m := testenv.SharedMinIO(t)
	ctx := context.Background()

	plain := m.NewBucket(t)
	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", "l1", "--lock-mode", "governance"}, clusterArgs(c), cosArgs(t, m, plain, ""))...)
	if code != 4 || !strings.Contains(errOut, "bucket "+plain+" has no object lock") {
		t.Fatalf("lock on an unlocked bucket: exit %d, want 4 naming the bucket\n%s\n%s", code, out, errOut)
	}
	code, _, errOut = runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", "l1", "--lock-mode", "forever"}, clusterArgs(c), cosArgs(t, m, plain, ""))...)
	if code != 4 || !strings.Contains(errOut, "--lock-mode") {
		t.Fatalf("bad lock mode: exit %d, want 4\n%s", code, errOut)
	}

	locked := m.NewLockedBucket(t)
	cos := cosArgs(t, m, locked, testenv.Prefix(t))
	t.Setenv("ETCD_RECOVERY_LOCK_MODE", "governance")
	code, out, errOut = runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", "l1", "--kind", "scheduled", "-o", "json"}, clusterArgs(c), cos)...)
	if code != 0 {
		t.Fatalf("backup exit %d\n%s\n%s", code, out, errOut)
	}
	var man struct {
		Lock *catalog.ManifestLock `json:"lock"`
	}
	if err := json.Unmarshal([]byte(out), &man); err != nil || man.Lock == nil || man.Lock.Mode != catalog.LockGovernanceMode {
		t.Fatalf("backup -o json lock: %+v, %v\n%s", man.Lock, err, out)
	}
	code, out, errOut = runCtx(t, ctx, concatArgs([]string{"prune", "--cluster-id", "l1"}, cos)...)
	if code != 0 {
		t.Fatalf("prune exit %d\n%s\n%s", code, out, errOut)
	}
}
