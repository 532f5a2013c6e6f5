package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/memcg"
)

// MemoryCgroup is a new memory cgroup, a child of the test process's own,
// limited to a number of bytes without swap: the kernel's OOM killer
// SIGKILLs a process in it that needs more, as the kubelet's cgroup does
// to a container over its memory limit. It is removed at cleanup (its
// processes killed first).
type MemoryCgroup struct {
	Dir   string
	Limit int64
}

// NewMemoryCgroup creates a memory cgroup limited to limit bytes. It works
// with cgroup v1 (the memory hierarchy) and v2 (memory.max, the memory
// controller enabled for the process's cgroup's children); a machine with
// neither fails the test, never skips it: the drill tests that need it
// claim the OOM killer's behaviour.
func NewMemoryCgroup(tb testing.TB, limit int64) *MemoryCgroup {
	tb.Helper()
	parent, v2, err := memoryCgroupParent()
	if err != nil {
		tb.Fatalf("testenv: memory cgroup: %v (tests run as root on a machine with the cgroup memory controller)", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(parent, "etcd-recovery-test-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatalf("testenv: memory cgroup: %v", err)
	}
	cg := &MemoryCgroup{Dir: dir, Limit: limit}
	tb.Cleanup(func() { cg.remove(tb) })
	lim := strconv.FormatInt(limit, 10)
	if v2 {
		if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(lim), 0o644); err != nil {
			tb.Fatalf("testenv: memory cgroup %s: memory.max: %v", dir, err)
		}
		// No swap to escape to (absent when the kernel has no swap accounting).
		_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0o644)
	} else {
		if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(lim), 0o644); err != nil {
			tb.Fatalf("testenv: memory cgroup %s: memory.limit_in_bytes: %v", dir, err)
		}
		_ = os.WriteFile(filepath.Join(dir, "memory.swappiness"), []byte("0"), 0o644)
		_ = os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), []byte(lim), 0o644)
	}
	return cg
}

// memoryCgroupParent is the directory of the test process's own memory
// cgroup, and whether it is cgroup v2 (then with the memory controller
// enabled for its children).
func memoryCgroupParent() (string, bool, error) {
	dir, v2 := memcg.Of(os.Getpid())
	switch {
	case dir == "":
		return "", false, errors.New("no memory cgroup in /proc/self/cgroup")
	case !v2:
		return dir, false, nil
	}
	ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return "", false, err
	}
	if !strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " memory ") {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory"), 0o644); err != nil {
			return "", false, fmt.Errorf("cgroup v2 %s: the memory controller is not available to its children: %w", dir, err)
		}
	}
	return dir, true, nil
}

// Wrap returns a directory holding, for each name → binary, an executable
// <name> that moves itself into the cgroup and then execs the binary with
// its arguments (the environment is the caller's).
func (cg *MemoryCgroup) Wrap(tb testing.TB, bins map[string]string) string {
	tb.Helper()
	dir := tb.TempDir()
	for name, bin := range bins {
		script := fmt.Sprintf("#!/bin/sh\necho $$ > '%s' || exit 97\nexec '%s' \"$@\"\n", filepath.Join(cg.Dir, "cgroup.procs"), bin)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// OOMKills is how many processes the OOM killer killed in the cgroup; -1
// when the kernel does not say.
func (cg *MemoryCgroup) OOMKills() int { return memcg.OOMKills(cg.Dir) }

func (cg *MemoryCgroup) remove(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(cg.Dir, "cgroup.procs"))
		pids := strings.Fields(string(b))
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		err := os.Remove(cg.Dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			tb.Errorf("testenv: remove memory cgroup %s: %v", cg.Dir, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
