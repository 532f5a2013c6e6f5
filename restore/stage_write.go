package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/ctxerr"
	"github.com/armada/etcd-recovery/internal/fanout"
)

// Prepared is a staged snapshot ready for WriteDataDirs.
type Prepared struct{ rc restoreConfig }

// Prepare is the prepare stage: the staged, verified snapshot at path is
// given a freelist and the revision bump once
// (etcdinternals.PrepareSnapshot), so that no member's restore walks the
// database; with markCompacted the bumped revision is marked compacted
// (opts.MarkCompacted; a drill marks it later, through the API). On the
// public path (opts.PublicRestorePath, ETCD_RECOVERY_NO_INTERNALS) the
// file is left to etcdutl's restore, which applies both in each member's
// copy.
func Prepare(ctx context.Context, opts Options, plan *Plan, path string, markCompacted bool) (*Prepared, error) {
	if err := opts.defaults(); err != nil {
		return nil, stepError(ctx, opts.ClusterID, StepValidate, err)
	}
	rc := restoreConfig{snapshotPath: path, initialCluster: plan.InitialCluster, token: plan.Token}
	if err := stageSnapshot(&rc, opts, markCompacted, opts.Log.With("cluster", opts.ClusterID)); err != nil {
		return nil, stepError(ctx, opts.ClusterID, StepWrite, err)
	}
	return &Prepared{rc: rc}, nil
}

// WriteOptions configure the write stage.
type WriteOptions struct {
	// Parallel is how many data dirs are written at a time; 0: all.
	Parallel int
	// TakeOver renames the prepared file into the data dir instead of
	// copying it, when the plan has one member (a drill, which owns the
	// staged file): the database is in scratch once, not twice.
	TakeOver bool
	// OnMemberWritten, when set, is called after each data dir is written.
	OnMemberWritten func(ctx context.Context, m Member)
	Log             *slog.Logger
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
	rc.takeOver = wo.TakeOver && len(plan.Members) == 1
	if err := writeDataDirs(ctx, plan, wo.Parallel, rc, log, wo.OnMemberWritten); err != nil {
		return stepError(ctx, plan.ClusterID, StepWrite, err)
	}
	return nil
}

// writeDataDirs restores every member's data dir, parallel at a time. All
// are written, or none: when one fails, or the run is cancelled while they
// are written, every data dir this run wrote is removed (with the parent
// dirs it created) and the error returned.
func writeDataDirs(ctx context.Context, plan *Plan, parallel int, rc restoreConfig, log *slog.Logger, after func(context.Context, Member)) error {
	errs := make([]error, len(plan.Members))
	created := make([][]string, len(plan.Members))
	// parallel <= 0: all at once. A member not started (the run ended
	// first) is not written; the cancellation below removes the others.
	fanout.ForEach(ctx, len(plan.Members), parallel, func(ctx context.Context, i int) {
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
	})
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
