package runbooks

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/mdblocks"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/kube"
)

const namespaceGone = "namespace-gone.md"

// namespaceGoneRunbook: the carrier's setup (operatorSetup: a real
// kube-apiserver, a 3-member TLS EtcdCluster with its secrets and
// Services), an encrypted backup that escrows them, then the namespace
// emptied (every secret, Service, pod, EtcdCluster, RBAC object) and the
// members killed with their data dirs. The runbook's blocks recreate the
// namespace as an administrator, rebuild and restore as the toolkit's
// service account (the stand-in restore operator restores a cluster it
// never saw, with the rebuilt secrets' PKI), check the nodePort is the
// old one and revoke the break-glass grant. Then the namespace is
// emptied again and the manual fallback runs: curl, stock age, kubectl
// create of the paused EtcdCluster, and the data restore. Every key is
// back after each.
func namespaceGoneRunbook(t *testing.T, rb mdblocks.Set) {
	const ns = "kubx-etcd-15"
	k, admin, dyn, fc, f, ctx := operatorSetup(t, ns, "etcd-rb-gone", "127.0.7.30")
	keys := testenv.PutKeys(t, fc.Etcd.Client(t), "/registry/configmaps/", 200, 128)

	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	idFile := filepath.Join(t.TempDir(), "identity.txt")
	if err := os.WriteFile(idFile, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := seal.ParseRecipients([]string{id.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kube.New(kube.Config{Rest: k.RestConfig(""), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kc.Clusters(ctx, fc.Name)
	if err != nil {
		t.Fatal(err)
	}
	// The escrowed spec says paused false: the fallback's edit must still
	// leave exactly one paused, true.
	if _, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Patch(ctx, fc.Name, types.MergePatchType,
		[]byte(`{"spec":{"paused":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	man := f.Backup(t, ctx, fc.Etcd, backup.Options{V2: backup.V2Off, Recipients: rs,
		Escrow: func(ctx context.Context) (*catalog.EscrowList, []string, error) { return kc.CaptureEscrow(ctx, cs[0]) }})
	if !man.Escrow.Usable() {
		t.Fatalf("the backup's escrow: %+v", man.Escrow)
	}
	np, err := admin.CoreV1().Services(ns).Get(ctx, fc.Name+"-client-service-np", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodePort := np.Spec.Ports[0].NodePort

	gone := func() {
		t.Helper()
		kubetest.WipeNamespace(t, ctx, admin, dyn, ns)
	}
	gone()
	for _, m := range fc.Etcd.Members {
		m.Kill()
		if err := os.RemoveAll(m.DataDir); err != nil {
			t.Fatal(err)
		}
	}
	op := kubetest.StartRestoreOperator(t, kubetest.RestoreOperatorOptions{Namespace: ns, Client: admin, Dynamic: dyn, RunningDelay: time.Second})

	s := newScenario(t, rb, f.Vars)
	s.Vars["namespace"] = ns
	s.Vars["identity-file"] = idFile
	s.Vars["deploy-dir"] = kubetest.DeployPath(t)
	s.Tools["kubectl"] = kubetest.KubectlBin(t)
	s.Tools["age"] = testenv.Age(t)
	adminEnv := []string{"KUBECONFIG=" + k.Kubeconfig(t, "", ns)}

	// An administrator recreates the namespace.
	s.ExtraEnv = adminEnv
	s.Run(namespaceGone + "#recreate-the-namespace")
	if _, err := admin.CoreV1().Secrets(ns).Get(ctx, "etcd-recovery-age-identity", metav1.GetOptions{}); err != nil {
		t.Fatalf("the identity secret: %v", err)
	}

	// The toolkit rebuilds and restores.
	s.ExtraEnv = []string{"KUBECONFIG=" + k.Kubeconfig(t, kubetest.SAToken(t, admin, ns, "etcd-recovery-toolkit"), ns)}
	s.After = func(r mdblocks.Result) {
		if strings.Contains(r.Block.Code, "--dry-run") {
			if got := kubetest.NamespaceObjects(t, ctx, admin, dyn, ns, fc.Name); len(got) != 0 {
				t.Fatalf("the dry run created %v", got)
			}
		}
	}
	out := s.Run(namespaceGone + "#rebuild-and-restore")
	s.After = nil
	mdblocks.MustContain(t, mdblocks.One(t, out, "--dry-run", 0), "dry run", "would create", fc.Name+"-server-tls", fc.Name+"-client-service-np", "EtcdCluster")
	restored := restoredOnce(t, op, 1)
	mdblocks.CheckKeys(t, restored.Members[0].Client(t), keys)

	// Check, revoke.
	s.ExtraEnv = adminEnv
	out = s.Run(namespaceGone + "#check-and-revoke")
	mdblocks.MustContain(t, out[0], "Running", "nodePort "+itoa(nodePort))
	if _, err := admin.RbacV1().Roles(ns).Get(ctx, "etcd-recovery-rebuild-"+fc.Name, metav1.GetOptions{}); err == nil {
		t.Error("the break-glass Role is still there after the revoke")
	}

	// The manual fallback, in the namespace gone again.
	gone()
	for _, m := range restored.Members {
		m.Kill()
	}
	kubetest.CreateCOSSecret(t, admin, ns, f.MinIO)
	kubetest.NewApplier(t, k).ApplyFile(t, kubetest.DeployPath(t, "10-rbac.yaml"), ns)
	pausedFirst, phaseFirst := false, ""
	s.After = func(r mdblocks.Result) {
		if strings.Contains(r.Block.Code, "kubectl -n") && strings.Contains(r.Block.Code, "create -f") {
			ec, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Get(ctx, fc.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pausedFirst, _, _ = unstructured.NestedBool(ec.Object, "spec", "paused")
			phaseFirst, _, _ = unstructured.NestedString(ec.Object, "status", "phase")
		}
	}
	out = s.Run(namespaceGone + "#manual-fallback")
	if !pausedFirst || phaseFirst != "Running" {
		t.Errorf("the fallback's kubectl create made an EtcdCluster paused %v, phase %q; want paused, Running (else etcd-operator seeds an empty member)", pausedFirst, phaseFirst)
	}
	mdblocks.MustContain(t, mdblocks.One(t, out, "age -d", 0), "newest backup: "+strings.TrimSuffix(f.Layout.BackupPrefix(f.ID, man.Name), "/"), man.Escrow.Address)
	if left, _ := filepath.Glob(filepath.Join(s.Dir, "escrow*")); len(left) != 0 {
		t.Errorf("the fallback left the escrow's plaintext or ciphertext behind: %v", left)
	}
	want := []string{"Secret/" + fc.Name + "-client-tls", "Secret/" + fc.Name + "-peer-tls", "Secret/" + fc.Name + "-server-tls",
		"Service/" + fc.Name, "Service/" + fc.Name + "-client", "Service/" + fc.Name + "-client-service-np", "EtcdCluster/" + fc.Name}
	got := kubetest.NamespaceObjects(t, ctx, admin, dyn, ns, fc.Name)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("after kubectl create of the escrow: %v, want %v", got, want)
	}
	restored = restoredOnce(t, op, 2)
	mdblocks.CheckKeys(t, restored.Members[0].Client(t), keys)
	ec, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Get(ctx, fc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p, _, _ := unstructured.NestedBool(ec.Object, "spec", "paused"); p {
		t.Error("the restored EtcdCluster is still paused")
	}
}

// restoredOnce waits for the n-th restore of the stand-in and returns it.
func restoredOnce(t *testing.T, op *kubetest.RestoreOperator, n int) kubetest.RestoreRecord {
	t.Helper()
	recs := op.Records()
	if len(recs) != n {
		t.Fatalf("%d restores by the stand-in, want %d", len(recs), n)
	}
	var last kubetest.RestoreRecord
	for _, r := range recs {
		if r.Err != nil {
			t.Fatalf("the stand-in's restore %s: %v", r.Restore, r.Err)
		}
		if r.RunningAt.After(last.RunningAt) {
			last = r
		}
	}
	if len(last.Members) != 3 {
		t.Fatalf("restored %d members, want 3", len(last.Members))
	}
	return last
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }
