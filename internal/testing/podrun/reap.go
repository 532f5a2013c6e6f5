package podrun

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// OwnerLabel marks every container podrun starts with the process that
// started it: "<pid>:<start time in clock ticks since boot>". A detached
// pod (Runner.Start) outlives a test process that is killed (the servers
// testenv starts die with it, by Pdeathsig; a podman container does not),
// and a toolkit pod left running holds the host's port 9090, so that the
// next run's toolkit cannot listen (it did, once). The first pod a process
// starts reaps the containers whose owner is gone.
const OwnerLabel = "etcd-recovery-test-owner"

var (
	reapOnce sync.Once
	self     = processOwner(os.Getpid())
)

// processOwner is pid's OwnerLabel value, or "" when pid is not running.
// The start time tells a live owner from a new process that reused its pid.
func processOwner(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The fields after the command (which may hold spaces and parentheses)
	// start after its last ')'; the start time is field 22, the 20th there.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return strconv.Itoa(pid) + ":" + f[19]
}

// ownerGone reports whether an OwnerLabel value names a process that is no
// longer running.
func ownerGone(owner string) bool {
	pid, _, ok := strings.Cut(owner, ":")
	n, err := strconv.Atoi(pid)
	if !ok || err != nil || n <= 0 {
		return false // not ours to judge
	}
	return processOwner(n) != owner
}

// reapOrphans removes the containers (and their cgroup parents) left by
// test processes that are gone. Errors are reported on stderr, not
// returned: a pod that cannot start for a port held by an orphan names it.
func (r *Runner) reapOrphans() { reapOnce.Do(r.reap) }

func (r *Runner) reap() {
	{
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		args := append(append([]string{}, r.Podman...), "ps", "-a", "--filter", "label="+OwnerLabel,
			"--format", `{{.Names}} {{index .Labels "`+OwnerLabel+`"}}`)
		out, err := exec.CommandContext(ctx, "podman", args...).Output()
		if err != nil {
			fmt.Fprintf(os.Stderr, "podrun: listing containers of earlier test runs: %v\n", err)
			return
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			name, owner, ok := strings.Cut(strings.TrimSpace(line), " ")
			if !ok || !ownerGone(owner) {
				continue
			}
			rm := append(append([]string{}, r.Podman...), "rm", "-f", "-t", "0", name)
			if b, err := exec.CommandContext(ctx, "podman", rm...).CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "podrun: removing container %s of a test process that is gone (%s): %v: %s\n", name, owner, err, bytes.TrimSpace(b))
				continue
			}
			removeCgroup("podrun-" + name)
			fmt.Fprintf(os.Stderr, "podrun: removed container %s, left by a test process that is gone (%s)\n", name, owner)
		}
	}
}
