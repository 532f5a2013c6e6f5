package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/journal"
)

// StepJournalReach is restore-all --to-time's check, in the plan, that
// each cluster's journal holds its state at that time.
const StepJournalReach = "check the journal reaches --to-time"

// checkPointInTime checks, for every cluster to restore to ToTime, that
// its journal holds its state then (journalReach), and puts the revision
// the time maps to in its row (what the plan shows); a cluster whose
// journal does not fails at StepJournalReach, before anything is done.
// ctx is the run's: its end (SIGTERM) stops the checks in flight and
// starts no more.
func (r *restoreAll) checkPointInTime(ctx context.Context) {
	if r.opts.ToTime.IsZero() {
		return
	}
	fanout.ForEach(ctx, len(r.todo), discoverParallel, func(ctx context.Context, i int) {
		c := r.todo[i]
		if c.action == "" || c.adoptOnly || c.row.Outcome == OutcomeFailed {
			return
		}
		if rev := plannedRevision(c); rev > 0 {
			// A resumed run: the revision its plan mapped ToTime to,
			// once (the evidence then, the cluster's own revision past
			// its journal's end among it, is not there to read again).
			c.row.Revision = rev
			return
		}
		ctx, cancel := context.WithTimeout(ctx, measureTimeout)
		defer cancel()
		rev, err := r.journalReach(ctx, c)
		if err != nil {
			c.fail(StepJournalReach, err)
			return
		}
		c.row.Revision = rev
	})
}

// journalReach is the revision ToTime maps to in c's journal
// (journal.Source.RevisionAt), or why the journal does not hold c's
// state at ToTime. That mapping alone takes the last revision received
// at or before ToTime, also from a journal that stopped before it: when
// the newest stored segment was received before ToTime, the journal
// holds the state at ToTime only if the cluster did not change after it,
// which the cluster's revision read by the probe (after ToTime) says. A
// cluster whose revision is unknown (quorum lost, or no EtcdCluster) is
// refused then too: the changes after the journal's end, if any, are in
// no segment.
func (r *restoreAll) journalReach(ctx context.Context, c *raCluster) (int64, error) {
	at := r.opts.ToTime.UTC().Format(time.RFC3339Nano)
	w, _, err := journal.LoadWindow(ctx, c.ns.Store, c.ns.Layout, c.id, nil, r.opts.Template.Identities)
	if err != nil {
		return 0, err
	}
	if !w.Journal {
		return 0, fmt.Errorf("cluster %s has no journal under %s: its state at --to-time %s is in no segment; restore it alone from a backup (restore --via etcd-operator)",
			c.id, c.ns.Layout.JournalPrefix(c.id), at)
	}
	window := fmt.Sprintf("the journal of cluster %s ends at revision %d, received %s, before --to-time %s", c.id, w.LastRev,
		w.LastReceived.UTC().Format(time.RFC3339Nano), at)
	switch {
	case w.LastReceived.IsZero() || !w.LastReceived.Before(r.opts.ToTime):
	case c.revision > 0 && c.revision == w.LastRev:
		// Idle since: the journal's end is the state at ToTime.
	case c.revision > 0 && c.revision < w.LastRev:
		return 0, fmt.Errorf("%s, and the cluster is at revision %d, below it: its history went back (a restore without a revision bump, a cluster recreated under its name), "+
			"so its state at --to-time is not the journal's; restore it alone with --to-revision (%d at most)", window, c.revision, w.LastRev)
	case c.revision > 0:
		return 0, fmt.Errorf("%s, and the cluster is at revision %d: revisions %d to %d are in no segment (its journal stopped, or has not stored its newest segment yet), "+
			"so which of them it held at --to-time is unknown; run again once its journal reaches --to-time, or restore it alone with --to-revision (%d at most)",
			window, c.revision, w.LastRev+1, c.revision, w.LastRev)
	default:
		return 0, fmt.Errorf("%s, and the cluster's revision cannot be read (%s): whether it changed after revision %d is unknown; "+
			"restore it alone with --to-latest (the journal's end) or --to-revision", window, cmpOr(c.row.Health, "no EtcdCluster"), w.LastRev)
	}
	rev, err := journal.NewSource(c.ns.Store, c.ns.Layout, c.id, r.opts.Template.Identities).RevisionAt(ctx, r.opts.ToTime)
	if err != nil {
		if errors.Is(err, journal.ErrNoJournal) {
			return 0, err
		}
		return 0, fmt.Errorf("--to-time %s: %w", at, err)
	}
	return rev, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// plannedRevision is the revision a resumed run's plan recorded for c (0:
// none, or not a resumed run).
func plannedRevision(c *raCluster) int64 {
	if !c.ns.resumed || c.ns.plan == nil {
		return 0
	}
	for _, p := range c.ns.plan.Clusters {
		if p.Cluster == c.id {
			return p.Revision
		}
	}
	return 0
}
