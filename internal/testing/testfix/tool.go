package testfix

import (
	"os"
	"os/exec"
	"path/filepath"
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

// Tool builds bin/etcd-recovery once per test binary and returns its path.
func Tool(tb testing.TB) string {
	tb.Helper()
	root := testenv.RepoRoot(tb)
	toolOnce.Do(func() {
		dir, err := os.MkdirTemp("", "etcd-recovery-tool-")
		if err != nil {
			toolErr = err
			return
		}
		toolPath = filepath.Join(dir, "etcd-recovery")
		cmd := exec.Command("go", "build", "-trimpath", "-o", toolPath, "./cmd/etcd-recovery")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		toolOut, toolErr = cmd.CombinedOutput()
	})
	if toolErr != nil {
		tb.Fatalf("build etcd-recovery: %v\n%s", toolErr, toolOut)
	}
	return toolPath
}
