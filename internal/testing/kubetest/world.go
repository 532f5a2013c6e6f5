package kubetest

import (
	"testing"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/kube"
)

// World is a real kube-apiserver (testenv.StartKubeAPIServer) with
// deploy/'s CRDs installed and deploy/10-rbac.yaml applied in Namespace:
// the carrier's namespace as deploy/'s pods find it.
type World struct {
	K         *testenv.KubeAPIServer
	Admin     *kubernetes.Clientset
	Dyn       *dynamic.DynamicClient
	Applier   *Applier
	Namespace string
}

// NewWorld starts a kube-apiserver and sets up the namespace ns (see
// World).
func NewWorld(tb testing.TB, ns string) *World {
	tb.Helper()
	w := &World{K: testenv.StartKubeAPIServer(tb), Namespace: ns}
	w.Admin, w.Dyn = w.K.Clientset(tb, ""), w.K.Dynamic(tb, "")
	InstallCRDs(tb, w.K)
	CreateNamespaces(tb, w.Admin, ns)
	w.Applier = NewApplier(tb, w.K)
	w.Applier.ApplyFile(tb, DeployPath(tb, "10-rbac.yaml"), ns)
	return w
}

// Token is a token of the namespace's service account sa (SAToken).
func (w *World) Token(tb testing.TB, sa string) string {
	tb.Helper()
	return SAToken(tb, w.Admin, w.Namespace, sa)
}

// Kube is a kube client of the namespace with token ("": the admin's).
func (w *World) Kube(tb testing.TB, token string) *kube.Client {
	tb.Helper()
	c, err := kube.New(kube.Config{Rest: w.K.RestConfig(token), Namespace: w.Namespace})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
