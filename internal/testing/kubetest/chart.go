package kubetest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// HelmBin is the helm built into the servers cache by `make test-servers`
// (scripts/test-servers.sh helm): <test-server cache>/helm-$HELM_VERSION/helm.
// Only that one (a helm on PATH may be any version). A test that needs it
// fails without it, naming `make test-servers` (never skips).
func HelmBin(tb testing.TB) string {
	tb.Helper()
	p := filepath.Join(testenv.ServersDir(tb), "helm-"+testenv.ServerVersion(tb, "HELM_VERSION"), "helm")
	st, err := os.Stat(p)
	if err == nil && (st.IsDir() || st.Mode()&0o111 == 0) {
		err = fmt.Errorf("%s is not an executable file", p)
	}
	if err != nil {
		tb.Fatalf("missing test server helm (%v): run `make test-servers`", err)
	}
	return p
}

// FleetValues are chart values for the namespaces given (each gets the
// chart's defaults: prefix "<name>/", the spread schedule offset).
func FleetValues(namespaces ...string) map[string]any {
	var ns []any
	for _, n := range namespaces {
		ns = append(ns, map[string]any{"name": n})
	}
	return map[string]any{"namespaces": ns}
}

// KubxNamespaces are the carrier's kubx-etcd-01 .. kubx-etcd-NN.
func KubxNamespaces(n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, fmt.Sprintf("kubx-etcd-%02d", i))
	}
	return out
}

// RenderChartErr is `helm template etcd-recovery deploy/ -f <values>`:
// the objects the chart renders for values (merged over deploy/values.yaml
// by helm), or helm's error with its output.
func RenderChartErr(tb testing.TB, values map[string]any, set ...string) ([]*unstructured.Unstructured, error) {
	tb.Helper()
	return RenderChartAt(tb, DeployPath(tb), values, set...)
}

// RenderChartAt is RenderChartErr for the chart in dir (a copy of deploy/).
func RenderChartAt(tb testing.TB, dir string, values map[string]any, set ...string) ([]*unstructured.Unstructured, error) {
	tb.Helper()
	b, err := yaml.Marshal(values)
	if err != nil {
		tb.Fatal(err)
	}
	f := filepath.Join(tb.TempDir(), "values.yaml")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	args := []string{"template", "etcd-recovery", dir, "-f", f}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(HelmBin(tb), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	// helm's own state (repositories, cache) in the test's directory,
	// never the user's.
	home := tb.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	objs, err := DecodeManifestBytes(out)
	if err != nil {
		return nil, fmt.Errorf("helm template output: %v", err)
	}
	return objs, nil
}

// RenderChart is RenderChartErr failing the test on an error.
func RenderChart(tb testing.TB, values map[string]any, set ...string) []*unstructured.Unstructured {
	tb.Helper()
	objs, err := RenderChartErr(tb, values, set...)
	if err != nil {
		tb.Fatalf("kubetest: %v", err)
	}
	return objs
}
