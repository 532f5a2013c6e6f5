package kube_test

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/armada/etcd-recovery/kube"
)

// The namespace: --namespace, else the kubeconfig context's, else the
// pod's own (POD_NAMESPACE or the service account's namespace file).
func TestNewNamespace(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: kubx-etcd-07}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", "")
	t.Setenv("POD_NAMESPACE", "")
	k, err := kube.New(kube.Config{Kubeconfig: kc})
	if err != nil || k.Namespace != "kubx-etcd-07" {
		t.Fatalf("from the kubeconfig context: %v %v", k, err)
	}
	if k, err = kube.New(kube.Config{Kubeconfig: kc, Namespace: "other"}); err != nil || k.Namespace != "other" {
		t.Fatalf("--namespace: %v %v", k, err)
	}
	t.Setenv("KUBECONFIG", kc)
	if k, err = kube.New(kube.Config{}); err != nil || k.Namespace != "kubx-etcd-07" {
		t.Fatalf("$KUBECONFIG: %v %v", k, err)
	}
	t.Setenv("POD_NAMESPACE", "kubx-etcd-03")
	if k, err = kube.New(kube.Config{Rest: &rest.Config{Host: "https://127.0.0.1:1"}}); err != nil || k.Namespace != "kubx-etcd-03" {
		t.Fatalf("in a pod: %v %v", k, err)
	}
	t.Setenv("POD_NAMESPACE", "")
	if _, err = kube.New(kube.Config{Kubeconfig: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Fatal("a missing kubeconfig: no error")
	}
}
