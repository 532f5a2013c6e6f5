package seal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ScratchPattern is the name pattern of scratch directories under the
// parent temp dir (filepath.Glob's syntax).
const ScratchPattern = "etcd-recovery-plain-*"

// Plaintext this tool writes to local disk (a Scratch, the drill's private
// directory, restore's staged snapshot) is named with the tag of the
// process that wrote it (ProcessTag: "p<pid>.<start>", before the random
// part), and registered, so that:
//   - RemoveAllScratch removes all of it on the hard exit (the second
//     signal), where deferred removals do not run;
//   - RemoveLeftovers, at the next start of the tool, removes what a
//     process that is gone (killed, OOM-killed, a node or pod restart of
//     the container) left, and never the files of a live process or
//     anything not named like this tool's plaintext.
//
// A tagged name stays "held" exactly as long as its process lives: no lock
// or file descriptor is needed, and a pid the kernel reused is told apart
// by the process's start time (Linux; elsewhere the pid alone is checked,
// and a reused pid keeps the leftover until that process is gone).

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
	dir, err := os.MkdirTemp(parent, "etcd-recovery-plain-"+ProcessTag()+"-*")
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
// still there, and every path registered by MkdirTemp and CreateTemp: for
// exit paths that skip deferred calls (the second signal's os.Exit).
func RemoveAllScratch() error {
	liveMu.Lock()
	all := make([]*Scratch, 0, len(live))
	for s := range live {
		all = append(all, s)
	}
	paths := make([]string, 0, len(tracked))
	for p := range tracked {
		paths = append(paths, p)
	}
	liveMu.Unlock()
	var errs []error
	for _, s := range all {
		errs = append(errs, s.Remove())
	}
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("removing plaintext scratch %s: %w", p, err))
			continue
		}
		liveMu.Lock()
		delete(tracked, p)
		liveMu.Unlock()
	}
	return errors.Join(errs...)
}

// tracked are the paths MkdirTemp and CreateTemp made, until found gone.
var tracked = map[string]struct{}{}

// track registers p for RemoveAllScratch, and forgets the registered paths
// that no longer exist (their owner removed them).
func track(p string) {
	liveMu.Lock()
	defer liveMu.Unlock()
	for q := range tracked {
		if _, err := os.Lstat(q); errors.Is(err, os.ErrNotExist) {
			delete(tracked, q)
		}
	}
	tracked[p] = struct{}{}
}

// MkdirTemp creates a 0700 directory for plaintext under dir
// (os.TempDir() when empty), named prefix + ProcessTag() + "-" + a random
// part, and registers it for RemoveAllScratch. The caller removes it; a
// leftover is removed by RemoveLeftovers once this process is gone.
func MkdirTemp(dir, prefix string) (string, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	d, err := os.MkdirTemp(dir, prefix+ProcessTag()+"-*")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(d, 0o700); err != nil {
		os.RemoveAll(d)
		return "", err
	}
	track(d)
	return d, nil
}

// CreateTemp creates a 0600 file for plaintext in dir (os.TempDir() when
// empty), named prefix + ProcessTag() + "-" + a random part + suffix, and
// registers it for RemoveAllScratch, like MkdirTemp.
func CreateTemp(dir, prefix, suffix string) (*os.File, error) {
	if strings.ContainsRune(prefix+suffix, '*') {
		return nil, fmt.Errorf("plaintext scratch file %q: '*' in a name part", prefix+suffix)
	}
	f, err := os.CreateTemp(dir, prefix+ProcessTag()+"-*"+suffix)
	if err != nil {
		return nil, err
	}
	track(f.Name())
	return f, nil
}

// ProcessTag is this process's tag in the names of its plaintext scratch:
// "p<pid>.<start>", start being the process's start time in clock ticks
// since boot (/proc/<pid>/stat; 0 where there is no /proc).
func ProcessTag() string { return selfTag() }

var selfTag = sync.OnceValue(func() string {
	pid := os.Getpid()
	start, _ := procStart(pid)
	return "p" + strconv.Itoa(pid) + "." + strconv.FormatUint(start, 10)
})

// taggedRe matches the names of tagged plaintext: "etcd-recovery-" or
// ".etcd-recovery-", anything, then the tag, the random part and an
// optional suffix of letters and dots.
var taggedRe = regexp.MustCompile(`^\.?etcd-recovery-.*-p([0-9]+)\.([0-9]+)-[0-9]+(?:\.[a-z][a-z.]*)?$`)

// toolDirRe matches this tool's other directories (untagged, e.g. the
// private directory of restore --via etcd-operator), whose tagged entries
// RemoveLeftovers looks at too.
var toolDirRe = regexp.MustCompile(`^\.?etcd-recovery-`)

// procStart is pid's start time in clock ticks since boot, from
// /proc/<pid>/stat; ok is false without /proc. err wraps os.ErrNotExist
// when there is /proc and no such process.
func procStart(pid int) (uint64, error) {
	if runtime.GOOS != "linux" {
		return 0, errors.ErrUnsupported
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses,
	// so the fields are counted after its last ')'; starttime is field 22.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// processGone says whether the process that wrote a tagged name is gone:
// no process has its pid, or (Linux) the one that has it started at
// another time. Unknown is never gone.
func processGone(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	if runtime.GOOS == "linux" {
		got, err := procStart(pid)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return true
		case err != nil:
			return false
		}
		return start != 0 && got != start
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	// Signal 0 only checks that the process exists.
	return errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}

// ownedByMe says whether fi belongs to this process's effective user
// (always true where there are no uids).
func ownedByMe(fi os.FileInfo) bool {
	euid := os.Geteuid()
	if euid < 0 {
		return true
	}
	v := reflect.ValueOf(fi.Sys())
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return false
	}
	uid := v.FieldByName("Uid")
	if !uid.IsValid() || !uid.CanUint() {
		return false
	}
	return uid.Uint() == uint64(euid)
}

// RemoveLeftovers removes from dir (os.TempDir() when empty) the plaintext
// scratch left by earlier processes of this tool that are gone: the
// tagged names (see the top of this file) of another process, owned by
// this user, directly in dir and one level down in this tool's own
// directories. It returns what it removed; a failure to remove one does
// not stop the others. Names of live processes, and any other file, are
// never touched.
func RemoveLeftovers(dir string) ([]string, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	return removeLeftovers(dir, true)
}

func removeLeftovers(dir string, descend bool) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("plaintext leftovers in %s: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if !toolDirRe.MatchString(name) {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Lstat(p)
		if err != nil || !ownedByMe(fi) || fi.Mode()&os.ModeSymlink != 0 {
			continue
		}
		m := taggedRe.FindStringSubmatch(name)
		if m == nil {
			if descend && fi.IsDir() {
				r, err := removeLeftovers(p, false)
				removed = append(removed, r...)
				errs = append(errs, err)
			}
			continue
		}
		pid, err1 := strconv.Atoi(m[1])
		start, err2 := strconv.ParseUint(m[2], 10, 64)
		if err1 != nil || err2 != nil || "p"+m[1]+"."+m[2] == ProcessTag() || !processGone(pid, start) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("removing plaintext left by process %d: %w", pid, err))
			continue
		}
		removed = append(removed, p)
	}
	return removed, errors.Join(errs...)
}
