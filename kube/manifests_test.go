package kube_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// toolImage is the toolkit image's name in every pod spec of deploy/.
const toolImage = "icr.io/armada/etcd-recovery"

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// imageParts splits an image reference into name, tag and digest.
func imageParts(ref string) (name, tag, digest string) {
	name, digest, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name, tag = name[:i], name[i+1:]
	}
	return name, tag, digest
}

// shippedDigest is deploy/values.yaml's image.digest.
func shippedDigest(t *testing.T, deploy string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deploy, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Image struct{ Repository, Digest string }
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("deploy/values.yaml: %v", err)
	}
	if v.Image.Repository != toolImage || !digestRE.MatchString(v.Image.Digest) {
		t.Fatalf("deploy/values.yaml: image %s@%s, want %s@sha256:<64 hex>", v.Image.Repository, v.Image.Digest, toolImage)
	}
	return v.Image.Digest
}

// everyRender is what the chart renders: the fleet for two namespaces,
// and the per-cluster pieces (the grant, the pre-update Job).
func everyRender(t *testing.T, deploy string) map[string][]*unstructured.Unstructured {
	t.Helper()
	vals := kubetest.FleetValues("kubx-etcd-01", "kubx-etcd-02")
	out := map[string][]*unstructured.Unstructured{}
	for how, set := range map[string][]string{
		"fleet":          nil,
		"grant":          {"cluster.namespace=kubx-etcd-02", "cluster.name=etcd-abc"},
		"pre-update Job": {"cluster.namespace=kubx-etcd-02", "cluster.name=etcd-abc", "cluster.update=u1"},
	} {
		objs, err := kubetest.RenderChartAt(t, deploy, vals, set...)
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		out[how] = objs
	}
	return out
}

// TestManifestImagesPinned: no pod spec under deploy/ runs a mutable image
// reference. The plain manifests name the bare toolkit image (no tag, no
// digest, no imagePullPolicy that would keep an unpinned image on a
// node), and every container the chart renders, the fleet's and the
// per-cluster Job's, runs exactly image.repository@image.digest of
// deploy/values.yaml.
func TestManifestImagesPinned(t *testing.T) {
	t.Parallel()
	deploy := kubetest.DeployPath(t)
	n := 0
	for _, f := range kubetest.DeployFiles(t) {
		for key, spec := range kubetest.PodSpecs(kubetest.DecodeManifests(t, f)) {
			for _, c := range containers(spec) {
				n++
				ref, _ := c["image"].(string)
				what := filepath.Base(f) + ": " + key + " container " + c["name"].(string) + ": image " + ref
				if ref != toolImage {
					t.Errorf("%s: want the bare %s, which the chart pins by digest (a tag is mutable)", what, toolImage)
				}
				if p, _ := c["imagePullPolicy"].(string); p != "" {
					t.Errorf("%s: imagePullPolicy %s: leave it to the digest's default", what, p)
				}
			}
		}
	}
	if n < 5 {
		t.Fatalf("only %d containers in deploy/'s pod specs", n)
	}
	want := toolImage + "@" + shippedDigest(t, deploy)
	for how, objs := range everyRender(t, deploy) {
		specs := kubetest.PodSpecs(objs)
		if len(specs) == 0 && how != "grant" {
			t.Errorf("chart (%s): no pod specs", how)
		}
		for key, spec := range specs {
			for _, c := range containers(spec) {
				if c["image"] != want {
					t.Errorf("chart (%s): %s: image %v, want %s", how, key, c["image"], want)
				}
			}
		}
	}
}

func containers(spec map[string]any) []map[string]any {
	var out []map[string]any
	for _, field := range []string{"initContainers", "containers"} {
		l, _ := spec[field].([]any)
		for _, c := range l {
			if m, ok := c.(map[string]any); ok {
				out = append(out, m)
			}
		}
	}
	return out
}

// TestManifestsPinDigest: `make manifests` writes the digest `make image`
// recorded (bin/image/digest when it was built, else a made-up one) into
// the chart's values, and the chart then renders every pod spec with
// exactly that image. It runs on a copy of deploy/.
func TestManifestsPinDigest(t *testing.T) {
	t.Parallel()
	root := testenv.RepoRoot(t)
	digest := "sha256:" + strings.Repeat("5a", 32)
	if b, err := os.ReadFile(filepath.Join(root, "bin", "image", "digest")); err == nil && digestRE.MatchString(strings.TrimSpace(string(b))) {
		digest = strings.TrimSpace(string(b))
	}
	tmp := t.TempDir()
	deploy := filepath.Join(tmp, "deploy")
	if out, err := exec.Command("cp", "-r", kubetest.DeployPath(t), deploy).CombinedOutput(); err != nil {
		t.Fatalf("copy deploy/: %v\n%s", err, out)
	}
	digestFile := filepath.Join(tmp, "digest")
	if err := os.WriteFile(digestFile, []byte(digest+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-s", "-C", root, "manifests", "MANIFESTS_DIGEST="+digestFile, "MANIFESTS_DIR="+deploy)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make manifests: %v\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
	if got := shippedDigest(t, deploy); got != digest {
		t.Fatalf("make manifests: values.yaml digest %s, want %s", got, digest)
	}
	for how, objs := range everyRender(t, deploy) {
		specs := kubetest.PodSpecs(objs)
		if len(specs) == 0 && how != "grant" {
			t.Fatalf("chart (%s): no pod specs", how)
		}
		for key, spec := range specs {
			for _, c := range containers(spec) {
				if c["image"] != toolImage+"@"+digest {
					t.Errorf("chart (%s): %s: image %v, want %s@%s", how, key, c["image"], toolImage, digest)
				}
			}
		}
	}
	// Without a digest, it refuses and says why.
	cmd = exec.Command("make", "-s", "-C", root, "manifests", "MANIFESTS_DIGEST="+filepath.Join(tmp, "none"), "MANIFESTS_DIR="+deploy)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "run make image first") {
		t.Errorf("make manifests without a digest: %v\n%s", err, out)
	}
}

// TestManifestsApplyNoTemplate: the fleet's install applies no per-cluster
// piece: it creates no Job (the pre-update backup is one per cluster and
// update) and nothing naming the placeholder cluster etcd-example, and the
// per-cluster renders name the cluster asked for, never the placeholder.
func TestManifestsApplyNoTemplate(t *testing.T) {
	t.Parallel()
	for how, objs := range everyRender(t, kubetest.DeployPath(t)) {
		if len(objs) == 0 {
			t.Errorf("chart (%s): nothing rendered", how)
		}
		for _, o := range objs {
			b, _ := json.Marshal(o.Object)
			if how == "fleet" && o.GetKind() == "Job" {
				t.Errorf("the fleet's install creates Job %s: a per-cluster piece applied for every namespace", o.GetName())
			}
			if strings.Contains(string(b), "etcd-example") {
				t.Errorf("chart (%s): %s %s names etcd-example, the plain files' placeholder", how, o.GetKind(), o.GetName())
			}
			if how != "fleet" && !strings.Contains(o.GetName(), "etcd-abc") {
				t.Errorf("chart (%s): %s %s does not name the cluster etcd-abc", how, o.GetKind(), o.GetName())
			}
		}
	}
}
