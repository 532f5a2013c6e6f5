package kubetest

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/kube"
)

// WipeNamespace deletes everything of the namespace that the
// management cluster's loss takes: every secret (cos-credentials too),
// Service, pod, EtcdCluster, EtcdRestore, ConfigMap, service account,
// Role and RoleBinding. The Namespace object stays (no namespace
// controller runs to finish its deletion); it is as empty as a new one.
func WipeNamespace(t testing.TB, ctx context.Context, admin kubernetes.Interface, dyn dynamic.Interface, ns string) {
	t.Helper()
	for _, gvr := range []schema.GroupVersionResource{kube.EtcdClusterGVR, kube.EtcdRestoreGVR,
		{Version: "v1", Resource: "secrets"}, {Version: "v1", Resource: "services"}, {Version: "v1", Resource: "pods"},
		{Version: "v1", Resource: "configmaps"}, {Version: "v1", Resource: "serviceaccounts"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}} {
		l, err := dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing %s: %v", gvr.Resource, err)
		}
		zero := int64(0)
		for _, o := range l.Items {
			if err := dyn.Resource(gvr).Namespace(ns).Delete(ctx, o.GetName(), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				t.Fatalf("deleting %s %s: %v", gvr.Resource, o.GetName(), err)
			}
		}
	}
	if n := NamespaceObjects(t, ctx, admin, dyn, ns, ""); len(n) != 0 {
		t.Fatalf("after the wipe: %v", n)
	}
}

// NamespaceObjects are the secrets, Services and EtcdClusters of the
// namespace named cluster or cluster-*: what a rebuild of cluster creates.
func NamespaceObjects(t testing.TB, ctx context.Context, admin kubernetes.Interface, dyn dynamic.Interface, ns, cluster string) []string {
	t.Helper()
	var out []string
	ss, err := admin.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss.Items {
		if ofCluster(s.Name, cluster) {
			out = append(out, "Secret/"+s.Name)
		}
	}
	svcs, err := admin.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		if ofCluster(s.Name, cluster) {
			out = append(out, "Service/"+s.Name)
		}
	}
	ecs, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ecs.Items {
		if ofCluster(e.GetName(), cluster) {
			out = append(out, "EtcdCluster/"+e.GetName())
		}
	}
	return out
}

// ofCluster: name is cluster's or one of its objects' (every name when
// cluster is empty).
func ofCluster(name, cluster string) bool {
	return cluster == "" || name == cluster || strings.HasPrefix(name, cluster+"-")
}
