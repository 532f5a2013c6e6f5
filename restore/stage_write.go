package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/ctxerr"
	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/fanout"
)

// Prepared is a staged snapshot ready for WriteDataDirs.
type Prepared struct{ rc restoreConfig }

// Prepare is the prepare stage: the staged, verified snapshot at path is
// given a freelist and the plan's revision bump once
// (etcdinternals.PrepareSnapshot), so that no member's restore walks the
// database; with markCompacted the bumped revision is marked compacted
// (Options.MarkCompacted; a drill marks it later, through the API). On the
// public path (Options.PublicRestorePath, ETCD_RECOVERY_NO_INTERNALS) the
// file is left to etcdutl's restore, which applies both in each member's
// copy.
func (c *Config) Prepare(ctx context.Context, plan *Plan, path string, markCompacted bool) (*Prepared, error) {
	if plan.InitialCluster == "" {
		// The members and the revision bump are PlanTargets': without it
		// the bump would silently be 0 and revisions reused.
		return nil, stepError(ctx, plan.ClusterID, StepWrite, errors.New("the plan has no members (PlanTargets did not run): refusing to prepare a snapshot without its revision bump"))
	}
	rc := restoreConfig{snapshotPath: path, initialCluster: plan.InitialCluster, token: plan.Token}
	if err := stageSnapshot(&rc, plan.BumpRevision, c.publicPath, markCompacted, c.log); err != nil {
		return nil, stepError(ctx, plan.ClusterID, StepWrite, err)
	}
	return &Prepared{rc: rc}, nil
}

// stageSnapshot readies the verified snapshot for every member's restore.
// Normally etcdinternals.PrepareSnapshot gives it a freelist and the
// revision bump once, so that no member's restore walks the database. On
// the public path (Options.PublicRestorePath, or ETCD_RECOVERY_NO_INTERNALS)
// the file is left as it is and etcdutl's restore applies
// --bump-revision --mark-compacted in each member's copy. etcdutl 3.5
// applies a bump only together with --mark-compacted
// (etcdutl/v3/snapshot/v3_snapshot.go), so a bump without the mark (a
// drill's) is then applied with etcdinternals.BumpRevision, through
// bbolt's public API only.
func stageSnapshot(rc *restoreConfig, bump uint64, publicPath, markCompacted bool, log *slog.Logger) error {
	if !publicPath && etcdinternals.Enabled() {
		return etcdinternals.PrepareSnapshot(rc.snapshotPath, bump, markCompacted, log)
	}
	log.Info("restoring through etcdutl's public restore path", "bump_revision", bump, "mark_compacted", markCompacted)
	if bump > 0 && !markCompacted {
		if _, err := etcdinternals.BumpRevision(rc.snapshotPath, bump, false); err != nil {
			return fmt.Errorf("bump the revision of %s: %w", rc.snapshotPath, err)
		}
		return nil
	}
	rc.bump, rc.markCompacted = bump, markCompacted
	return nil
}

// WriteOptions configure the write stage.
type WriteOptions struct {
	// Parallel is how many data dirs are written at a time; 0: all.
	Parallel int
	// TakeOver renames the prepared file into the last member's data dir
	// instead of copying it (takeOverMember), once every other member's
	// copy is written: the caller owns the staged file and has no use
	// for it after the write (a drill's, a restore's). Three members then
	// take three writes of the database, not four, and the disk holds
	// the database three times at the peak, not four.
	TakeOver bool
	Log      *slog.Logger
}

// WriteDataDirs is the write stage: every member's data dir in the plan
// is written from the prepared snapshot with etcdutl's restore code,
// wo.Parallel at a time. All are written, or none: when one fails, or the
// run is cancelled, every data dir this stage wrote is removed (with the
// parent dirs it created). Data dirs in the way must have been moved
// aside before (Run does it, with Force).
func WriteDataDirs(ctx context.Context, plan *Plan, p *Prepared, wo WriteOptions) error {
	log := wo.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rc := p.rc
	rc.takeOver = wo.TakeOver
	if err := writeDataDirs(ctx, plan, wo.Parallel, rc, log); err != nil {
		return stepError(ctx, plan.ClusterID, StepWrite, err)
	}
	return nil
}

// writeDataDirs restores every member's data dir, parallel at a time. All
// are written, or none: when one fails, or the run is cancelled while they
// are written, every data dir this run wrote is removed (with the parent
// dirs it created) and the error returned.
func writeDataDirs(ctx context.Context, plan *Plan, parallel int, rc restoreConfig, log *slog.Logger) error {
	after := afterMemberWritten(ctx)
	errs := make([]error, len(plan.Members))
	created := make([][]string, len(plan.Members))
	write := func(ctx context.Context, i int, rc restoreConfig) {
		m := &plan.Members[i]
		t := time.Now()
		dirs, err := restoreMember(rc, *m)
		created[i] = dirs
		if err != nil {
			errs[i] = fmt.Errorf("member %s (%s): %w", m.Name, m.DataDir, err)
			return
		}
		m.Restored = true
		log.Info("data dir written", "member", m.Name, "data_dir", m.DataDir, "duration", time.Since(t).Round(time.Millisecond))
		if after != nil {
			after(ctx, *m)
		}
	}
	// With take-over, the last member gets the staged file itself, after
	// every other member's copy of it is written (take-over changes the
	// file, then renames it away).
	copies, copyRC := len(plan.Members), rc
	if rc.takesOver() {
		copies--
		copyRC.takeOver = false
	}
	// parallel <= 0: all at once. A member not started (the run ended
	// first) is not written; the cancellation below removes the others.
	fanout.ForEach(ctx, copies, parallel, func(ctx context.Context, i int) { write(ctx, i, copyRC) })
	if copies < len(plan.Members) && ctx.Err() == nil && !slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
		write(ctx, copies, rc)
	}
	var failed []error
	for _, e := range errs {
		if e != nil && !errors.Is(e, context.Canceled) && !errors.Is(e, context.DeadlineExceeded) {
			failed = append(failed, e)
		}
	}
	err := errors.Join(failed...)
	if cerr := ctx.Err(); cerr != nil {
		// Cancelled while they were written: those written are complete,
		// but the run was stopped, so none stay.
		if err != nil {
			err = ctxerr.Wrap(ctx, err)
		} else {
			err = fmt.Errorf("%w while the data dirs were written", cerr)
		}
	}
	if err == nil {
		return nil
	}
	// All or nothing: a partial set of data dirs would form no cluster.
	var left []string
	for i := range plan.Members {
		m := &plan.Members[i]
		if m.Restored {
			if rerr := removeRestored(*m); rerr != nil {
				left = append(left, fmt.Sprintf("%s: %v", m.DataDir, rerr))
			}
			m.Restored = false
		}
	}
	for i := range plan.Members {
		removeEmptyDirs(created[i])
	}
	if len(left) > 0 {
		return fmt.Errorf("%w; removing the data dirs written could not finish, remove them by hand: %s", err, strings.Join(left, "; "))
	}
	log.Warn("data dir write stopped: every data dir written by this run was removed", "members", describeMembers(plan.Members), "err", err)
	return err
}

// removeRestored removes a data dir this run wrote (it was absent or
// empty before), after another member failed.
func removeRestored(m Member) error {
	if m.State == DirEmpty {
		entries, err := os.ReadDir(m.DataDir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(m.DataDir, e.Name())); err != nil {
				return err
			}
		}
		return nil
	}
	return os.RemoveAll(m.DataDir)
}

// memberWrittenKey is the context key of a test's failpoint after each
// member's data dir is written, inside the write step (before the next
// one starts with --parallel-data-dirs 1): set only by the package's
// tests (export_test.go), to act exactly during the write.
type memberWrittenKey struct{}

// afterMemberWritten is the failpoint after each member's data dir is
// written, or nil: a test's (memberWrittenKey), or restore.Run's
// FailpointEnv one (withEnvFailpoint). A drill's write never has one.
func afterMemberWritten(ctx context.Context) func(context.Context, Member) {
	f, _ := ctx.Value(memberWrittenKey{}).(func(context.Context, Member))
	return f
}

// withEnvFailpoint is ctx with the real binary's FailpointEnv failpoint
// (read when the restore runs, as before the stages moved), unless a
// test set its own: restore.Run's write only, never a drill's.
func withEnvFailpoint(ctx context.Context) context.Context {
	if _, ok := ctx.Value(memberWrittenKey{}).(func(context.Context, Member)); ok {
		return ctx
	}
	if f := envAfterMemberWritten(); f != nil {
		return context.WithValue(ctx, memberWrittenKey{}, f)
	}
	return ctx
}
