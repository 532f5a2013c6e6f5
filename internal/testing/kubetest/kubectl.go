package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// KubectlBin is the kubectl built into the servers cache by `make
// test-servers` (scripts/test-servers.sh kubectl), for the RBAC tests and
// the documents' kubectl commands:
// <test-server cache>/kubectl-$KUBE_VERSION/kubectl, the release of the test
// kube-apiserver (scripts/test-servers.env). Only that one: a kubectl on
// PATH may be any version (and CI has none). A test that needs it fails
// without it, naming `make test-servers` (never skips).
func KubectlBin(tb testing.TB) string {
	tb.Helper()
	p := filepath.Join(testenv.ServersDir(tb), "kubectl-"+testenv.ServerVersion(tb, "KUBE_VERSION"), "kubectl")
	st, err := os.Stat(p)
	if err == nil && (st.IsDir() || st.Mode()&0o111 == 0) {
		err = fmt.Errorf("%s is not an executable file", p)
	}
	if err != nil {
		tb.Fatalf("missing test server kubectl (%v): run `make test-servers`", err)
	}
	return p
}

// PodSpecs are the pod specs of the workload objects among objs (CronJob,
// Job, Deployment, StatefulSet, DaemonSet, ReplicaSet, Pod), keyed
// "Kind/name".
func PodSpecs(objs []*unstructured.Unstructured) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objs {
		var path []string
		switch o.GetKind() {
		case "CronJob":
			path = []string{"spec", "jobTemplate", "spec", "template", "spec"}
		case "Job", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet":
			path = []string{"spec", "template", "spec"}
		case "Pod":
			path = []string{"spec"}
		default:
			continue
		}
		if spec, ok, _ := unstructured.NestedMap(o.Object, path...); ok {
			out[o.GetKind()+"/"+o.GetName()] = spec
		}
	}
	return out
}
