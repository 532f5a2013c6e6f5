package seal_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/armada/etcd-recovery/internal/seal"
)

func TestScratchPermissionsAndRemoval(t *testing.T) {
	// Not parallel: it changes the process's umask.
	parent := t.TempDir()
	// A permissive umask must not loosen the modes.
	old := syscall.Umask(0)
	s, err := seal.NewScratch(parent)
	if err != nil {
		syscall.Umask(old)
		t.Fatal(err)
	}
	f, err := s.Create("snapshot.db")
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("plaintext"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	st, err := os.Stat(s.Dir())
	if err != nil || st.Mode().Perm() != 0o700 || !st.IsDir() {
		t.Fatalf("scratch dir mode %v, %v; want 0700", st.Mode(), err)
	}
	if filepath.Dir(s.Dir()) != parent {
		t.Fatalf("scratch dir %s not under %s", s.Dir(), parent)
	}
	st, err = os.Stat(f.Name())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("scratch file mode %v, %v; want 0600", st.Mode(), err)
	}
	if _, err := s.Create("snapshot.db"); err == nil {
		t.Fatal("Create over an existing file succeeded")
	}
	for _, bad := range []string{"", ".", "..", "../escape", "a/b"} {
		if _, err := s.Create(bad); err == nil {
			t.Fatalf("Create(%q) accepted", bad)
		}
	}
	// Idempotent, also concurrently.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := s.Remove(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("scratch dir still there after Remove: %v", err)
	}
}

// TestScratchRemovedOnEveryExitPath: return, error return, panic, and the
// hard-exit path's RemoveAllScratch.
func TestScratchRemovedOnEveryExitPath(t *testing.T) {
	// Not parallel: RemoveAllScratch removes every scratch of the process.
	parent := t.TempDir()
	use := func(fail, panics bool) (dir string, err error) {
		s, err := seal.NewScratch(parent)
		if err != nil {
			return "", err
		}
		defer s.Remove()
		dir = s.Dir()
		f, err := s.Create("plain")
		if err != nil {
			return dir, err
		}
		defer f.Close()
		if panics {
			panic(dir)
		}
		if fail {
			return dir, errors.New("drill failed")
		}
		return dir, s.Remove() // early removal, deferred one is a no-op
	}
	for _, fail := range []bool{false, true} {
		dir, _ := use(fail, false)
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("fail=%v: %s left behind", fail, dir)
		}
	}
	func() {
		defer func() {
			dir := recover().(string)
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("panic: %s left behind", dir)
			}
		}()
		use(false, true)
	}()

	s1, err := seal.NewScratch(parent)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := seal.NewScratch(parent)
	if err != nil {
		t.Fatal(err)
	}
	if err := seal.RemoveAllScratch(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*seal.Scratch{s1, s2} {
		if _, err := os.Stat(s.Dir()); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("RemoveAllScratch left %s", s.Dir())
		}
		if err := s.Remove(); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(parent)
	if err != nil || len(entries) != 0 {
		t.Fatalf("parent not empty: %v %v", entries, err)
	}
}
