package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is one run of a server process. It is not restarted: a restart makes
// a new proc.
type proc struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has been waited for
	waitErr error         // valid after done

	mu     sync.Mutex
	frozen bool
}

// procSlot is a server's current (or last) process: a restart replaces
// it. Once the server's test has ended (closed) it is not started again.
type procSlot struct {
	mu     sync.Mutex
	proc   *proc
	closed bool
}

func (s *procSlot) current() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// launch makes start's process the current one, unless the server's test
// has ended or its process still runs (name names the server then).
func (s *procSlot) launch(name string, start func() (*proc, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("%s: its test has ended", name)
	}
	if s.proc.running() {
		return fmt.Errorf("%s is already running (pid %d)", name, s.proc.pid())
	}
	p, err := start()
	if err != nil {
		return err
	}
	s.proc = p
	return nil
}

// close marks the server's test ended and kills its process.
func (s *procSlot) close() {
	s.mu.Lock()
	s.closed = true
	p := s.proc
	s.mu.Unlock()
	p.kill()
}

// Server processes are started from one goroutine locked to its OS thread for
// the life of the test binary: Pdeathsig fires when the *thread* that forked
// the child exits, and an ordinary goroutine's thread could in principle go
// away while the server still runs.
var (
	spawnOnce sync.Once
	spawnCh   chan func()
)

func onSpawnThread(f func()) {
	spawnOnce.Do(func() {
		spawnCh = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for f := range spawnCh {
				f()
			}
		}()
	})
	done := make(chan struct{})
	spawnCh <- func() { defer close(done); f() }
	<-done
}

// childEnv returns the environment for a server: ours without variables the
// servers would read as configuration, plus extra.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "ETCD_") || strings.HasPrefix(k, "ETCDCTL_") || strings.HasPrefix(k, "MINIO_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// startProc starts bin with args, appending its stdout and stderr to logPath.
// env, when non-nil, is the full environment.
func startProc(name, bin string, args, env []string, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	fmt.Fprintf(logf, "==== testenv %s: starting %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))

	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	onSpawnThread(func() { err = cmd.Start() })
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// A nil *proc is a server with no process started yet: pid is 0, it is
// not running, and freeze, thaw, kill and stop do nothing to it.

func (p *proc) pid() int {
	if p == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// running reports whether the process is alive (frozen counts as alive).
func (p *proc) running() bool { return p != nil && !p.exited() }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process group (the server and anything it forked).
func (p *proc) signal(sig syscall.Signal) {
	if p.exited() {
		return
	}
	if err := syscall.Kill(-p.pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Signal(sig)
	}
}

// freeze stops the process with SIGSTOP and returns once every thread of
// it is stopped. kill(2) returns when the signal is queued, not when it
// has taken effect: a thread finishing a system call (an fdatasync, a
// write of a response) stops only when it returns, and a busy machine may
// schedule it late. A test that freezes the store and at once sends it a
// request was seen to get its answer (or the first of several) from the
// "frozen" MinIO.
func (p *proc) freeze() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signal(syscall.SIGSTOP)
	p.frozen = true
	waitStopped(p.pid(), 10*time.Second)
}

// waitStopped waits until every thread of pid is in the stopped state ('T'
// in /proc/<pid>/task/<tid>/stat), or the process is gone, or timeout.
func waitStopped(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if allStopped(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func allStopped(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return true // gone
	}
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/stat")
		if err != nil {
			continue // the thread exited
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false
		}
		if st := b[i+2]; st != 'T' && st != 't' {
			return false
		}
	}
	return true
}

func (p *proc) thaw() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signal(syscall.SIGCONT)
	p.frozen = false
}

// kill thaws the process if frozen, SIGKILLs its group and waits for it.
func (p *proc) kill() {
	if p == nil {
		return
	}
	p.thaw()
	p.signal(syscall.SIGKILL)
	<-p.done
}

// stop thaws the process if frozen, SIGTERMs it and waits up to stopTimeout,
// then SIGKILLs it.
func (p *proc) stop() {
	if p == nil {
		return
	}
	p.thaw()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		p.kill()
	}
}

// exitError describes how the process ended, for failure messages.
func (p *proc) exitError() string {
	if !p.exited() {
		return "still running"
	}
	if p.waitErr == nil {
		return "exited with status 0"
	}
	return p.waitErr.Error()
}

// tailFile returns the last n lines of path.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	const maxRead = 256 << 10
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot stat %s: %v)", path, err)
	}
	off := st.Size() - maxRead
	if off < 0 {
		off = 0
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return fmt.Sprintf("(cannot seek %s: %v)", path, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	data = bytes.TrimRight(data, "\n")
	lines := bytes.Split(data, []byte("\n"))
	if off > 0 && len(lines) > 0 {
		lines = lines[1:] // probably a partial line
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// logTail logs the tail of a server's log to tb.
func logTail(tb testing.TB, name, path string) {
	tb.Helper()
	tb.Logf("---- last %d lines of %s log (%s) ----\n%s\n---- end of %s log ----", logTailLines, name, path, tailFile(path, logTailLines), name)
}
