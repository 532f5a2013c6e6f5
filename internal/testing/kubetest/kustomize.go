package kubetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// Kustomization is the part of a kustomization.yaml the tests read.
type Kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images"`
}

// ReadKustomization reads dir/kustomization.yaml.
func ReadKustomization(tb testing.TB, dir string) Kustomization {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		tb.Fatalf("kubetest: %v", err)
	}
	var k Kustomization
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		tb.Fatalf("kubetest: %s/kustomization.yaml: %v", dir, err)
	}
	return k
}

// KustomizationResources are the files `kubectl apply -k deploy/`
// applies (deploy/kustomization.yaml's resources), as absolute paths,
// sorted.
func KustomizationResources(tb testing.TB) []string {
	tb.Helper()
	dir := DeployPath(tb)
	var out []string
	for _, r := range ReadKustomization(tb, dir).Resources {
		out = append(out, filepath.Join(dir, r))
	}
	sort.Strings(out)
	return out
}

// KubectlBin is the kubectl built into the servers cache by `make
// test-servers` (scripts/test-servers.sh kubectl):
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

// Kustomize is `kubectl kustomize dir`: the objects `kubectl apply -k dir`
// would apply.
func Kustomize(tb testing.TB, dir string) []*unstructured.Unstructured {
	tb.Helper()
	out, err := exec.Command(KubectlBin(tb), "kustomize", dir).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		tb.Fatalf("kubetest: kubectl kustomize %s: %v\n%s", dir, err, stderr)
	}
	objs, err := DecodeManifestBytes(out)
	if err != nil {
		tb.Fatalf("kubetest: kubectl kustomize %s: %v", dir, err)
	}
	return objs
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
