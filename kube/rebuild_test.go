package kube_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// rebuildNS holds the objects of the kube.Rebuild test.
const rebuildNS = "kubx-etcd-12"

// escrowFixture is an escrow as the capture writes it (catalog's shape:
// stripped of server-set fields): three secrets, the three Services (the
// headless one with clusterIP None, the NodePort one with its nodePort and
// clusterIP), the EtcdCluster with the versions annotation. Decoded from
// its canonical bytes, as escrow.Open returns it (numbers as json.Number).
func escrowFixture(t *testing.T, name string, nodePort int64, clusterIP string) *catalog.EscrowList {
	t.Helper()
	secret := func(suffix string, data map[string]any) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
			"metadata": map[string]any{"name": name + suffix, "labels": map[string]any{"app": "etcd", "etcd_cluster": name}}, "data": data}
	}
	sel := map[string]any{"app": "etcd", "etcd_cluster": name}
	l := &catalog.EscrowList{APIVersion: "v1", Kind: "List", Metadata: map[string]any{}, Items: []map[string]any{
		{"apiVersion": kube.APIVersion, "kind": kube.KindEtcdCluster,
			"metadata": map[string]any{"name": name, "annotations": map[string]any{catalog.AnnotationEscrowVersions: `{"etcdClusterAPI":"etcd.database.coreos.com/v1beta2"}`}},
			"spec": map[string]any{"size": 3, "version": "3.5.35", "TLS": map[string]any{"static": map[string]any{
				"member": map[string]any{"peerSecret": name + "-peer-tls", "serverSecret": name + "-server-tls"}, "operatorSecret": name + "-client-tls"}}}},
		secret("-client-tls", map[string]any{"etcd-client.crt": "Y2xpZW50", "etcd-client.key": "a2V5", "etcd-client-ca.crt": "Y2E="}),
		secret("-peer-tls", map[string]any{"peer.crt": "cGVlcg==", "peer.key": "a2V5", "peer-ca.crt": "Y2E="}),
		secret("-server-tls", map[string]any{"server.crt": "c2VydmVy", "server.key": "a2V5", "server-ca.crt": "Y2E="}),
		{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": name},
			"spec": map[string]any{"clusterIP": "None", "selector": sel, "publishNotReadyAddresses": true,
				"ports": []any{map[string]any{"name": "client", "port": 2379, "targetPort": 2379, "protocol": "TCP"},
					map[string]any{"name": "peer", "port": 2380, "targetPort": 2380, "protocol": "TCP"}}}},
		{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": name + "-client"},
			"spec": map[string]any{"type": "ClusterIP", "selector": sel,
				"ports": []any{map[string]any{"name": "client", "port": 2379, "targetPort": 2379, "protocol": "TCP"}}}},
		{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": name + "-client-service-np"},
			"spec": map[string]any{"type": "NodePort", "clusterIP": clusterIP, "selector": sel,
				"ports": []any{map[string]any{"name": "client", "port": 2379, "targetPort": 2379, "nodePort": nodePort, "protocol": "TCP"}}}},
	}}
	b, err := catalog.MarshalEscrow(l)
	if err != nil {
		t.Fatal(err)
	}
	out, err := catalog.UnmarshalEscrow(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func actions(rep *kube.RebuildReport) map[string]string {
	out := map[string]string{}
	for _, o := range rep.Objects {
		out[o.Kind+"/"+o.Name] = o.Action
	}
	return out
}

// testRebuild: kube.Rebuild against TestKube's real kube-apiserver, as
// the toolkit's service account: a dry run creates nothing and lists every
// object; the rebuild creates the secrets, the Services (same nodePort and
// clusterIP, headless None) and the EtcdCluster paused; again, everything
// is "exists (same)"; a secret changed since refuses the rebuild naming
// its field, before anything is created; Replace replaces it.
func testRebuild(t *testing.T, k *testenv.KubeAPIServer, admin kubernetes.Interface) {
	ctx := testfix.Context(t, 2*time.Minute)
	const name = "etcd-rb1"
	l := escrowFixture(t, name, 31801, "10.96.201.7")
	toolkit := kubetest.SAToken(t, admin, rebuildNS, "etcd-recovery-toolkit")
	kc, err := kube.New(kube.Config{Rest: k.RestConfig(toolkit), Namespace: rebuildNS})
	if err != nil {
		t.Fatal(err)
	}
	all := []string{"Secret/" + name + "-client-tls", "Secret/" + name + "-peer-tls", "Secret/" + name + "-server-tls",
		"Service/" + name, "Service/" + name + "-client", "Service/" + name + "-client-service-np", "EtcdCluster/" + name}

	// The break-glass grant is this cluster's: the toolkit may read its
	// server-tls secret, never another cluster's (nor the age identity
	// through this grant) while the grant is applied.
	for secret, want := range map[string]bool{name + "-server-tls": true, "etcd-other-server-tls": false, "etcd-other-peer-tls": false} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + rebuildNS + ":etcd-recovery-toolkit",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: rebuildNS, Verb: "get", Resource: "secrets", Name: secret}}}
		got, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != want {
			t.Errorf("the toolkit may get secret %s: %v, want %v (break-glass grant of %s)", secret, got.Status.Allowed, want, name)
		}
	}

	// An EtcdRestore of the cluster in flight (not the tool's, no status):
	// refused before anything is created, naming it.
	er := &unstructured.Unstructured{Object: map[string]any{"apiVersion": kube.APIVersion, "kind": "EtcdRestore",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"etcdCluster": map[string]any{"name": name}, "backupStorageType": "S3"}}}
	erc := k.Dynamic(t, "").Resource(kube.EtcdRestoreGVR).Namespace(rebuildNS)
	if _, err := erc.Create(ctx, er, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		_, err := kube.Rebuild(ctx, kube.RebuildOptions{Kube: kc, Cluster: name, List: l, DryRun: dry})
		if err == nil || !strings.Contains(err.Error(), "an EtcdRestore "+name+" already exists") || !strings.Contains(err.Error(), "in flight") {
			t.Fatalf("an EtcdRestore in flight (dry run %v): %v, want a refusal naming it", dry, err)
		}
	}
	if _, err := admin.CoreV1().Secrets(rebuildNS).Get(ctx, name+"-client-tls", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a rebuild refused for an EtcdRestore in flight created a secret: %v", err)
	}
	if err := erc.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Dry run: every object "create", nothing created.
	rep, err := kube.Rebuild(ctx, kube.RebuildOptions{Kube: kc, Cluster: name, List: l, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range rep.Objects {
		names = append(names, o.Kind+"/"+o.Name)
		if o.Action != kube.RebuildCreate || o.Done {
			t.Errorf("dry run: %s: %s (done %v), want %s", o.Kind, o.Name, o.Done, kube.RebuildCreate)
		}
	}
	if !slices.Equal(names, all) {
		t.Fatalf("dry run lists %v, want %v (secrets, Services, EtcdCluster)", names, all)
	}
	if _, err := admin.CoreV1().Secrets(rebuildNS).Get(ctx, name+"-server-tls", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the dry run created a secret: %v", err)
	}
	if s := rep.Table(); !strings.Contains(s.Title, "dry run") || s.Rows[0][2] != "would create" {
		t.Errorf("dry-run table: %q %v", s.Title, s.Rows)
	}

	// The rebuild.
	rep, err = kube.Rebuild(ctx, kube.RebuildOptions{Kube: kc, Cluster: name, List: l})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range rep.Objects {
		if o.Action != kube.RebuildCreate || !o.Done {
			t.Errorf("%s %s: %s (done %v)", o.Kind, o.Name, o.Action, o.Done)
		}
	}
	np, err := admin.CoreV1().Services(rebuildNS).Get(ctx, name+"-client-service-np", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if np.Spec.Type != corev1.ServiceTypeNodePort || np.Spec.Ports[0].NodePort != 31801 || np.Spec.ClusterIP != "10.96.201.7" {
		t.Errorf("nodeport Service: type %s nodePort %d clusterIP %s, want NodePort 31801 10.96.201.7", np.Spec.Type, np.Spec.Ports[0].NodePort, np.Spec.ClusterIP)
	}
	if hl, err := admin.CoreV1().Services(rebuildNS).Get(ctx, name, metav1.GetOptions{}); err != nil || hl.Spec.ClusterIP != "None" {
		t.Errorf("headless Service: %v %v", hl, err)
	}
	if s, err := admin.CoreV1().Secrets(rebuildNS).Get(ctx, name+"-server-tls", metav1.GetOptions{}); err != nil || string(s.Data["server.crt"]) != "server" {
		t.Errorf("server secret: %v %v", s, err)
	}
	ec, err := k.Dynamic(t, "").Resource(kube.EtcdClusterGVR).Namespace(rebuildNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if paused, _, _ := unstructured.NestedBool(ec.Object, "spec", "paused"); !paused {
		t.Error("the rebuilt EtcdCluster is not paused")
	}
	// Before any EtcdRestore exists, etcd-operator's cluster controller
	// must see it as a running cluster, else it seeds an empty member.
	if _, err := k.Dynamic(t, "").Resource(kube.EtcdRestoreGVR).Namespace(rebuildNS).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("an EtcdRestore exists after Rebuild: %v", err)
	}
	if seeds, why := etcdOperatorSetup(ec); seeds {
		t.Errorf("etcd-operator would start an empty cluster for the rebuilt EtcdCluster: %s", why)
	}
	if size, _, _ := unstructured.NestedInt64(ec.Object, "spec", "size"); size != 3 {
		t.Errorf("spec.size %d, want 3", size)
	}

	// Again: nothing to do.
	rep, err = kube.Rebuild(ctx, kube.RebuildOptions{Kube: kc, Cluster: name, List: l})
	if err != nil {
		t.Fatal(err)
	}
	for o, a := range actions(rep) {
		if a != kube.RebuildSame {
			t.Errorf("second rebuild: %s: %s, want %s", o, a, kube.RebuildSame)
		}
	}

	// A secret that differs refuses the rebuild, naming the field; nothing
	// else is created (the headless Service deleted first must stay gone).
	s, err := admin.CoreV1().Secrets(rebuildNS).Get(ctx, name+"-peer-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data["peer.crt"] = []byte("another")
	if _, err := admin.CoreV1().Secrets(rebuildNS).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().Services(rebuildNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rep, err = kube.Rebuild(ctx, kube.RebuildOptions{Kube: kc, Cluster: name, List: l})
	var rerr *kube.RebuildError
	if !errors.As(err, &rerr) || !errors.Is(err, kube.ErrRebuildDiffers) || !strings.Contains(err.Error(), "Secret "+name+"-peer-tls (data.peer.crt)") ||
		!strings.Contains(err.Error(), rebuildNS+"/"+name) {
		t.Fatalf("a differing secret: %v, want a RebuildError naming the cluster, Secret %s-peer-tls and data.peer.crt", err, name)
	}
	if a := actions(rep); a["Secret/"+name+"-peer-tls"] != kube.RebuildRefused || a["Service/"+name] != kube.RebuildCreate {
		t.Errorf("refused rebuild's report: %v", a)
	}
	if _, err := admin.CoreV1().Services(rebuildNS).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a refused rebuild created the headless Service: %v", err)
	}

	// Replace needs update, which the break-glass Role does not grant:
	// refused by the API server, and the refusal names the object.
	_, err = kube.Rebuild(ctx, kube.RebuildOptions{Kube: kc, Cluster: name, List: l, Replace: true})
	if err == nil || !strings.Contains(err.Error(), "replacing Secret "+name+"-peer-tls") || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("replace without update granted: %v", err)
	}
	// Granted by hand for that one secret (docs/kubernetes.md), the
	// secret is replaced and the Service created.
	grantUpdate(t, admin, rebuildNS, name+"-peer-tls")
	rep, err = kube.Rebuild(ctx, kube.RebuildOptions{Kube: kc, Cluster: name, List: l, Replace: true})
	if err != nil {
		t.Fatal(err)
	}
	if a := actions(rep); a["Secret/"+name+"-peer-tls"] != kube.RebuildReplaced || a["Service/"+name] != kube.RebuildCreate {
		t.Errorf("replace: %v", a)
	}
	if s, err := admin.CoreV1().Secrets(rebuildNS).Get(ctx, name+"-peer-tls", metav1.GetOptions{}); err != nil || string(s.Data["peer.crt"]) != "peer" {
		t.Errorf("replaced secret: %v %v", s, err)
	}

	// A nodePort held by a Service of another namespace: the dry run
	// names the clash (the API server's own dry run), and the real run
	// refuses before creating anything.
	const name2 = "etcd-rb2"
	kubetest.RebuildAccess(t, kubetest.NewApplier(t, k), rebuildNS, name2)
	if _, err := admin.CoreV1().Services(otherNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "holds-31802"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "x"},
			Ports: []corev1.ServicePort{{Port: 80, NodePort: 31802}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l2 := escrowFixture(t, name2, 31802, "")
	for _, dry := range []bool{true, false} {
		rep, err := kube.Rebuild(ctx, kube.RebuildOptions{Kube: kc, Cluster: name2, List: l2, DryRun: dry})
		if !errors.Is(err, kube.ErrRebuildRejected) || !strings.Contains(err.Error(), "creating Service "+name2+"-client-service-np") ||
			!strings.Contains(err.Error(), "31802") {
			t.Fatalf("a held nodePort (dry run %v): %v, want it named before anything is created", dry, err)
		}
		for _, o := range rep.Objects {
			if o.Done || (o.Name == name2+"-client-service-np") != (o.Rejected != "") {
				t.Errorf("held nodePort (dry run %v): %+v", dry, o)
			}
		}
		for _, s := range []string{name2 + "-client-tls", name2 + "-peer-tls", name2 + "-server-tls"} {
			if _, err := admin.CoreV1().Secrets(rebuildNS).Get(ctx, s, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("a rebuild refused for a held nodePort created secret %s: %v", s, err)
			}
		}
		if _, err := admin.CoreV1().Services(rebuildNS).Get(ctx, name2, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a rebuild refused for a held nodePort created the headless Service: %v", err)
		}
	}
}

// etcdOperatorSetup models etcd-operator's cluster controller on a new
// EtcdCluster (coreos/etcd-operator pkg/cluster/cluster.go, setup()): an
// empty phase creates the cluster (prepareSeedMember starts a seed
// member, before spec.paused is ever read); phase Running does not.
func etcdOperatorSetup(ec *unstructured.Unstructured) (seeds bool, why string) {
	phase, _, _ := unstructured.NestedString(ec.Object, "status", "phase")
	switch phase {
	case "":
		return true, "status.phase is empty: setup() calls create(), which starts a seed member whatever spec.paused says"
	case "Running":
		return false, ""
	default:
		return true, fmt.Sprintf("status.phase %q: setup() fails or recreates", phase)
	}
}

// grantUpdate grants the toolkit's account update on one secret, as an
// SRE does by hand before rebuild --replace.
func grantUpdate(t *testing.T, admin kubernetes.Interface, namespace, secret string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "rebuild-replace"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secret}, Verbs: []string{"update"}}}}
	if _, err := admin.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "rebuild-replace"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "rebuild-replace"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "etcd-recovery-toolkit", Namespace: namespace}}}
	if _, err := admin.RbacV1().RoleBindings(namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// RBAC is read from the API server's cache: wait until it applies.
	deadline := time.Now().Add(10 * time.Second)
	for {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + namespace + ":etcd-recovery-toolkit",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "update", Resource: "secrets", Name: secret}}}
		got, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err == nil && got.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("update on %s not granted after 10s: %v", secret, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
