package prune

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
)

// Escrows follow their backups (catalog's escrow.go; the decision is
// retention.DecideEscrows). A cluster's escrows (<prefix>/_escrow/<cluster>/)
// are listed with everything else, before any delete; each is decided
// after the backups are deleted, from the backups that remain:
//
//   - prune: an escrow no remaining committed backup names is deleted once
//     older than the escrow grace (retention.Policy.EscrowGrace: a backup
//     writes its escrow before its manifest); in a dry run the backups
//     planned for deletion count as gone. A backup whose deletion failed
//     (its manifest stayed) still names its escrow.
//   - delete of named backups: the same, with the default policy's grace.
//   - delete --all-backups and the orphan lifecycle (deleteCluster): every
//     escrow of the cluster goes once every backup is gone; while one is
//     retained by object lock or failed, they all stay.
//
// An escrow still under object lock is retained (ActionRetained), as a
// locked backup is; a failed lock read or delete fails that escrow only.

// EscrowAction is what happened (or, in a dry run, would happen) to one
// escrow object.
type EscrowAction struct {
	ClusterID    string    `json:"clusterID"`
	Address      string    `json:"address"`
	Key          string    `json:"key"`
	Bytes        int64     `json:"bytes"`
	LastModified time.Time `json:"lastModified,omitzero"`
	Keep         bool      `json:"keep"`
	// Rule is why (retention.EscrowRule*).
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
	// Action is keep, delete (dry run), deleted, retained or FAILED.
	Action      string     `json:"action"`
	LockedUntil *time.Time `json:"lockedUntil,omitempty"`
	Error       string     `json:"error,omitempty"`
	Err         error      `json:"-"`
}

func (a *EscrowAction) fail(err error) {
	a.Action, a.Err, a.Error = ActionFailed, err, err.Error()
}

// escrowsOf are the escrow objects among objs, by cluster.
func escrowsOf(l catalog.Layout, objs []store.ObjectInfo) map[string][]store.ObjectInfo {
	out := map[string][]store.ObjectInfo{}
	for _, o := range objs {
		if ki := l.Classify(o.Key); ki.Kind == catalog.KeyEscrow {
			out[ki.ClusterID] = append(out[ki.ClusterID], o)
		}
	}
	return out
}

// listEscrows lists the escrows of one cluster (its EscrowPrefix).
func listEscrows(ctx context.Context, st store.Store, l catalog.Layout, id string) ([]store.ObjectInfo, error) {
	objs, err := st.List(ctx, l.EscrowPrefix(id))
	if err != nil {
		return nil, fmt.Errorf("cluster %s: list escrows under %s: %w", id, l.EscrowPrefix(id), err)
	}
	return escrowsOf(l, objs)[id], nil
}

// namedEscrows are the escrow addresses the remaining committed backups of
// entries name (newest first), and the remaining committed backups whose
// manifest could not be read. gone says a backup is deleted (or, in a dry
// run, would be).
func namedEscrows(entries []catalog.Entry, manifestOf func(name string) *catalog.Manifest, gone func(name string) bool) (map[string][]string, []string) {
	named := map[string][]string{}
	var unreadable []string
	for _, e := range entries {
		if !e.Committed || gone(e.Name) {
			continue
		}
		m := manifestOf(e.Name)
		switch {
		case m == nil:
			unreadable = append(unreadable, e.ClusterID+"/"+e.Name)
		case m.Escrow.Stored():
			named[m.Escrow.Address] = append(named[m.Escrow.Address], e.Name)
		}
	}
	return named, unreadable
}

// decideEscrows turns retention.DecideEscrows into actions (keep or
// delete), in the order of objs.
func decideEscrows(l catalog.Layout, id string, objs []store.ObjectInfo, named map[string][]string, unreadable, inFlight []string, now time.Time, grace time.Duration) []EscrowAction {
	eos := make([]retention.EscrowObject, len(objs))
	for i, o := range objs {
		eos[i] = retention.EscrowObject{Address: l.Classify(o.Key).Name, LastModified: o.LastModified}
	}
	var out []EscrowAction
	for i, d := range retention.DecideEscrows(eos, named, unreadable, inFlight, now, grace) {
		a := EscrowAction{ClusterID: id, Address: d.Address, Key: objs[i].Key, Bytes: objs[i].Size, LastModified: objs[i].LastModified,
			Keep: d.Keep, Rule: d.Rule, Reason: d.Reason, Action: ActionKeep}
		if !d.Keep {
			a.Action = ActionDelete
		}
		out = append(out, a)
	}
	return out
}

// inFlightOf are the names of the folders without a manifest among
// entries last written within grace of now: backups that may be in
// flight.
func inFlightOf(entries []catalog.Entry, now time.Time, grace time.Duration) []string {
	var out []string
	for _, e := range entries {
		if e.Committed {
			continue
		}
		var last time.Time
		for _, o := range e.Objects {
			if o.LastModified.After(last) {
				last = o.LastModified
			}
		}
		if now.Sub(last) <= grace {
			out = append(out, e.Name)
		}
	}
	return out
}

// clusterEndEscrows are the actions of the escrows of a cluster whose
// every backup is deleted: all go.
func clusterEndEscrows(l catalog.Layout, id string, objs []store.ObjectInfo, why string) []EscrowAction {
	var out []EscrowAction
	for _, o := range objs {
		out = append(out, EscrowAction{ClusterID: id, Address: l.Classify(o.Key).Name, Key: o.Key, Bytes: o.Size, LastModified: o.LastModified,
			Rule: retention.EscrowRuleClusterEnd, Reason: why, Action: ActionDelete})
	}
	return out
}

// keepEscrows turns the planned deletions of acts into keeps, with why.
func keepEscrows(acts []EscrowAction, why string) {
	for i := range acts {
		if acts[i].Action == ActionDelete {
			acts[i].Keep, acts[i].Action, acts[i].Reason = true, ActionKeep, why
		}
	}
}

// toDelete are the planned deletions of acts.
func escrowsToDelete(acts []EscrowAction) []*EscrowAction {
	var out []*EscrowAction
	for i := range acts {
		if acts[i].Action == ActionDelete {
			out = append(out, &acts[i])
		}
	}
	return out
}

// holdLockedEscrows, on a bucket with object lock, marks each of acts
// whose object is still locked at now as retained and returns the
// others, as holdLocked does for backups. A retention that cannot be
// read fails that escrow (it is not deleted). Without object lock (or
// when the configuration cannot be read: logged) it returns acts.
func holdLockedEscrows(ctx context.Context, st store.Store, acts []*EscrowAction, now time.Time, log *slog.Logger) []*EscrowAction {
	lk, ok := st.(store.Locker)
	if !ok || len(acts) == 0 {
		return acts
	}
	info, err := lk.LockConfig(ctx)
	if err != nil {
		log.Warn("escrows: the bucket's object lock configuration could not be read: deleting as on a bucket without lock", "err", err)
		return acts
	}
	if !info.Enabled {
		return acts
	}
	var rest []*EscrowAction
	for _, a := range acts {
		r, err := lk.Retention(ctx, a.Key, "")
		switch {
		case err != nil && store.IsNotFound(err):
			rest = append(rest, a) // gone meanwhile: the delete is a no-op
		case err != nil:
			a.fail(fmt.Errorf("cluster %s: escrow %s: the object lock could not be read, so it was not deleted: %w", a.ClusterID, a.Key, err))
		case r.Locked(now):
			u := r.Until.UTC()
			a.Action, a.LockedUntil = ActionRetained, &u
			a.Reason += fmt.Sprintf("; retained until %s (%s object lock): deleted by a run after that", u.Format(time.RFC3339), strings.ToLower(string(r.Mode)))
			log.Info("escrow retained: object lock", "cluster", a.ClusterID, "key", a.Key, "until", u)
		default:
			rest = append(rest, a)
		}
	}
	return rest
}

// deleteEscrows deletes acts (one request per 1,000 keys) and records
// each outcome.
func deleteEscrows(ctx context.Context, st store.Store, acts []*EscrowAction, stats *StoreStats, log *slog.Logger) {
	if len(acts) == 0 {
		return
	}
	failed := storeDeleteEach(ctx, st, acts, func(a *EscrowAction) string { return a.Key }, stats)
	for _, a := range acts {
		if err, ok := failed[a.Key]; ok {
			a.fail(fmt.Errorf("cluster %s: delete escrow %s: %w", a.ClusterID, a.Key, err))
			log.Warn("could not delete an escrow", "cluster", a.ClusterID, "key", a.Key, "err", err)
			continue
		}
		a.Action = ActionDeleted
		log.Info("deleted escrow", "cluster", a.ClusterID, "key", a.Key, "reason", a.Reason)
	}
}

// runEscrows holds the locked ones among the planned deletions of acts
// and, unless dryRun, deletes the others. It returns the failures.
// recheck, when not nil, runs just before the deletes (not in a dry
// run) and returns those of todo that may still go (recheckEscrows).
func runEscrows(ctx context.Context, st store.Store, acts []EscrowAction, now time.Time, dryRun bool, stats *StoreStats, log *slog.Logger, recheck func([]*EscrowAction) []*EscrowAction) []error {
	todo := holdLockedEscrows(ctx, st, escrowsToDelete(acts), now, log)
	if !dryRun {
		if recheck != nil && len(todo) > 0 {
			todo = recheck(todo)
		}
		deleteEscrows(ctx, st, todo, stats, log)
	}
	var errs []error
	for _, a := range acts {
		if a.Action == ActionFailed {
			errs = append(errs, a.Err)
		}
	}
	return errs
}

// listedCommitted are the names of entries, each with whether it was
// committed when listed: what recheckEscrows need not read again.
func listedCommitted(entries []catalog.Entry) map[string]bool {
	out := make(map[string]bool, len(entries))
	for _, e := range entries {
		out[e.Name] = e.Committed
	}
	return out
}

// recheckEscrows re-reads cluster id just before its escrows are deleted:
// a backup may have committed, or started, after the listing the
// decisions came from (a backup reusing an older escrow's address writes
// nothing to it). It lists the cluster again and reads the manifest of
// every backup committed since (listed: listedCommitted of the first
// listing); a folder that was not listed is in flight. An escrow such a
// backup names, or any while one is in flight or unreadable, is kept;
// a failed listing fails every deletion (nothing deleted).
func recheckEscrows(ctx context.Context, st store.Store, l catalog.Layout, id string, listed map[string]bool, now time.Time, grace time.Duration) func([]*EscrowAction) []*EscrowAction {
	return func(todo []*EscrowAction) []*EscrowAction {
		entries, _, err := catalog.ClusterInventory(ctx, st, l, id)
		if err != nil {
			for _, a := range todo {
				a.fail(fmt.Errorf("cluster %s: escrow %s: re-reading the cluster's backups just before deleting it failed, so it was not deleted: %w", id, a.Key, err))
			}
			return nil
		}
		named := map[string][]string{}
		var unreadable, inFlight []string
		for _, e := range entries {
			committed, ok := listed[e.Name]
			switch {
			case ok && (committed || !e.Committed):
				continue // decided from the first listing
			case !e.Committed:
				inFlight = append(inFlight, e.Name)
				continue
			}
			m, err := catalog.LoadManifest(ctx, st, l, id, e.Name)
			switch {
			case err != nil:
				unreadable = append(unreadable, id+"/"+e.Name)
			case m.Escrow.Stored():
				named[m.Escrow.Address] = append(named[m.Escrow.Address], e.Name)
			}
		}
		var rest []*EscrowAction
		for _, a := range todo {
			d := retention.DecideEscrows([]retention.EscrowObject{{Address: a.Address, LastModified: a.LastModified}}, named, unreadable, inFlight, now, grace)[0]
			if d.Keep {
				a.Keep, a.Action, a.Rule, a.Reason = true, ActionKeep, d.Rule, d.Reason+" (re-read just before deleting)"
				continue
			}
			rest = append(rest, a)
		}
		return rest
	}
}

// escrowCounts are the numbers of acts kept, to delete (or deleted),
// retained and failed.
type escrowCounts struct{ kept, planned, deleted, retained, failed int }

func countEscrows(acts []EscrowAction) escrowCounts {
	var n escrowCounts
	for _, a := range acts {
		switch a.Action {
		case ActionKeep:
			n.kept++
		case ActionDelete:
			n.planned++
		case ActionDeleted:
			n.planned++
			n.deleted++
		case ActionRetained:
			n.retained++
		case ActionFailed:
			n.planned++
			n.failed++
		}
	}
	return n
}

func (a EscrowAction) row() []string {
	reason := a.Reason
	if a.Error != "" {
		reason += "; " + a.Error
	}
	return []string{a.ClusterID, "-", "escrow: " + shortAddress(a.Address), fmtTime(a.LastModified), a.Action, reason}
}

// shortAddress is an escrow address's first 12 hex digits, as tables show it.
func shortAddress(a string) string { return a[:min(len(a), 12)] }

// escrowSummary is the line under a table that counts acts.
func escrowSummary(acts []EscrowAction, dryRun bool) string {
	if len(acts) == 0 {
		return ""
	}
	n := countEscrows(acts)
	verb, k := "deleted", n.deleted
	if dryRun {
		verb, k = "would delete", n.planned
	}
	return fmt.Sprintf("escrows: %d kept, %s %d, %d retained by object lock, %d failed", n.kept, verb, k, n.retained, n.failed)
}

// allEscrows are the escrow actions of every cluster of a prune, in order.
func (r *PruneReport) allEscrows() []EscrowAction {
	var out []EscrowAction
	for _, c := range r.Clusters {
		out = append(out, c.Escrows...)
	}
	return out
}

// pruneEscrows is Prune's escrow step (after the backups are deleted, or
// in a dry run after the plan): it decides every listed escrow of the
// pruned clusters from the backups that remain, holds the locked ones,
// deletes the others (not in a dry run) and counts them into rep.
func pruneEscrows(ctx context.Context, opts PruneOptions, inv *pruneInventory, rep *PruneReport) []error {
	if len(inv.escrows) == 0 {
		return nil
	}
	var errs []error
	seen := map[string]bool{}
	for ci := range rep.Clusters {
		c := &rep.Clusters[ci]
		seen[c.ClusterID] = true
		gone := map[string]bool{}
		for _, a := range c.Backups {
			if a.ManifestDeleted || (opts.DryRun && a.Action == ActionDelete) {
				gone[a.Name] = true
			}
		}
		named, unreadable := namedEscrows(inv.groups[c.ClusterID],
			func(name string) *catalog.Manifest { return inv.manifestOf[c.ClusterID+"/"+name] },
			func(name string) bool { return gone[name] })
		// A backup in flight (a folder without a manifest retention keeps
		// as young) may name an escrow it wrote or reuses.
		var inFlight []string
		for _, a := range c.Backups {
			if !a.Committed && slices.Contains(a.Rules, retention.RuleIncompleteYoung) {
				inFlight = append(inFlight, a.Name)
			}
		}
		c.Escrows = decideEscrows(opts.Layout, c.ClusterID, inv.escrows[c.ClusterID], named, unreadable, inFlight, opts.Now, opts.Policy.EscrowGrace())
		recheck := recheckEscrows(ctx, opts.Store, opts.Layout, c.ClusterID, listedCommitted(inv.groups[c.ClusterID]), opts.Now, opts.Policy.EscrowGrace())
		errs = append(errs, runEscrows(ctx, opts.Store, c.Escrows, opts.Now, opts.DryRun, &rep.Stats, opts.Log, recheck)...)
	}
	// Clusters with escrows but no backup at all (--all): named by none.
	var ids []string
	for id := range inv.escrows {
		if !seen[id] && inv.wanted(id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		c := ClusterPrune{ClusterID: id, Backups: []BackupAction{}}
		c.Escrows = decideEscrows(opts.Layout, id, inv.escrows[id], nil, nil, nil, opts.Now, opts.Policy.EscrowGrace())
		recheck := recheckEscrows(ctx, opts.Store, opts.Layout, id, nil, opts.Now, opts.Policy.EscrowGrace())
		errs = append(errs, runEscrows(ctx, opts.Store, c.Escrows, opts.Now, opts.DryRun, &rep.Stats, opts.Log, recheck)...)
		rep.Clusters = append(rep.Clusters, c)
	}
	slices.SortFunc(rep.Clusters, func(a, b ClusterPrune) int { return strings.Compare(a.ClusterID, b.ClusterID) })
	n := countEscrows(rep.allEscrows())
	rep.EscrowsKept, rep.EscrowsPlanned, rep.EscrowsDeleted, rep.EscrowsRetained, rep.EscrowsFailed = n.kept, n.planned, n.deleted, n.retained, n.failed
	return errs
}

// errEscrows joins escrow failures for an error message.
func errEscrows(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%d escrow(s) could not be deleted: %w", len(errs), errors.Join(errs...))
}

// listPruneEscrows lists the escrows of the chosen clusters: from the root
// listing (objs) with All, else one listing of each cluster's escrow
// prefix. A listing that fails fails the prune before anything is
// deleted.
func listPruneEscrows(ctx context.Context, opts PruneOptions, ids []string, objs []store.ObjectInfo, stats *StoreStats) (map[string][]store.ObjectInfo, *PruneError) {
	if opts.All {
		return escrowsOf(opts.Layout, objs), nil
	}
	out := map[string][]store.ObjectInfo{}
	for _, id := range ids {
		os, err := listEscrows(ctx, opts.Store, opts.Layout, id)
		if err != nil {
			return nil, nothingDeleted(PruneStepListEscrows, err)
		}
		stats.ObjectsListed += len(os)
		if len(os) > 0 {
			out[id] = os
		}
	}
	return out, nil
}
