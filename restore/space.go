package restore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/armada/etcd-recovery/internal/bytesize"
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

// StagedBytes is what a staged copy of a database of raw bytes takes:
// the database, the freelist the restore adds (8 bytes a page at most)
// and slack.
func StagedBytes(raw int64) int64 { return raw + raw/512 + spaceSlack }

// memberBytes is what one member's data dir takes right after a restore.
func memberBytes(raw int64) int64 { return StagedBytes(raw) + walSegmentBytes }

// drillEtcdBytes is what the drill's etcd adds to its data dir once it
// runs, beyond the database: the WAL segment the restore wrote and the next
// one etcd preallocates (64 MiB each, allocated, not sparse), and slack
// for the pages the drill's compaction writes.
const drillEtcdBytes = 2*walSegmentBytes + spaceSlack

// DrillScratchBytes is the room a drill of a database of raw bytes needs
// in its scratch space on top of a snapshot file it already has there
// (the plaintext copy a backup streamed, taken over by rename into the
// drill's data dir): etcd's WAL and slack, and the freelist the staging
// adds. A drill that downloads needs StagedBytes(raw) more.
func DrillScratchBytes(raw int64) int64 { return raw/512 + drillEtcdBytes }

// EnvScratchLimit is the size limit of the scratch space ($TMPDIR, or
// --temp-dir): a Kubernetes quantity ("10Gi") or bytes. The shipped pods
// set it to their scratch emptyDir's sizeLimit, which statfs does not see
// (the kubelet evicts the pod above it). Every free-space check then
// counts min(statfs free, limit - what is already under the scratch root).
const EnvScratchLimit = "ETCD_RECOVERY_SCRATCH_LIMIT"

// ParseScratchLimit reads a scratch limit: a Kubernetes quantity (10Gi,
// 500M), a size (10GiB) or a number of bytes (internal/bytesize).
func ParseScratchLimit(s string) (int64, error) {
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", EnvScratchLimit, s, err)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive Kubernetes quantity (10Gi) or bytes", EnvScratchLimit, s)
	}
	return n, nil
}

// diskUsage is what the files under root take on disk (allocated blocks,
// as the kubelet's du counts them for an emptyDir's sizeLimit).
// Unreadable entries are not counted.
func diskUsage(root string) int64 {
	var n int64
	_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		n += allocated(info)
		return nil
	})
	return n
}

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
	// Limit and Used are set when a volume's limit (EnvScratchLimit,
	// EnvVolumeLimits: Env), not the file system, was short: Free is
	// Limit - Used.
	Limit int64
	Used  int64
	Env   string
	// Reserved is what other restores of this process reserved under the
	// limit and may not have written yet (ReserveSpace): Free is Limit -
	// Used - Reserved.
	Reserved int64
}

func (e *SpaceError) Error() string {
	if e.Limit > 0 {
		env, place := e.Env, "the volume"
		if env == "" || env == EnvScratchLimit {
			env, place = EnvScratchLimit, "the scratch space"
		}
		reserved := ""
		if e.Reserved > 0 {
			reserved = fmt.Sprintf(" and %s reserved by the restores running beside it", output.Bytes(e.Reserved))
		}
		return fmt.Sprintf("not enough room in %s %s for %s; need %s, found %s free: its limit %s=%s less %s already used under it%s "+
			"(checked before anything is downloaded or streamed): %s",
			place, e.Path, e.What, humanBytes(e.Need), humanBytes(e.Free), env, humanBytes(e.Limit), output.Bytes(e.Used), reserved, e.Hint)
	}
	return fmt.Sprintf("not enough free space in %s for %s; need %s, found %s free (checked before downloading): %s",
		e.Path, e.What, humanBytes(e.Need), humanBytes(e.Free), e.Hint)
}

// CheckSpace checks that every file system named by needs has room for
// what is written to it; needs on the same file system add up. It is
// called before anything is downloaded. A file system whose free space
// cannot be read is not refused (the write itself will say). Needs under
// the scratch root ($TMPDIR) also add up against the scratch limit
// (EnvScratchLimit), less what is already used under that root.
func CheckSpace(needs []SpaceNeed) error {
	return checkSpace(ScratchRoot(""), needs)
}

func checkSpace(scratchRoot string, needs []SpaceNeed) error {
	limits, err := volumeLimits(scratchRoot)
	if err != nil {
		return err
	}
	return checkLimits(limits, needs, nil)
}

// checkLimits is checkSpace with the limits read, less reserved (per
// limited root: what other restores of this process reserved there and
// may not have written yet).
func checkLimits(limits []limitedRoot, needs []SpaceNeed, reserved map[string]int64) error {
	var errs []error
	for _, l := range limits {
		var in []SpaceNeed
		for _, n := range needs {
			if p, err := filepath.Abs(n.Path); err == nil && n.Bytes > 0 && (p == l.root || within(l.root, p)) {
				in = append(in, n)
			}
		}
		if len(in) == 0 {
			continue
		}
		var need int64
		var what, hints []string
		for _, n := range in {
			need += n.Bytes
			what = append(what, fmt.Sprintf("%s: %s", n.What, output.Bytes(n.Bytes)))
			if !slices.Contains(hints, n.Hint) {
				hints = append(hints, n.Hint)
			}
		}
		used := diskUsage(l.root)
		if free := max(l.limit-used-reserved[l.root], 0); need > free {
			hints = append(hints, fmt.Sprintf("raise the volume's sizeLimit and %s together", l.env))
			errs = append(errs, &SpaceError{Path: l.root, What: strings.Join(what, " + "), Need: need, Free: free,
				Hint: strings.Join(hints, "; "), Limit: l.limit, Used: used, Reserved: reserved[l.root], Env: l.env})
		}
	}
	if err := checkFS(needs); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// EnvVolumeLimits names size limits of other volumes than the scratch
// space, which statfs does not see either: comma-separated
// directory=quantity pairs, e.g. "/restore=18Gi" (the toolkit pod's
// emptyDir for the data dirs of a manual restore). Needs under a listed
// directory add up against its limit, less what is already used under it,
// as needs under the scratch root do against EnvScratchLimit.
const EnvVolumeLimits = "ETCD_RECOVERY_VOLUME_LIMITS"

// limitedRoot is a directory whose volume has a size limit.
type limitedRoot struct {
	root  string
	limit int64
	env   string // the variable that set it (with the directory, for EnvVolumeLimits)
}

// volumeLimits is every limited directory: the scratch root with
// EnvScratchLimit, and each of EnvVolumeLimits. A value that cannot be
// read is an error (a misconfigured pod is refused rather than evicted).
func volumeLimits(scratchRoot string) ([]limitedRoot, error) {
	var out []limitedRoot
	if v, ok := os.LookupEnv(EnvScratchLimit); ok && strings.TrimSpace(v) != "" {
		limit, err := ParseScratchLimit(v)
		if err != nil {
			return nil, err
		}
		root, _ := filepath.Abs(scratchRoot)
		out = append(out, limitedRoot{root: root, limit: limit, env: EnvScratchLimit})
	}
	v := strings.TrimSpace(os.Getenv(EnvVolumeLimits))
	if v == "" {
		return out, nil
	}
	for _, pair := range strings.Split(v, ",") {
		dir, q, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !filepath.IsAbs(strings.TrimSpace(dir)) {
			return nil, fmt.Errorf("%s=%q: entry %q: want /absolute/dir=quantity (e.g. /restore=18Gi), comma-separated", EnvVolumeLimits, v, pair)
		}
		limit, err := ParseScratchLimit(q)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: entry %q: %w", EnvVolumeLimits, v, pair, err)
		}
		out = append(out, limitedRoot{root: filepath.Clean(strings.TrimSpace(dir)), limit: limit, env: EnvVolumeLimits + " (" + filepath.Clean(strings.TrimSpace(dir)) + ")"})
	}
	return out, nil
}

func checkFS(needs []SpaceNeed) error {
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
		if !slices.Contains(f.hints, n.Hint) {
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

// CheckDrillScratch checks, before a backup streams, that the scratch
// space under scratchDir ($TMPDIR when "") holds what the drill of an
// encrypted backup of a database of dbSize bytes writes there: the
// plaintext copy the backup streams (the database and etcd's 32-byte
// trailer) and, the copy being renamed into the drill's data dir, only
// etcd's WAL beside it (DrillScratchBytes). It honours EnvScratchLimit.
func CheckDrillScratch(scratchDir string, dbSize int64) error {
	raw := dbSize + 32
	return CheckSpace([]SpaceNeed{{Path: ScratchRoot(scratchDir), Bytes: raw + DrillScratchBytes(raw), Hint: HintScratch,
		What: fmt.Sprintf("the plaintext copy of a database of %s and its drill", output.Bytes(dbSize))}})
}
