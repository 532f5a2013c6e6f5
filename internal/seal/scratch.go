package seal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// ScratchPattern is the name pattern of scratch directories under the
// parent temp dir (os.MkdirTemp's syntax).
const ScratchPattern = "etcd-recovery-plain-*"

// Scratch is a private directory for plaintext copies (the drill after a
// backup, restore staging): 0700, its files 0600, removed by Remove. Remove
// (and Close) are idempotent and safe from several goroutines, so they can
// be deferred and also called early.
type Scratch struct {
	dir  string
	once sync.Once
	err  error
}

var (
	liveMu sync.Mutex
	live   = map[*Scratch]struct{}{}
)

// NewScratch creates a 0700 directory under parent (os.TempDir() when
// empty). The caller defers Remove.
func NewScratch(parent string) (*Scratch, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	dir, err := os.MkdirTemp(parent, ScratchPattern)
	if err != nil {
		return nil, fmt.Errorf("plaintext scratch directory: %w", err)
	}
	// MkdirTemp creates 0700 already; say it, whatever the umask.
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("plaintext scratch directory: %w", err)
	}
	s := &Scratch{dir: dir}
	liveMu.Lock()
	live[s] = struct{}{}
	liveMu.Unlock()
	return s, nil
}

// Dir is the directory's path.
func (s *Scratch) Dir() string { return s.dir }

// Create creates a new 0600 file name (a base name, no separators) in the
// directory; it fails if it exists.
func (s *Scratch) Create(name string) (*os.File, error) {
	p, err := s.Path(name)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("plaintext scratch file: %w", err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		os.Remove(p)
		return nil, fmt.Errorf("plaintext scratch file: %w", err)
	}
	return f, nil
}

// Path is the path of name inside the directory, for tools that create
// the file themselves (etcdutl's data dir); name must be a base name.
func (s *Scratch) Path(name string) (string, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, filepath.Separator) || strings.ContainsRune(name, '/') {
		return "", fmt.Errorf("plaintext scratch file name %q: not a plain file name", name)
	}
	return filepath.Join(s.dir, name), nil
}

// Remove deletes the directory and everything in it. Only the first call
// acts; later calls return its result.
func (s *Scratch) Remove() error {
	if s == nil {
		return nil
	}
	s.once.Do(func() {
		liveMu.Lock()
		delete(live, s)
		liveMu.Unlock()
		if err := os.RemoveAll(s.dir); err != nil {
			s.err = fmt.Errorf("removing plaintext scratch %s: %w", s.dir, err)
		}
	})
	return s.err
}

// Close is Remove, for io.Closer.
func (s *Scratch) Close() error { return s.Remove() }

// RemoveAllScratch removes every scratch directory of this process that is
// still there: for exit paths that skip deferred calls (the second signal's
// os.Exit).
func RemoveAllScratch() error {
	liveMu.Lock()
	all := make([]*Scratch, 0, len(live))
	for s := range live {
		all = append(all, s)
	}
	liveMu.Unlock()
	var errs []error
	for _, s := range all {
		errs = append(errs, s.Remove())
	}
	return errors.Join(errs...)
}
