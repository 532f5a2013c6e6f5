package mdblocks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// BlockTimeout bounds one block (a restore verify waits up to 2 minutes).
const BlockTimeout = 4 * time.Minute

// ToolkitTools are the shell utilities the toolkit image has (busybox); a
// block sees only these, etcd's tools and etcd-recovery on PATH, plus what
// its needs= annotation adds.
var ToolkitTools = []string{"awk", "cat", "cut", "date", "echo", "env", "grep", "head", "ls", "mkdir",
	"mv", "printf", "rm", "sed", "seq", "sleep", "sort", "tail", "tee", "tr", "true", "false", "wc"}

// executed records every block run, by id, across scenarios of the test
// binary.
var executed sync.Map

// Executed reports whether a scenario ran b.
func Executed(b *Block) bool {
	_, ok := executed.Load(b.ID())
	return ok
}

var placeholderRE = regexp.MustCompile(`<([a-z][a-z0-9-]*)>`)

// Placeholders lists the <placeholders> of a block's code, in order, once
// each.
func Placeholders(code string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range placeholderRE.FindAllStringSubmatch(code, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			out = append(out, m[1])
		}
	}
	return out
}

// Scenario runs sections of a Set in one setup: one working directory
// (files a block writes are read by the next), one set of placeholders.
type Scenario struct {
	T   *testing.T
	Set Set
	// Prelude, if set, runs before every block in the same shell: the
	// connection settings an SRE has exported
	// (runbooks/README.md#connection-settings).
	Prelude  *Block
	Dir      string
	Vars     map[string]string
	Members  []map[string]string // per-member placeholders (name, client-url, peer-url)
	ExtraEnv []string            // more of the blocks' environment (KUBECONFIG=...), as an SRE's shell has it
	// Tools are binaries the harness provides for needs= (kubectl: the
	// test servers' build, never one on this machine's PATH); other
	// needs are looked up on PATH.
	Tools map[string]string
	// After, if set, is called after each block that ran in the
	// foreground (and kept its promised exit code): what the block did
	// is checked before the next one runs.
	After func(r Result)
	paths map[string]string
	bg    int
}

// NewScenario is a scenario in a fresh directory.
func NewScenario(t *testing.T, set Set, prelude *Block, vars map[string]string) *Scenario {
	t.Helper()
	if vars == nil {
		vars = map[string]string{}
	}
	return &Scenario{T: t, Set: set, Prelude: prelude, Dir: t.TempDir(), Vars: vars, paths: map[string]string{}, Tools: map[string]string{}}
}

// PathDir makes a directory of symlinks: the tool, etcd 3.5's etcd,
// etcdctl and etcdutl, the drill servers etcd-3.5 and etcd-3.6, the
// toolkit's shell utilities and extra (from tools, else this machine's
// PATH).
func PathDir(tb testing.TB, extra []string, tools map[string]string) string {
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
	for _, name := range append(append([]string{}, ToolkitTools...), extra...) {
		if p, ok := tools[name]; ok {
			links[name] = p
			continue
		}
		p, err := exec.LookPath(name)
		if err != nil {
			tb.Fatalf("tool %s not found on this machine (Debian packages: coreutils, grep, sed, mawk, curl, zstd): %v", name, err)
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

func (s *Scenario) path(needs []string) string {
	key := strings.Join(needs, ",")
	if p, ok := s.paths[key]; ok {
		return p
	}
	p := PathDir(s.T, needs, s.Tools)
	s.paths[key] = p
	return p
}

// fill replaces every <placeholder>; an unknown one fails the test (the
// text uses a placeholder the scenario cannot fill: a new one must be
// described where the placeholders are, and given here).
func (s *Scenario) fill(b *Block, member map[string]string) string {
	s.T.Helper()
	var missing []string
	out := placeholderRE.ReplaceAllStringFunc(b.Code, func(m string) string {
		name := m[1 : len(m)-1]
		if v, ok := member[name]; ok {
			return v
		}
		if v, ok := s.Vars[name]; ok {
			return v
		}
		missing = append(missing, m)
		return m
	})
	if len(missing) > 0 {
		s.T.Fatalf("%s: no value for %s in scenario %s", b.ID(), strings.Join(missing, ", "), s.T.Name())
	}
	return out
}

// Result is one run of a block.
type Result struct {
	Block  *Block
	Code   string // as run
	Output string // stdout and stderr
	Exit   int
}

func (r Result) String() string {
	return fmt.Sprintf("%s (exit %d):\n%s\n--- output ---\n%s", r.Block.ID(), r.Exit, r.Code, r.Output)
}

// Run executes the section ref: every block under it, in order, each in a
// fresh bash -euo pipefail after the prelude, checking each block's
// promised exit code. Background blocks are started and left running
// until the test ends. A section with no block to run fails the test.
func (s *Scenario) Run(ref string) []Result {
	s.T.Helper()
	blocks, err := s.Set.Blocks(ref)
	if err != nil {
		s.T.Fatal(err)
	}
	var results []Result
	ran := 0
	for _, b := range blocks {
		if b.Opts.NotRun != "" {
			s.T.Logf("%s: not run (%s)", b.ID(), b.Opts.NotRun)
			continue
		}
		members := []map[string]string{nil}
		if b.Opts.PerMember {
			if len(s.Members) == 0 {
				s.T.Fatalf("%s runs per member, scenario has no members", b.ID())
			}
			members = s.Members
		}
		for _, m := range members {
			script := s.fill(b, m)
			if s.Prelude != nil {
				script = s.fill(s.Prelude, m) + script
			}
			if b.Opts.Background {
				s.background(b, script)
				continue
			}
			r := s.exec(b, script)
			results = append(results, r)
			if r.Exit != b.Opts.Exit {
				s.T.Fatalf("%s: block %s exited %d, the text promises %d:\n%s", ref, b.ID(), r.Exit, b.Opts.Exit, r)
			}
			s.T.Logf("ran %s (exit %d):\n%s", b.ID(), r.Exit, r.Output)
			if s.After != nil {
				s.After(r)
			}
		}
		executed.Store(b.ID(), true)
		if s.Prelude != nil {
			executed.Store(s.Prelude.ID(), true)
		}
		ran++
	}
	if ran == 0 {
		s.T.Fatalf("section %s has no block to run", ref)
	}
	return results
}

func (s *Scenario) env(b *Block) []string {
	return append([]string{"PATH=" + s.path(b.Opts.Needs), "HOME=" + s.Dir, "LANG=C", "TMPDIR=" + s.Dir}, s.ExtraEnv...)
}

func (s *Scenario) exec(b *Block, script string) Result {
	s.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), BlockTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = s.Dir, s.env(b)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	r := Result{Block: b, Code: script, Output: out.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		s.T.Fatalf("block %s did not end within %v:\n%s", b.ID(), BlockTimeout, r)
	case errors.As(err, &ee):
		r.Exit = ee.ExitCode()
	default:
		s.T.Fatalf("block %s: %v", b.ID(), err)
	}
	return r
}

// background starts a block that runs a server in the foreground (etcd);
// it is killed (its whole process group) when the test ends, and its log is
// printed if the test failed.
func (s *Scenario) background(b *Block, script string) {
	s.T.Helper()
	s.bg++
	logPath := filepath.Join(s.Dir, fmt.Sprintf("background-%d.log", s.bg))
	f, err := os.Create(logPath)
	if err != nil {
		s.T.Fatal(err)
	}
	cmd := exec.Command("/bin/bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = s.Dir, s.env(b)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		s.T.Fatalf("block %s: %v", b.ID(), err)
	}
	f.Close()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t := s.T
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if t.Failed() {
			tail, _ := os.ReadFile(logPath)
			if len(tail) > 4000 {
				tail = tail[len(tail)-4000:]
			}
			t.Logf("background block %s (%s), log tail:\n%s", b.ID(), logPath, tail)
		}
	})
}

// Find returns the results whose block's code contains substr.
func Find(rs []Result, substr string) []Result {
	var out []Result
	for _, r := range rs {
		if strings.Contains(r.Block.Code, substr) {
			out = append(out, r)
		}
	}
	return out
}

// One is the i-th result (negative: from the end) whose code contains
// substr; none fails the test.
func One(t testing.TB, rs []Result, substr string, i int) Result {
	t.Helper()
	got := Find(rs, substr)
	if i < 0 {
		i += len(got)
	}
	if i < 0 || i >= len(got) {
		t.Fatalf("no run #%d of a block with %q (%d found)", i, substr, len(got))
	}
	return got[i]
}

// MustContain checks that r's output says each of subs (whitespace
// collapsed: tables and long lines are wrapped).
func MustContain(t testing.TB, r Result, subs ...string) {
	t.Helper()
	out := strings.Join(strings.Fields(r.Output), " ")
	for _, s := range subs {
		if !strings.Contains(out, strings.Join(strings.Fields(s), " ")) {
			t.Errorf("the output of %s does not say %q:\n%s", r.Block.ID(), s, r.Output)
		}
	}
}

// RunScenarios runs each scenario as a parallel subtest of t (under
// "scenario/"), each given set; once all of them passed (and -run selected
// them all), every runnable block of set that none of them ran fails t:
// a document's command is either executed or marked with its reason. It
// reports whether that coverage was checked. what names the documents in
// the messages ("docs/", "runbook").
func RunScenarios(t *testing.T, set Set, what string, scenarios map[string]func(t *testing.T, set Set)) bool {
	t.Helper()
	var done atomic.Int32
	t.Run("scenario", func(t *testing.T) {
		for name, fn := range scenarios {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				fn(t, set)
				if !t.Failed() {
					done.Add(1)
				}
			})
		}
	})
	if int(done.Load()) != len(scenarios) {
		t.Logf("%d of %d scenarios passed (or -run selected some): coverage of the %s blocks not checked", done.Load(), len(scenarios), what)
		return false
	}
	if un := set.Unexecuted(); len(un) > 0 {
		t.Errorf("%s blocks that no scenario runs (run them in a scenario, or mark them <!-- not run by the tests: REASON -->): %s", what, strings.Join(un, ", "))
	}
	return true
}
