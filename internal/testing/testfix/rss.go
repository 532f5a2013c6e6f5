package testfix

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RSSWatch follows a running process's own memory from /proc/<pid>/status.
//
// Benchmarks use it instead of wait4's ru_maxrss, which overstates a
// child's peak: Go starts children with clone(CLONE_VM) and exec, and on
// exec Linux folds the high-water mark of the memory the child was sharing
// (the parent's, here the test binary's) into the child's maxrss. VmHWM
// belongs to the child's own address space from exec on.
type RSSWatch struct {
	mu              sync.Mutex
	hwm, anon, file int64
	quit, done      chan struct{}
	interval        time.Duration
	statusPath      string
	stopped         bool
}

// WatchRSS starts sampling pid every 10 ms.
func WatchRSS(pid int) *RSSWatch {
	w := &RSSWatch{quit: make(chan struct{}), done: make(chan struct{}), interval: 10 * time.Millisecond,
		statusPath: fmt.Sprintf("/proc/%d/status", pid)}
	go w.run()
	return w
}

func (w *RSSWatch) run() {
	defer close(w.done)
	for {
		w.sample()
		select {
		case <-w.quit:
			return
		case <-time.After(w.interval):
		}
	}
}

func (w *RSSWatch) sample() {
	b, err := os.ReadFile(w.statusPath)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, line := range bytes.Split(b, []byte("\n")) {
		name, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			continue
		}
		switch string(name) {
		case "VmHWM":
			w.hwm = max(w.hwm, kb<<10)
		case "RssAnon":
			w.anon = max(w.anon, kb<<10)
		case "RssFile":
			w.file = max(w.file, kb<<10)
		}
	}
}

// Stop ends sampling and returns the peaks in bytes: VmHWM (the kernel's
// own high-water mark, exact up to the last sample), and the sampled
// peaks of anonymous and file-backed resident memory.
func (w *RSSWatch) Stop() (hwm, anon, file int64) {
	w.mu.Lock()
	stopped := w.stopped
	w.stopped = true
	w.mu.Unlock()
	if !stopped {
		close(w.quit)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hwm, w.anon, w.file
}

// RunMeasured runs cmd to completion and returns its wall time and own
// peak RSS (see RSSWatch), or the command's error.
func RunMeasured(cmd *exec.Cmd) (time.Duration, int64, error) {
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	w := WatchRSS(cmd.Process.Pid)
	err := cmd.Wait()
	d := time.Since(t0)
	hwm, _, _ := w.Stop()
	if err == nil && hwm == 0 {
		err = fmt.Errorf("%s: exited before its memory could be sampled", cmd.Path)
	}
	return d, hwm, err
}

// CPUTime is the user plus system CPU time pid has used so far, from
// /proc/<pid>/stat; 0 if it cannot be read.
func CPUTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces: fields start after its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0
	}
	// Fields 14 and 15 of stat (utime, stime), in clock ticks (100 Hz on
	// Linux), are the 12th and 13th after the name.
	ut, _ := strconv.ParseInt(string(f[11]), 10, 64)
	st, _ := strconv.ParseInt(string(f[12]), 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// Median of the per-round ratios a benchmark prints; 0 for none.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := slices.Clone(v)
	slices.Sort(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

// Ratios formats per-round ratios for a benchmark's output.
func Ratios(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, " ")
}
