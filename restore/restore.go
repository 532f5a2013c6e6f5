package restore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/ctxerr"
	"github.com/armada/etcd-recovery/internal/etcdinternals"
)

// DefaultBumpRevision is etcdutl's recommended revision bump: far more
// revisions than a cluster writes between its last backup and a restore.
const DefaultBumpRevision = 1_000_000_000

// Progress shows the progress of one stream (internal/output.Progress).
type Progress interface {
	Update(n int64)
	Done()
}

// withTotal tells p the size of m's snapshot object when it can show it (SetTotal:
// internal/output.Progress shows the percentage and the time left).
func withTotal(p Progress, m *catalog.Manifest) Progress {
	if t, ok := p.(interface{ SetTotal(int64) }); ok && m != nil && m.Snapshot.StoredSize > 0 {
		t.SetTotal(m.Snapshot.StoredSize)
	}
	return p
}

type nopProgress struct{}

func (nopProgress) Update(int64) {}

func (nopProgress) Done() {}

// Run restores a cluster: see the package documentation. It resolves the
// options once (Resolve: checked, completed, the point in time made a
// revision) and composes the stages: PlanTargets, Select, Fetch, Replay
// (a point in time; a dry run only plans it), then, not in a dry run, the
// data dirs moved aside, Prepare, WriteDataDirs and, with Options.Verify,
// the rebuilt cluster checked (Result.CheckRebuilt). It returns the plan,
// and how far it got, even when it fails after building it.
func Run(ctx context.Context, opts Options) (_ *Result, rerr error) {
	start := time.Now()
	cfg, plan, err := Resolve(ctx, opts)
	r := &restoreRun{cfg: cfg, res: &Result{Plan: *plan, start: start}}
	r.plan = &r.res.Plan
	if err != nil {
		return r.res, err
	}
	if err := cfg.PlanTargets(r.plan); err != nil {
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
	if err := r.stage(ctx, tmpDir); err != nil {
		return r.res, err
	}
	if cfg.dryRun {
		return r.res, r.dryRunProblems()
	}
	if err := r.moveDataDirsAside(ctx); err != nil {
		return r.res, err
	}
	if err := r.prepareAndWrite(ctx); err != nil {
		return r.res, err
	}
	r.written()
	if len(cfg.verify.Etcd.Endpoints) == 0 {
		return r.res, nil
	}
	vo := cfg.verify
	if vo.Log == nil {
		vo.Log = cfg.src.log
	}
	return r.res, r.res.CheckRebuilt(ctx, vo)
}

// restoreRun is the state of one Run: its config, its result (the plan
// in it) and what it has staged and moved so far.
type restoreRun struct {
	cfg  *Config
	res  *Result
	plan *Plan
	// snapPath is the staged snapshot Fetch wrote.
	snapPath string
	// moved are the members whose non-empty data dir was moved aside.
	moved []*Member
}

// fail is the run's failure at step.
func (r *restoreRun) fail(ctx context.Context, step string, err error) error {
	return stepError(ctx, r.cfg.src.clusterID, step, err)
}

// scratchDir is where the snapshot is staged (beside the first data dir
// unless ScratchDir says), with the parent dirs a run would create there.
func (r *restoreRun) scratchDir() (dir string, created []string) {
	dir = filepath.Dir(r.plan.Members[0].DataDir)
	if r.cfg.scratchDir != "" {
		dir = r.cfg.scratchDir
	}
	created, _, _ = missingDirs(dir)
	return dir, created
}

// stage is the Select, Fetch and Replay stages: a backup (or the survivor
// snapshot) chosen, verified and staged in dir, and the journal replayed
// into it up to the point in time.
func (r *restoreRun) stage(ctx context.Context, dir string) error {
	sel, err := r.cfg.Select(ctx, r.plan)
	if err != nil {
		return err
	}
	if r.snapPath, err = r.cfg.Fetch(ctx, r.plan, sel, FetchOptions{Dir: dir}); err != nil {
		return err
	}
	return Replay(ctx, r.plan, r.snapPath, r.cfg.to, r.cfg.log)
}

// dryRunProblems ends a dry run: an error when the plan found problems.
func (r *restoreRun) dryRunProblems() error {
	if len(r.plan.Problems) > 0 {
		return &Error{ClusterID: r.cfg.src.clusterID, At: StepDataDirs, Err: &ProblemsError{r.plan.Problems}}
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
		m.MovedTo = movedName(m.DataDir, r.cfg.src.now())
		if err := moveAside(m.DataDir, m.MovedTo); err != nil {
			r.moveDataDirsBack()
			return r.fail(ctx, StepMoveAside, fmt.Errorf("member %s: %w", m.Name, err))
		}
		r.cfg.log.Warn("moved a non-empty data dir aside", "member", m.Name, "from", m.DataDir, "to", m.MovedTo)
		m.State = DirAbsent
		r.moved = append(r.moved, m)
	}
	return nil
}

// moveDataDirsBack moves the data dirs moved aside back, after a failure.
func (r *restoreRun) moveDataDirsBack() {
	for _, m := range r.moved {
		if err := os.Rename(m.MovedTo, m.DataDir); err != nil {
			r.cfg.log.Error("could not move a data dir back after the restore failed", "member", m.Name, "from", m.MovedTo, "to", m.DataDir, "err", err)
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
	prep, err := r.cfg.Prepare(ctx, r.plan, r.snapPath, r.cfg.markCompacted)
	if err != nil {
		r.moveDataDirsBack()
		return err
	}
	// The staged file is the run's own and is removed once the data
	// dirs are written: the last member takes it over, except on the
	// public path, where etcdutl's restore alone writes every data dir.
	wo := WriteOptions{Parallel: r.cfg.parallel, TakeOver: !r.cfg.publicPath && etcdinternals.Enabled(), Log: r.cfg.log}
	if err := WriteDataDirs(withEnvFailpoint(ctx), r.plan, prep, wo); err != nil {
		for _, m := range r.moved {
			m.State = DirAbsent
		}
		r.moveDataDirsBack()
		return err
	}
	return nil
}

// written records the data dirs written: the staged snapshot removed and
// the duration logged, with what to start when the rebuilt cluster is
// then waited for (Options.Verify).
func (r *restoreRun) written() {
	os.Remove(r.snapPath)
	r.res.Duration = time.Since(r.res.start)
	r.cfg.log.Info("data dirs written", "members", len(r.plan.Members), "duration", r.res.Duration.Round(time.Millisecond))
	if vo := r.cfg.verify; len(vo.Etcd.Endpoints) > 0 {
		r.cfg.log.Info("data dirs written: start the new members now; waiting for them",
			"etcd_version", r.plan.EtcdVersion, "initial_cluster_token", r.plan.Token, "endpoints", strings.Join(vo.Etcd.Endpoints, ","),
			"timeout", vo.Timeout)
	}
}

// CheckRebuilt is the VerifyRebuilt stage of a restore: the rebuilt
// cluster at vo.Etcd, once its members are started, waited for and
// checked against what the plan and the snapshot say it must hold
// (vo's MinRevision, expected keys and members filled in from them). It
// records the report in r.Verify and, when it passes, r.TotalToVerified.
// Run calls it with Options.Verify; a caller that starts the members
// itself calls it after Run.
func (r *Result) CheckRebuilt(ctx context.Context, vo VerifyOptions) error {
	vo.MinRevision = r.MinRevision
	vo.ExpectedKeys = -1
	if r.Snapshot != nil {
		r.Snapshot.Expect(&vo)
	}
	if vo.ExpectedMembers == 0 {
		// Every member of --initial-cluster, restored in this run or not.
		if pc, err := parseInitialCluster(r.InitialCluster); err == nil {
			vo.ExpectedMembers = len(pc.names)
		}
	}
	rep, err := VerifyRebuilt(ctx, vo)
	r.Verify = rep
	if err != nil {
		return stepError(ctx, r.ClusterID, StepVerifyCluster, err)
	}
	r.TotalToVerified = time.Since(r.start)
	if vo.Log != nil {
		vo.Log.Info("rebuilt cluster verified", "cluster", r.ClusterID, "total", r.TotalToVerified.Round(time.Millisecond))
	}
	return nil
}

// stepError is a stage's failure: the cluster, the step and the cause,
// wrapped with the context's error when the run was cancelled.
func stepError(ctx context.Context, clusterID, step string, err error) error {
	return &Error{ClusterID: clusterID, At: step, Err: ctxerr.Wrap(ctx, err)}
}
