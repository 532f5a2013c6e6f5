package fleet

import (
	"context"
	"errors"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/restore"
)

// pitrPlanTimeout bounds one cluster's point-in-time selection in the
// plan (its backups' manifests, its journal's index).
const pitrPlanTimeout = 2 * time.Minute

// StepPlanToTime is the failed step of a cluster whose point in time
// cannot be planned (no journal reaching --to-time, no backup before it).
const StepPlanToTime = "plan the point in time"

// readPointInTime is readBackups with ToTime: each cluster's selection is
// restore's own, in dry-run mode and without a download (as a rebuild
// chooses its backup): --to-time resolved on the cluster's journal to a
// revision, the base backup at or before it chosen, and the journal
// checked to reach that revision from it. The plan then shows the base
// backup, the revision at T and the base backup's bytes; a cluster whose
// selection fails (no journal reaching T, no backup before it) is a
// failed row with its cause, before anything is changed, rather than a
// planned one that fails only in the real run. Bounded in parallel as
// readBackups is, and on the run's ctx as it is: its end (SIGTERM) stops
// the selections in flight and starts no more.
func (r *restoreAll) readPointInTime(ctx context.Context) {
	fanout.ForEach(ctx, len(r.todo), discoverParallel, func(ctx context.Context, i int) {
		c := r.todo[i]
		if c.action == "" || c.row.Outcome == OutcomeFailed {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, pitrPlanTimeout)
		defer cancel()
		chosen, rev, err := r.pointInTime(pctx, c)
		if err != nil {
			step := StepPlanToTime
			var re *restore.Error
			if errors.As(err, &re) && re.At != "" {
				step = re.At
			}
			c.fail(step, err)
			return
		}
		m, err := catalog.LoadManifest(pctx, c.ns.Store, c.ns.Layout, c.id, chosen)
		if err != nil {
			c.fail(StepPlanToTime, err)
			return
		}
		c.row.Backup, c.row.Revision, c.row.Bytes, c.rawBytes = m.Name, rev, m.Snapshot.StoredSize, m.Snapshot.RawSize
		c.snapshotKey = c.ns.Layout.Key(c.id, m.Name, m.Snapshot.Object)
	})
}

// pointInTime is c's base backup and revision at ToTime, as restore
// selects them in a dry run (restore.Resolve, Select and the dry run's
// Replay check of the journal).
func (r *restoreAll) pointInTime(ctx context.Context, c *raCluster) (backup string, rev int64, err error) {
	t := r.opts.Template
	sel := restore.Options{ClusterID: c.id, Store: c.ns.Store, Layout: c.ns.Layout, NoLive: true, DryRun: true,
		Log: r.log, Identities: t.Identities, ToTime: r.opts.ToTime,
		Journal: journal.NewSource(c.ns.Store, c.ns.Layout, c.id, t.Identities).ListOnce()}
	if c.row.Revision > 0 {
		// journalReach mapped ToTime to it, with evidence a restore alone
		// does not have (NoLive): the cluster's own revision, when the
		// time is after its journal's end. Resolved once.
		sel.ToTime, sel.ToRevision = time.Time{}, c.row.Revision
	}
	// A placeholder target satisfies the options' check of a manual
	// restore: nothing is written (as kube's rebuild chooses its backup).
	sel.InitialCluster = "plan=http://127.0.0.1:2380"
	cfg, plan, err := restore.Resolve(ctx, sel)
	if err != nil {
		return "", 0, err
	}
	if _, err := cfg.Select(ctx, plan); err != nil {
		return "", 0, err
	}
	if plan.Chosen == nil {
		return "", 0, errors.New("no backup at or before --to-time")
	}
	if err := restore.Replay(ctx, plan, "", cfg.Target(), r.log); err != nil {
		return "", 0, err
	}
	return plan.Chosen.Name, cfg.Target().Revision, nil
}
