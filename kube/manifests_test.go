package kube_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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

// TestManifestImagesPinned: no pod spec under deploy/ runs a mutable image
// reference. A pod spec names either an image by digest, or the bare
// toolkit name that the kustomization covering its file pins by digest;
// never :latest or another tag, and no imagePullPolicy that would keep an
// unpinned image on a node. What `kubectl kustomize` renders for deploy/
// and deploy/templates/ is by digest only.
func TestManifestImagesPinned(t *testing.T) {
	t.Parallel()
	checkImagesPinned(t, kubetest.DeployPath(t))
}

func checkImagesPinned(t *testing.T, deploy string) {
	t.Helper()
	// The kustomization directories and the image names they pin.
	pinned := map[string]map[string]string{} // dir -> name -> digest
	for _, dir := range []string{deploy, filepath.Join(deploy, "templates")} {
		if _, err := os.Stat(filepath.Join(dir, "kustomization.yaml")); err != nil {
			continue
		}
		pinned[dir] = map[string]string{}
		for _, im := range kubetest.ReadKustomization(t, dir).Images {
			if im.NewTag != "" || !digestRE.MatchString(im.Digest) {
				t.Errorf("%s/kustomization.yaml: image %s: newTag %q digest %q, want a sha256 digest and no tag", dir, im.Name, im.NewTag, im.Digest)
				continue
			}
			pinned[dir][im.Name] = im.Digest
		}
	}
	files, _ := filepath.Glob(filepath.Join(deploy, "*.yaml"))
	more, _ := filepath.Glob(filepath.Join(deploy, "*", "*.yaml"))
	n := 0
	for _, f := range append(files, more...) {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		for key, spec := range kubetest.PodSpecs(kubetest.DecodeManifests(t, f)) {
			for _, c := range containers(spec) {
				n++
				ref, _ := c["image"].(string)
				policy, _ := c["imagePullPolicy"].(string)
				name, tag, digest := imageParts(ref)
				what := filepath.Base(f) + ": " + key + " container " + c["name"].(string) + ": image " + ref
				switch {
				case digest != "":
					if !digestRE.MatchString(digest) {
						t.Errorf("%s: not a sha256 digest", what)
					}
				case tag != "":
					t.Errorf("%s: a tag (%q) is mutable; name the image without a tag and pin it by digest in the kustomization", what, tag)
				case pinned[filepath.Dir(f)][name] == "":
					t.Errorf("%s: no digest, and %s/kustomization.yaml does not pin %s", what, filepath.Dir(f), name)
				}
				if digest == "" && policy != "" && policy != "Always" {
					t.Errorf("%s: imagePullPolicy %s without a digest keeps a stale image on a node", what, policy)
				}
			}
		}
	}
	if n < 3 {
		t.Fatalf("only %d containers in deploy/'s pod specs", n)
	}
	// What kustomize renders: by digest only.
	for dir := range pinned {
		specs := kubetest.PodSpecs(kubetest.Kustomize(t, dir))
		if len(specs) == 0 {
			t.Errorf("kubectl kustomize %s: no pod specs", dir)
		}
		for key, spec := range specs {
			for _, c := range containers(spec) {
				ref, _ := c["image"].(string)
				if name, tag, digest := imageParts(ref); tag != "" || !digestRE.MatchString(digest) || name != toolImage {
					t.Errorf("kubectl kustomize %s: %s: image %q, want %s@sha256:...", dir, key, ref, toolImage)
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
// both kustomizations, and kustomize then renders every pod spec with
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
	for _, dir := range []string{deploy, filepath.Join(deploy, "templates")} {
		specs := kubetest.PodSpecs(kubetest.Kustomize(t, dir))
		if len(specs) == 0 {
			t.Fatalf("kubectl kustomize %s: no pod specs", dir)
		}
		for key, spec := range specs {
			for _, c := range containers(spec) {
				if c["image"] != toolImage+"@"+digest {
					t.Errorf("%s: %s: image %v, want %s@%s", dir, key, c["image"], toolImage, digest)
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

// TestManifestsApplyNoTemplate: what docs/kubernetes.md says to run applies no
// template: neither `kubectl apply -f deploy/` nor `kubectl apply -k
// deploy/` creates a Job (the pre-update backup is a template, one per
// cluster and update) or anything naming the template cluster
// etcd-example; and both apply the same files.
func TestManifestsApplyNoTemplate(t *testing.T) {
	t.Parallel()
	checkNoTemplateApplied(t, kubetest.DeployPath(t))
}

func checkNoTemplateApplied(t *testing.T, deploy string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(deploy, "*.yaml"))
	files = slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == "kustomization.yaml" })
	var applied []*unstructured.Unstructured
	for _, f := range files {
		applied = append(applied, kubetest.DecodeManifests(t, f)...)
	}
	check := func(how string, objs []*unstructured.Unstructured) {
		t.Helper()
		if len(objs) < 10 {
			t.Errorf("%s: only %d objects", how, len(objs))
		}
		for _, o := range objs {
			b, _ := json.Marshal(o.Object)
			if o.GetKind() == "Job" {
				t.Errorf("%s creates Job %s: a template applied for real", how, o.GetName())
			}
			if strings.Contains(string(b), "etcd-example") {
				t.Errorf("%s creates %s %s naming etcd-example, the templates' placeholder", how, o.GetKind(), o.GetName())
			}
		}
	}
	check("kubectl apply -f deploy/", applied)
	if _, err := os.Stat(filepath.Join(deploy, "kustomization.yaml")); err != nil {
		t.Errorf("no deploy/kustomization.yaml: %v", err)
		return
	}
	check("kubectl apply -k deploy/", kubetest.Kustomize(t, deploy))
	var res []string
	for _, r := range kubetest.ReadKustomization(t, deploy).Resources {
		res = append(res, filepath.Join(deploy, r))
	}
	slices.Sort(res)
	slices.Sort(files)
	if !slices.Equal(res, files) {
		t.Errorf("deploy/kustomization.yaml's resources %v are not the files kubectl apply -f deploy/ applies %v", res, files)
	}
}
