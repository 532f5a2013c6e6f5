package restore

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/armada/etcd-recovery/internal/ctxerr"
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
// (selectPointInTime): the file is the point-in-time snapshot etcd's own
// snapshot restore accepts.
func SelectSnapshot(ctx context.Context, opts Options, dir string) (*Plan, string, error) {
	plan := &Plan{ClusterID: opts.ClusterID, DryRun: opts.DryRun, Checks: []Check{}}
	fail := func(step string, err error) (*Plan, string, error) {
		return plan, "", &Error{ClusterID: opts.ClusterID, At: step, Err: ctxerr.Wrap(ctx, err)}
	}
	if err := opts.validateSource(); err != nil {
		return fail(StepValidate, err)
	}
	if err := opts.validateLatest(); err != nil {
		return fail(StepValidate, err)
	}
	if err := opts.defaults(); err != nil {
		return fail(StepValidate, err)
	}
	log := opts.Log.With("cluster", opts.ClusterID)
	if opts.ToLatest {
		if err := resolveLatest(ctx, &opts, plan, log); err != nil {
			return fail(StepLatest, err)
		}
	}
	if dir == "" {
		dir = os.TempDir()
	}
	plan.BumpRevision, plan.MarkCompacted = opts.BumpRevision, opts.MarkCompacted
	snapPath, step, err := selectAndVerify(ctx, opts, log, plan, dir)
	if err != nil {
		if snapPath != "" {
			os.Remove(snapPath)
		}
		return fail(step, err)
	}
	if opts.ToRevision > 0 {
		if err := selectPointInTime(ctx, opts, plan, snapPath, log); err != nil {
			if snapPath != "" {
				os.Remove(snapPath)
			}
			return plan, "", err
		}
	} else if opts.BumpRevision > 0 {
		if err := bumpSelected(ctx, opts, plan, snapPath, log); err != nil {
			if snapPath != "" {
				os.Remove(snapPath)
			}
			return plan, "", err
		}
	}
	return plan, snapPath, nil
}

// bumpSelected bumps the revision of the verified snapshot at path by
// BumpRevision (marked compacted with MarkCompacted) and writes etcd's
// sha256 trailer again, as selectPointInTime does for a replayed one: a
// restore that something else performs from it (etcd-operator's, which
// applies no bump) then never reuses revisions that watchers, caches and
// the journal already saw (a journal would find the cluster gone back:
// journal.LineageError). Plan.MinRevision is the snapshot's revision plus
// the bump.
func bumpSelected(ctx context.Context, opts Options, plan *Plan, path string, log *slog.Logger) error {
	if opts.DryRun || path == "" {
		plan.Checks = append(plan.Checks, Check{Name: CheckStagedSnapshot, Status: CheckPlanned,
			Detail: fmt.Sprintf("would bump the revision by %d (marked compacted: %t) and write etcd's sha256 trailer", opts.BumpRevision, opts.MarkCompacted)})
		return nil
	}
	sum, err := bumpAndSeal(path, opts.BumpRevision, opts.MarkCompacted)
	if err != nil {
		plan.Checks = append(plan.Checks, Check{Name: CheckStagedSnapshot, Status: CheckFailed, Detail: err.Error()})
		return stepError(ctx, opts.ClusterID, StepWrite, err)
	}
	var rev int64
	if plan.Snapshot != nil {
		rev = plan.Snapshot.Revision
	}
	plan.MinRevision = rev + int64(opts.BumpRevision)
	plan.Checks = append(plan.Checks, Check{Name: CheckStagedSnapshot, Status: CheckPassed,
		Detail: fmt.Sprintf("revision %d bumped by %d (marked compacted: %t); etcd's sha256 trailer %s", rev, opts.BumpRevision, opts.MarkCompacted, sum)})
	log.Info("snapshot bumped for etcd's snapshot restore", "revision", rev, "bump_revision", opts.BumpRevision, "mark_compacted", opts.MarkCompacted, "sha256", sum)
	return nil
}
