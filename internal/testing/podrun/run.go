package podrun

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// CgroupRoot is where the cgroup v1 hierarchies are mounted.
const CgroupRoot = "/sys/fs/cgroup"

// Runner runs Specs with podman.
type Runner struct {
	Podman  []string // podman's global flags (testenv.PodmanGlobalArgs)
	RunArgs []string // `podman run` flags (testenv.PodmanRunArgs)
	Image   string
	// WorkDir is a host directory for the pods' volumes and files.
	WorkDir string
	// SampleEvery is the memory sampling period (default 100 ms).
	SampleEvery time.Duration
}

// Pod is a started container.
type Pod struct {
	Spec   *Spec
	Name   string // the podman container's name
	r      *Runner
	dir    string // host dir of this pod
	cgroup string // the cgroup parent, relative to each hierarchy
	disk   map[string]string
	mon    *monitor
	once   sync.Once
	res    Usage
}

// Usage is what a pod used.
type Usage struct {
	// MemoryLimit is the memory cgroup's limit as the kernel has it
	// (memory.limit_in_bytes of the container), read while it ran.
	MemoryLimit int64
	// PeakRSS is the highest total_rss (anonymous memory) of the
	// container's cgroup, sampled; PeakShmem its tmpfs (memory emptyDir)
	// pages; PeakCache its page cache (reclaimable, charged to the limit
	// too).
	PeakRSS, PeakShmem, PeakCache int64
	// PeakRSSShmem is the highest sampled total_rss + total_shmem: the
	// memory the kernel cannot reclaim under the limit.
	PeakRSSShmem int64
	// CgroupMaxUsage is the cgroup parent's memory.max_usage_in_bytes:
	// everything charged, page cache and conmon included.
	CgroupMaxUsage int64
	Samples        int
	// OOMKills counts the kernel's OOM kills in the container's cgroup.
	OOMKills int64
	// EmptyDirPeak is the highest usage seen of each disk emptyDir
	// (by mount path), and EmptyDirLimit its sizeLimit.
	EmptyDirPeak  map[string]int64
	EmptyDirLimit map[string]int64
	// ProcPeakRSS is the highest peak RSS (VmHWM) of the container's
	// processes by command name (comm: "etcd-recovery", a drill's
	// "etcd-3.5"), read from /proc at each sample while they run: what
	// each program itself needed at most. VmHWM counts file pages the
	// process maps (an etcd's bbolt database): ProcPeakAnon is the highest
	// sampled RssAnon, the process's own memory, which the kernel cannot
	// reclaim under the limit.
	ProcPeakRSS  map[string]int64
	ProcPeakAnon map[string]int64
}

// String is e.g. "peak rss 38.2 MiB (tmpfs 0.0 MiB, cache 412.0 MiB) of limit 512.0 MiB".
func (u Usage) String() string {
	s := fmt.Sprintf("peak rss %s (tmpfs %s, cache %s; cgroup max usage %s) of limit %s",
		mib(u.PeakRSS), mib0(u.PeakShmem), mib0(u.PeakCache), mib0(u.CgroupMaxUsage), mib(u.MemoryLimit))
	for _, p := range sortedKeys(u.EmptyDirPeak) {
		s += fmt.Sprintf("; emptyDir %s peak %s of sizeLimit %s", p, mib0(u.EmptyDirPeak[p]), mib(u.EmptyDirLimit[p]))
	}
	for _, c := range sortedKeys(u.ProcPeakRSS) {
		s += fmt.Sprintf("; %s peak rss %s (anon %s)", c, mib0(u.ProcPeakRSS[c]), mib0(u.ProcPeakAnon[c]))
	}
	return s
}

func mib0(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Check is the kubelet's verdict on the usage: an OOM kill, or a disk
// emptyDir above its sizeLimit (the kubelet evicts the pod).
func (u Usage) Check() error {
	var errs []error
	if u.OOMKills > 0 {
		errs = append(errs, fmt.Errorf("OOM-killed (%d kills) at the memory limit %s: %s", u.OOMKills, mib(u.MemoryLimit), u))
	}
	for p, peak := range u.EmptyDirPeak {
		if lim := u.EmptyDirLimit[p]; lim > 0 && peak > lim {
			errs = append(errs, fmt.Errorf("emptyDir %s used %s, above its sizeLimit %s: the kubelet evicts the pod", p, mib0(peak), mib(lim)))
		}
	}
	return errors.Join(errs...)
}

// Result is the outcome of a run or an exec.
type Result struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	Duration time.Duration
}

// Start creates the pod's volumes and starts its container detached
// (podman run -d), under a cgroup parent of its own.
func (r *Runner) Start(ctx context.Context, s *Spec) (*Pod, error) {
	p, args, err := r.prepare(s, true)
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
	if err != nil {
		p.cleanup()
		return nil, fmt.Errorf("pod %s: podman run: %v: %s", s.PodName, err, bytes.TrimSpace(out))
	}
	p.mon.start()
	return p, nil
}

// Run runs the pod's container to completion (bounded by the spec's
// ActiveDeadline and ctx: then it is stopped as the kubelet stops it,
// SIGTERM, the grace period, SIGKILL) and removes it. The usage is
// measured throughout.
func (r *Runner) Run(ctx context.Context, s *Spec) (Result, Usage, error) {
	p, args, err := r.prepare(s, false)
	if err != nil {
		return Result{}, Usage{}, err
	}
	defer p.cleanup()
	if s.ActiveDeadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.ActiveDeadline)
		defer cancel()
	}
	cmd := exec.Command("podman", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Result{}, Usage{}, err
	}
	p.mon.start()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-ctx.Done():
		p.podman(context.Background(), "stop", "-t", strconv.Itoa(int(s.GracePeriod/time.Second)), p.Name)
		werr = <-done
	}
	res := Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Duration: time.Since(start)}
	u := p.finish()
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		res.ExitCode = ee.ExitCode()
	default:
		return res, u, werr
	}
	if p.oomKilled() {
		u.OOMKills = max(u.OOMKills, 1)
	}
	if ctx.Err() != nil {
		return res, u, fmt.Errorf("pod %s: still running after %v (activeDeadlineSeconds or the test's deadline): stopped", s.PodName, res.Duration.Round(time.Second))
	}
	return res, u, nil
}

// Exec runs a command in the running container, as `kubectl exec` does
// (the container's user, env and cgroup).
func (p *Pod) Exec(ctx context.Context, argv ...string) (Result, error) {
	cmd := exec.CommandContext(ctx, "podman", append(append(append([]string{}, p.r.Podman...), "exec", p.Name), argv...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	res := Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Duration: time.Since(start)}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitCode = ee.ExitCode()
		err = nil
	}
	return res, err
}

// Logs is what the container's main process wrote so far (stdout and
// stderr), as `kubectl logs` shows it.
func (p *Pod) Logs(ctx context.Context) ([]byte, error) {
	return p.podman(ctx, "logs", p.Name)
}

// HostPath is the host directory behind a disk emptyDir of the pod, by
// its mount path in the container.
func (p *Pod) HostPath(mountPath string) string { return p.disk[mountPath] }

// Usage is the usage measured so far.
func (p *Pod) Usage() Usage { return p.mon.snapshot() }

// Stop stops the container as the kubelet does (SIGTERM, the grace
// period, SIGKILL), removes it and its volumes, and returns how it
// exited, how long the stop took and the usage.
func (p *Pod) Stop(ctx context.Context) (exitCode int, took time.Duration, u Usage, err error) {
	start := time.Now()
	if out, err := p.podman(ctx, "stop", "-t", strconv.Itoa(int(p.Spec.GracePeriod/time.Second)), p.Name); err != nil {
		p.cleanup()
		return -1, time.Since(start), p.finish(), fmt.Errorf("pod %s: podman stop: %v: %s", p.Name, err, out)
	}
	took = time.Since(start)
	u = p.finish()
	out, err := p.podman(ctx, "inspect", "--format", "{{.State.ExitCode}} {{.State.OOMKilled}}", p.Name)
	if err == nil {
		f := strings.Fields(string(out))
		if len(f) == 2 {
			exitCode, _ = strconv.Atoi(f[0])
			if f[1] == "true" {
				u.OOMKills = max(u.OOMKills, 1)
			}
		}
	}
	p.cleanup()
	return exitCode, took, u, err
}

// Close removes the container and the pod's files (idempotent).
func (p *Pod) Close() { p.finish(); p.cleanup() }

func (p *Pod) podman(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, "podman", append(append([]string{}, p.r.Podman...), args...)...).CombinedOutput()
}

func (p *Pod) oomKilled() bool {
	out, err := p.podman(context.Background(), "inspect", "--format", "{{.State.OOMKilled}}", p.Name)
	return err == nil && strings.TrimSpace(string(out)) == "true"
}

func (p *Pod) finish() Usage {
	p.once.Do(func() {
		p.res = p.mon.stop()
	})
	return p.res
}

func (p *Pod) cleanup() {
	p.podman(context.Background(), "rm", "-f", "-t", "0", p.Name)
	removeCgroup(p.cgroup)
	os.RemoveAll(p.dir)
}

// prepare materialises the volumes and builds podman's argv (no secret
// in it: env goes through a 0600 file, secrets through files).
func (r *Runner) prepare(s *Spec, detach bool) (*Pod, []string, error) {
	r.reapOrphans()
	id := randHex(4)
	name := sanitize(s.PodName) + "-" + id
	dir := filepath.Join(r.WorkDir, name)
	p := &Pod{Spec: s, Name: name, r: r, dir: dir, cgroup: "podrun-" + name, disk: map[string]string{}}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*Pod, []string, error) {
		p.cleanup()
		return nil, nil, fmt.Errorf("pod %s: %w", s.PodName, err)
	}
	// The cgroup parent, made first so it outlives the container's own
	// cgroup: its max_usage_in_bytes is read after the container exits.
	if err := os.Mkdir(filepath.Join(CgroupRoot, "memory", p.cgroup), 0o755); err != nil {
		return fail(fmt.Errorf("cgroup parent: %w", err))
	}
	args := append(append([]string{}, r.Podman...), "run", "--name", name, "--hostname", sanitize(s.PodName),
		"--cgroup-parent", "/"+p.cgroup, "--label", OwnerLabel+"="+self)
	args = append(args, r.RunArgs...)
	if detach {
		args = append(args, "-d")
	}
	// Environment, through a file only root can read.
	var env bytes.Buffer
	for _, e := range s.Env {
		fmt.Fprintf(&env, "%s=%s\n", e.Name, e.Value)
	}
	envFile := filepath.Join(dir, "env")
	if err := os.WriteFile(envFile, env.Bytes(), 0o600); err != nil {
		return fail(err)
	}
	args = append(args, "--env-file", envFile)
	user := strconv.FormatInt(s.User, 10)
	if s.Group != 0 || s.User != 0 {
		user += ":" + strconv.FormatInt(s.Group, 10)
	}
	args = append(args, "--user", user)
	for _, g := range s.SupplementalGroups {
		args = append(args, "--group-add", strconv.FormatInt(g, 10))
	}
	if s.ReadOnlyRoot {
		// --read-only-tmpfs=false: Kubernetes mounts no tmpfs of its own
		// on /tmp, /run or /var/tmp.
		args = append(args, "--read-only", "--read-only-tmpfs=false")
	}
	if s.NoNewPrivileges {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	for _, c := range s.CapDrop {
		args = append(args, "--cap-drop", c)
	}
	if s.MemoryLimit > 0 {
		m := strconv.FormatInt(s.MemoryLimit, 10)
		args = append(args, "--memory", m, "--memory-swap", m) // no swap, as the kubelet
	}
	if s.CPULimitMilli > 0 {
		args = append(args, "--cpus", strconv.FormatFloat(float64(s.CPULimitMilli)/1000, 'f', 3, 64))
	}
	if s.CPURequestMilli > 0 {
		args = append(args, "--cpu-shares", strconv.FormatInt(max(2, s.CPURequestMilli*1024/1000), 10))
	}
	if s.WorkingDir != "" {
		args = append(args, "--workdir", s.WorkingDir)
	}
	diskLimit := map[string]int64{}
	for i, m := range s.Mounts {
		host := filepath.Join(dir, fmt.Sprintf("vol%d-%s", i, sanitize(m.Volume)))
		switch m.Kind {
		case MountSecret, MountServiceAccount:
			if err := writeAtomicVolume(host, m); err != nil {
				return fail(fmt.Errorf("volume %s: %w", m.Volume, err))
			}
			args = append(args, "--volume", host+":"+m.Path+":ro")
		case MountEmptyDirDisk:
			// As the kubelet makes it: 0777, and with fsGroup, owned by
			// that group with the setgid bit.
			if err := os.Mkdir(host, 0o777); err != nil {
				return fail(err)
			}
			mode := os.FileMode(0o777)
			if m.FSGroup != nil {
				if err := os.Chown(host, 0, int(*m.FSGroup)); err != nil {
					return fail(err)
				}
				mode |= os.ModeSetgid
			}
			if err := os.Chmod(host, mode); err != nil {
				return fail(err)
			}
			opt := ""
			if m.ReadOnly {
				opt = ":ro"
			}
			args = append(args, "--volume", host+":"+m.Path+opt)
			p.disk[m.Path] = host
			diskLimit[m.Path] = m.SizeLimit
		case MountEmptyDirMemory:
			// As the kubelet mounts it: a tmpfs of sizeLimit, mode 0777
			// (the kubelet also gives it the fsGroup, which podman's
			// --tmpfs cannot; with 0777 that changes nothing).
			rw := "rw"
			if m.ReadOnly {
				rw = "ro"
			}
			opt := fmt.Sprintf("%s,nosuid,nodev,size=%d,mode=0777", rw, m.SizeLimit)
			args = append(args, "--tmpfs", m.Path+":"+opt)
		default:
			return fail(fmt.Errorf("volume %s: unknown kind %s", m.Volume, m.Kind))
		}
	}
	if len(s.Entrypoint) > 0 {
		ep, _ := json.Marshal(s.Entrypoint)
		args = append(args, "--entrypoint", string(ep))
	}
	args = append(args, r.Image)
	args = append(args, s.Args...)
	every := r.SampleEvery
	if every == 0 {
		every = 100 * time.Millisecond
	}
	p.mon = &monitor{cgroup: p.cgroup, every: every, disk: p.disk, diskLimit: diskLimit, limit: s.MemoryLimit}
	return p, args, nil
}

// writeAtomicVolume lays out a secret (or projected token) volume as the
// kubelet's atomic writer does: the files in a timestamped directory,
// "..data" pointing at it, and each key a symlink through "..data"; files
// owned by root, with fsGroup their group and group-read added.
func writeAtomicVolume(dir string, m Mount) error {
	ts := time.Now().UTC().Format("..2006_01_02_15_04_05.000000000")
	if err := os.MkdirAll(filepath.Join(dir, ts), 0o755); err != nil {
		return err
	}
	mode := m.FileMode
	gid := 0
	if m.FSGroup != nil {
		gid = int(*m.FSGroup)
		mode |= 0o440 // volume.SetVolumeOwnership, read-only volume
	}
	for _, k := range sortedKeys(m.Files) {
		if strings.ContainsAny(k, "/") || strings.HasPrefix(k, "..") {
			return fmt.Errorf("key %q is not a file name", k)
		}
		f := filepath.Join(dir, ts, k)
		if err := os.WriteFile(f, m.Files[k], 0o600); err != nil {
			return err
		}
		if err := os.Chown(f, 0, gid); err != nil {
			return err
		}
		if err := os.Chmod(f, mode); err != nil {
			return err
		}
	}
	if err := os.Symlink(ts, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	for k := range m.Files {
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			return err
		}
	}
	if m.FSGroup != nil {
		for _, d := range []string{dir, filepath.Join(dir, ts)} {
			if err := os.Chown(d, 0, gid); err != nil {
				return err
			}
			if err := os.Chmod(d, 0o755|os.ModeSetgid); err != nil {
				return err
			}
		}
	}
	return nil
}

// monitor samples the container's memory cgroup and the disk emptyDirs.
type monitor struct {
	cgroup    string
	every     time.Duration
	disk      map[string]string
	diskLimit map[string]int64
	limit     int64

	mu      sync.Mutex
	u       Usage
	stopCh  chan struct{}
	doneCh  chan struct{}
	started bool
}

func (m *monitor) start() {
	m.u.EmptyDirPeak, m.u.EmptyDirLimit = map[string]int64{}, map[string]int64{}
	m.u.ProcPeakRSS, m.u.ProcPeakAnon = map[string]int64{}, map[string]int64{}
	for p, l := range m.diskLimit {
		m.u.EmptyDirPeak[p], m.u.EmptyDirLimit[p] = 0, l
	}
	m.stopCh, m.doneCh, m.started = make(chan struct{}), make(chan struct{}), true
	go func() {
		defer close(m.doneCh)
		t := time.NewTicker(m.every)
		defer t.Stop()
		lastDisk := time.Time{}
		for {
			m.sample()
			if time.Since(lastDisk) >= time.Second {
				m.sampleDisk()
				lastDisk = time.Now()
			}
			select {
			case <-m.stopCh:
				return
			case <-t.C:
			}
		}
	}()
}

func (m *monitor) stop() Usage {
	if m == nil || !m.started {
		return Usage{}
	}
	close(m.stopCh)
	<-m.doneCh
	m.sample()
	m.sampleDisk()
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, err := readInt(filepath.Join(CgroupRoot, "memory", m.cgroup, "memory.max_usage_in_bytes")); err == nil {
		m.u.CgroupMaxUsage = v
	}
	if m.u.MemoryLimit == 0 {
		m.u.MemoryLimit = m.limit
	}
	return m.u
}

func (m *monitor) snapshot() Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.u
	u.EmptyDirPeak = map[string]int64{}
	for k, v := range m.u.EmptyDirPeak {
		u.EmptyDirPeak[k] = v
	}
	u.ProcPeakRSS, u.ProcPeakAnon = map[string]int64{}, map[string]int64{}
	for k, v := range m.u.ProcPeakRSS {
		u.ProcPeakRSS[k] = v
	}
	for k, v := range m.u.ProcPeakAnon {
		u.ProcPeakAnon[k] = v
	}
	return u
}

// containerCgroups are the container's memory cgroups under the parent
// (conmon's is left out).
func (m *monitor) containerCgroups() []string {
	ents, err := os.ReadDir(filepath.Join(CgroupRoot, "memory", m.cgroup))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && e.Name() != "conmon" {
			out = append(out, filepath.Join(CgroupRoot, "memory", m.cgroup, e.Name()))
		}
	}
	return out
}

func (m *monitor) sample() {
	for _, cg := range m.containerCgroups() {
		st, err := readStat(filepath.Join(cg, "memory.stat"))
		if err != nil {
			continue // gone: the container exited
		}
		oom := int64(0)
		if b, err := os.ReadFile(filepath.Join(cg, "memory.oom_control")); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
					oom, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				}
			}
		}
		lim, limErr := readInt(filepath.Join(cg, "memory.limit_in_bytes"))
		hwm, anon := procPeaks(filepath.Join(cg, "cgroup.procs"))
		m.mu.Lock()
		for c, v := range hwm {
			m.u.ProcPeakRSS[c] = max(m.u.ProcPeakRSS[c], v)
		}
		for c, v := range anon {
			m.u.ProcPeakAnon[c] = max(m.u.ProcPeakAnon[c], v)
		}
		m.u.Samples++
		m.u.PeakRSS = max(m.u.PeakRSS, st["total_rss"])
		m.u.PeakShmem = max(m.u.PeakShmem, st["total_shmem"])
		m.u.PeakCache = max(m.u.PeakCache, st["total_cache"])
		m.u.PeakRSSShmem = max(m.u.PeakRSSShmem, st["total_rss"]+st["total_shmem"])
		m.u.OOMKills = max(m.u.OOMKills, oom)
		if limErr == nil {
			m.u.MemoryLimit = lim
		}
		m.mu.Unlock()
	}
}

func (m *monitor) sampleDisk() {
	for path, host := range m.disk {
		n := diskUsage(host)
		m.mu.Lock()
		m.u.EmptyDirPeak[path] = max(m.u.EmptyDirPeak[path], n)
		m.mu.Unlock()
	}
}

// diskUsage is what `du` counts: allocated blocks, as the kubelet's
// emptyDir accounting does.
func diskUsage(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// procPeaks reads the peak RSS (VmHWM) and the current anonymous RSS
// (RssAnon) of each process listed in a cgroup.procs file, by command name
// (the highest per name).
func procPeaks(procsFile string) (hwm, anon map[string]int64) {
	b, err := os.ReadFile(procsFile)
	if err != nil {
		return nil, nil
	}
	hwm, anon = map[string]int64{}, map[string]int64{}
	kb := func(v string) int64 {
		f := strings.Fields(v) // "12345 kB"
		if len(f) == 0 {
			return 0
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		return n << 10
	}
	for _, pid := range strings.Fields(string(b)) {
		st, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
		if err != nil {
			continue // exited
		}
		var name string
		var h, a int64
		for _, l := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(l, "Name:"); ok {
				name = strings.TrimSpace(v)
			} else if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				h = kb(v)
			} else if v, ok := strings.CutPrefix(l, "RssAnon:"); ok {
				a = kb(v)
			}
		}
		if name != "" {
			hwm[name] = max(hwm[name], h)
			anon[name] = max(anon[name], a)
		}
	}
	return hwm, anon
}

func readStat(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			out[f[0]] = v
		}
	}
	return out, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// removeCgroup removes the cgroup parent (and what is left under it) in
// every hierarchy, deepest first.
func removeCgroup(name string) {
	if name == "" || strings.Contains(name, "..") {
		return
	}
	hier, _ := os.ReadDir(CgroupRoot)
	for _, h := range hier {
		root := filepath.Join(CgroupRoot, h.Name(), name)
		var dirs []string
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
		for _, d := range dirs {
			os.Remove(d)
		}
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-.")
	if len(out) > 50 {
		out = out[:50]
	}
	return out
}
