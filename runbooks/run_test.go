package runbooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/testenv"
	"github.com/armada/etcd-recovery/internal/testfix"
)

// blockTimeout bounds one block (a restore verify waits up to 2 minutes).
const blockTimeout = 4 * time.Minute

// connectionRef is the block every command runs after: the exported
// connection settings an SRE has in their shell.
const connectionRef = "README.md#connection-settings"

// toolkitTools are the shell utilities the toolkit image has (busybox); a
// runbook block sees only these, etcd's tools and etcd-recovery on PATH.
var toolkitTools = []string{"awk", "cat", "cut", "date", "echo", "env", "grep", "head", "ls", "mkdir",
	"mv", "printf", "rm", "sed", "seq", "sleep", "sort", "tail", "tee", "tr", "true", "false", "wc"}

// executed records every block run, by id, across scenarios.
var executed sync.Map

var placeholderRE = regexp.MustCompile(`<([a-z][a-z0-9-]*)>`)

// pathDir makes a directory of symlinks: the tool, etcd 3.5.35's etcd,
// etcdctl and etcdutl, the toolkit's shell utilities and extra.
func pathDir(tb testing.TB, extra []string) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	links := map[string]string{
		"etcd-recovery": testfix.Tool(tb),
		"etcd":          testenv.EtcdBin(tb, testenv.V35),
		"etcdctl":       testenv.EtcdctlBin(tb, testenv.V35),
		"etcdutl":       testenv.EtcdutlBin(tb, testenv.V35),
		// The servers a restore drill runs, as the image ships them.
		"etcd-3.5": testenv.EtcdBin(tb, testenv.V35),
		"etcd-3.6": testenv.EtcdBin(tb, testenv.V36),
	}
	for _, name := range append(append([]string{}, toolkitTools...), extra...) {
		p, err := exec.LookPath(name)
		if err != nil {
			tb.Fatalf("runbook tool %s not found on this machine (Debian packages: coreutils, grep, sed, mawk, curl, zstd): %v", name, err)
		}
		links[name] = p
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// scenario runs runbook sections in one failure: one working directory
// (files a block writes are read by the next), one set of placeholders.
type scenario struct {
	t        *testing.T
	rb       runbooks
	dir      string
	vars     map[string]string
	members  []map[string]string // per-member placeholders (name, client-url, peer-url)
	paths    map[string]string   // PATH per needs
	extraEnv []string            // more of the block's environment (KUBECONFIG=...), as an SRE's shell has it
	// after, if set, is called after each block that ran in the
	// foreground (and kept its promised exit code): what the block did
	// is checked before the next one runs.
	after func(r result)
	bg    int
}

func newScenario(t *testing.T, rb runbooks, vars map[string]string) *scenario {
	t.Helper()
	s := &scenario{t: t, rb: rb, dir: t.TempDir(), vars: vars, paths: map[string]string{}}
	return s
}

func (s *scenario) path(needs []string) string {
	key := strings.Join(needs, ",")
	if p, ok := s.paths[key]; ok {
		return p
	}
	p := pathDir(s.t, needs)
	s.paths[key] = p
	return p
}

// fill replaces every <placeholder>; an unknown one fails the test (the
// runbook uses a placeholder the scenario cannot fill: a new one must be
// described in README.md and given here).
func (s *scenario) fill(b *block, code string, member map[string]string) string {
	s.t.Helper()
	var missing []string
	out := placeholderRE.ReplaceAllStringFunc(code, func(m string) string {
		name := m[1 : len(m)-1]
		if v, ok := member[name]; ok {
			return v
		}
		if v, ok := s.vars[name]; ok {
			return v
		}
		missing = append(missing, m)
		return m
	})
	if len(missing) > 0 {
		s.t.Fatalf("%s: no value for %s in scenario %s", b.id(), strings.Join(missing, ", "), s.t.Name())
	}
	return out
}

// result is one run of a block.
type result struct {
	block  *block
	code   string // as run
	output string // stdout and stderr
	exit   int
}

func (r result) String() string {
	return fmt.Sprintf("%s (exit %d):\n%s\n--- output ---\n%s", r.block.id(), r.exit, r.code, r.output)
}

// run executes the section ref: every block under it, in order, each in a
// fresh bash -euo pipefail after the connection settings, checking each
// block's promised exit code. Background blocks are started and left
// running until the test ends.
func (s *scenario) run(ref string) []result {
	s.t.Helper()
	conn, err := s.rb.blocks(connectionRef)
	if err != nil || len(conn) != 1 {
		s.t.Fatalf("connection settings %s: %v (%d blocks)", connectionRef, err, len(conn))
	}
	blocks, err := s.rb.blocks(ref)
	if err != nil {
		s.t.Fatal(err)
	}
	var results []result
	ran := 0
	for _, b := range blocks {
		if b.opts.notRun != "" {
			s.t.Logf("%s: not run (%s)", b.id(), b.opts.notRun)
			continue
		}
		members := []map[string]string{nil}
		if b.opts.perMember {
			if len(s.members) == 0 {
				s.t.Fatalf("%s runs per member, scenario has no members", b.id())
			}
			members = s.members
		}
		for _, m := range members {
			script := s.fill(conn[0], conn[0].code, m) + s.fill(b, b.code, m)
			if b.opts.background {
				s.background(b, script)
			} else {
				r := s.exec(b, script)
				results = append(results, r)
				if r.exit != b.opts.exit {
					s.t.Fatalf("runbook %s: block %s exited %d, the runbook promises %d:\n%s", ref, b.id(), r.exit, b.opts.exit, r)
				}
				s.t.Logf("ran %s (exit %d):\n%s", b.id(), r.exit, r.output)
				if s.after != nil {
					s.after(r)
				}
			}
		}
		executed.Store(b.id(), true)
		executed.Store(conn[0].id(), true)
		ran++
	}
	if ran == 0 {
		s.t.Fatalf("runbook section %s has no block to run", ref)
	}
	return results
}

func (s *scenario) env(b *block) []string {
	return append([]string{"PATH=" + s.path(b.opts.needs), "HOME=" + s.dir, "LANG=C", "TMPDIR=" + s.dir}, s.extraEnv...)
}

func (s *scenario) exec(b *block, script string) result {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), blockTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = s.dir, s.env(b)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	r := result{block: b, code: script, output: out.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		s.t.Fatalf("block %s did not end within %v:\n%s", b.id(), blockTimeout, r)
	case errors.As(err, &ee):
		r.exit = ee.ExitCode()
	default:
		s.t.Fatalf("block %s: %v", b.id(), err)
	}
	return r
}

// background starts a block that runs a server in the foreground (etcd);
// it is killed (its whole process group) when the test ends, and its log is
// printed if the test failed.
func (s *scenario) background(b *block, script string) {
	s.t.Helper()
	s.bg++
	logPath := filepath.Join(s.dir, fmt.Sprintf("background-%d.log", s.bg))
	f, err := os.Create(logPath)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command("/bin/bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = s.dir, s.env(b)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("block %s: %v", b.id(), err)
	}
	f.Close()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if s.t.Failed() {
			tail, _ := os.ReadFile(logPath)
			if len(tail) > 4000 {
				tail = tail[len(tail)-4000:]
			}
			s.t.Logf("background block %s (%s), log tail:\n%s", b.id(), logPath, tail)
		}
	})
}

// find returns the results whose command contains substr.
func find(rs []result, substr string) []result {
	var out []result
	for _, r := range rs {
		if strings.Contains(r.block.code, substr) {
			out = append(out, r)
		}
	}
	return out
}

// nextStep is the NEXT STEP line of an inspect output.
func nextStep(tb testing.TB, r result) string {
	tb.Helper()
	lines := strings.Split(r.output, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "NEXT STEP:") {
			// Long lines are wrapped, continued on indented lines.
			for _, c := range lines[i+1:] {
				if !strings.HasPrefix(c, " ") || strings.TrimSpace(c) == "" {
					break
				}
				l += " " + strings.TrimSpace(c)
			}
			return strings.TrimSpace(l)
		}
	}
	tb.Fatalf("no NEXT STEP line in the output of %s", r)
	return ""
}

// unexecuted lists every runnable block no scenario ran.
func (rb runbooks) unexecuted() []string {
	var out []string
	for _, d := range rb {
		for _, b := range d.blocks {
			if _, ok := executed.Load(b.id()); !ok && b.opts.notRun == "" {
				out = append(out, b.id())
			}
		}
	}
	sort.Strings(out)
	return out
}
