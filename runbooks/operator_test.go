package runbooks

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/mdblocks"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// operatorRestoreRef is the carrier's restore path.
const operatorRestoreRef = "quorum-loss.md#restore-through-etcd-operator"

// operatorSetup is the carrier's setup the etcd-operator runbook tests
// share: a real kube-apiserver with deploy/'s CRDs and RBAC in namespace
// ns, an EtcdCluster name backed by a real 3-member etcd on ip with the
// per-cluster grant of its client-TLS secret, the runbook fixture on it,
// and cos-credentials in etcd-operator's format, also mounted as the
// tool's COS_CREDENTIALS_DIR (the toolkit pod mounts that secret: its
// files are the tool's credentials too). ctx ends with the test, at most
// 5 minutes.
func operatorSetup(t *testing.T, ns, name, ip string) (*testenv.KubeAPIServer, *kubernetes.Clientset, *dynamic.DynamicClient, kubetest.Cluster, *mdblocks.Fixture, context.Context) {
	t.Helper()
	w := kubetest.NewWorld(t, ns)
	k, admin, dyn, a := w.K, w.Admin, w.Dyn, w.Applier

	fc := kubetest.AddEtcdCluster(t, admin, dyn, ns, name, testenv.EtcdOptions{IP: ip, Members: 3})
	kubetest.PerClusterAccess(t, a, ns, fc.Name)
	f := mdblocks.NewFixture(t, fc.Etcd.PKI, fc.Etcd.Endpoints())
	f.ID = fc.Name
	f.Vars["id"] = fc.Name
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	secret := kubetest.CreateCOSSecret(t, admin, ns, f.MinIO).Data
	creds := filepath.Join(t.TempDir(), "cos-credentials")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, v := range secret {
		if err := os.WriteFile(filepath.Join(creds, name), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.Vars["cos-credentials-dir"] = creds
	return k, admin, dyn, fc, f, ctx
}

// toolkitScenario is the runbook scenario on f, run as the toolkit's
// service account of namespace ns (KUBECONFIG), <namespace> set.
func toolkitScenario(t *testing.T, rb mdblocks.Set, k *testenv.KubeAPIServer, admin kubernetes.Interface, ns string, f *mdblocks.Fixture) *mdblocks.Scenario {
	t.Helper()
	s := newScenario(t, rb, f.Vars)
	s.Vars["namespace"] = ns
	s.ExtraEnv = []string{"KUBECONFIG=" + k.Kubeconfig(t, kubetest.SAToken(t, admin, ns, "etcd-recovery-toolkit"), ns)}
	return s
}

// etcdRestores lists the EtcdRestores of namespace ns.
func etcdRestores(t *testing.T, ctx context.Context, dyn dynamic.Interface, ns string) []unstructured.Unstructured {
	t.Helper()
	l, err := dyn.Resource(kube.EtcdRestoreGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// operatorRestored is the stand-in's record of the one EtcdRestore of ers
// (namespace ns's after the restore: the tool's), once it is done.
func operatorRestored(t *testing.T, op *kubetest.RestoreOperator, ers []unstructured.Unstructured, ns string) kubetest.RestoreRecord {
	t.Helper()
	if len(ers) != 1 {
		t.Fatalf("%d EtcdRestores in %s after the restore, want the one the tool created", len(ers), ns)
	}
	rec := op.WaitUID(t, ers[0].GetUID(), time.Minute)
	if rec.Err != nil {
		t.Fatalf("the restore operator stand-in: %v", rec.Err)
	}
	return rec
}

// operatorRestore: the carrier's setup in a kubx-etcd-NN namespace of a
// real kube-apiserver (deploy/'s CRDs and RBAC, the per-cluster grant of
// the client-TLS secret, cos-credentials in etcd-operator's format, also
// mounted as the tool's COS_CREDENTIALS_DIR), an EtcdCluster backed by a
// real 3-member etcd with a COS backup and newer writes, two members
// killed, and etcd-operator's restore operator played by
// kubetest.StartRestoreOperator. The runbook's blocks run as the toolkit's
// service account (KUBECONFIG). The dry run creates no EtcdRestore and
// changes neither the EtcdCluster, its pods nor the bucket; the restore
// snapshots the survivor (pre-restore), stages it, has the stand-in
// recreate the cluster, returns only after it is Running, verifies it; and
// every key written, before and after the COS backup, has its value in the
// restored cluster, and no other key is there.
func operatorRestore(t *testing.T, rb mdblocks.Set) {
	const ns = "kubx-etcd-07"
	k, admin, dyn, fc, f, ctx := operatorSetup(t, ns, "etcd-rb-op", "127.0.7.10")

	cli := fc.Etcd.Client(t)
	keys := testenv.PutKeys(t, cli, "/registry/secrets/", 300, 200)
	f.Backup(t, ctx, fc.Etcd, backup.Options{})
	maps.Copy(keys, testenv.PutKeys(t, cli, "/registry/leases/", 50, 100)) // only in the survivor's data
	fc.Etcd.Members[1].Kill()
	fc.Etcd.Members[2].Kill()
	op := kubetest.StartRestoreOperator(t, kubetest.RestoreOperatorOptions{Namespace: ns, Client: admin, Dynamic: dyn, RunningDelay: 2 * time.Second})
	op.Register(fc)

	s := toolkitScenario(t, rb, k, admin, ns, f)
	state := func() string {
		t.Helper()
		ec, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Get(ctx, fc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("etcdcluster %s: %v", fc.Name, err)
		}
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := "etcdcluster uid " + string(ec.GetUID()) + "@" + ec.GetResourceVersion() + "; pods"
		for _, p := range pods.Items {
			st += " " + p.Name + "@" + p.ResourceVersion
		}
		return st + "; objects " + strings.Join(testfix.Keys(t, f.Store, f.Layout.RootPrefix()), " ")
	}
	before := state()
	var returned time.Time
	s.After = func(r mdblocks.Result) {
		if strings.Contains(r.Block.Code, "--dry-run") {
			if ers := etcdRestores(t, ctx, dyn, ns); len(ers) != 0 {
				t.Fatalf("the dry run created %d EtcdRestore(s) in %s", len(ers), ns)
			}
			if after := state(); after != before {
				t.Fatalf("the dry run changed the API objects or the bucket:\nbefore %s\nafter  %s", before, after)
			}
			return
		}
		returned = time.Now()
	}
	rs := s.Run(operatorRestoreRef)
	mdblocks.MustContain(t, mdblocks.One(t, rs, "--dry-run", 0), "dry run: nothing was changed", "Would create: EtcdRestore "+ns+"/"+fc.Name, "kind: EtcdRestore")
	if returned.IsZero() || len(rs) != 2 {
		t.Fatalf("%s: want a dry run, then the restore; ran %d blocks", operatorRestoreRef, len(rs))
	}
	restored := rs[1]
	mdblocks.MustContain(t, restored, "Restored cluster at https://127.0.0.1:", "Restored and verified in")

	ers := etcdRestores(t, ctx, dyn, ns)
	rec := operatorRestored(t, op, ers, ns)
	if rec.OldUID != fc.UID || rec.NewUID == "" || rec.NewUID == fc.UID {
		t.Fatalf("the operator replaced etcdcluster uid %s by %s, want the original %s replaced", rec.OldUID, rec.NewUID, fc.UID)
	}
	if returned.Before(rec.RunningAt) {
		t.Errorf("the restore block returned at %s, before the restored cluster was Running at %s",
			returned.Format(time.StampMilli), rec.RunningAt.Format(time.StampMilli))
	}
	ec, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Get(ctx, fc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if phase, _, _ := unstructured.NestedString(ec.Object, "status", "phase"); ec.GetUID() != rec.NewUID || phase != "Running" {
		t.Errorf("etcdcluster %s: uid %s phase %q, want the restored %s Running", fc.Name, ec.GetUID(), phase, rec.NewUID)
	}
	// The survivor's snapshot (it has the writes after the COS backup) is
	// what was restored.
	list, err := catalog.ListBackups(ctx, f.Store, f.Layout, f.ID)
	if err != nil || len(list) != 2 || list[0].Manifest == nil || list[0].Manifest.Kind != catalog.KindPreRestore ||
		ers[0].GetAnnotations()[kube.AnnotationBackup] != list[0].Manifest.Name {
		t.Fatalf("want the pre-restore backup newest and restored: %+v %v (restored %q)", list, err, ers[0].GetAnnotations()[kube.AnnotationBackup])
	}
	// Every key and value, and nothing else.
	rcli := rec.Members[0].Client(t)
	mdblocks.CheckKeys(t, rcli, keys)
	resp, err := rcli.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var extra []string
	for _, kv := range resp.Kvs {
		if _, ok := keys[string(kv.Key)]; !ok {
			extra = append(extra, string(kv.Key))
		}
	}
	if len(extra) > 0 || len(resp.Kvs) != len(keys) {
		t.Errorf("restored cluster has %d keys, want %d; not written: %v", len(resp.Kvs), len(keys), slices.Compact(extra))
	}
}
