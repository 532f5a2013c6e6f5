package kube_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/escrow"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// escrowNS holds the clusters of the escrow capture test.
const escrowNS = "kubx-etcd-06"

// testCaptureEscrow: CaptureEscrow, as the backup jobs' account, reads a
// cluster's EtcdCluster, its three secrets (bytes as the API holds them)
// and Services (the nodePort the API server allocated), stripped of what
// the server sets; a missing Service or secret is named.
func testCaptureEscrow(t *testing.T, k *testenv.KubeAPIServer, a *kubetest.Applier, admin kubernetes.Interface) {
	ctx := testfix.Context(t, 2*time.Minute)
	dynAdmin := k.Dynamic(t, "")
	const name = "etcd-e1"
	kubetest.AddEtcdCluster(t, admin, dynAdmin, escrowNS, name, testenv.EtcdOptions{IP: "127.0.36.10", Members: 1})
	kubetest.PerClusterAccess(t, a, escrowNS, name)
	// kubectl apply's annotation on the EtcdCluster: never escrowed.
	if _, err := dynAdmin.Resource(kube.EtcdClusterGVR).Namespace(escrowNS).Patch(ctx, name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+kube.LastAppliedAnnotation+`":"{}","keep":"me"},"labels":{"team":"armada"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	sa, err := kube.New(kube.Config{Rest: k.RestConfig(kubetest.SAToken(t, admin, escrowNS, "etcd-recovery")), Namespace: escrowNS})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sa.Clusters(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	c := cs[0]

	list, problems, err := sa.CaptureEscrow(ctx, c)
	if err != nil || len(problems) != 0 || list == nil {
		t.Fatalf("capture: %v, problems %q", err, problems)
	}
	want := []string{"EtcdCluster/" + name, "Secret/" + name + "-client-tls", "Secret/" + name + "-peer-tls", "Secret/" + name + "-server-tls",
		"Service/" + name, "Service/" + name + "-client", "Service/" + name + "-client-service-np"}
	if got := list.ObjectNames(); !slices.Equal(got, want) {
		t.Fatalf("objects %q, want %q", got, want)
	}
	if _, err := catalog.MarshalEscrow(list); err != nil { // Validate: nothing the server sets
		t.Fatal(err)
	}
	for _, sname := range []string{name + "-client-tls", name + "-peer-tls", name + "-server-tls"} {
		s, err := admin.CoreV1().Secrets(escrowNS).Get(ctx, sname, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, ok := escrow.SecretData(list, sname)
		if !ok || len(got) != len(s.Data) || len(got) != 3 {
			t.Fatalf("secret %s: %d keys escrowed, %d in the API", sname, len(got), len(s.Data))
		}
		for key, b := range s.Data {
			if !bytes.Equal(got[key], b) {
				t.Fatalf("secret %s key %s differs from the API's", sname, key)
			}
		}
	}
	np, err := admin.CoreV1().Services(escrowNS).Get(ctx, name+"-client-service-np", metav1.GetOptions{})
	if err != nil || np.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("nodeport service: %v %+v", err, np)
	}
	ports := escrow.Item(list, "Service", name+"-client-service-np")["spec"].(map[string]any)["ports"].([]any)
	if got := ports[0].(map[string]any)["nodePort"]; got != int64(np.Spec.Ports[0].NodePort) {
		t.Fatalf("escrowed nodePort %v, the API's %d", got, np.Spec.Ports[0].NodePort)
	}
	if ip := escrow.Item(list, "Service", name+"-client")["spec"].(map[string]any)["clusterIP"]; ip == "" || ip == nil {
		t.Fatalf("client service without its cluster IP")
	}
	ec := escrow.EtcdCluster(list)
	md := ec["metadata"].(map[string]any)
	ann := md["annotations"].(map[string]any)
	if _, ok := ann[kube.LastAppliedAnnotation]; ok || ann["keep"] != "me" || md["labels"].(map[string]any)["team"] != "armada" {
		t.Fatalf("EtcdCluster metadata %v", md)
	}
	if _, ok := ec["spec"].(map[string]any)["TLS"]; !ok {
		t.Fatalf("EtcdCluster spec %v", ec["spec"])
	}
	v, err := escrow.Versions(list)
	if err != nil || v.EtcdClusterAPI != kube.APIVersion {
		t.Fatalf("versions %+v, %v", v, err)
	}
	for _, it := range list.Items {
		md := it["metadata"].(map[string]any)
		for _, f := range []string{"uid", "resourceVersion", "managedFields", "creationTimestamp", "generation"} {
			if _, ok := md[f]; ok {
				t.Fatalf("%s/%s holds %s", it["kind"], md["name"], f)
			}
		}
	}
	// base64 in the List, as the API serves a Secret's data.
	if d := escrow.Item(list, "Secret", name+"-server-tls")["data"].(map[string]any)[escrow.ServerKeyKey].(string); d == "" {
		t.Fatal("no server key")
	} else if b, err := base64.StdEncoding.DecodeString(d); err != nil || !bytes.Contains(b, []byte("PRIVATE KEY-----")) {
		t.Fatalf("server key not base64 PEM: %v", err)
	}

	// The NodePort Service gone: named, the rest still escrowed.
	del := func(what string, f func(context.Context, string, metav1.DeleteOptions) error, n string) {
		t.Helper()
		if err := f(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s %s: %v", what, n, err)
		}
	}
	del("service", admin.CoreV1().Services(escrowNS).Delete, name+"-client-service-np")
	del("service", admin.CoreV1().Services(escrowNS).Delete, name) // the headless one: not a problem
	list, problems, err = sa.CaptureEscrow(ctx, c)
	if err != nil || list == nil || len(problems) != 1 || !strings.Contains(problems[0], "service "+name+"-client-service-np not found") {
		t.Fatalf("without the nodeport service: %v, problems %q", err, problems)
	}
	if got := len(list.Items); got != 5 {
		t.Fatalf("%d items without two services", got)
	}
	// The peer secret gone: no list, named.
	del("secret", admin.CoreV1().Secrets(escrowNS).Delete, name+"-peer-tls")
	list, problems, err = sa.CaptureEscrow(ctx, c)
	if err != nil || list != nil || len(problems) != 2 || !strings.Contains(problems[0], "secret "+name+"-peer-tls not found") {
		t.Fatalf("without the peer secret: list %v, %v, problems %q", list != nil, err, problems)
	}
	// The EtcdCluster gone.
	c.Name = "etcd-gone"
	list, problems, err = sa.CaptureEscrow(ctx, c)
	if err != nil || list != nil || len(problems) != 1 || !strings.Contains(problems[0], "etcdcluster "+escrowNS+"/etcd-gone not found") {
		t.Fatalf("without the etcdcluster: %v, problems %q", err, problems)
	}
}
