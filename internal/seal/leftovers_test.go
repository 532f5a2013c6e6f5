package seal_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/seal"
)

// MkdirTemp and CreateTemp name plaintext with the process's tag and
// register it: RemoveAllScratch (the second signal's hard exit) removes
// both, and the registration of a path removed meanwhile is harmless.
// Not parallel: RemoveAllScratch acts on the whole process.
func TestTrackedPlaintextRemovedByRemoveAllScratch(t *testing.T) {
	root := t.TempDir()
	d, err := seal.MkdirTemp(root, ".etcd-recovery-drill-c1-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "db"), []byte("plaintext"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := seal.CreateTemp(root, ".etcd-recovery-c1-", ".snapshot.db")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	gone, err := seal.MkdirTemp(root, ".etcd-recovery-dry-run-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(gone); err != nil { // its owner's cleanup ran
		t.Fatal(err)
	}
	tag := "-" + seal.ProcessTag() + "-"
	st, err := os.Stat(d)
	if err != nil || st.Mode().Perm() != 0o700 || !strings.Contains(filepath.Base(d), tag) ||
		!strings.Contains(filepath.Base(f.Name()), tag) || !strings.HasSuffix(f.Name(), ".snapshot.db") {
		t.Fatalf("names %s, %s (mode %v, %v): want 0700 and the tag %s", d, f.Name(), st.Mode(), err, tag)
	}
	if err := seal.RemoveAllScratch(); err != nil {
		t.Fatal(err)
	}
	if left := names(t, root); len(left) != 0 {
		t.Fatalf("left after RemoveAllScratch: %v", left)
	}
}

// RemoveLeftovers removes the tagged plaintext of a process that is gone
// (a real child that exited, and a live pid whose start time differs: a
// reused pid), also one level down in this tool's own directories; it
// keeps the tagged plaintext of live processes (this one, a running
// child), untagged names, other programs' files and, as root, another
// user's files.
func TestRemoveLeftoversOnlyOfGoneProcesses(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	live := exec.Command("sleep", "600")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _, _ = live.Process.Wait() })
	liveTag := tagOf(t, live.Process.Pid)
	deadTag := "p" + strconv.Itoa(dead.Process.Pid) + ".1"
	reusedTag := "p" + strconv.Itoa(os.Getpid()) + ".1" // this pid, another start
	mk := func(name string, dir bool) string {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if dir {
			if err := os.MkdirAll(filepath.Join(p, "member"), 0o700); err != nil {
				t.Fatal(err)
			}
			return name
		}
		if err := os.WriteFile(p, []byte("plaintext"), 0o600); err != nil {
			t.Fatal(err)
		}
		return name
	}
	gone := []string{
		mk(".etcd-recovery-drill-c1-"+deadTag+"-42", true),
		mk(".etcd-recovery-c1-"+reusedTag+"-42.snapshot.db", false),
		mk("etcd-recovery-plain-"+deadTag+"-7", true),
		mk("etcd-recovery-operator-restore-99/.etcd-recovery-c2-"+deadTag+"-8.snapshot.db", false),
	}
	kept := []string{
		mk(".etcd-recovery-drill-c1-"+seal.ProcessTag()+"-42", true),
		mk(".etcd-recovery-drill-c1-"+liveTag+"-43", true),
		mk(".etcd-recovery-drill-c1-44", true),       // untagged (an older version's)
		mk("other-"+deadTag+"-1.snapshot.db", false), // not this tool's name
		mk("etcd-recovery-operator-restore-99", true),
	}
	if os.Geteuid() == 0 {
		n := mk(".etcd-recovery-c3-"+deadTag+"-9.snapshot.db", false)
		if err := os.Chown(filepath.Join(root, n), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, n)
	}
	removed, err := seal.RemoveLeftovers(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range removed {
		rel, _ := filepath.Rel(root, p)
		got = append(got, rel)
	}
	slices.Sort(got)
	slices.Sort(gone)
	if !slices.Equal(got, gone) {
		t.Errorf("removed %v, want %v", got, gone)
	}
	for _, n := range gone {
		if _, err := os.Lstat(filepath.Join(root, n)); !os.IsNotExist(err) {
			t.Errorf("%s: still there (%v)", n, err)
		}
	}
	for _, n := range kept {
		if _, err := os.Lstat(filepath.Join(root, n)); err != nil {
			t.Errorf("%s: removed (%v), want it kept", n, err)
		}
	}
}

// tagOf is the tag a process would name its scratch with.
func tagOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return "p" + strconv.Itoa(pid) + "." + f[19]
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
