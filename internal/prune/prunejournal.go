package prune

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
)

// The journal's part of a prune: its segments are listed with everything
// else before any delete (listPruneJournal), decided after the backup
// rule by ApplyJournalRetention (planJournal: the bases it needs are kept
// with RuleJournalBase), and deleted after the backups
// (deleteSegments). A segment's time is its object's stored time
// (LastModified), no header is read: later than its last revision's
// receive time by the upload, so a segment is if anything kept longer.

// PruneStepListJournal: listing the clusters' journal segments.
const PruneStepListJournal = "list journal segments"

// SegmentAction is what happened (or, in a dry run, would happen) to one
// journal segment.
type SegmentAction struct {
	ClusterID string    `json:"clusterID"`
	Key       string    `json:"key"`
	FirstRev  int64     `json:"firstRev"`
	LastRev   int64     `json:"lastRev"`
	Stored    time.Time `json:"stored"`
	Bytes     int64     `json:"bytes"`
	Keep      bool      `json:"keep"`
	// Base is the backup the window through the segment starts from.
	Base   string `json:"base,omitempty"`
	Reason string `json:"reason"`
	// Action is keep, delete (dry run), deleted or FAILED.
	Action string `json:"action"`
	Error  string `json:"error,omitempty"`
	Err    error  `json:"-"`
}

// listPruneJournal lists the journal segments of the chosen clusters:
// from the root listing (objs) with All, else one listing of each
// cluster's journal prefix. A listing that fails fails the prune before
// anything is deleted.
func listPruneJournal(ctx context.Context, opts PruneOptions, ids []string, objs []store.ObjectInfo, stats *StoreStats) (map[string][]store.ObjectInfo, *PruneError) {
	out := map[string][]store.ObjectInfo{}
	add := func(o store.ObjectInfo) {
		if ki := opts.Layout.Classify(o.Key); ki.Kind == catalog.KeyJournal {
			out[ki.ClusterID] = append(out[ki.ClusterID], o)
		}
	}
	if opts.All {
		for _, o := range objs {
			add(o)
		}
		return out, nil
	}
	for _, id := range ids {
		os, err := opts.Store.List(ctx, opts.Layout.JournalPrefix(id))
		if err != nil {
			return nil, nothingDeleted(PruneStepListJournal, fmt.Errorf("cluster %s: listing %s: %w", id, opts.Layout.JournalPrefix(id), err))
		}
		stats.ObjectsListed += len(os)
		for _, o := range os {
			add(o)
		}
	}
	return out, nil
}

// planJournal applies journal retention to one cluster after the backup
// rule: the backups it needs as bases are kept (RuleJournalBase), and
// its segments decided into c.Segments.
func planJournal(opts PruneOptions, inv *pruneInventory, id string, plan retention.Plan, c *ClusterPrune) retention.Plan {
	objs := inv.journal[id]
	if len(objs) == 0 {
		return plan
	}
	size := map[string]int64{}
	for _, o := range objs {
		size[o.Key] = o.Size
	}
	plan, jp := withJournal(opts.Layout, plan, func(name string) *catalog.Manifest { return inv.manifestOf[id+"/"+name] }, objs, opts.Now, opts.JournalRetention)
	for _, d := range jp.Segments {
		a := SegmentAction{ClusterID: id, Key: d.Segment.Key, FirstRev: d.Segment.FirstRev, LastRev: d.Segment.LastRev, Stored: d.Segment.Received,
			Bytes: size[d.Segment.Key], Keep: d.Keep, Base: d.Base, Reason: d.Reason, Action: ActionKeep}
		if !d.Keep {
			a.Action = ActionDelete
		}
		c.Segments = append(c.Segments, a)
	}
	return plan
}

// withJournal applies journal retention to a cluster's backup plan (its
// decisions by the backup rule, manifestOf each committed backup's
// manifest) and its listed segments objs: the backups it needs as bases
// are kept (RuleJournalBase). The plan's decisions are updated in place.
func withJournal(layout catalog.Layout, plan retention.Plan, manifestOf func(name string) *catalog.Manifest, objs []store.ObjectInfo, now time.Time, keep time.Duration) (retention.Plan, retention.JournalPlan) {
	var bs []retention.JournalBackup
	for _, d := range plan.Decisions {
		m := manifestOf(d.Entry.Name)
		if !d.Entry.Good() || m == nil || m.Revision() < 1 {
			continue
		}
		bs = append(bs, retention.JournalBackup{Name: d.Entry.Name, Rev: m.Revision(), Time: d.Entry.Time, Keep: d.Keep})
	}
	segs := make([]retention.JournalSegment, 0, len(objs))
	for _, o := range objs {
		ki := layout.Classify(o.Key)
		segs = append(segs, retention.JournalSegment{Key: o.Key, FirstRev: ki.FirstRev, LastRev: ki.LastRev, Received: o.LastModified})
	}
	jp := retention.ApplyJournalRetention(bs, segs, now, keep)
	for i, d := range plan.Decisions {
		if why, ok := jp.KeepBases[d.Entry.Name]; ok && !d.Keep {
			plan.Decisions[i].Keep, plan.Decisions[i].Rules, plan.Decisions[i].Reason = true, []string{retention.RuleJournalBase}, why
		}
	}
	return plan, jp
}

// deleteSegments deletes the planned segments (oldest first, in one
// request per 1,000) and records each outcome.
func deleteSegments(ctx context.Context, st store.Store, acts []*SegmentAction, stats *StoreStats, log *slog.Logger) {
	if len(acts) == 0 {
		return
	}
	slices.SortStableFunc(acts, func(a, b *SegmentAction) int { return cmp.Compare(a.FirstRev, b.FirstRev) })
	failed := storeDeleteEach(ctx, st, acts, func(a *SegmentAction) string { return a.Key }, stats)
	for _, a := range acts {
		if err, ok := failed[a.Key]; ok {
			a.Action, a.Err = ActionFailed, fmt.Errorf("cluster %s: delete journal segment %s: %w", a.ClusterID, a.Key, err)
			a.Error = a.Err.Error()
			log.Warn("prune: could not delete a journal segment", "cluster", a.ClusterID, "key", a.Key, "err", err)
			continue
		}
		a.Action = ActionDeleted
		log.Info("deleted journal segment", "cluster", a.ClusterID, "key", a.Key, "reason", a.Reason)
	}
}

// segmentErrs counts the segments' outcomes into rep and returns their
// failures.
func segmentErrs(acts []*SegmentAction, rep *PruneReport) []error {
	var errs []error
	for _, a := range acts {
		if a.Action == ActionDeleted {
			rep.SegmentsDeleted++
		} else {
			rep.SegmentsFailed++
			errs = append(errs, a.Err)
		}
	}
	return errs
}

func (a SegmentAction) row() []string {
	reason := a.Reason
	if a.Error != "" {
		reason += "; " + a.Error
	}
	base := a.Base
	if base == "" {
		base = "-"
	}
	return []string{a.ClusterID, base, fmt.Sprintf("segment: %d-%d", a.FirstRev, a.LastRev), fmtTime(a.Stored), a.Action, reason}
}

// retainLockedSegments is the object-lock part of the journal's plan, as
// retainLocked is the backups': on a bucket with object lock, a segment
// journal retention lets go whose object is still locked at opts.Now
// (the journal writes segments locked when given a lock mode:
// SegmentLockUntil) is retained (ActionRetained, its reason saying until
// when), not deleted and not a failure: a Delete would only hide it under
// a delete marker. A prune after the lock ends deletes it. A bucket
// without object lock changes nothing, as does a configuration the
// credential cannot read, unless opts.Lock is on. A retention that
// cannot be read fails the plan: nothing is deleted.
func retainLockedSegments(ctx context.Context, opts PruneOptions, byCluster clusterPrunes) *PruneError {
	var todo []*SegmentAction
	for _, c := range byCluster {
		for i := range c.Segments {
			if !c.Segments[i].Keep {
				todo = append(todo, &c.Segments[i])
			}
		}
	}
	if len(todo) == 0 {
		return nil
	}
	info, err := catalog.LockConfigOf(ctx, opts.Store)
	switch {
	case err != nil && opts.Lock.Enabled():
		return nothingDeleted(PruneStepPlan, fmt.Errorf("reading the bucket's object-lock configuration: %w", err))
	case err != nil:
		opts.Log.Warn("prune: could not read the bucket's object-lock configuration; deleting journal segments as without object lock", "err", err)
		return nil
	}
	lk, ok := opts.Store.(store.Locker)
	if !info.Enabled || !ok {
		return nil
	}
	for _, a := range todo {
		r, err := lk.Retention(ctx, a.Key, "")
		if err != nil {
			if store.IsNotFound(err) {
				continue // gone meanwhile
			}
			return nothingDeleted(PruneStepPlan, fmt.Errorf("cluster %s: reading the retention of journal segment %s: %w", a.ClusterID, a.Key, err))
		}
		if !r.Locked(opts.Now) {
			continue
		}
		a.Action = ActionRetained
		a.Reason += fmt.Sprintf("; retained until %s (%s object lock): deleted by a prune after that",
			r.Until.UTC().Format(time.RFC3339), strings.ToLower(string(r.Mode)))
	}
	return nil
}
