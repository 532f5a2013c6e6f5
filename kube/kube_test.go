package kube_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

func TestMain(m *testing.M) { testfix.Main(m) }

const (
	ns      = "kubx-etcd-01"
	otherNS = "kubx-etcd-02"
)

// TestKube runs everything against one real kube-apiserver (starting one
// is the expensive part): the manifests, RBAC, discovery of 20
// EtcdClusters backed by real etcd members, restore via etcd-operator and
// the API verbs of the commands. backup --all and inspect --all are
// package fleet's tests.
func TestKube(t *testing.T) {
	k := testenv.StartKubeAPIServer(t)
	admin := k.Clientset(t, "")
	kubetest.CreateNamespaces(t, admin, ns, otherNS, restoreNS, verbsNS, escrowNS, rebuildNS, goneNS)
	kubetest.InstallCRDs(t, k)
	a := kubetest.NewApplier(t, k)

	t.Run("ManifestsDryRun", func(t *testing.T) {
		ctx := testfix.Context(t, 2*time.Minute)
		n := 0
		for _, f := range kubetest.DeployFiles(t) {
			for _, o := range kubetest.DecodeManifests(t, f) {
				if o.GetNamespace() != "" {
					t.Errorf("%s: %s %s sets a namespace; manifests are applied with -n", f, o.GetKind(), o.GetName())
				}
				if err := a.Apply(ctx, o, ns, true); err != nil {
					t.Errorf("%s: dry-run apply: %v", filepath.Base(f), err)
				}
				n++
			}
		}
		if n < 12 {
			t.Fatalf("only %d objects in deploy/", n)
		}
		// Nothing was created by the dry run.
		if _, err := admin.BatchV1().CronJobs(ns).Get(ctx, "etcd-recovery-backup", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("dry run created the CronJob: %v", err)
		}
	})

	// Real RBAC for the rest.
	for _, ns := range []string{ns, otherNS, restoreNS, verbsNS, escrowNS, rebuildNS, goneNS} {
		a.ApplyFile(t, kubetest.DeployPath(t, "10-rbac.yaml"), ns)
	}
	kubetest.RebuildAccess(t, a, rebuildNS, "etcd-rb1")
	t.Run("Discovery", func(t *testing.T) { testDiscovery(t, k, a, admin) })
	t.Run("OperatorRestore", func(t *testing.T) { testOperatorRestore(t, k, a, admin) })
	t.Run("Verbs", func(t *testing.T) { testVerbs(t, k, a, admin) })
	t.Run("CaptureEscrow", func(t *testing.T) { testCaptureEscrow(t, k, a, admin) })
	t.Run("Rebuild", func(t *testing.T) { testRebuild(t, k, admin) })
	t.Run("RebuildFromStore", func(t *testing.T) { testRebuildFromStore(t, k, a, admin) })
}

func testDiscovery(t *testing.T, k *testenv.KubeAPIServer, a *kubetest.Applier, admin kubernetes.Interface) {
	ctx := testfix.Context(t, 10*time.Minute)
	dynAdmin := k.Dynamic(t, "")
	m := testenv.SharedMinIO(t)
	const n = 20
	clusters, token, sa := kubetest.AddSAFleet(t, k, a, admin, m, ns, []string{otherNS}, n)

	t.Run("Discovery", func(t *testing.T) {
		got, err := sa.Clusters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != n {
			t.Fatalf("discovered %d clusters, want %d", len(got), n)
		}
		for i, c := range got {
			want := clusters[i].Etcd.Endpoints()
			if c.Name != clusters[i].Name || c.EndpointSource != kube.SourcePods || strings.Join(c.Endpoints, ",") != strings.Join(want, ",") {
				t.Errorf("cluster %d: %+v, want %s at %v", i, c, clusters[i].Name, want)
			}
			if !c.TLS() || c.UID != clusters[i].UID || c.Size != 1 {
				t.Errorf("cluster %d: %+v", i, c)
			}
		}
		// Inspect with the service account: the discovered TLS config works.
		dir := t.TempDir()
		cfg, err := sa.EtcdConfig(ctx, got[0], dir, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{cfg.Cert, cfg.Key, cfg.CACert} {
			st, err := os.Stat(f)
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v %v, want mode 0600", f, st.Mode(), err)
			}
		}
		rep, err := inspect.Run(ctx, inspect.Options{Etcd: cfg, Timeout: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Verdict != inspect.VerdictHealthy {
			t.Fatalf("inspect %s: %s", got[0].Name, rep.Verdict)
		}
		// COS credentials come from the secret.
		creds, err := sa.COSCredentials(ctx, "")
		if err != nil || creds.Name != kube.COSSecretName || creds.Source() != "secret "+ns+"/"+kube.COSSecretName ||
			!bytes.Contains(creds.Data[kube.AWSSecretCredentialsKey], []byte(m.AccessKey)) {
			t.Fatalf("cos credentials from secret: %v", err)
		}
		// A single named cluster; an unknown one.
		one, err := sa.Clusters(ctx, "etcd-c03")
		if err != nil || len(one) != 1 || one[0].Endpoints[0] != clusters[3].Etcd.Endpoints()[0] {
			t.Fatalf("named cluster: %+v %v", one, err)
		}
		var nf *kube.NotFoundError
		if _, err := sa.Clusters(ctx, "etcd-nope"); !errors.As(err, &nf) {
			t.Fatalf("unknown cluster: %v", err)
		}
		// Without member pods (or without IPs yet), the client service;
		// without TLS, http.
		noPods := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": kube.APIVersion, "kind": kube.KindEtcdCluster,
			"metadata": map[string]any{"name": "etcd-plain", "namespace": otherNS},
			"spec":     map[string]any{"size": int64(3), "version": "3.4.13"}}}
		if _, err := dynAdmin.Resource(kube.EtcdClusterGVR).Namespace(otherNS).Create(ctx, noPods, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		other, err := kube.New(kube.Config{Rest: k.RestConfig(kubetest.SAToken(t, admin, otherNS, "etcd-recovery")), Namespace: otherNS})
		if err != nil {
			t.Fatal(err)
		}
		plain, err := other.Clusters(ctx)
		if err != nil || len(plain) != 1 || plain[0].EndpointSource != kube.SourceService || plain[0].TLS() ||
			plain[0].Endpoints[0] != "http://etcd-plain-client."+otherNS+".svc:2379" || plain[0].Size != 3 {
			t.Fatalf("cluster without pods: %+v %v", plain, err)
		}
		cfg2, err := other.EtcdConfig(ctx, plain[0], t.TempDir(), time.Second)
		if err != nil || cfg2.Cert != "" || len(cfg2.Endpoints) != 1 {
			t.Fatalf("config without TLS: %+v %v", cfg2, err)
		}
	})

	t.Run("RBAC", func(t *testing.T) {
		cs := k.Clientset(t, token)
		dyn := k.Dynamic(t, token)
		forbidden := func(what string, err error) {
			t.Helper()
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s: got %v, want forbidden", what, err)
			}
		}
		_, err := cs.CoreV1().Secrets(ns).Get(ctx, "unrelated", metav1.GetOptions{})
		forbidden("get a secret not in the Role", err)
		_, err = cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		forbidden("list secrets", err)
		_, err = cs.CoreV1().Secrets(otherNS).Get(ctx, kube.COSSecretName, metav1.GetOptions{})
		forbidden("get cos-credentials in another namespace", err)
		// The escrow: the backup jobs' account reads the cluster's
		// server- and peer-TLS secrets; the toolkit's and the exporter's
		// never do.
		for _, s := range []string{"etcd-c01-server-tls", "etcd-c01-peer-tls"} {
			if _, err := cs.CoreV1().Secrets(ns).Get(ctx, s, metav1.GetOptions{}); err != nil {
				t.Errorf("backup account: get %s (escrow): %v", s, err)
			}
			for _, other := range []string{"etcd-recovery-toolkit", "etcd-recovery-exporter"} {
				_, err = k.Clientset(t, kubetest.SAToken(t, admin, ns, other)).CoreV1().Secrets(ns).Get(ctx, s, metav1.GetOptions{})
				forbidden(other+": get "+s, err)
			}
		}
		_, err = cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		forbidden("list services (the escrow gets them by name)", err)
		// Its Services by name, per cluster (the per-cluster Role):
		// another cluster's, or any other Service, stay forbidden.
		for _, s := range []string{"etcd-c01", "etcd-c01-client", "etcd-c01-client-service-np"} {
			if _, err := cs.CoreV1().Services(ns).Get(ctx, s, metav1.GetOptions{}); apierrors.IsForbidden(err) {
				t.Errorf("backup account: get Service %s (escrow): %v", s, err)
			}
		}
		for _, s := range []string{"etcd-nope-client-service-np", "kubernetes-dashboard"} {
			_, err = cs.CoreV1().Services(ns).Get(ctx, s, metav1.GetOptions{})
			forbidden("get Service "+s+" (not a granted cluster's)", err)
		}
		err = dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Delete(ctx, "etcd-c01", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		forbidden("delete an etcdcluster with the backup Role", err)
		_, err = dyn.Resource(kube.EtcdRestoreGVR).Namespace(ns).Create(ctx, kubetest.EtcdRestoreObj("etcd-c01"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		forbidden("create an etcdrestore with the backup Role", err)
		_, err = dyn.Resource(kube.EtcdClusterGVR).Namespace(otherNS).List(ctx, metav1.ListOptions{})
		forbidden("list etcdclusters in another namespace", err)
		_, err = cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		forbidden("create a pod", err)
		// What the backup needs is allowed.
		if _, err := cs.CoreV1().Secrets(ns).Get(ctx, "etcd-c01-client-tls", metav1.GetOptions{}); err != nil {
			t.Errorf("get the cluster's client-tls secret: %v", err)
		}
		// A cluster whose client-TLS secret was not granted fails clearly.
		_, err = sa.EtcdConfig(ctx, kube.Cluster{Namespace: ns, Name: "x", OperatorSecret: "unrelated", Endpoints: []string{"https://127.0.0.1:1"}}, t.TempDir(), time.Second)
		if err == nil || !apierrors.IsForbidden(errors.Unwrap(err)) && !strings.Contains(err.Error(), "forbidden") {
			t.Errorf("EtcdConfig with an ungranted secret: %v", err)
		}
		// The toolkit's service account may restore.
		tk := kubetest.SAToken(t, admin, ns, "etcd-recovery-toolkit")
		tdyn := k.Dynamic(t, tk)
		if _, err := tdyn.Resource(kube.EtcdRestoreGVR).Namespace(ns).Create(ctx, kubetest.EtcdRestoreObj("etcd-c01"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("toolkit: create etcdrestore: %v", err)
		}
		// etcd-operator replaces the EtcdCluster; the toolkit never deletes one.
		err = tdyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Delete(ctx, "etcd-c01", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		forbidden("toolkit: delete an etcdcluster", err)
	})
}
