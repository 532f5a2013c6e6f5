package restore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/armada/etcd-recovery/internal/etcdinternals"
)

// CheckStagedSnapshot is the check of a point-in-time snapshot made for a
// restore someone else performs (SelectSnapshot with ToRevision or
// ToLatest): the journal replayed into it, the revision bumped and marked
// compacted, and etcd's sha256 trailer written again.
const CheckStagedSnapshot = "point-in-time snapshot"

// sealPointInTime is the point-in-time half of SelectSnapshot, once the
// journal is replayed into the verified snapshot at path (Replay): since
// etcd-operator's restore applies no bump, the revision is bumped by the
// plan's BumpRevision and, with MarkCompacted, marked compacted, as
// Prepare does for a plain restore (etcdinternals.BumpRevision, bbolt's
// public API), and etcd's sha256 trailer appended: etcdutl's snapshot
// restore, which etcd-operator runs, refuses a snapshot without it
// ("snapshot missing hash") or with one that does not match.
// Plan.MinRevision is then the replayed revision plus the bump. A dry run
// only says so.
func sealPointInTime(ctx context.Context, plan *Plan, path string, log *slog.Logger) error {
	bump, mark := plan.BumpRevision, plan.MarkCompacted
	if plan.DryRun {
		plan.Checks = append(plan.Checks, Check{Name: CheckStagedSnapshot, Status: CheckPlanned,
			Detail: fmt.Sprintf("would bump the revision by %d (marked compacted: %t) and write etcd's sha256 trailer", bump, mark)})
		return nil
	}
	sum, err := bumpAndSeal(path, bump, mark)
	if err != nil {
		plan.Checks = append(plan.Checks, Check{Name: CheckStagedSnapshot, Status: CheckFailed, Detail: err.Error()})
		return stepError(ctx, plan.ClusterID, StepWrite, err)
	}
	plan.Checks = append(plan.Checks, Check{Name: CheckStagedSnapshot, Status: CheckPassed,
		Detail: fmt.Sprintf("revision %d bumped by %d (marked compacted: %t); etcd's sha256 trailer %s", plan.Replay.ToRevision,
			bump, mark, sum)})
	log.Info("point-in-time snapshot ready for etcd's snapshot restore", "revision", plan.Replay.ToRevision, "bump_revision", bump,
		"mark_compacted", mark, "sha256", sum)
	return nil
}

// bumpAndSeal bumps the revision of the database at path (without etcd's
// trailer, or with it: it is dropped first) and appends the trailer etcd's
// snapshot restore checks: the sha256 of every byte before it. It returns
// the trailer in hex.
func bumpAndSeal(path string, bump uint64, mark bool) (string, error) {
	if err := etcdinternals.DropTrailer(path); err != nil {
		return "", err
	}
	if bump > 0 {
		if _, err := etcdinternals.BumpRevision(path, bump, mark); err != nil {
			return "", fmt.Errorf("bump the revision of %s: %w", path, err)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	if n%512 != 0 {
		// etcdutl recognises the trailer by the size (size % 512 == 32).
		return "", fmt.Errorf("%s is %d bytes, not whole 512-byte blocks: etcd's trailer would not be recognised", path, n)
	}
	sum := h.Sum(nil)
	if _, err := f.Write(sum); err != nil {
		return "", fmt.Errorf("write etcd's trailer to %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	return hex.EncodeToString(sum), f.Close()
}
