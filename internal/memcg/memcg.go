// Package memcg reads the memory cgroup of a process (cgroup v1's memory
// hierarchy or cgroup v2): where it is, its limit, and how many of its
// processes the kernel's OOM killer has killed. The drill tells an etcd
// killed by the OOM killer (the node's fault) from one that exited on its
// own (the backup's) with it. SelfLimits (limits.go) also reads this
// process's CPU limit beside its memory limit (a pod's container limits),
// from which restore-all sizes its parallelism. Everything here only reads /proc and
// /sys/fs/cgroup; where they are absent (not Linux, no cgroup) the answers
// are "unknown".
package memcg

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Roots are where cgroup v1's memory hierarchy and cgroup v2 are mounted.
const (
	V1Root = "/sys/fs/cgroup/memory"
	V2Root = "/sys/fs/cgroup"
	// V2HybridRoot is cgroup v2 beside v1 (a hybrid host).
	V2HybridRoot = "/sys/fs/cgroup/unified"
)

// Of is the directory of pid's memory cgroup and whether it is cgroup v2;
// "" when it can't be told (no such process, no cgroup). v1 wins on a
// hybrid host, where only it has the memory controller.
func Of(pid int) (dir string, v2 bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", false
	}
	var v2path string
	for _, e := range parseCgroup(string(b)) {
		if e.v2 {
			v2path = e.path
			continue
		}
		if slices.Contains(e.controllers, "memory") {
			return filepath.Join(V1Root, e.path), false
		}
	}
	if v2path == "" {
		return "", false
	}
	for _, root := range []string{V2Root, V2HybridRoot} {
		d := filepath.Join(root, v2path)
		if _, err := os.Stat(filepath.Join(d, "cgroup.controllers")); err == nil {
			return d, true
		}
	}
	return "", false
}

// cgroupEntry is a line of /proc/<pid>/cgroup, "ID:controllers:path":
// v2 for the unified hierarchy ("0::path"); mount is the controllers as
// written (v1 mounts a hierarchy at that name).
type cgroupEntry struct {
	v2          bool
	controllers []string
	mount, path string
}

// parseCgroup are the entries of a /proc/<pid>/cgroup file, in order;
// malformed lines are passed over.
func parseCgroup(procCgroup string) []cgroupEntry {
	var out []cgroupEntry
	for _, l := range strings.Split(procCgroup, "\n") {
		parts := strings.SplitN(strings.TrimSpace(l), ":", 3)
		if len(parts) != 3 {
			continue
		}
		out = append(out, cgroupEntry{v2: parts[0] == "0" && parts[1] == "", controllers: strings.Split(parts[1], ","), mount: parts[1], path: parts[2]})
	}
	return out
}

// OOMKills is how many processes the OOM killer killed in the cgroup (v2
// memory.events' oom_kill, v1 memory.oom_control's); -1 when unknown.
func OOMKills(dir string) int {
	for _, f := range []string{"memory.events", "memory.oom_control"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
				if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					return n
				}
			}
		}
	}
	return -1
}

// Limit is the cgroup's memory limit in bytes (v2 memory.max, v1
// memory.limit_in_bytes); 0 when none or unknown.
func Limit(dir string) int64 {
	for _, f := range []string{"memory.max", "memory.limit_in_bytes"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && n < 1<<60 {
			return n
		}
	}
	return 0
}
