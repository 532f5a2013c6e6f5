package podrun

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// exitedPid is the pid of a process that has exited.
func exitedPid(t testing.TB) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestProcessOwner(t *testing.T) {
	if self == "" || ownerGone(self) {
		t.Fatalf("this process's owner %q reads as gone", self)
	}
	dead := exitedPid(t)
	if o := processOwner(dead); o != "" {
		t.Fatalf("an exited process has owner %q", o)
	}
	pid, start, _ := strings.Cut(self, ":")
	for _, tc := range []struct {
		owner string
		gone  bool
	}{
		{self, false},
		{strconv.Itoa(dead) + ":" + start, true},                    // exited
		{pid + ":1" + start, true},                                  // its pid reused by a newer process
		{"", false}, {"x:1", false}, {"-1:5", false}, {"42", false}, // not ours to judge
	} {
		if got := ownerGone(tc.owner); got != tc.gone {
			t.Errorf("ownerGone(%q) = %v, want %v", tc.owner, got, tc.gone)
		}
	}
}

// TestReapOrphans creates two containers of the toolkit image with real
// podman: one owned by a process that has exited, one by this process.
// Reaping removes the first only.
func TestReapOrphans(t *testing.T) {
	image := testenv.Image(t)
	r := &Runner{Podman: testenv.PodmanGlobalArgs, RunArgs: testenv.PodmanRunArgs, Image: image}
	_, start, _ := strings.Cut(self, ":")
	orphan, mine := "podrun-reap-orphan-"+randHex(4), "podrun-reap-mine-"+randHex(4)
	for name, owner := range map[string]string{orphan: strconv.Itoa(exitedPid(t)) + ":" + start, mine: self} {
		if out, err := testenv.Podman(t, "create", "--name", name, "--label", OwnerLabel+"="+owner, image); err != nil {
			t.Fatalf("podman create %s: %v: %s", name, err, out)
		}
		t.Cleanup(func() { testenv.Podman(t, "rm", "-f", "-t", "0", name) })
	}
	r.reap()
	out, err := testenv.Podman(t, "ps", "-a", "--format", "{{.Names}}")
	if err != nil {
		t.Fatalf("podman ps: %v: %s", err, out)
	}
	names := strings.Fields(string(out))
	if slices.Contains(names, orphan) {
		t.Errorf("the container of an exited test process (%s) was not reaped", orphan)
	}
	if !slices.Contains(names, mine) {
		t.Errorf("the container of this live process (%s) was reaped", mine)
	}
}
