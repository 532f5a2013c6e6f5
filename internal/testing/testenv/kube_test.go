package testenv_test

import (
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

func TestKubeAPIServer(t *testing.T) {
	t.Parallel()
	k := testenv.StartKubeAPIServer(t)
	cs := k.Clientset(t, "")
	c := ctx(t)
	v, err := cs.Discovery().ServerVersion()
	if err != nil || v.GitVersion != testenv.ServerVersion(t, "KUBE_VERSION") {
		t.Fatalf("server version %v, %v; want %s (scripts/test-servers.env)", v, err, testenv.ServerVersion(t, "KUBE_VERSION"))
	}
	if _, err := cs.CoreV1().Namespaces().Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa, err := cs.CoreV1().ServiceAccounts("ns1").Create(c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// RBAC: a fresh service account may not list secrets.
	tr, err := cs.CoreV1().ServiceAccounts("ns1").CreateToken(c, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.Clientset(t, tr.Status.Token).CoreV1().Secrets("ns1").List(c, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("service account listing secrets: got %v, want forbidden", err)
	}
	// An unknown token is not authenticated.
	_, err = k.Clientset(t, "not-a-token").CoreV1().Namespaces().List(c, metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Fatalf("unknown token: got %v, want unauthorized", err)
	}
	// A kubeconfig for the admin works with the same CA.
	if k.Kubeconfig(t, "", "ns1") == "" || len(k.CA) == 0 {
		t.Fatal("no kubeconfig or CA")
	}
}
