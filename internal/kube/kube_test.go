package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/kube"
	"github.com/armada/etcd-recovery/internal/testenv"
	"github.com/armada/etcd-recovery/internal/testfix"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	ns      = "kubx-etcd-01"
	otherNS = "kubx-etcd-02"
	// inspectNS holds the clusters of the inspect --all test.
	inspectNS = "kubx-etcd-03"
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// decodeManifests reads every object of a YAML file.
func decodeManifests(t testing.TB, path string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out
}

func deployFiles(t testing.TB) []string {
	root := testenv.RepoRoot(t)
	files, _ := filepath.Glob(filepath.Join(root, "deploy", "*.yaml"))
	more, _ := filepath.Glob(filepath.Join(root, "deploy", "*", "*.yaml"))
	files = append(files, more...)
	sort.Strings(files)
	if len(files) < 6 {
		t.Fatalf("deploy/ has only %v", files)
	}
	return files
}

// applier applies objects with server-side apply through the dynamic client.
type applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func newApplier(t testing.TB, k *testenv.KubeAPIServer) *applier {
	dc, err := discovery.NewDiscoveryClientForConfig(k.RestConfig(""))
	if err != nil {
		t.Fatal(err)
	}
	gr, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{dyn: k.Dynamic(t, ""), mapper: restmapper.NewDiscoveryRESTMapper(gr)}
}

func (a *applier) apply(ctx context.Context, obj *unstructured.Unstructured, namespace string, dryRun bool) error {
	gvk := obj.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s: %w", gvk, err)
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = a.dyn.Resource(m.Resource).Namespace(namespace)
	}
	opts := metav1.ApplyOptions{FieldManager: "etcd-recovery-test", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Apply(ctx, obj.GetName(), obj, opts)
	if err != nil {
		return fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	return nil
}

// installCRDs creates the CRDs of deploy/00-crds.yaml for real and waits
// until they are served.
func installCRDs(t testing.TB, k *testenv.KubeAPIServer) {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	dyn := k.Dynamic(t, "")
	for _, o := range decodeManifests(t, filepath.Join(testenv.RepoRoot(t), "deploy", "00-crds.yaml")) {
		if _, err := dyn.Resource(crdGVR).Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "etcd-recovery-test", Force: true}); err != nil {
			t.Fatalf("CRD %s: %v", o.GetName(), err)
		}
	}
	for _, gvr := range []schema.GroupVersionResource{kube.EtcdClusterGVR, kube.EtcdBackupGVR, kube.EtcdRestoreGVR} {
		deadline := time.Now().Add(time.Minute)
		for {
			_, err := dyn.Resource(gvr).Namespace("default").List(ctx, metav1.ListOptions{})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not served: %v", gvr, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func createNS(t testing.TB, cs kubernetes.Interface, names ...string) {
	for _, n := range names {
		if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

func saToken(t testing.TB, cs kubernetes.Interface, namespace, sa string) string {
	t.Helper()
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", namespace, sa, err)
	}
	return tr.Status.Token
}

// TestKube runs everything against one real kube-apiserver (starting one
// is the expensive part): the manifests, RBAC, discovery, and backup --all
// of 20 EtcdClusters backed by real etcd members.
func TestKube(t *testing.T) {
	k := testenv.StartKubeAPIServer(t)
	admin := k.Clientset(t, "")
	createNS(t, admin, ns, otherNS, inspectNS)
	installCRDs(t, k)
	a := newApplier(t, k)

	t.Run("ManifestsDryRun", func(t *testing.T) {
		ctx := ctxT(t, 2*time.Minute)
		n := 0
		for _, f := range deployFiles(t) {
			for _, o := range decodeManifests(t, f) {
				if o.GetNamespace() != "" {
					t.Errorf("%s: %s %s sets a namespace; manifests are applied with -n", f, o.GetKind(), o.GetName())
				}
				if err := a.apply(ctx, o, ns, true); err != nil {
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
	ctx := ctxT(t, 10*time.Minute)
	for _, ns := range []string{ns, otherNS, inspectNS} {
		for _, o := range decodeManifests(t, filepath.Join(testenv.RepoRoot(t), "deploy", "10-rbac.yaml")) {
			if err := a.apply(ctx, o, ns, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("Fleet", func(t *testing.T) { testFleet(t, k, a, admin) })
	t.Run("InspectAll", func(t *testing.T) { testInspectAll(t, k, a, admin) })
}

// perClusterAccess applies deploy/per-cluster/client-tls-access.yaml for a cluster.
func perClusterAccess(t testing.TB, a *applier, cluster string) {
	perClusterAccessIn(t, a, ns, cluster)
}

// perClusterAccessIn is perClusterAccess in the given namespace.
func perClusterAccessIn(t testing.TB, a *applier, namespace, cluster string) {
	t.Helper()
	path := filepath.Join(testenv.RepoRoot(t), "deploy", "per-cluster", "client-tls-access.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(t.TempDir(), "access.yaml")
	if err := os.WriteFile(tmp, bytes.ReplaceAll(b, []byte("etcd-example"), []byte(cluster)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, o := range decodeManifests(t, tmp) {
		if err := a.apply(context.Background(), o, namespace, false); err != nil {
			t.Fatal(err)
		}
	}
}

type fakeCluster struct {
	name string
	etcd *testenv.EtcdCluster
	uid  types.UID
}

// addEtcdCluster starts a real single-member etcd with TLS on its own
// loopback IP and describes it to Kubernetes the way etcd-operator does:
// the EtcdCluster, the operator (client TLS) secret, and a member pod.
// Endpoints objects can't point at 127.0.0.0/8 (the API server rejects
// loopback addresses there), so discovery uses the member pods' status
// IPs; no kubelet runs, the pod's status is written through the status
// subresource, and its "client" container port is the member's real port.
func addEtcdCluster(t testing.TB, cs kubernetes.Interface, dyn dynamic.Interface, name, ip string) fakeCluster {
	t.Helper()
	return addEtcdClusterIn(t, cs, dyn, ns, name, ip, 1)
}

// addEtcdClusterIn is addEtcdCluster in the given namespace with the given
// number of members, all on the one loopback IP (each member's pod has that
// IP and the member's own client port).
func addEtcdClusterIn(t testing.TB, cs kubernetes.Interface, dyn dynamic.Interface, namespace, name, ip string, members int) fakeCluster {
	t.Helper()
	ctx := context.Background()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: members, TLS: true, IP: ip})
	secret := name + "-client-tls"
	data := map[string][]byte{}
	for key, f := range map[string]string{kube.ClientCertKey: c.PKI.ClientCertFile, kube.ClientKeyKey: c.PKI.ClientKeyFile, kube.ClientCAKey: c.PKI.CAFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		data[key] = b
	}
	if _, err := cs.CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret}, Data: data}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ec := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kube.APIVersion, "kind": kube.KindEtcdCluster,
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{"size": int64(members), "version": "3.5.35",
			"TLS": map[string]any{"static": map[string]any{
				"member":         map[string]any{"peerSecret": name + "-peer-tls", "serverSecret": name + "-server-tls"},
				"operatorSecret": secret}}},
	}}
	got, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(namespace).Create(ctx, ec, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, ep := range c.Endpoints() {
		port := strings.TrimPrefix(ep, "https://"+ip+":")
		var p int32
		fmt.Sscan(port, &p)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%04d", name, i), Labels: map[string]string{kube.LabelApp: "etcd", kube.LabelCluster: name}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "etcd", Image: "quay.io/coreos/etcd:v3.5.35",
				Ports: []corev1.ContainerPort{{Name: "client", ContainerPort: p}, {Name: "peer", ContainerPort: 2380}}}}},
		}
		created, err := cs.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
		if _, err := cs.CoreV1().Pods(namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("pod status with IP %s: %v", ip, err)
		}
	}
	return fakeCluster{name: name, etcd: c, uid: got.GetUID()}
}

func testFleet(t *testing.T, k *testenv.KubeAPIServer, a *applier, admin kubernetes.Interface) {
	ctx := ctxT(t, 10*time.Minute)
	dynAdmin := k.Dynamic(t, "")
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	prefix := testenv.Prefix(t)
	for _, n := range []string{ns, otherNS} {
		if _, err := admin.CoreV1().Secrets(n).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: kube.COSSecretName},
			Data:       map[string][]byte{"access_key_id": []byte(m.AccessKey), "secret_access_key": []byte(m.SecretKey)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}, StringData: map[string]string{"x": "y"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	const n = 20
	var clusters []fakeCluster
	start := time.Now()
	for i := range n {
		name := fmt.Sprintf("etcd-c%02d", i)
		fc := addEtcdCluster(t, admin, dynAdmin, name, fmt.Sprintf("127.0.3.%d", 10+i))
		perClusterAccess(t, a, name)
		testenv.PutKeys(t, fc.etcd.Client(t), "/registry/k", 50+i, 256)
		clusters = append(clusters, fc)
	}
	t.Logf("%d etcd clusters with TLS started in %v", n, time.Since(start).Round(time.Millisecond))

	token := saToken(t, admin, ns, "etcd-recovery")
	sa, err := kube.New(kube.Config{Rest: k.RestConfig(token), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("Discovery", func(t *testing.T) {
		got, err := sa.Clusters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != n {
			t.Fatalf("discovered %d clusters, want %d", len(got), n)
		}
		for i, c := range got {
			want := clusters[i].etcd.Endpoints()
			if c.Name != clusters[i].name || c.EndpointSource != kube.SourcePods || strings.Join(c.Endpoints, ",") != strings.Join(want, ",") {
				t.Errorf("cluster %d: %+v, want %s at %v", i, c, clusters[i].name, want)
			}
			if !c.TLS() || c.UID != clusters[i].uid || c.Size != 1 {
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
		creds, err := sa.COSCredentials(ctx, "", nil)
		if err != nil || creds.AccessKeyID != m.AccessKey {
			t.Fatalf("cos credentials from secret: %v", err)
		}
		// A single named cluster; an unknown one.
		one, err := sa.Clusters(ctx, "etcd-c03")
		if err != nil || len(one) != 1 || one[0].Endpoints[0] != clusters[3].etcd.Endpoints()[0] {
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
		other, err := kube.New(kube.Config{Rest: k.RestConfig(saToken(t, admin, otherNS, "etcd-recovery")), Namespace: otherNS})
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
		_, err = cs.CoreV1().Secrets(ns).Get(ctx, "etcd-c01-server-tls", metav1.GetOptions{})
		forbidden("get a server-tls secret", err)
		err = dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Delete(ctx, "etcd-c01", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		forbidden("delete an etcdcluster with the backup Role", err)
		_, err = dyn.Resource(kube.EtcdRestoreGVR).Namespace(ns).Create(ctx, restoreObj("etcd-c01"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
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
		tk := saToken(t, admin, ns, "etcd-recovery-toolkit")
		tdyn := k.Dynamic(t, tk)
		if _, err := tdyn.Resource(kube.EtcdRestoreGVR).Namespace(ns).Create(ctx, restoreObj("etcd-c01"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("toolkit: create etcdrestore: %v", err)
		}
		if err := tdyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Delete(ctx, "etcd-c01", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("toolkit: delete etcdcluster (dry run): %v", err)
		}
	})

	t.Run("BackupAllOneDown", func(t *testing.T) {
		down := clusters[7]
		down.etcd.Members[0].Kill()
		tool := testfix.Tool(t)
		kc := k.Kubeconfig(t, token, ns)
		cmd := exec.CommandContext(ctx, tool, "backup", "--all", "--prune", "--kind", "scheduled", "--parallel", "4",
			"--kubeconfig", kc, "--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix,
			"--dial-timeout", "2s", "--probe-timeout", "2s", "-o", "json")
		// No COS credentials in the environment: they come from the secret.
		cmd.Env = toolEnv()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		elapsed := time.Since(start)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("exit: %v, want 1\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
		if !strings.Contains(stderr.String(), "backup failed for 1 etcdcluster(s) in "+ns+": "+down.name) {
			t.Errorf("stderr does not name the failed cluster:\n%s", lastLines(stderr.String(), 5))
		}
		var rep kube.BackupAllReport
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("json: %v\n%s", err, stdout.String())
		}
		if len(rep.Clusters) != n || len(rep.Failed) != 1 || rep.Failed[0] != down.name {
			t.Fatalf("report: %d clusters, failed %v", len(rep.Clusters), rep.Failed)
		}
		st := testfix.Store(t, m, bucket)
		layout := backup.Layout{Prefix: prefix}
		for i, r := range rep.Clusters {
			fc := clusters[i]
			if fc.name == down.name {
				if r.Result != kube.ResultFailed || !strings.Contains(r.Error, down.name) {
					t.Errorf("down cluster: %+v", r)
				}
				continue
			}
			if r.Result != kube.ResultOK || r.Revision == 0 || r.Size == 0 || r.Prune == nil {
				t.Errorf("%s: %+v", fc.name, r)
				continue
			}
			list, err := backup.ListBackups(ctx, st, layout, fc.name)
			if err != nil || len(list) != 1 || list[0].Manifest == nil || list[0].Manifest.Kind != backup.KindScheduled {
				t.Errorf("%s: backups in COS: %+v %v", fc.name, list, err)
			}
		}
		t.Logf("backup --all of %d clusters (1 down) at --parallel 4: %v", n, elapsed.Round(time.Millisecond))

		// Events on the EtcdClusters, as kubectl describe shows them.
		kadmin, err := kube.New(kube.Config{Rest: k.RestConfig(""), Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		for _, fc := range clusters {
			evs, err := kadmin.Events(ctx, kube.Cluster{Namespace: ns, Name: fc.name})
			if err != nil {
				t.Fatal(err)
			}
			wantReason, wantType := kube.ReasonBackupSucceeded, corev1.EventTypeNormal
			if fc.name == down.name {
				wantReason, wantType = kube.ReasonBackupFailed, corev1.EventTypeWarning
			}
			if len(evs) != 1 || evs[0].Reason != wantReason || evs[0].Type != wantType || evs[0].InvolvedObject.UID != fc.uid ||
				evs[0].Source.Component != kube.EventComponent {
				t.Errorf("%s: events %+v", fc.name, evs)
				continue
			}
			if fc.name == down.name {
				t.Logf("event on %s: %s %s: %s", fc.name, evs[0].Type, evs[0].Reason, evs[0].Message)
			}
		}

		// In-process, the package function: the survivors again, named.
		rep2, err := kube.BackupAll(ctx, kube.BackupAllOptions{
			Kube: sa, Names: []string{"etcd-c00", "etcd-c01"}, Parallel: 2,
			Template:    backup.Options{Kind: backup.KindManual, Store: st, Layout: layout, ProbeTimeout: 2 * time.Second},
			DialTimeout: 2 * time.Second,
		})
		if err != nil || len(rep2.Clusters) != 2 || rep2.Clusters[0].Result != kube.ResultOK {
			t.Fatalf("BackupAll named: %+v %v", rep2, err)
		}
		tab := rep2.Table()
		if strings.Join(tab.Header, " ") != "CLUSTER RESULT BACKUP REVISION SIZE DURATION PRUNED ERROR" || len(tab.Rows) != 2 ||
			tab.Rows[0][0] != "etcd-c00" || tab.Rows[0][1] != kube.ResultOK || tab.Rows[0][6] != "-" {
			t.Fatalf("summary table: %v %v", tab.Header, tab.Rows)
		}
	})

}

func restoreObj(cluster string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kube.APIVersion, "kind": "EtcdRestore",
		"metadata": map[string]any{"name": cluster},
		"spec": map[string]any{"etcdCluster": map[string]any{"name": cluster}, "backupStorageType": "S3",
			"s3": map[string]any{"path": "bucket/" + cluster + "/snapshot.db", "awsSecret": "cos-credentials", "endpoint": "https://s3.example", "forcePathStyle": true}},
	}}
}

// toolEnv is the environment for the CLI without COS credentials, etcdctl
// settings, a kubeconfig or a pod namespace: everything comes from flags
// and the API.
func toolEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COS_") && !strings.HasPrefix(kv, "ETCDCTL_") && !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "POD_NAMESPACE=") {
			env = append(env, kv)
		}
	}
	return env
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
