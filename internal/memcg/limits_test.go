package memcg

import (
	"testing"
	"testing/fstest"
)

func TestParseCPUMax(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"max 100000", 0},
		{"max", 0},
		{"200000 100000", 2000},
		{"150000 100000\n", 1500},
		{"50000", 500}, // the period defaults to 100000
		{"1000 1000000", 1},
		{"1 1000000", 1}, // under a thousandth is one
		{"", 0},
		{"garbage", 0},
		{"100000 0", 0},
		{"-1 100000", 0},
		{"1 2 3", 0},
	} {
		if got := ParseCPUMax(c.in); got != c.want {
			t.Errorf("ParseCPUMax(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestParseCFS(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		quota, period string
		want          int64
	}{
		{"-1", "100000", 0},
		{"100000", "100000", 1000},
		{"250000\n", "100000\n", 2500},
		{"50000", "", 0},
		{"", "100000", 0},
	} {
		if got := ParseCFS(c.quota, c.period); got != c.want {
			t.Errorf("ParseCFS(%q, %q) = %d, want %d", c.quota, c.period, got, c.want)
		}
	}
}

func TestParseMemoryLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"max", 0},
		{"536870912\n", 512 << 20},
		{"9223372036854771712", 0}, // v1's "no limit"
		{"0", 0},
		{"", 0},
		{"-5", 0},
	} {
		if got := ParseMemoryLimit(c.in); got != c.want {
			t.Errorf("ParseMemoryLimit(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestLimitsFS(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, c := range []struct {
		name       string
		fs         fstest.MapFS
		procCgroup string
		cpu, mem   int64
	}{
		{
			name: "v2 in a container's cgroup namespace",
			fs: fstest.MapFS{
				"cgroup.controllers": file("cpu memory"),
				"cpu.max":            file("200000 100000\n"),
				"memory.max":         file("536870912\n"),
			},
			procCgroup: "0::/\n",
			cpu:        2000, mem: 512 << 20,
		},
		{
			name: "v2 without limits",
			fs: fstest.MapFS{
				"cgroup.controllers": file("cpu memory"),
				"cpu.max":            file("max 100000\n"),
				"memory.max":         file("max\n"),
			},
			procCgroup: "0::/\n",
		},
		{
			name: "v2 nested: the tightest of the cgroup and its parents",
			fs: fstest.MapFS{
				"cgroup.controllers":          file("cpu memory"),
				"kubepods/cpu.max":            file("max 100000"),
				"kubepods/memory.max":         file("1073741824"),
				"kubepods/pod1/cpu.max":       file("150000 100000"),
				"kubepods/pod1/memory.max":    file("max"),
				"kubepods/pod1/c1/cpu.max":    file("max 100000"),
				"kubepods/pod1/c1/memory.max": file("268435456"),
			},
			procCgroup: "0::/kubepods/pod1/c1\n",
			cpu:        1500, mem: 256 << 20,
		},
		{
			name: "v2: a path the mount doesn't have is read at the root",
			fs: fstest.MapFS{
				"cgroup.controllers": file("cpu memory"),
				"cpu.max":            file("100000 100000"),
				"memory.max":         file("134217728"),
			},
			procCgroup: "0::/host/path/we/cannot/see\n",
			cpu:        1000, mem: 128 << 20,
		},
		{
			name: "v1, cpu and cpuacct joint",
			fs: fstest.MapFS{
				"cpu,cpuacct/cpu.cfs_quota_us":       file("-1"),
				"cpu,cpuacct/cpu.cfs_period_us":      file("100000"),
				"cpu,cpuacct/pod/cpu.cfs_quota_us":   file("50000"),
				"cpu,cpuacct/pod/cpu.cfs_period_us":  file("100000"),
				"memory/memory.limit_in_bytes":       file("9223372036854771712"),
				"memory/pod/memory.limit_in_bytes":   file("536870912"),
				"unified/cgroup.controllers":         file(""),
				"unified/pod/cgroup.procs":           file(""),
				"unified/pod/memory.max":             file("1"), // v1 holds memory: not read
				"cpu,cpuacct/pod/cpu.shares":         file("1024"),
				"memory/pod/memory.usage_in_bytes":   file("1000"),
				"memory/pod/memory.soft_limit_bytes": file("1"),
			},
			procCgroup: "5:memory:/pod\n3:cpu,cpuacct:/pod\n0::/pod\n",
			cpu:        500, mem: 512 << 20,
		},
		{
			name: "v1 without limits (this host's shape: cpu alone)",
			fs: fstest.MapFS{
				"cpu/cpu.cfs_quota_us":           file("-1"),
				"cpu/cpu.cfs_period_us":          file("100000"),
				"memory/memory.limit_in_bytes":   file("9223372036854771712"),
				"memory/x/memory.limit_in_bytes": file("9223372036854771712"),
			},
			procCgroup: "4:memory:/x\n2:cpuacct:/\n1:cpu:/\n0::/\n",
		},
		{
			name:       "no cgroup at all",
			fs:         fstest.MapFS{},
			procCgroup: "",
		},
		{
			name:       "a cgroup file but no mount",
			fs:         fstest.MapFS{},
			procCgroup: "0::/\n4:memory:/x\n",
		},
	} {
		cpu, mem := LimitsFS(c.fs, c.procCgroup)
		if cpu != c.cpu || mem != c.mem {
			t.Errorf("%s: LimitsFS = cpu %d, memory %d; want %d, %d", c.name, cpu, mem, c.cpu, c.mem)
		}
	}
}

// TestSelfLimits reads this process's limits: no error, and never a
// negative number (the machine's own limits are whatever they are).
func TestSelfLimits(t *testing.T) {
	t.Parallel()
	cpu, mem := SelfLimits()
	if cpu < 0 || mem < 0 {
		t.Fatalf("SelfLimits = %d, %d", cpu, mem)
	}
	t.Logf("cpu %d milli, memory %d bytes", cpu, mem)
}
