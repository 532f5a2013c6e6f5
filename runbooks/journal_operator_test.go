package runbooks

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/mdblocks"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// journalOperatorRef is the carrier's restore from the journal.
const journalOperatorRef = "quorum-loss.md#every-member-lost-through-etcd-operator"

func init() {
	scenarios = append(scenarios, scenario{"every-member-lost-operator", everyMemberLostOperator})
}

// everyMemberLostOperator: the carrier's setup (as operatorRestore: a
// kubx-etcd-NN namespace of a real kube-apiserver, deploy/'s RBAC, an
// EtcdCluster backed by a real 3-member etcd, cos-credentials in
// etcd-operator's format), a COS backup, the journal (2 s segments) while
// keys are written, overwritten and deleted after it, then every member
// SIGKILLed. The runbook's restore --via etcd-operator --to-latest, as the
// toolkit's service account: the dry run names the journal's last revision
// and changes nothing; the restore stages the replayed database, which
// etcd-operator's restore (kubetest's stand-in: etcdutl snapshot restore,
// which checks etcd's sha256 trailer) starts on; the restored cluster
// holds every key as of the journal's last revision, nothing else, at
// that revision plus the bump.
func everyMemberLostOperator(t *testing.T, rb mdblocks.Set) {
	const ns = "kubx-etcd-08"
	k, admin, dyn, fc, f, ctx := operatorSetup(t, ns, "etcd-rb-jop", "127.0.7.12")

	cli := fc.Etcd.Client(t)
	keys := testenv.PutKeys(t, cli, "/registry/secrets/", 200, 200)
	base := f.Backup(t, ctx, fc.Etcd, backup.Options{})
	cp := startCapture(t, ctx, f, fc.Etcd.Client(t), base, lossInterval, testfix.Logger(t))
	// After the backup: new keys, overwrites and deletes, over more than
	// one segment.
	for i := range 3 {
		maps.Copy(keys, testenv.PutKeys(t, cli, fmt.Sprintf("/registry/leases/w%d-", i), 30, 100))
		k, v := fmt.Sprintf("/registry/secrets/key%06d", i+1), fmt.Sprintf("over-%d", i)
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
		keys[k] = v
		d := fmt.Sprintf("/registry/secrets/key%06d", 100+i)
		if _, err := cli.Delete(ctx, d); err != nil {
			t.Fatal(err)
		}
		delete(keys, d)
		time.Sleep(lossInterval / 2)
	}
	last, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	lastRev := last.Header.Revision
	for _, m := range fc.Etcd.Members {
		m.Kill()
	}
	for deadline := time.Now().Add(lossBound + 3*time.Second); ; time.Sleep(200 * time.Millisecond) {
		segs, err := journal.ListSegments(ctx, f.Store, f.Layout, f.ID, base.Revision())
		if err != nil {
			t.Fatal(err)
		}
		if segs.Reach >= lastRev {
			break
		}
		if time.Now().After(deadline) {
			select {
			case err := <-cp.done:
				t.Fatalf("the journal of %s stopped: %v", f.ID, err)
			default:
			}
			t.Fatalf("the journal reaches %d, not the last revision %d, %v after every member was lost", segs.Reach, lastRev, lossBound+3*time.Second)
		}
	}
	cp.stop(t)

	op := kubetest.StartRestoreOperator(t, kubetest.RestoreOperatorOptions{Namespace: ns, Client: admin, Dynamic: dyn, RunningDelay: time.Second})
	op.Register(fc)
	s := toolkitScenario(t, rb, k, admin, ns, f)
	s.After = func(r mdblocks.Result) {
		if strings.Contains(r.Block.Code, "--dry-run") {
			if ers := etcdRestores(t, ctx, dyn, ns); len(ers) != 0 {
				t.Fatalf("the dry run created %d EtcdRestore(s) in %s", len(ers), ns)
			}
		}
	}
	rs := s.Run(journalOperatorRef)
	if len(rs) != 2 {
		t.Fatalf("%s: want a dry run, then the restore; ran %d blocks", journalOperatorRef, len(rs))
	}
	latest := fmt.Sprintf("Latest (--to-latest): revision %d (received ", lastRev)
	mdblocks.MustContain(t, rs[0], "dry run: nothing was changed", latest, "point-in-time snapshot")
	mdblocks.MustContain(t, rs[1], latest, "point-in-time snapshot", "Restored and verified in",
		fmt.Sprintf("Expected after the restore: revision >= %d (the journal's revision %d + bump 1000000000", lastRev+1_000_000_000, lastRev))

	ers := etcdRestores(t, ctx, dyn, ns)
	rec := operatorRestored(t, op, ers, ns)
	if got := ers[0].GetAnnotations()[kube.AnnotationRevision]; got != fmt.Sprint(lastRev) {
		t.Errorf("EtcdRestore annotation %s = %q, want the journal's revision %d", kube.AnnotationRevision, got, lastRev)
	}
	rcli := rec.Members[0].Client(t)
	mdblocks.CheckKeys(t, rcli, keys)
	resp, err := rcli.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != len(keys) {
		t.Errorf("restored cluster has %d keys, want %d", len(resp.Kvs), len(keys))
	}
	if resp.Header.Revision < lastRev+1_000_000_000 {
		t.Errorf("restored revision %d: not the journal's %d bumped by 1,000,000,000", resp.Header.Revision, lastRev)
	}
}
