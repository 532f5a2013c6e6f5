// Package kubetest holds the Kubernetes test fixtures several packages'
// tests share: reading deploy/'s manifests, applying them to a real
// kube-apiserver (testenv.StartKubeAPIServer), service-account tokens, and
// EtcdClusters backed by real etcd members, described to the API the way
// etcd-operator describes them. Only _test files import it.
//
// It is its own package (not part of testenv) because it names
// kube's constants, and packages kube imports have
// in-package tests that import testenv.
package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
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
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"github.com/armada/etcd-recovery/internal/escrow"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/kube"
)

// DeployPath is a path under the repository's deploy/ directory.
func DeployPath(tb testing.TB, elem ...string) string {
	tb.Helper()
	return filepath.Join(append([]string{testenv.RepoRoot(tb), "deploy"}, elem...)...)
}

// DecodeManifests reads every object of a YAML file.
func DecodeManifests(tb testing.TB, path string) []*unstructured.Unstructured {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("kubetest: %v", err)
	}
	out, err := DecodeManifestBytes(b)
	if err != nil {
		tb.Fatalf("kubetest: %s: %v", path, err)
	}
	return out
}

// DecodeManifestBytes decodes every object of a YAML stream.
func DecodeManifestBytes(b []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out, nil
}

// AppliedFiles are the plain manifests of deploy/ that the chart renders
// into each namespace (and 40-alerts.yaml, once): deploy/NN-*.yaml,
// sorted. Not the chart's own files (Chart.yaml, values.yaml) nor its
// templates/.
func AppliedFiles(tb testing.TB) []string {
	tb.Helper()
	files, _ := filepath.Glob(DeployPath(tb, "[0-9][0-9]-*.yaml"))
	sort.Strings(files)
	return files
}

// DeployFiles is every plain manifest under deploy/ that the chart reads:
// AppliedFiles, the per-cluster pieces (deploy/per-cluster/) and the
// ServiceMonitors (deploy/monitoring/). Not templates/ (Go templates, not
// YAML) nor testdata/.
func DeployFiles(tb testing.TB) []string {
	tb.Helper()
	files := AppliedFiles(tb)
	for _, dir := range []string{"per-cluster", "monitoring"} {
		more, _ := filepath.Glob(DeployPath(tb, dir, "*.yaml"))
		files = append(files, more...)
	}
	sort.Strings(files)
	return files
}

// Applier applies objects with server-side apply through the dynamic client.
type Applier struct {
	Dyn    dynamic.Interface
	Mapper meta.RESTMapper
}

// NewApplier is an Applier acting as the API server's admin.
func NewApplier(tb testing.TB, k *testenv.KubeAPIServer) *Applier {
	tb.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(k.RestConfig(""))
	if err != nil {
		tb.Fatal(err)
	}
	gr, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		tb.Fatal(err)
	}
	return &Applier{Dyn: k.Dynamic(tb, ""), Mapper: restmapper.NewDiscoveryRESTMapper(gr)}
}

// Apply server-side applies obj in namespace (ignored for cluster-scoped
// kinds); dryRun asks the server to validate without persisting.
func (a *Applier) Apply(ctx context.Context, obj *unstructured.Unstructured, namespace string, dryRun bool) error {
	gvk := obj.GroupVersionKind()
	m, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s: %w", gvk, err)
	}
	var ri dynamic.ResourceInterface = a.Dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = a.Dyn.Resource(m.Resource).Namespace(namespace)
	}
	opts := metav1.ApplyOptions{FieldManager: "etcd-recovery-test", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := ri.Apply(ctx, obj.GetName(), obj, opts); err != nil {
		return fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	return nil
}

// ApplyFile applies every object of a manifest file in namespace.
func (a *Applier) ApplyFile(tb testing.TB, path, namespace string) {
	tb.Helper()
	for _, o := range DecodeManifests(tb, path) {
		if err := a.Apply(context.Background(), o, namespace, false); err != nil {
			tb.Fatalf("kubetest: %s: %v", filepath.Base(path), err)
		}
	}
}

// InstallCRDs creates the third-party CRDs the manifests need, from the
// test fixtures in deploy/testdata/crds/ (etcd-operator's EtcdCluster,
// EtcdBackup and EtcdRestore, the Prometheus Operator's PrometheusRule and
// ServiceMonitor), for real, and waits
// until each is served and in discovery: a CRD answers a list before the
// discovery controller publishes it, and an Applier's RESTMapper reads
// discovery once.
func InstallCRDs(tb testing.TB, k *testenv.KubeAPIServer) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	dyn := k.Dynamic(tb, "")
	dc, err := discovery.NewDiscoveryClientForConfig(k.RestConfig(""))
	if err != nil {
		tb.Fatal(err)
	}
	// They belong to etcd-operator and the Prometheus Operator, which install
	// them on a carrier's cluster; the chart never applies them.
	var crds []*unstructured.Unstructured
	for _, f := range CRDFixtures(tb) {
		crds = append(crds, DecodeManifests(tb, f)...)
	}
	for _, o := range crds {
		if _, err := dyn.Resource(crdGVR).Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "etcd-recovery-test", Force: true}); err != nil {
			tb.Fatalf("CRD %s: %v", o.GetName(), err)
		}
	}
	inDiscovery := func(gvr schema.GroupVersionResource) error {
		rl, err := dc.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
		if err != nil {
			return err
		}
		for _, r := range rl.APIResources {
			if r.Name == gvr.Resource {
				return nil
			}
		}
		return fmt.Errorf("%s not in discovery yet", gvr.Resource)
	}
	for _, gvr := range []schema.GroupVersionResource{kube.EtcdClusterGVR, kube.EtcdBackupGVR, kube.EtcdRestoreGVR,
		{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"},
		{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}} {
		deadline := time.Now().Add(time.Minute)
		for {
			_, err := dyn.Resource(gvr).Namespace("default").List(ctx, metav1.ListOptions{})
			if err == nil {
				err = inDiscovery(gvr)
			}
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("%s not served: %v", gvr, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// CRDFixtures are the files of deploy/testdata/crds/: the third-party CRDs
// (etcd-operator's, the Prometheus Operator's) that the tests install into
// their kube-apiserver before applying what the chart renders.
func CRDFixtures(tb testing.TB) []string {
	tb.Helper()
	files, _ := filepath.Glob(DeployPath(tb, "testdata", "crds", "*.yaml"))
	if len(files) == 0 {
		tb.Fatal("kubetest: no CRD fixture in deploy/testdata/crds/")
	}
	sort.Strings(files)
	return files
}

// CreateNamespaces creates namespaces (existing ones are fine).
func CreateNamespaces(tb testing.TB, cs kubernetes.Interface, names ...string) {
	tb.Helper()
	for _, n := range names {
		if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			tb.Fatal(err)
		}
	}
}

// SAToken is a bound token (TokenRequest, 1 h) of a service account.
func SAToken(tb testing.TB, cs kubernetes.Interface, namespace, sa string) string {
	tb.Helper()
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("token for %s/%s: %v", namespace, sa, err)
	}
	return tr.Status.Token
}

// PerClusterAccess applies deploy/per-cluster/client-tls-access.yaml for
// a cluster in namespace (the template's "etcd-example" replaced).
func PerClusterAccess(tb testing.TB, a *Applier, namespace, cluster string) {
	tb.Helper()
	b, err := os.ReadFile(DeployPath(tb, "per-cluster", "client-tls-access.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	objs, err := DecodeManifestBytes(bytes.ReplaceAll(b, []byte("etcd-example"), []byte(cluster)))
	if err != nil {
		tb.Fatal(err)
	}
	for _, o := range objs {
		if err := a.Apply(context.Background(), o, namespace, false); err != nil {
			tb.Fatal(err)
		}
	}
}

// RebuildAccessPath is the break-glass grant of a rebuild, a template
// for one cluster (its "etcd-example" set to the cluster's name).
const RebuildAccessPath = "break-glass/rebuild-access.yaml"

// RebuildAccessObjects are the break-glass grant rendered for cluster, as
// the runbook renders it (every "etcd-example" replaced).
func RebuildAccessObjects(tb testing.TB, cluster string) []*unstructured.Unstructured {
	tb.Helper()
	b, err := os.ReadFile(DeployPath(tb, RebuildAccessPath))
	if err != nil {
		tb.Fatal(err)
	}
	objs, err := DecodeManifestBytes(bytes.ReplaceAll(b, []byte("etcd-example"), []byte(cluster)))
	if err != nil {
		tb.Fatal(err)
	}
	return objs
}

// RebuildAccess applies the break-glass grant of a rebuild of cluster in
// namespace (RebuildAccessObjects).
func RebuildAccess(tb testing.TB, a *Applier, namespace, cluster string) {
	tb.Helper()
	for _, o := range RebuildAccessObjects(tb, cluster) {
		if err := a.Apply(context.Background(), o, namespace, false); err != nil {
			tb.Fatal(err)
		}
	}
}

// Cluster is an EtcdCluster in the API backed by a real etcd.
type Cluster struct {
	Name string
	Etcd *testenv.EtcdCluster
	UID  types.UID
}

// AddEtcdCluster starts a real etcd (opts; TLS is forced on and IP must be
// set) and describes it to Kubernetes the way etcd-operator and the
// carrier's runbook do: the EtcdCluster, its three TLS secrets (the
// operator's client TLS <name>-client-tls, the members' <name>-server-tls
// and <name>-peer-tls, with etcd-operator's keys, from the cluster's PKI:
// the server and peer certificate is the one the members serve), its
// three Services (<name> headless, <name>-client ClusterIP,
// <name>-client-service-np NodePort, the nodePort allocated by the API
// server), and one member pod per member. Endpoints objects can't point at 127.0.0.0/8 (the API server
// rejects loopback addresses there), so discovery uses the member pods'
// status IPs; no kubelet runs, the pod's status is written through the
// status subresource, and its "client" container port is the member's
// real port.
func AddEtcdCluster(tb testing.TB, cs kubernetes.Interface, dyn dynamic.Interface, namespace, name string, opts testenv.EtcdOptions) Cluster {
	tb.Helper()
	opts.TLS = true
	if opts.IP == "" {
		tb.Fatalf("kubetest: AddEtcdCluster %s: opts.IP is required (each cluster has its own loopback IP)", name)
	}
	if opts.Version == "" {
		opts.Version = testenv.V35
	}
	if opts.Members == 0 {
		opts.Members = 1
	}
	ctx := context.Background()
	c := testenv.StartEtcd(tb, opts)
	secret := name + "-client-tls"
	for sname, files := range map[string]map[string]string{
		secret:               {kube.ClientCertKey: c.PKI.ClientCertFile, kube.ClientKeyKey: c.PKI.ClientKeyFile, kube.ClientCAKey: c.PKI.CAFile},
		name + "-server-tls": {escrow.ServerCertKey: c.PKI.ServerCertFile, escrow.ServerKeyKey: c.PKI.ServerKeyFile, escrow.ServerCAKey: c.PKI.CAFile},
		name + "-peer-tls":   {escrow.PeerCertKey: c.PKI.ServerCertFile, escrow.PeerKeyKey: c.PKI.ServerKeyFile, escrow.PeerCAKey: c.PKI.CAFile},
	} {
		data := map[string][]byte{}
		for key, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				tb.Fatal(err)
			}
			data[key] = b
		}
		if _, err := cs.CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sname}, Type: corev1.SecretTypeOpaque, Data: data}, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	ClusterServices(tb, cs, namespace, name)
	ec := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kube.APIVersion, "kind": kube.KindEtcdCluster,
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{"size": int64(opts.Members), "version": "3.5.35",
			"TLS": map[string]any{"static": map[string]any{
				"member":         map[string]any{"peerSecret": name + "-peer-tls", "serverSecret": name + "-server-tls"},
				"operatorSecret": secret}}},
	}}
	got, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(namespace).Create(ctx, ec, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	for i, ep := range c.Endpoints() {
		MemberPod(tb, ctx, cs, namespace, name, fmt.Sprintf("%s-%04d", name, i), ep)
	}
	return Cluster{Name: name, Etcd: c, UID: got.GetUID()}
}

// ClusterServices creates the three Services etcd-operator and the
// carrier create for cluster name: <name> (headless, client and peer
// ports), <name>-client (ClusterIP, client port) and
// <name>-client-service-np (NodePort: the API server allocates the
// nodePort), each selecting the cluster's member pods.
func ClusterServices(tb testing.TB, cs kubernetes.Interface, namespace, name string) {
	tb.Helper()
	sel := map[string]string{kube.LabelApp: "etcd", kube.LabelCluster: name}
	client := corev1.ServicePort{Name: "client", Port: kube.ClientPort, TargetPort: intstr.FromInt32(kube.ClientPort), Protocol: corev1.ProtocolTCP}
	peer := corev1.ServicePort{Name: "peer", Port: 2380, TargetPort: intstr.FromInt32(2380), Protocol: corev1.ProtocolTCP}
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: sel}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: sel,
			Ports: []corev1.ServicePort{client, peer}, PublishNotReadyAddresses: true}},
		{ObjectMeta: metav1.ObjectMeta{Name: name + "-client", Labels: sel}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: sel,
			Ports: []corev1.ServicePort{client}}},
		{ObjectMeta: metav1.ObjectMeta{Name: name + "-client-service-np", Labels: sel}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: sel,
			Ports: []corev1.ServicePort{client}}},
	} {
		if _, err := cs.CoreV1().Services(namespace).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
			tb.Fatalf("kubetest: service %s/%s: %v", namespace, svc.Name, err)
		}
	}
}

// COSSecret is a namespace's cos-credentials secret for m in the
// carrier's format (etcd-operator's credentials/config keys, AWS
// shared-file format: AWSSecretData), as armada-secure creates it.
func COSSecret(m *testenv.MinIO) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: kube.COSSecretName}, Data: AWSSecretData(m.AccessKey, m.SecretKey, m.Region)}
}

// CreateCOSSecret creates the namespace's cos-credentials secret for m
// (COSSecret) and returns it.
func CreateCOSSecret(tb testing.TB, cs kubernetes.Interface, namespace string, m *testenv.MinIO) *corev1.Secret {
	tb.Helper()
	s := COSSecret(m)
	if _, err := cs.CoreV1().Secrets(namespace).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("kubetest: secret %s/%s: %v", namespace, kube.COSSecretName, err)
	}
	return s
}

// AddEtcdClusters adds n EtcdClusters etcd-c00, etcd-c01, … to namespace
// (AddEtcdCluster: each a real single-member etcd with TLS, the i-th on
// 127.0.3.(10+i)), grants each deploy/per-cluster's client-TLS access
// (PerClusterAccess) and writes 50+i keys of 256 bytes under /registry/k.
func AddEtcdClusters(tb testing.TB, cs kubernetes.Interface, dyn dynamic.Interface, a *Applier, namespace string, n int) []Cluster {
	tb.Helper()
	var clusters []Cluster
	start := time.Now()
	for i := range n {
		name := fmt.Sprintf("etcd-c%02d", i)
		fc := AddEtcdCluster(tb, cs, dyn, namespace, name, testenv.EtcdOptions{IP: fmt.Sprintf("127.0.3.%d", 10+i), Members: 1})
		PerClusterAccess(tb, a, namespace, name)
		testenv.PutKeys(tb, fc.Etcd.Client(tb), "/registry/k", 50+i, 256)
		clusters = append(clusters, fc)
	}
	tb.Logf("%d etcd clusters with TLS started in %v", n, time.Since(start).Round(time.Millisecond))
	return clusters
}

// AddSAFleet sets up a namespace as backup --all finds it: the COS secret
// for m in namespace and in each of others, an unrelated secret in
// namespace, n EtcdClusters there (AddEtcdClusters); it returns them with a
// token of the namespace's etcd-recovery service account and a client
// with it.
func AddSAFleet(tb testing.TB, k *testenv.KubeAPIServer, a *Applier, admin kubernetes.Interface, m *testenv.MinIO, namespace string, others []string, n int) (clusters []Cluster, token string, sa *kube.Client) {
	tb.Helper()
	for _, ns := range append([]string{namespace}, others...) {
		CreateCOSSecret(tb, admin, ns, m)
	}
	if _, err := admin.CoreV1().Secrets(namespace).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}, StringData: map[string]string{"x": "y"}}, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	clusters = AddEtcdClusters(tb, admin, k.Dynamic(tb, ""), a, namespace, n)
	token = SAToken(tb, admin, namespace, "etcd-recovery")
	sa, err := kube.New(kube.Config{Rest: k.RestConfig(token), Namespace: namespace})
	if err != nil {
		tb.Fatal(err)
	}
	return clusters, token, sa
}

// EtcdRestoreObj is an EtcdRestore of cluster from an S3 path (for
// dry-run creates: RBAC checks).
func EtcdRestoreObj(cluster string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kube.APIVersion, "kind": "EtcdRestore",
		"metadata": map[string]any{"name": cluster},
		"spec": map[string]any{"etcdCluster": map[string]any{"name": cluster}, "backupStorageType": "S3",
			"s3": map[string]any{"path": "bucket/" + cluster + "/snapshot.db", "awsSecret": "cos-credentials", "endpoint": "https://s3.example", "forcePathStyle": true}},
	}}
}

// MemberPod creates a running pod of the EtcdCluster cluster named name
// whose IP and "client" container port are those of the member's
// clientURL: no kubelet runs, the status is written through the status
// subresource (AddEtcdCluster's pods; a test replaces pods with it).
func MemberPod(tb testing.TB, ctx context.Context, cs kubernetes.Interface, namespace, cluster, name, clientURL string) {
	tb.Helper()
	u, err := url.Parse(clientURL)
	if err != nil {
		tb.Fatalf("kubetest: endpoint %s: %v", clientURL, err)
	}
	var port int32
	if _, err := fmt.Sscan(u.Port(), &port); err != nil {
		tb.Fatalf("kubetest: endpoint %s: %v", clientURL, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kube.LabelApp: "etcd", kube.LabelCluster: cluster}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "etcd", Image: "quay.io/coreos/etcd:v3.5.35",
			Ports: []corev1.ContainerPort{{Name: "client", ContainerPort: port}, {Name: "peer", ContainerPort: 2380}}}}},
	}
	created, err := cs.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: u.Hostname(), PodIPs: []corev1.PodIP{{IP: u.Hostname()}},
		Conditions: ReadyConditions(true)}
	if _, err := cs.CoreV1().Pods(namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		tb.Fatalf("pod status with IP %s: %v", u.Hostname(), err)
	}
}

// ReadyConditions are a member pod's Ready and ContainersReady
// conditions, as the kubelet writes them.
func ReadyConditions(ready bool) []corev1.PodCondition {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	now := metav1.Now()
	return []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: st, LastTransitionTime: now}}
}

// SetMemberReady marks the member pod of cluster whose IP and client
// port are those of clientURL Ready or not, through the status
// subresource, as the kubelet does when the member's readiness probe
// fails or passes again.
func SetMemberReady(tb testing.TB, ctx context.Context, cs kubernetes.Interface, namespace, cluster, clientURL string, ready bool) {
	tb.Helper()
	u, err := url.Parse(clientURL)
	if err != nil {
		tb.Fatalf("kubetest: endpoint %s: %v", clientURL, err)
	}
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelCluster + "=" + cluster})
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, ct := range p.Spec.Containers {
			for _, cp := range ct.Ports {
				if cp.Name == "client" && p.Status.PodIP == u.Hostname() && fmt.Sprint(cp.ContainerPort) == u.Port() {
					p.Status.Conditions = ReadyConditions(ready)
					if _, err := cs.CoreV1().Pods(namespace).UpdateStatus(ctx, &p, metav1.UpdateOptions{}); err != nil {
						tb.Fatalf("kubetest: pod %s/%s ready=%t: %v", namespace, p.Name, ready, err)
					}
					return
				}
			}
		}
	}
	tb.Fatalf("kubetest: no member pod of %s/%s at %s", namespace, cluster, clientURL)
}

// MemberDown kills a member and marks its pod not Ready, as the kubelet
// would once the member's readiness probe fails: the cluster's members
// are down as far as Kubernetes can tell.
func MemberDown(tb testing.TB, ctx context.Context, cs kubernetes.Interface, namespace, cluster string, m *testenv.EtcdMember) {
	tb.Helper()
	m.Kill()
	SetMemberReady(tb, ctx, cs, namespace, cluster, m.ClientURL, false)
}

// RBACWorld is a real kube-apiserver with the CRDs installed, namespaces
// created and deploy/10-rbac.yaml applied in each: the start of the tests
// of the tool's service account.
type RBACWorld struct {
	K     *testenv.KubeAPIServer
	Admin *kubernetes.Clientset
	Dyn   *dynamic.DynamicClient
	A     *Applier
}

// StartRBACWorld starts a kube-apiserver, installs the CRDs, creates
// namespaces and applies deploy/10-rbac.yaml in each of them.
func StartRBACWorld(tb testing.TB, namespaces ...string) *RBACWorld {
	tb.Helper()
	k := testenv.StartKubeAPIServer(tb)
	w := &RBACWorld{K: k, Admin: k.Clientset(tb, ""), Dyn: k.Dynamic(tb, "")}
	InstallCRDs(tb, k)
	CreateNamespaces(tb, w.Admin, namespaces...)
	w.A = NewApplier(tb, k)
	for _, ns := range namespaces {
		w.A.ApplyFile(tb, DeployPath(tb, "10-rbac.yaml"), ns)
	}
	return w
}
