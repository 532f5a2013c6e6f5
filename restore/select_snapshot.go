package restore

import (
	"context"
	"fmt"
	"log/slog"
	"os"
)

// SelectSnapshot is the first half of Run, for restores that something
// else performs (etcd-operator's restore operator): it takes the survivor
// snapshot (not with NoLive, without Old endpoints, or in a dry run, which
// only probes), chooses the backup as Run does (without Backup, past one
// that fails verification to the next: Plan.Fallbacks), and verifies it by
// streaming it into a temp file in dir (the system's when empty), whose
// database it then reads into Plan.Snapshot. In a dry run nothing is
// written and the path is empty. With BumpRevision (and no point in
// time), the verified snapshot's revision is bumped and etcd's trailer
// written again (bumpSelected). Targets, Token, data dirs and Verify are
// not used. The caller removes the returned file; on error it is
// already removed.
//
// With ToRevision or ToLatest (resolved first, as Run does), the journal
// is replayed into the file, its revision bumped by BumpRevision (marked
// compacted with MarkCompacted) and etcd's sha256 trailer written again
// (sealPointInTime): the file is the point-in-time snapshot etcd's own
// snapshot restore accepts.
func SelectSnapshot(ctx context.Context, opts Options, dir string) (*Plan, string, error) {
	// Only what selects and reads the snapshot is checked: no data dir is
	// written here.
	cfg, plan, err := resolve(ctx, opts, func() error {
		if err := opts.validateSource(); err != nil {
			return err
		}
		return opts.validatePointInTime()
	})
	if err != nil {
		return plan, "", err
	}
	if dir == "" {
		dir = os.TempDir()
	}
	plan.BumpRevision, plan.MarkCompacted = cfg.bump, cfg.markCompacted
	sel, err := cfg.Select(ctx, plan)
	if err != nil {
		return plan, "", err
	}
	snapPath, err := cfg.Fetch(ctx, plan, sel, FetchOptions{Dir: dir})
	if err != nil {
		return plan, "", err
	}
	if err := Replay(ctx, plan, snapPath, cfg.to, cfg.log); err == nil {
		switch {
		case cfg.to.Revision > 0:
			err = sealPointInTime(ctx, plan, snapPath, cfg.log)
		case cfg.bump > 0:
			err = bumpSelected(ctx, plan, snapPath, cfg.log)
		}
	}
	if err != nil {
		if snapPath != "" {
			os.Remove(snapPath)
		}
		return plan, "", err
	}
	return plan, snapPath, nil
}

// bumpSelected bumps the revision of the verified snapshot at path by
// BumpRevision (marked compacted with MarkCompacted) and writes etcd's
// sha256 trailer again, as sealPointInTime does for a replayed one: a
// restore that something else performs from it (etcd-operator's, which
// applies no bump) then never reuses revisions that watchers, caches and
// the journal already saw (a journal would find the cluster gone back:
// journal.LineageError). Plan.MinRevision is the snapshot's revision plus
// the bump.
func bumpSelected(ctx context.Context, plan *Plan, path string, log *slog.Logger) error {
	if plan.DryRun || path == "" {
		plan.Checks = append(plan.Checks, Check{Name: CheckStagedSnapshot, Status: CheckPlanned,
			Detail: fmt.Sprintf("would bump the revision by %d (marked compacted: %t) and write etcd's sha256 trailer", plan.BumpRevision, plan.MarkCompacted)})
		return nil
	}
	sum, err := bumpAndSeal(path, plan.BumpRevision, plan.MarkCompacted)
	if err != nil {
		plan.Checks = append(plan.Checks, Check{Name: CheckStagedSnapshot, Status: CheckFailed, Detail: err.Error()})
		return stepError(ctx, plan.ClusterID, StepWrite, err)
	}
	var rev int64
	if plan.Snapshot != nil {
		rev = plan.Snapshot.Revision
	}
	plan.MinRevision = rev + int64(plan.BumpRevision)
	plan.Checks = append(plan.Checks, Check{Name: CheckStagedSnapshot, Status: CheckPassed,
		Detail: fmt.Sprintf("revision %d bumped by %d (marked compacted: %t); etcd's sha256 trailer %s", rev, plan.BumpRevision, plan.MarkCompacted, sum)})
	log.Info("snapshot bumped for etcd's snapshot restore", "revision", rev, "bump_revision", plan.BumpRevision, "mark_compacted", plan.MarkCompacted, "sha256", sum)
	return nil
}
