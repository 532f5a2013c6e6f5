package memcg

import (
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
)

// SelfLimits are this process's CPU and memory limits from its cgroups (a
// pod's container limits): cpuMilli in thousandths of a CPU (v2 cpu.max,
// v1 cpu.cfs_quota_us / cpu.cfs_period_us), memBytes in bytes (v2
// memory.max, v1 memory.limit_in_bytes). 0 is no limit, or unknown (not
// Linux, no cgroup).
func SelfLimits() (cpuMilli, memBytes int64) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, 0
	}
	return LimitsFS(os.DirFS(V2Root), string(b))
}

// LimitsFS is SelfLimits over cgroupFS, the cgroup mount (/sys/fs/cgroup:
// v2 at its root or under "unified", v1's controllers in "cpu",
// "cpu,cpuacct", "memory"), for a process whose /proc/<pid>/cgroup is
// procCgroup. The tightest limit on the way from the process's cgroup up
// to the mount's root counts (a parent's limit binds its children). A
// cgroup path the mount doesn't have (a container's cgroup namespace shows
// the host's path, or a v1 mount shows the container's cgroup at its root)
// is read at the root. v1 wins where it holds the controller (a hybrid
// host).
func LimitsFS(cgroupFS fs.FS, procCgroup string) (cpuMilli, memBytes int64) {
	var v2path string
	v1 := map[string]string{} // controller → the mount's directory + the cgroup's path
	for _, e := range parseCgroup(procCgroup) {
		if e.v2 {
			v2path = e.path
			continue
		}
		for _, c := range e.controllers {
			if c == "cpu" || c == "memory" {
				v1[c] = e.mount + "\x00" + e.path
			}
		}
	}
	if c, ok := v1["cpu"]; ok {
		mount, p, _ := strings.Cut(c, "\x00")
		cpuMilli = tightest(cgroupFS, []string{"cpu", mount}, p, func(dir string) int64 {
			return ParseCFS(readString(cgroupFS, dir, "cpu.cfs_quota_us"), readString(cgroupFS, dir, "cpu.cfs_period_us"))
		})
	}
	if c, ok := v1["memory"]; ok {
		_, p, _ := strings.Cut(c, "\x00")
		memBytes = tightest(cgroupFS, []string{"memory"}, p, func(dir string) int64 {
			return ParseMemoryLimit(readString(cgroupFS, dir, "memory.limit_in_bytes"))
		})
	}
	if v2path != "" {
		var v2mount []string
		for _, m := range []string{".", "unified"} {
			if _, err := fs.Stat(cgroupFS, path.Join(m, "cgroup.controllers")); err == nil {
				v2mount = []string{m}
				break
			}
		}
		if v2mount != nil {
			if _, ok := v1["cpu"]; !ok {
				cpuMilli = tightest(cgroupFS, v2mount, v2path, func(dir string) int64 {
					return ParseCPUMax(readString(cgroupFS, dir, "cpu.max"))
				})
			}
			if _, ok := v1["memory"]; !ok {
				memBytes = tightest(cgroupFS, v2mount, v2path, func(dir string) int64 {
					return ParseMemoryLimit(readString(cgroupFS, dir, "memory.max"))
				})
			}
		}
	}
	return cpuMilli, memBytes
}

// tightest is the smallest non-zero limit of the cgroup at p (in the
// first of mounts that exists) and its ancestors; 0 when none has one.
func tightest(cgroupFS fs.FS, mounts []string, p string, limit func(dir string) int64) int64 {
	var mount string
	for _, m := range mounts {
		if st, err := fs.Stat(cgroupFS, m); err == nil && st.IsDir() {
			mount = m
			break
		}
	}
	if mount == "" {
		return 0
	}
	dir := path.Join(mount, strings.TrimPrefix(path.Clean("/"+p), "/"))
	if st, err := fs.Stat(cgroupFS, dir); err != nil || !st.IsDir() {
		dir = mount
	}
	var best int64
	for {
		if n := limit(dir); n > 0 && (best == 0 || n < best) {
			best = n
		}
		if dir == mount {
			return best
		}
		dir = path.Dir(dir)
	}
}

func readString(cgroupFS fs.FS, dir, file string) string {
	b, err := fs.ReadFile(cgroupFS, path.Join(dir, file))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ParseCPUMax is a cgroup v2 cpu.max ("<quota> <period>" in µs, quota
// "max" for none; the period defaults to 100000) in thousandths of a CPU;
// 0 for none or unparsable. A quota under a thousandth is one.
func ParseCPUMax(s string) int64 {
	f := strings.Fields(s)
	if len(f) == 0 || len(f) > 2 {
		return 0
	}
	period := "100000"
	if len(f) == 2 {
		period = f[1]
	}
	if f[0] == "max" {
		return 0
	}
	return ParseCFS(f[0], period)
}

// ParseCFS is cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us in
// thousandths of a CPU; 0 for none (quota -1) or unparsable.
func ParseCFS(quota, period string) int64 {
	q, err1 := strconv.ParseInt(strings.TrimSpace(quota), 10, 64)
	p, err2 := strconv.ParseInt(strings.TrimSpace(period), 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0
	}
	return max(1, q*1000/p)
}

// ParseMemoryLimit is a v2 memory.max or v1 memory.limit_in_bytes in
// bytes; 0 for none ("max", or v1's page-rounded maximum: anything at or
// above 2^60) or unparsable.
func ParseMemoryLimit(s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 || n >= 1<<60 {
		return 0
	}
	return n
}
