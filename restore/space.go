package restore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/armada/etcd-recovery/internal/output"
)

// StepSpace is the step of a free-space check, made before any download.
const StepSpace = "check free space"

// walSegmentBytes is the WAL segment etcd's restore code preallocates in
// each member's data dir (wal.SegmentSizeBytes).
const walSegmentBytes = 64 << 20

// spaceSlack covers file-system overhead and small files (snapshot
// metadata, the freelist page header).
const spaceSlack = 1 << 20

// stagedBytes is what a staged copy of a database of raw bytes takes:
// the database, the freelist the restore adds (8 bytes a page at most)
// and slack.
func stagedBytes(raw int64) int64 { return raw + raw/512 + spaceSlack }

// memberBytes is what one member's data dir takes right after a restore.
func memberBytes(raw int64) int64 { return stagedBytes(raw) + walSegmentBytes }

// HintScratch is what to change when the scratch space is short.
const HintScratch = "point --temp-dir (or TMPDIR) at a filesystem with room; in the toolkit pod that is its scratch volume (TMPDIR is set to it)"

// HintDataDirs is what to change when the data dirs' file system is short.
const HintDataDirs = "free space on the data dirs' volume (--data-dir-root / --data-dir), or restore one member per host with --name"

// SpaceNeed is room needed on one file system.
type SpaceNeed struct {
	Path  string // where it is written (created if missing)
	What  string // what is written there, for the error
	Bytes int64
	Hint  string // the flag or volume to change
}

// SpaceError is a free-space check that failed: Need bytes were needed
// where Free were found.
type SpaceError struct {
	Path string // the directory checked (its nearest existing parent)
	What string
	Need int64
	Free int64
	Hint string
}

func (e *SpaceError) Error() string {
	return fmt.Sprintf("not enough free space in %s for %s; need %s, found %s free (checked before downloading): %s",
		e.Path, e.What, humanBytes(e.Need), humanBytes(e.Free), e.Hint)
}

// CheckSpace checks that every file system named by needs has room for
// what is written to it; needs on the same file system add up. It is
// called before anything is downloaded. A file system whose free space
// cannot be read is not refused (the write itself will say).
func CheckSpace(needs []SpaceNeed) error {
	type fsNeed struct {
		path  string
		what  []string
		bytes int64
		hints []string
		free  int64
	}
	byDev := map[uint64]*fsNeed{}
	var order []uint64
	for _, n := range needs {
		if n.Bytes <= 0 {
			continue
		}
		dir, err := existingParent(n.Path)
		if err != nil {
			continue
		}
		dev, free, ok := fsStat(dir)
		if !ok {
			continue
		}
		f := byDev[dev]
		if f == nil {
			f = &fsNeed{path: dir, free: free}
			byDev[dev] = f
			order = append(order, dev)
		}
		f.bytes += n.Bytes
		f.what = append(f.what, fmt.Sprintf("%s: %s", n.What, output.Bytes(n.Bytes)))
		if !contains(f.hints, n.Hint) {
			f.hints = append(f.hints, n.Hint)
		}
	}
	var errs []error
	for _, dev := range order {
		f := byDev[dev]
		if f.bytes > f.free {
			errs = append(errs, &SpaceError{Path: f.path, What: strings.Join(f.what, " + "), Need: f.bytes, Free: f.free,
				Hint: strings.Join(f.hints, "; ")})
		}
	}
	return errors.Join(errs...)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// existingParent is path, or its nearest existing parent directory.
func existingParent(path string) (string, error) {
	p, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	for {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p, nil
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", fmt.Errorf("%s: no existing parent", path)
		}
		p = parent
	}
}

// ScratchRoot is where staged files go: dir, else the system's temp dir
// ($TMPDIR, else /tmp).
func ScratchRoot(dir string) string {
	if dir == "" {
		return os.TempDir()
	}
	return dir
}

func humanBytes(n int64) string {
	if n < 1024 {
		return output.Bytes(n)
	}
	return fmt.Sprintf("%s (%d bytes)", output.Bytes(n), n)
}
