package kubetest_test

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// KubectlBin is the cached build of the test kube-apiserver's release,
// whatever $KUBECTL or PATH hold.
func TestKubectlBin(t *testing.T) {
	t.Setenv("KUBECTL", "/bin/false")
	t.Setenv("PATH", t.TempDir())
	bin := kubetest.KubectlBin(t)
	out, err := exec.Command(bin, "version", "--client", "-o", "json").Output()
	if err != nil {
		t.Fatalf("%s version: %v", bin, err)
	}
	var v struct {
		ClientVersion struct{ GitVersion string } `json:"clientVersion"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s version: %v\n%s", bin, err, out)
	}
	if want := testenv.ServerVersion(t, "KUBE_VERSION"); v.ClientVersion.GitVersion != want {
		t.Fatalf("%s is kubectl %q, want %s (the test kube-apiserver's release)", bin, v.ClientVersion.GitVersion, want)
	}
}
