package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A Linux-only identifier outside a _linux.go file fails the check for
// darwin and windows and passes for linux; moved into a _linux.go file
// with an _other.go twin, it passes everywhere.
func TestCatchesLinuxOnlyCode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module plant\n\ngo 1.22\n")
	write("main.go", "package main\n\nimport \"syscall\"\n\nfunc main() { _ = syscall.SYS_FADVISE64 }\n")
	for _, c := range []struct {
		goos, goarch string
		bad          bool
	}{{"linux", "amd64", false}, {"darwin", "arm64", true}, {"windows", "amd64", true}} {
		n, err := check(dir, ".", c.goos, c.goarch)
		if err != nil {
			t.Fatalf("%s/%s: %v", c.goos, c.goarch, err)
		}
		if (n > 0) != c.bad {
			t.Errorf("%s/%s: %d errors, want errors: %v", c.goos, c.goarch, n, c.bad)
		}
	}
	os.Remove(filepath.Join(dir, "main.go"))
	write("main.go", "package main\n\nfunc main() { _ = fadvise }\n")
	write("fadvise_linux.go", "package main\n\nimport \"syscall\"\n\nconst fadvise = syscall.SYS_FADVISE64\n")
	write("fadvise_other.go", "//go:build !linux\n\npackage main\n\nconst fadvise = 0\n")
	for _, p := range [][2]string{{"linux", "amd64"}, {"darwin", "arm64"}, {"windows", "amd64"}} {
		if n, err := check(dir, ".", p[0], p[1]); err != nil || n > 0 {
			t.Errorf("%s/%s with the Linux code in a _linux.go file: %d errors, %v", p[0], p[1], n, err)
		}
	}
}
