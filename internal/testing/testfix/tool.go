package testfix

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

var (
	toolOnce sync.Once
	toolPath string
	toolErr  error
	toolOut  []byte
)

// Main is testenv.Main for a package whose tests run the tool: it builds
// the binary before the first test starts. Built lazily, by the first
// test that called Tool, the build (a minute and more on a loaded
// 2-core machine) ran inside that test's deadline: a test whose context
// was made first failed with "context deadline exceeded" at its exec.
func Main(m *testing.M) {
	testenv.Main(m, func() { buildTool(testenv.FindRepoRoot()) })
}

// Tool builds the etcd-recovery binary once per test binary and returns its
// path. The binary (about 76 MB) lives in a temp dir that testenv.Main
// removes when the tests end, so it needs the package's TestMain to call
// testenv.Main: every run used to leave one behind, and a few hundred runs
// filled the disk under the tests.
func Tool(tb testing.TB) string {
	tb.Helper()
	buildTool(testenv.RepoRoot(tb), nil)
	if toolErr != nil {
		tb.Fatalf("build etcd-recovery: %v\n%s", toolErr, toolOut)
	}
	return toolPath
}

// buildTool builds the binary once, from the repository at root (or
// fails with rootErr); its result is in toolPath, toolErr and toolOut.
func buildTool(root string, rootErr error) {
	toolOnce.Do(func() {
		if rootErr != nil {
			toolErr = rootErr
			return
		}
		dir, err := os.MkdirTemp("", "etcd-recovery-tool-")
		if err != nil {
			toolErr = err
			return
		}
		if !testenv.AtMainExit(func(bool) { os.RemoveAll(dir) }) {
			os.RemoveAll(dir)
			toolErr = errors.New("testfix.Tool needs the package's TestMain to call testenv.Main(m), which removes the binary")
			return
		}
		toolPath = filepath.Join(dir, "etcd-recovery")
		cmd := exec.Command("go", "build", "-trimpath", "-o", toolPath, "./cmd/etcd-recovery")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		toolOut, toolErr = cmd.CombinedOutput()
	})
}

// RunTool runs the tool with args, its environment ToolEnv() plus env,
// and returns its stdout, its stderr and its exit code.
func RunTool(tb testing.TB, ctx context.Context, tool string, env []string, args ...string) (string, string, int) {
	tb.Helper()
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Env = append(ToolEnv(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	case err != nil:
		tb.Fatal(err)
	}
	return out.String(), errb.String(), 0
}

// ToolEnv is the environment for the CLI without COS credentials, etcdctl
// settings, a kubeconfig or a pod namespace: everything comes from flags
// and the API.
func ToolEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COS_") && !strings.HasPrefix(kv, "ETCDCTL_") && !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "POD_NAMESPACE=") {
			env = append(env, kv)
		}
	}
	return env
}

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// StartExit starts cmd and returns where its exit code will arrive once it
// has been waited for: -1 when it did not exit with a status (a signal, or
// a failure of the wait itself).
func StartExit(tb testing.TB, cmd *exec.Cmd) <-chan int {
	tb.Helper()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		err := cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			code = -1
		}
		done <- code
	}()
	return done
}
