package restore

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/armada/etcd-recovery/internal/ctxerr"
)

// DefaultBumpRevision is etcdutl's recommended revision bump: far more
// revisions than a cluster writes between its last backup and a restore.
const DefaultBumpRevision = 1_000_000_000

// Progress shows the progress of one stream (internal/output.Progress).
type Progress interface {
	Update(n int64)
	Done()
}

type nopProgress struct{}

func (nopProgress) Update(int64) {}

func (nopProgress) Done() {}

// Run restores a cluster: see the package documentation. It composes the
// stages (stages.go): PlanTargets, Select, Fetch, then (not in a dry run)
// Replay when Options.ToRevision is set, the data dirs moved aside,
// Prepare, WriteDataDirs and VerifyRebuilt. It
// returns the plan, and how far it got, even when it fails after building
// it.
func Run(ctx context.Context, opts Options) (_ *Result, rerr error) {
	r := newRestoreRun(opts)
	if err := r.setUp(ctx); err != nil {
		return r.res, err
	}
	if err := PlanTargets(r.opts, r.plan); err != nil {
		return r.res, err
	}
	tmpDir, tmpCreated := r.scratchDir()
	defer func() {
		if r.snapPath != "" {
			os.Remove(r.snapPath)
		}
		if rerr != nil {
			// Parent dirs this run created for nothing.
			removeEmptyDirs(tmpCreated)
		}
	}()
	if err := r.selectAndFetch(ctx, tmpDir); err != nil {
		return r.res, err
	}
	if r.opts.DryRun {
		if r.opts.ToRevision > 0 {
			if err := PlanReplay(ctx, r.opts, r.plan, ReplayOptions{ToRevision: r.opts.ToRevision, Journal: r.opts.Journal}); err != nil {
				return r.res, err
			}
		}
		return r.res, r.dryRunProblems()
	}
	if r.opts.ToRevision > 0 {
		if err := Replay(ctx, r.opts, r.plan, r.snapPath, ReplayOptions{ToRevision: r.opts.ToRevision, Journal: r.opts.Journal}); err != nil {
			return r.res, err
		}
	}
	if err := r.moveDataDirsAside(ctx); err != nil {
		return r.res, err
	}
	if err := r.prepareAndWrite(ctx); err != nil {
		return r.res, err
	}
	r.written()
	return r.res, r.verify(ctx)
}

// restoreRun is the state of one Run: its options, its result (the plan
// in it) and what it has staged and moved so far.
type restoreRun struct {
	start time.Time
	opts  Options
	log   *slog.Logger
	res   *Result
	plan  *Plan
	// snapPath is the staged snapshot Fetch wrote.
	snapPath string
	// moved are the members whose non-empty data dir was moved aside.
	moved []*Member
}

// newRestoreRun starts a run: its result holds the plan from the start.
func newRestoreRun(opts Options) *restoreRun {
	r := &restoreRun{start: time.Now(), opts: opts,
		res: &Result{Plan: Plan{ClusterID: opts.ClusterID, DryRun: opts.DryRun, Checks: []Check{}}}}
	r.plan = &r.res.Plan
	return r
}

// fail is the run's failure at step.
func (r *restoreRun) fail(ctx context.Context, step string, err error) error {
	return stepError(ctx, r.opts.ClusterID, step, err)
}

// setUp is the validate step: the options checked, then defaulted.
func (r *restoreRun) setUp(ctx context.Context) error {
	if err := r.opts.Validate(); err != nil {
		return r.fail(ctx, StepValidate, err)
	}
	if err := r.opts.defaults(); err != nil {
		return r.fail(ctx, StepValidate, err)
	}
	r.log = r.opts.Log.With("cluster", r.opts.ClusterID)
	if r.opts.ToLatest {
		if err := resolveLatest(ctx, &r.opts, r.plan, r.log); err != nil {
			return r.fail(ctx, StepLatest, err)
		}
	}
	return nil
}

// scratchDir is where the snapshot is staged (beside the first data dir
// unless ScratchDir says), with the parent dirs a run would create there.
func (r *restoreRun) scratchDir() (dir string, created []string) {
	dir = filepath.Dir(r.plan.Members[0].DataDir)
	if r.opts.ScratchDir != "" {
		dir = r.opts.ScratchDir
	}
	created, _, _ = missingDirs(dir)
	return dir, created
}

// selectAndFetch is the Select and Fetch stages: a backup (or the survivor
// snapshot) chosen, verified and staged in dir.
func (r *restoreRun) selectAndFetch(ctx context.Context, dir string) error {
	sel, err := Select(ctx, r.opts, r.plan)
	if err != nil {
		return err
	}
	r.snapPath, err = Fetch(ctx, r.opts, r.plan, sel, FetchOptions{Dir: dir})
	return err
}

// dryRunProblems ends a dry run: an error when the plan found problems.
func (r *restoreRun) dryRunProblems() error {
	if len(r.plan.Problems) > 0 {
		return &Error{ClusterID: r.opts.ClusterID, At: StepDataDirs, Err: &ProblemsError{r.plan.Problems}}
	}
	return nil
}

// moveDataDirsAside is the move-aside step: non-empty data dirs moved
// aside (--force). On any failure, or a cancel, from here on, the dirs
// moved aside are moved back: the data dirs end as they were, or all
// written.
func (r *restoreRun) moveDataDirsAside(ctx context.Context) error {
	for i := range r.plan.Members {
		m := &r.plan.Members[i]
		if m.MovedTo == "" {
			continue
		}
		if err := ctx.Err(); err != nil {
			r.moveDataDirsBack()
			return r.fail(ctx, StepMoveAside, err)
		}
		m.MovedTo = movedName(m.DataDir, r.opts.Now())
		if err := moveAside(m.DataDir, m.MovedTo); err != nil {
			r.moveDataDirsBack()
			return r.fail(ctx, StepMoveAside, fmt.Errorf("member %s: %w", m.Name, err))
		}
		r.log.Warn("moved a non-empty data dir aside", "member", m.Name, "from", m.DataDir, "to", m.MovedTo)
		m.State = DirAbsent
		r.moved = append(r.moved, m)
	}
	return nil
}

// moveDataDirsBack moves the data dirs moved aside back, after a failure.
func (r *restoreRun) moveDataDirsBack() {
	for _, m := range r.moved {
		if err := os.Rename(m.MovedTo, m.DataDir); err != nil {
			r.log.Error("could not move a data dir back after the restore failed", "member", m.Name, "from", m.MovedTo, "to", m.DataDir, "err", err)
			continue
		}
		m.State, m.MovedTo = DirNonEmpty, ""
	}
}

// prepareAndWrite is the Prepare and WriteDataDirs stages: the staged
// snapshot prepared and every data dir written, or the dirs moved aside
// moved back.
func (r *restoreRun) prepareAndWrite(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		r.moveDataDirsBack()
		return r.fail(ctx, StepWrite, err)
	}
	prep, err := Prepare(ctx, r.opts, r.plan, r.snapPath, r.opts.MarkCompacted)
	if err != nil {
		r.moveDataDirsBack()
		return err
	}
	after := r.opts.OnMemberWritten
	if after == nil {
		after = envAfterMemberWritten()
	}
	if err := WriteDataDirs(ctx, r.plan, prep, WriteOptions{Parallel: r.opts.Parallel, OnMemberWritten: after, Log: r.log}); err != nil {
		for _, m := range r.moved {
			m.State = DirAbsent
		}
		r.moveDataDirsBack()
		return err
	}
	return nil
}

// written records the data dirs written: the staged snapshot removed, the
// duration logged, OnDataDirs told.
func (r *restoreRun) written() {
	os.Remove(r.snapPath)
	r.res.Duration = time.Since(r.start)
	r.log.Info("data dirs written", "members", len(r.plan.Members), "duration", r.res.Duration.Round(time.Millisecond))
	if r.opts.OnDataDirs != nil {
		r.opts.OnDataDirs(r.plan)
	}
}

// verify is the VerifyRebuilt stage, when Options.Verify names endpoints:
// the rebuilt cluster checked against what the snapshot holds.
func (r *restoreRun) verify(ctx context.Context) error {
	if len(r.opts.Verify.Etcd.Endpoints) == 0 {
		return nil
	}
	rep, err := VerifyRebuilt(ctx, r.verifyOptions())
	r.res.Verify = rep
	if err != nil {
		return r.fail(ctx, StepVerifyCluster, err)
	}
	r.res.TotalToVerified = time.Since(r.start)
	r.log.Info("rebuilt cluster verified", "total", r.res.TotalToVerified.Round(time.Millisecond))
	return nil
}

// verifyOptions are Options.Verify completed with what the plan and the
// snapshot say the rebuilt cluster must hold.
func (r *restoreRun) verifyOptions() VerifyOptions {
	vo := r.opts.Verify
	vo.MinRevision = r.plan.MinRevision
	vo.ExpectedKeys = -1
	if r.plan.Snapshot != nil {
		r.plan.Snapshot.Expect(&vo)
	}
	if vo.ExpectedMembers == 0 {
		if _, pc, err := r.opts.Targets.resolve(); err == nil {
			vo.ExpectedMembers = len(pc.names)
		}
	}
	if vo.Log == nil {
		vo.Log = r.opts.Log
	}
	return vo
}

// stepError is a stage's failure: the cluster, the step and the cause,
// wrapped with the context's error when the run was cancelled.
func stepError(ctx context.Context, clusterID, step string, err error) error {
	return &Error{ClusterID: clusterID, At: step, Err: ctxerr.Wrap(ctx, err)}
}
