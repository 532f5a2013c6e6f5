package restore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// missingDirs returns dir and those of its ancestors that do not exist,
// deepest first, and the nearest ancestor that does.
func missingDirs(dir string) (missing []string, existing string, err error) {
	for d := filepath.Clean(dir); ; {
		_, err := os.Lstat(d)
		switch {
		case err == nil:
			return missing, d, nil
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
			return missing, "", err
		}
		missing = append(missing, d)
		parent := filepath.Dir(d)
		if parent == d {
			return missing, "", fmt.Errorf("%s: no ancestor exists", dir)
		}
		d = parent
	}
}

// checkTarget is the check every run, dry or not, makes of a data dir
// before anything happens: it, or its nearest existing ancestor, must be
// a directory this process can write into. Nothing is written.
func checkTarget(dataDir, state string) error {
	dir := dataDir
	if state == DirAbsent {
		_, existing, err := missingDirs(dataDir)
		if err != nil {
			return err
		}
		dir = existing
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory: data dir %s cannot be created under it", dir, dataDir)
	}
	if err := canWrite(dir); err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	return nil
}

// removeEmptyDirs removes dirs (deepest first) that are empty: those this
// run created and that a failure left behind.
func removeEmptyDirs(dirs []string) {
	for _, d := range dirs {
		_ = os.Remove(d) // fails, harmlessly, unless empty
	}
}

// FailpointEnv names a test-only failpoint of the real binary, as etcd's
// gofail failpoints: set to a path P, the write step, after writing each
// member's data dir, creates P.<member> and waits until that file is
// removed or the run is cancelled. Tests use it to signal the process
// exactly during the write; it has no other use.
const FailpointEnv = "ETCD_RECOVERY_FAILPOINT_MEMBER_WRITTEN"

// envAfterMemberWritten is the failpoint of FailpointEnv; nil when unset.
func envAfterMemberWritten() func(context.Context, Member) {
	p := os.Getenv(FailpointEnv)
	if p == "" {
		return nil
	}
	return func(ctx context.Context, m Member) {
		marker := p + "." + m.Name
		if err := os.WriteFile(marker, nil, 0o600); err != nil {
			return
		}
		for ctx.Err() == nil {
			if _, err := os.Stat(marker); errors.Is(err, fs.ErrNotExist) {
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// describeMembers lists member names, for errors.
func describeMembers(ms []Member) string {
	var names []string
	for _, m := range ms {
		names = append(names, m.Name)
	}
	return strings.Join(names, ", ")
}
