package prune

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
)

// Backups that follow their cluster's life (seed 000: when a customer
// deletes a cluster, "all existing backups will be deleted").
//
// Two objects beside the backups, both outside the layout (ParseKey and
// GroupEntries never see them as backups: a backup key has exactly three
// segments under the root):
//
//	<prefix>/etcd-recovery-owner.json      the ownership record: the one Kubernetes namespace whose
//	                                       EtcdClusters decide which cluster ids under <prefix> are orphans
//	<prefix>/<cluster-id>/orphan.json      the orphan marker: first seen without an EtcdCluster, by which
//	                                       namespace, and when its backups go
//
// A cluster id is an orphan when it has backups under the prefix and no
// EtcdCluster of that name in the namespace. Its backups are deleted only
// when every one of these holds:
//   - the store listing, the EtcdCluster listing and the EtcdRestore listing
//     all succeeded in this run (a failure deletes nothing and writes no marker);
//   - the prefix is not empty and its ownership record names this namespace
//     (ClaimPrefix writes it once, with a conditional create); otherwise
//     orphans are only reported;
//   - no EtcdRestore of the namespace references it (a restore through
//     etcd-operator deletes and recreates the EtcdCluster);
//   - its marker was written by an earlier run (so one bad listing alone
//     never deletes anything) and the grace is over: DeleteAfter = the
//     later of the time of its newest backup (of any kind, complete or not)
//     and the time a run first saw it without an EtcdCluster (the marker's
//     FirstSeen), + Grace. The grace always runs from the first sighting
//     too: a cluster whose backups are already older than the grace (a
//     namespace gone for days, then recreated while its clusters are
//     rebuilt one by one) keeps them for Grace after it is first seen.
//
// The marker is written when the orphan is first seen (owned prefix only)
// and removed when an EtcdCluster of that name is back, so a restart of the
// tool resets nothing and a recreated cluster keeps its backups.

// DefaultOrphanGrace is how long an orphan's backups are kept after its
// newest backup, and after an orphan pass first saw it.
const DefaultOrphanGrace = 72 * time.Hour

// MinOrphanGrace is the shortest grace accepted: at least one CronJob period
// plus margin, so a cluster is seen as an orphan by two runs.
const MinOrphanGrace = time.Hour

// Errors of the lifecycle.
var (
	// ErrSharedPrefix: the prefix is empty (the bucket root, shared by every
	// namespace): no namespace can own it.
	ErrSharedPrefix = errors.New("the prefix is empty (the bucket root, shared by every namespace): no namespace can own it; set COS_PREFIX/--prefix to one per namespace")
	// ErrOwnedByOther: the ownership record names another namespace.
	ErrOwnedByOther = errors.New("the prefix is owned by another namespace")
	// ErrClusterExists: delete --all found the cluster's EtcdCluster.
	ErrClusterExists = errors.New("its EtcdCluster exists")
)

// OwnerRecord is the ownership record of a prefix.
type OwnerRecord struct {
	Format    int       `json:"format"`
	Prefix    string    `json:"prefix"`
	Namespace string    `json:"namespace"`
	ClaimedAt time.Time `json:"claimedAt"`
}

// OrphanMarker is the record of an orphan.
type OrphanMarker struct {
	Format       int       `json:"format"`
	ClusterID    string    `json:"clusterID"`
	Namespace    string    `json:"namespace"`
	FirstSeen    time.Time `json:"firstSeen"`
	NewestBackup time.Time `json:"newestBackup"`
	Grace        string    `json:"grace"`
	DeleteAfter  time.Time `json:"deleteAfter"`
}

func getJSON(ctx context.Context, st store.Store, key string, v any) (found bool, err error) {
	err = objectio.ReadRecord(ctx, st, key, v, objectio.RecordOptions{Max: catalog.MaxManifestBytes})
	switch {
	case err == nil:
		return true, nil
	case store.IsNotFound(err) && ctx.Err() == nil:
		return false, nil
	case errors.Is(err, objectio.ErrDamagedRecord):
		return true, err
	}
	return false, err
}

// ReadOwner reads the ownership record of the layout's prefix: nil when
// there is none.
func ReadOwner(ctx context.Context, st store.Store, layout catalog.Layout) (*OwnerRecord, error) {
	var r OwnerRecord
	found, err := getJSON(ctx, st, catalog.OwnerKey(layout), &r)
	if err != nil || !found {
		return nil, err
	}
	return &r, nil
}

// ClaimPrefix records namespace as the owner of the layout's prefix, once:
// the record is created only if absent (a conditional create), so two
// namespaces can never both own a prefix. Claiming again from the owner is
// a no-op (created false); from another namespace it fails with
// ErrOwnedByOther. An empty prefix is refused (ErrSharedPrefix).
func ClaimPrefix(ctx context.Context, st store.Store, layout catalog.Layout, namespace string, now time.Time) (rec *OwnerRecord, created bool, err error) {
	if layout.RootPrefix() == "" {
		return nil, false, ErrSharedPrefix
	}
	if namespace == "" {
		return nil, false, errors.New("claim prefix: no namespace")
	}
	cs, ok := st.(store.Conditional)
	if !ok {
		return nil, false, errors.New("claim prefix: the store cannot create an object only if it is absent, so the claim cannot be made safely")
	}
	rec = &OwnerRecord{Format: 1, Prefix: strings.TrimSuffix(layout.RootPrefix(), "/"), Namespace: namespace, ClaimedAt: now.UTC()}
	b, _ := json.MarshalIndent(rec, "", "  ")
	if _, err := cs.PutIfAbsent(ctx, catalog.OwnerKey(layout), bytes.NewReader(b)); err != nil {
		if !errors.Is(err, store.ErrExists) {
			return nil, false, fmt.Errorf("claim prefix %s: %w", layout.RootPrefix(), err)
		}
		have, rerr := ReadOwner(ctx, st, layout)
		if rerr != nil {
			return nil, false, fmt.Errorf("claim prefix %s: already claimed, and the record cannot be read: %w", layout.RootPrefix(), rerr)
		}
		if have == nil || have.Namespace != namespace {
			who := "?"
			if have != nil {
				who = have.Namespace
			}
			return have, false, fmt.Errorf("claim prefix %s for namespace %s: %w (%s, %s)", layout.RootPrefix(), namespace, ErrOwnedByOther, who, catalog.OwnerKey(layout))
		}
		return have, false, nil
	}
	return rec, true, nil
}

// Ownership says whether namespace owns the layout's prefix, and why not.
// A store failure is an error (nothing may be deleted then); a missing or
// damaged record is "not owned".
func Ownership(ctx context.Context, st store.Store, layout catalog.Layout, namespace string) (owned bool, why string, rec *OwnerRecord, err error) {
	if layout.RootPrefix() == "" {
		return false, ErrSharedPrefix.Error(), nil, nil
	}
	rec, err = ReadOwner(ctx, st, layout)
	switch {
	case errors.Is(err, objectio.ErrDamagedRecord):
		return false, fmt.Sprintf("the ownership record %s is damaged: %v", catalog.OwnerKey(layout), err), nil, nil
	case err != nil:
		return false, "", nil, err
	case rec == nil:
		return false, fmt.Sprintf("no ownership record %s: the prefix is not claimed (claim it once with `etcd-recovery prune --orphans --claim-prefix` in namespace %s)", catalog.OwnerKey(layout), namespace), nil, nil
	case rec.Namespace != namespace:
		return false, fmt.Sprintf("%s: %s names namespace %s, not %s", ErrOwnedByOther, catalog.OwnerKey(layout), rec.Namespace, namespace), rec, nil
	}
	return true, "", rec, nil
}

// ReadOrphanMarker reads a cluster's orphan marker: nil when there is none.
func ReadOrphanMarker(ctx context.Context, st store.Store, layout catalog.Layout, clusterID string) (*OrphanMarker, error) {
	var m OrphanMarker
	found, err := getJSON(ctx, st, catalog.OrphanMarkerKey(layout, clusterID), &m)
	if err != nil || !found {
		return nil, err
	}
	return &m, nil
}

// States of an orphan (Orphan.State).
const (
	OrphanWaiting   = "waiting"      // within its grace, or first seen in this run
	OrphanDelete    = "delete"       // dry run: would be deleted now
	OrphanDeleted   = "deleted"      // every backup and the marker are gone
	OrphanFailed    = "FAILED"       // some deletion failed
	OrphanRestoring = "restoring"    // an EtcdRestore references it: kept
	OrphanNotOwned  = "report only"  // the namespace does not own the prefix: never deleted
	OrphanMarkerOut = "marker only"  // a marker without backups: the marker is removed
	OrphanReturned  = "cluster back" // an EtcdCluster of that name is back: its marker is removed
)

// Steps of the orphan pass (OrphanError.Step).
const (
	OrphanStepValidate  = "validate"
	OrphanStepList      = "list backups"
	OrphanStepOwner     = "read the ownership record"
	OrphanStepClusters  = "list etcdclusters"
	OrphanStepRestores  = "list etcdrestores"
	OrphanStepMarkers   = "read orphan markers"
	OrphanStepUploads   = "list multipart uploads"
	OrphanStepDelete    = "delete orphans"
	OrphanStepMarkWrite = "write orphan markers"
)

// OrphanOptions configure Orphans.
type OrphanOptions struct {
	Store  store.Store
	Layout catalog.Layout
	// Namespace is the Kubernetes namespace whose EtcdClusters were listed.
	Namespace string
	// Clusters returns the name of every EtcdCluster in Namespace: the
	// complete list, or an error. It is called after the store listing.
	Clusters func(ctx context.Context) ([]string, error)
	// Restores returns, for every cluster id an EtcdRestore of Namespace
	// references, the EtcdRestores' names: complete, or an error.
	Restores func(ctx context.Context) (map[string][]string, error)
	// Grace: an orphan's backups go Grace after the later of its newest
	// backup and its first sighting (OrphanDeadline; default
	// DefaultOrphanGrace, at least MinOrphanGrace).
	Grace time.Duration
	// Now is the time of the decision; default time.Now().
	Now    time.Time
	DryRun bool
	Log    *slog.Logger
	// ClockTolerance, when positive, has Orphans compare Now with the
	// store's own time before anything else and refuse, recording and
	// deleting nothing, when they differ by more (a *ClockError at
	// OrphanStepClock), as PruneOptions.ClockTolerance.
	ClockTolerance time.Duration
}

// Orphan is one cluster id under the prefix without an EtcdCluster (or
// whose marker was removed because its EtcdCluster is back).
type Orphan struct {
	ClusterID    string    `json:"clusterID"`
	Backups      int       `json:"backups"` // folders, complete or not
	Objects      int       `json:"objects"`
	Bytes        int64     `json:"bytes"`
	NewestBackup time.Time `json:"newestBackup,omitzero"`
	// FirstSeen is when a run first found it without an EtcdCluster (its
	// marker); zero when it has no marker yet (or the prefix is not owned).
	FirstSeen   time.Time `json:"firstSeen,omitzero"`
	DeleteAfter time.Time `json:"deleteAfter,omitzero"`
	State       string    `json:"state"`
	Reason      string    `json:"reason"`
	// Restores are the EtcdRestores that reference it (state restoring).
	Restores []string       `json:"restores,omitempty"`
	Deleted  []BackupAction `json:"deleted,omitempty"`
	Uploads  []UploadAction `json:"uploads,omitempty"`
	// Escrows are its escrows (escrow.go): they go with its backups.
	Escrows []EscrowAction `json:"escrows,omitempty"`
	// UndeleteRecords are its undelete records (undeletes.go): they go
	// with its last backup.
	UndeleteRecords []string `json:"undeleteRecords,omitempty"`
	Error           string   `json:"error,omitempty"`
	Err             error    `json:"-"`
}

// OrphanReport is the outcome of Orphans.
type OrphanReport struct {
	Namespace string    `json:"namespace"`
	Prefix    string    `json:"prefix"`
	Now       time.Time `json:"now"`
	Grace     string    `json:"grace"`
	DryRun    bool      `json:"dryRun"`
	// Owned says the namespace owns the prefix: only then are orphans
	// deleted; NotOwned says why not.
	Owned    bool         `json:"owned"`
	NotOwned string       `json:"notOwned,omitempty"`
	Owner    *OwnerRecord `json:"owner,omitempty"`
	// EtcdClusters is how many EtcdClusters the namespace has.
	EtcdClusters int      `json:"etcdClusters"`
	Orphans      []Orphan `json:"orphans"`
	Deleted      int      `json:"deleted"` // orphans whose backups were all deleted
	Failed       int      `json:"failed"`
	// Unknown are the keys under the prefix that are not in the layout
	// (Layout.Classify): never touched, reported.
	Unknown []string   `json:"unknown,omitempty"`
	Stats   StoreStats `json:"stats"`
}

func (o *OrphanOptions) defaults() error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Store == nil {
		return errNoStore
	}
	if o.Namespace == "" || o.Clusters == nil || o.Restores == nil {
		return errors.New("orphans need the namespace and its EtcdCluster and EtcdRestore listings")
	}
	if o.Grace == 0 {
		o.Grace = DefaultOrphanGrace
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	o.Now = o.Now.UTC()
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// markerIDs returns the cluster ids that have an orphan marker in objs.
func markerIDs(layout catalog.Layout, objs []store.ObjectInfo) []string {
	var ids []string
	for _, o := range objs {
		if ki := layout.Classify(o.Key); ki.Kind == catalog.KeyOrphanMarker {
			ids = append(ids, ki.ClusterID)
		}
	}
	return ids
}

// OrphanError is a failed orphan pass (Orphans). A failure before the
// plan records and deletes nothing (NothingDeleted); a failure to record,
// or to delete an orphan's backups, is reported per orphan in the report,
// and the rest of the plan still runs. Its text is the one prune's
// failures have ("prune failed at step ...", "prune: ...").
type OrphanError struct {
	step           string
	NothingDeleted bool
	Failed         int // orphans whose deletion failed
	// Err joins every failure.
	Err   error
	first error
}

// Step is the step of the orphan pass that failed (OrphanStep*).
func (e *OrphanError) Step() string { return e.step }

func (e *OrphanError) Error() string {
	pe := PruneError{step: e.step, NothingDeleted: e.NothingDeleted, Failed: e.Failed, Err: e.Err, first: e.first}
	return pe.Error()
}

func (e *OrphanError) Unwrap() error { return e.Err }

// orphanNothingDone is the error of an orphan step before anything is
// recorded or deleted.
func orphanNothingDone(step string, err error) *OrphanError {
	return &OrphanError{step: step, NothingDeleted: true, Err: err}
}

// Orphans finds the cluster ids under the prefix without an EtcdCluster in
// the namespace, records them (markers) and deletes the backups of those
// whose grace is over, under the conditions at the top of this file:
// listOrphans, planOrphans and executeOrphans, in that order. The report
// is returned whenever the plan was made; the error is an *OrphanError
// naming the step.
func Orphans(ctx context.Context, opts OrphanOptions) (*OrphanReport, error) {
	if err := opts.defaults(); err != nil {
		return nil, orphanNothingDone(OrphanStepValidate, err)
	}
	start := time.Now()
	log := opts.Log.With("namespace", opts.Namespace)
	fail := func(pe *OrphanError) (*OrphanReport, error) {
		log.Error("orphans: failed before deleting anything; nothing was deleted", "step", pe.step, "err", pe.Err)
		return nil, pe
	}
	rep := &OrphanReport{Namespace: opts.Namespace, Prefix: strings.TrimSuffix(opts.Layout.RootPrefix(), "/"), Now: opts.Now,
		Grace: retention.FormatDuration(opts.Grace), DryRun: opts.DryRun, Orphans: []Orphan{}}

	whose := fmt.Sprintf("the orphans of namespace %s under prefix %q", opts.Namespace, opts.Layout.RootPrefix())
	if err := checkClock(ctx, opts.Store, opts.Now, opts.ClockTolerance, whose); err != nil {
		return fail(orphanNothingDone(OrphanStepClock, err))
	}
	inv, pe := listOrphans(ctx, opts, rep, log)
	if pe != nil {
		return fail(pe)
	}
	plan, pe := planOrphans(ctx, opts, inv, rep)
	if pe != nil {
		return fail(pe)
	}
	if opts.DryRun {
		rep.Stats.Duration = time.Since(start)
		log.Info("orphans dry run: nothing deleted or recorded", "orphans", len(rep.Orphans), "would_delete", len(plan.toDelete), "owned", inv.owned)
		return rep, nil
	}
	return executeOrphans(ctx, opts, plan, rep, start, log)
}

// orphanInventory is everything the orphan plan is made from, read before
// anything is recorded or deleted.
type orphanInventory struct {
	ids      []string                   // every cluster id with backups or a marker, sorted
	groups   map[string][]catalog.Entry // the backups of each id
	marked   map[string]bool            // ids with a marker object
	markers  map[string]*OrphanMarker
	live     map[string]bool     // ids with an EtcdCluster
	restores map[string][]string // id -> EtcdRestores referencing it
	owned    bool
	why      string                        // why the prefix is not owned
	escrows  map[string][]store.ObjectInfo // by cluster: its escrows
	// undeletes are the undelete records of each cluster (undeletes.go).
	undeletes map[string][]string
}

// listOrphans is the orphan steps 1 and 2: the store listing, then
// ownership, the EtcdClusters and the restores in flight (so that an id
// with backups in the listing had its EtcdCluster before the EtcdCluster
// listing starts), then the markers. Any failure is returned before
// anything is recorded or deleted.
func listOrphans(ctx context.Context, opts OrphanOptions, rep *OrphanReport, log *slog.Logger) (*orphanInventory, *OrphanError) {
	fail := func(step string, err error) (*orphanInventory, *OrphanError) {
		return nil, orphanNothingDone(step, err)
	}
	// 1. The store, then Kubernetes: an id with backups in this listing
	// had its EtcdCluster before the EtcdCluster listing starts.
	objs, err := opts.Store.List(ctx, opts.Layout.RootPrefix())
	if err != nil {
		return fail(OrphanStepList, err)
	}
	rep.Stats.ObjectsListed = len(objs)
	if rep.Unknown = catalog.UnknownKeys(opts.Layout, objs); len(rep.Unknown) > 0 {
		log.Warn("orphans: keys not in the layout, left alone", "count", len(rep.Unknown), "keys", firstKeys(rep.Unknown))
	}
	groups := catalog.GroupEntries(opts.Layout, objs)
	marked := map[string]bool{}
	for _, id := range markerIDs(opts.Layout, objs) {
		marked[id] = true
	}
	owned, why, owner, err := Ownership(ctx, opts.Store, opts.Layout, opts.Namespace)
	if err != nil {
		return fail(OrphanStepOwner, err)
	}
	rep.Owned, rep.NotOwned, rep.Owner = owned, why, owner
	names, err := opts.Clusters(ctx)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return fail(OrphanStepClusters, err)
	}
	rep.EtcdClusters = len(names)
	restores, err := opts.Restores(ctx)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return fail(OrphanStepRestores, err)
	}
	live := map[string]bool{}
	for _, n := range names {
		live[n] = true
	}
	var ids []string
	for id := range groups {
		ids = append(ids, id)
	}
	for id := range marked {
		if _, ok := groups[id]; !ok {
			ids = append(ids, id)
		}
	}
	// A cluster id with escrows only (its backups are gone) and no
	// EtcdCluster: its escrows go too.
	escrows := escrowsOf(opts.Layout, objs)
	for id := range escrows {
		if _, ok := groups[id]; !ok && !marked[id] && !live[id] {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)

	// 2. The markers of the orphans (and of the ids that are back).
	markers := map[string]*OrphanMarker{}
	for _, id := range ids {
		if !marked[id] {
			continue
		}
		m, err := ReadOrphanMarker(ctx, opts.Store, opts.Layout, id)
		switch {
		case errors.Is(err, objectio.ErrDamagedRecord):
			log.Warn("orphans: damaged marker, treated as absent", "cluster", id, "err", err)
		case err != nil:
			return fail(OrphanStepMarkers, fmt.Errorf("cluster %s: %w", id, err))
		default:
			markers[id] = m
		}
	}

	return &orphanInventory{ids: ids, groups: groups, marked: marked, markers: markers, live: live, restores: restores, owned: owned, why: why,
		escrows: escrows, undeletes: undeleteRecordsOf(opts.Layout, objs)}, nil
}

// orphanWrite is an orphan marker to write.
type orphanWrite struct {
	id string
	m  OrphanMarker
}

// orphanPlan is what executeOrphans does: pointers into the report's
// orphans, which it updates with each outcome.
type orphanPlan struct {
	toDelete      []*Orphan
	removeMarkers []string
	writes        []orphanWrite
	// escrowsOnly are the orphans without backups whose escrows go
	// (their Escrows planned).
	escrowsOnly []*Orphan
}

// planOrphans is the orphan steps 3 and 4: it decides every cluster id
// (returned, waiting, not owned, restoring, due), fills rep.Orphans, and
// lists the uploads into the folders of the orphans to delete. Its steps:
// decideReturned or decideGone for each id, then listOrphanUploads.
func planOrphans(ctx context.Context, opts OrphanOptions, inv *orphanInventory, rep *OrphanReport) (*orphanPlan, *OrphanError) {
	// 3. Plan.
	plan := &orphanPlan{}
	for _, id := range inv.ids {
		if inv.live[id] {
			plan.decideReturned(opts, inv, id, rep)
			continue
		}
		plan.decideGone(opts, inv, id, rep)
	}
	for i := range rep.Orphans {
		switch o := &rep.Orphans[i]; {
		case o.State == OrphanDelete:
			plan.toDelete = append(plan.toDelete, o)
		case o.State == OrphanMarkerOut && len(escrowsToDelete(o.Escrows)) > 0:
			plan.escrowsOnly = append(plan.escrowsOnly, o)
		}
	}

	// 4. The uploads into the folders to delete, before any delete.
	if pe := plan.listOrphanUploads(ctx, opts, inv); pe != nil {
		return nil, pe
	}
	return plan, nil
}

// decideReturned decides a cluster id that has an EtcdCluster: when it is
// marked (and the prefix owned), it is back, and its marker is removed.
func (p *orphanPlan) decideReturned(opts OrphanOptions, inv *orphanInventory, id string, rep *OrphanReport) {
	if !inv.marked[id] || !inv.owned {
		return
	}
	o := Orphan{ClusterID: id, State: OrphanReturned,
		Reason: fmt.Sprintf("EtcdCluster %s/%s exists again: its orphan marker is removed, its backups stay", opts.Namespace, id)}
	if m := inv.markers[id]; m != nil {
		o.FirstSeen = m.FirstSeen
	}
	rep.Orphans = append(rep.Orphans, o)
	p.removeMarkers = append(p.removeMarkers, id)
}

// decideGone decides a cluster id without an EtcdCluster: a marker without
// backups goes (when the prefix is owned), and backups are decided by
// decideBackups.
func (p *orphanPlan) decideGone(opts OrphanOptions, inv *orphanInventory, id string, rep *OrphanReport) {
	es := inv.groups[id]
	o := Orphan{ClusterID: id, Backups: len(es)}
	for _, e := range es {
		o.Objects += len(e.Objects)
		for _, ob := range e.Objects {
			o.Bytes += ob.Size
		}
	}
	m := inv.markers[id]
	if m != nil {
		o.FirstSeen = m.FirstSeen
	}
	if len(es) == 0 {
		p.decideNoBackups(opts, inv, &o)
		rep.Orphans = append(rep.Orphans, o)
		return
	}
	o.NewestBackup = es[0].Time
	firstSeen := opts.Now // first seen now: a marker is written with this time
	switch {
	case m != nil && m.FirstSeen.IsZero():
		// A marker that does not say when the cluster was first seen
		// (hand-written, damaged): first seen now, and rewritten so
		// (its deadline moves, decideBackups). Taken as it is, its grace
		// would run from the newest backup alone.
		mc := *m
		mc.FirstSeen, mc.DeleteAfter = opts.Now, time.Time{}
		m = &mc
	case m != nil:
		firstSeen = m.FirstSeen
	}
	o.DeleteAfter = OrphanDeadline(o.NewestBackup, firstSeen, opts.Grace)
	p.decideBackups(opts, inv, &o, m)
	rep.Orphans = append(rep.Orphans, o)
}

// OrphanDeadline is when an orphan's backups go: grace after the later of
// its newest backup and its first sighting without an EtcdCluster (now,
// for one not yet recorded).
func OrphanDeadline(newestBackup, firstSeen time.Time, grace time.Duration) time.Time {
	return later(newestBackup, firstSeen).Add(grace)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// orphanRule is the deadline's rule in words, for the reasons.
func orphanRule(grace string) string {
	return "the later of its newest backup and its first sighting + " + grace
}

// decideNoBackups decides a cluster id without an EtcdCluster and without
// backups: its marker is removed and its escrows, which no backup names,
// go once older than the orphan grace (when the prefix is owned).
func (p *orphanPlan) decideNoBackups(opts OrphanOptions, inv *orphanInventory, o *Orphan) {
	id := o.ClusterID
	what := "an orphan marker without backups"
	if !inv.marked[id] {
		what = "escrows without backups"
	}
	o.State, o.Reason = OrphanMarkerOut, what
	if !inv.owned {
		o.Reason += ": kept (" + inv.why + ")"
		return
	}
	o.Reason += ": removed"
	if inv.marked[id] {
		p.removeMarkers = append(p.removeMarkers, id)
	}
	if objs := inv.escrows[id]; len(objs) > 0 {
		o.Escrows = decideEscrows(opts.Layout, id, objs, nil, nil, nil, opts.Now, opts.Grace)
		if n := countEscrows(o.Escrows); n.kept > 0 {
			o.Reason += fmt.Sprintf(" (%d escrow(s) younger than the grace %s stay)", n.kept, retention.FormatDuration(opts.Grace))
		}
	}
}

// decideBackups sets the state of an orphan with backups: restoring, not
// owned, first seen (a marker to write), waiting (its marker moved when
// the deadline did) or due for deletion.
func (p *orphanPlan) decideBackups(opts OrphanOptions, inv *orphanInventory, o *Orphan, m *OrphanMarker) {
	id := o.ClusterID
	due := !opts.Now.Before(o.DeleteAfter)
	noCluster := fmt.Sprintf("no EtcdCluster %s in namespace %s", id, opts.Namespace)
	switch {
	case len(inv.restores[id]) > 0:
		o.State, o.Restores = OrphanRestoring, inv.restores[id]
		o.Reason = fmt.Sprintf("%s, but EtcdRestore %s references it (a restore through etcd-operator in flight): kept",
			noCluster, strings.Join(inv.restores[id], ", "))
	case !inv.owned:
		o.State = OrphanNotOwned
		o.Reason = fmt.Sprintf("%s; would go after %s, but nothing is deleted: %s", noCluster, fmtTimeUTC(o.DeleteAfter), inv.why)
	case m == nil:
		o.State, o.FirstSeen = OrphanWaiting, opts.Now
		o.Reason = fmt.Sprintf("%s: first seen now; its backups go after %s (%s), at the first run after that",
			noCluster, fmtTimeUTC(o.DeleteAfter), orphanRule(retention.FormatDuration(opts.Grace)))
		p.writes = append(p.writes, orphanWrite{id, OrphanMarker{Format: 1, ClusterID: id, Namespace: opts.Namespace, FirstSeen: opts.Now,
			NewestBackup: o.NewestBackup, Grace: retention.FormatDuration(opts.Grace), DeleteAfter: o.DeleteAfter}})
	case !due:
		o.State = OrphanWaiting
		o.Reason = fmt.Sprintf("%s since %s: its backups go after %s (%s)",
			noCluster, fmtTimeUTC(m.FirstSeen), fmtTimeUTC(o.DeleteAfter), orphanRule(retention.FormatDuration(opts.Grace)))
		if !m.DeleteAfter.Equal(o.DeleteAfter) || m.Namespace != opts.Namespace {
			// A newer backup (or another grace, or a marker written by
			// the rule before the first sighting counted): keep
			// firstSeen, move the deadline.
			p.writes = append(p.writes, orphanWrite{id, OrphanMarker{Format: 1, ClusterID: id, Namespace: opts.Namespace, FirstSeen: m.FirstSeen,
				NewestBackup: o.NewestBackup, Grace: retention.FormatDuration(opts.Grace), DeleteAfter: o.DeleteAfter}})
		}
	default:
		o.State = OrphanDelete
		o.Reason = fmt.Sprintf("%s since %s; grace over at %s (%s): every backup is deleted",
			noCluster, fmtTimeUTC(m.FirstSeen), fmtTimeUTC(o.DeleteAfter), orphanRule(retention.FormatDuration(opts.Grace)))
	}
}

// listOrphanUploads is the orphan step 4: it lists the uploads into the
// folders of the orphans to delete and plans the deletion of their
// backups and the abort of those uploads.
func (p *orphanPlan) listOrphanUploads(ctx context.Context, opts OrphanOptions, inv *orphanInventory) *OrphanError {
	groups := inv.groups
	uploads := map[string][]store.Upload{}
	for _, o := range p.toDelete {
		u, err := clusterUploads(ctx, opts.Store, opts.Layout, o.ClusterID, groups[o.ClusterID])
		if err != nil {
			return orphanNothingDone(OrphanStepUploads, fmt.Errorf("cluster %s: %w", o.ClusterID, err))
		}
		uploads[o.ClusterID] = u
	}
	for _, o := range p.toDelete {
		for _, e := range groups[o.ClusterID] {
			a := newAction(e)
			a.Action, a.Reason = ActionDelete, "orphan: "+o.Reason
			o.Deleted = append(o.Deleted, a)
		}
		for _, u := range uploads[o.ClusterID] {
			pk, _ := opts.Layout.ParseKey(u.Key)
			o.Uploads = append(o.Uploads, UploadAction{ClusterID: o.ClusterID, Name: pk.Name, Key: u.Key, UploadID: u.UploadID,
				Initiated: u.Initiated, Action: ActionAbort, Reason: "multipart upload into an orphan's backup folder: abandoned"})
		}
		o.Escrows = clusterEndEscrows(opts.Layout, o.ClusterID, inv.escrows[o.ClusterID], "orphan: its escrows go with its backups")
		o.UndeleteRecords = inv.undeletes[o.ClusterID]
	}
	return nil
}

// executeOrphans is the orphan step 5: it writes and removes the markers,
// then deletes every backup of each orphan that is due (deleteCluster),
// and completes rep with the outcome.
func executeOrphans(ctx context.Context, opts OrphanOptions, plan *orphanPlan, rep *OrphanReport, start time.Time, log *slog.Logger) (*OrphanReport, error) {
	writes, removeMarkers, toDelete := plan.writes, plan.removeMarkers, plan.toDelete
	// 5. Record, then delete.
	var errs []error
	for _, w := range writes {
		b, _ := json.MarshalIndent(w.m, "", "  ")
		if _, err := opts.Store.Put(ctx, catalog.OrphanMarkerKey(opts.Layout, w.id), bytes.NewReader(b)); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: write orphan marker: %w", w.id, err))
			continue
		}
		log.Info("orphan recorded: no EtcdCluster", "cluster", w.id, "first_seen", w.m.FirstSeen, "delete_after", w.m.DeleteAfter)
	}
	for _, id := range removeMarkers {
		if err := opts.Store.Delete(ctx, []string{catalog.OrphanMarkerKey(opts.Layout, id)}); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: remove orphan marker: %w", id, err))
			continue
		}
		log.Info("orphan marker removed", "cluster", id)
	}
	t := time.Now()
	for _, o := range plan.escrowsOnly {
		if es := runEscrows(ctx, opts.Store, o.Escrows, opts.Now, false, &rep.Stats, log, nil); len(es) > 0 {
			err := fmt.Errorf("cluster %s: %w", o.ClusterID, errEscrows(es))
			o.State, o.Err, o.Error = OrphanFailed, err, err.Error()
			rep.Failed++
			errs = append(errs, err)
		}
	}
	for _, o := range toDelete {
		if err := deleteCluster(ctx, opts.Store, opts.Layout, o.ClusterID, o.Deleted, o.Uploads, o.Escrows, o.UndeleteRecords, &rep.Stats, log); err != nil {
			o.State, o.Err, o.Error = OrphanFailed, err, err.Error()
			rep.Failed++
			errs = append(errs, err)
			continue
		}
		o.State = OrphanDeleted
		rep.Deleted++
		log.Info("orphan deleted: every backup of a cluster without an EtcdCluster", "cluster", o.ClusterID, "backups", o.Backups,
			"first_seen", o.FirstSeen, "delete_after", o.DeleteAfter)
	}
	rep.Stats.DeleteDuration = time.Since(t)
	rep.Stats.Duration = time.Since(start)
	if len(errs) > 0 {
		return rep, &OrphanError{step: OrphanStepDelete, Failed: rep.Failed, Err: errors.Join(errs...), first: errs[0]}
	}
	return rep, nil
}

// clusterUploads lists the multipart uploads under a cluster's prefix and
// under the exact keys of each of its folders.
func clusterUploads(ctx context.Context, st store.Store, layout catalog.Layout, id string, es []catalog.Entry) ([]store.Upload, error) {
	ups, err := catalog.ListUploads(ctx, st, layout.ClusterPrefix(id))
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range es {
		keys = append(keys, catalog.UploadKeys(layout, e, nil)...)
	}
	exact, err := catalog.ListUploadsAt(ctx, st, keys, catalog.DefaultCheckParallel)
	if err != nil {
		return nil, err
	}
	var out []store.Upload
	for _, u := range mergeUploads(ups, exact) {
		if pk, ok := layout.ParseKey(u.Key); ok && pk.ClusterID == id {
			out = append(out, u)
		}
	}
	return out, nil
}

// deleteCluster deletes every folder of a cluster (manifests first, as
// prune does), aborts the uploads into them, then, once every backup and
// escrow is gone, its undelete records and its orphan marker. acts and
// ups are updated in place.
func deleteCluster(ctx context.Context, st store.Store, layout catalog.Layout, id string, acts []BackupAction, ups []UploadAction, escrows []EscrowAction,
	undeletes []string, stats *StoreStats, log *slog.Logger) error {
	var ptrs []*BackupAction
	for i := range acts {
		if acts[i].Action != ActionRetained {
			ptrs = append(ptrs, &acts[i])
		}
	}
	deleteBackups(ctx, st, holdLocked(ctx, st, ptrs, time.Now(), log), stats, log)
	var errs []error
	retained := 0
	for _, a := range acts {
		switch a.Action {
		case ActionDeleted:
		case ActionRetained:
			retained++
		default:
			errs = append(errs, a.Err)
		}
	}
	for i := range ups {
		u := &ups[i]
		if err := catalog.AbortUpload(ctx, st, store.Upload{Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated}); err != nil {
			u.Action, u.Err = ActionFailed, fmt.Errorf("abort upload %s of %s: %w", u.UploadID, u.Key, err)
			u.Error = u.Err.Error()
			errs = append(errs, u.Err)
			continue
		}
		u.Action = ActionAborted
		stats.UploadsAborted++
	}
	// The escrows go with the last backup: only once every one is gone.
	if len(errs) > 0 || retained > 0 {
		keepEscrows(escrows, fmt.Sprintf("kept: %d backup(s) of the cluster remain (retained by object lock or not deleted); the escrows go with the last",
			countFailed(acts)+retained))
	} else {
		errs = append(errs, runEscrows(ctx, st, escrows, time.Now(), false, stats, log, nil)...)
	}
	if len(errs) > 0 {
		return fmt.Errorf("cluster %s: %d of %d backups, %d uploads, %d escrows: deletion incomplete (a later run retries): %w",
			id, countFailed(acts), len(acts), len(ups), len(escrows), errors.Join(errs...))
	}
	if n := countEscrows(escrows); retained > 0 || n.retained > 0 {
		// Locked backups (or escrows) stay until their retention ends:
		// the marker too, so a later run deletes them then.
		log.Info("backups or escrows retained by object lock; the orphan marker and the undelete records stay", "cluster", id, "retained", retained, "escrows_retained", n.retained)
		return nil
	}
	// The undelete records go with the last backup (undeletes.go).
	if len(undeletes) > 0 {
		if err := st.Delete(ctx, undeletes); err != nil {
			return fmt.Errorf("cluster %s: every backup deleted, but not its %d undelete record(s) under %s (a later delete --all-backups retries): %w",
				id, len(undeletes), layout.UndeletesPrefix(id), err)
		}
		log.Info("deleted the cluster's undelete records with its last backup", "cluster", id, "records", len(undeletes))
	}
	// Last: the marker (a marker without backups is removed by a later run).
	if err := st.Delete(ctx, []string{catalog.OrphanMarkerKey(layout, id)}); err != nil {
		return fmt.Errorf("cluster %s: every backup deleted, but not its orphan marker: %w", id, err)
	}
	return nil
}

func countFailed(acts []BackupAction) int {
	n := 0
	for _, a := range acts {
		if a.Action != ActionDeleted && a.Action != ActionRetained {
			n++
		}
	}
	return n
}

func fmtTimeUTC(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// DeleteAllOptions configure DeleteAll.
type DeleteAllOptions struct {
	Store     store.Store
	Layout    catalog.Layout
	ClusterID string
	DryRun    bool
	// Reason is recorded on every backup (e.g. "deleted on request: every
	// backup of the cluster (--all)").
	Reason string
	Log    *slog.Logger
}

// DeleteAllReport is the outcome of DeleteAll.
type DeleteAllReport struct {
	ClusterID string         `json:"clusterID"`
	DryRun    bool           `json:"dryRun"`
	Backups   []BackupAction `json:"backups"`
	Uploads   []UploadAction `json:"uploads,omitempty"`
	// Marker says the cluster had an orphan marker (removed with it).
	Marker bool `json:"orphanMarker,omitempty"`
	// Escrows are the cluster's escrows (escrow.go): they all go with its
	// backups (the runbook's Destroy), unless a backup is retained.
	Escrows []EscrowAction `json:"escrows,omitempty"`
	// UndeleteRecords are the cluster's undelete records (undeletes.go):
	// they go with its last backup, unless a backup is retained.
	UndeleteRecords []string `json:"undeleteRecords,omitempty"`
	// Unknown are the keys under the cluster's prefix that are not in the
	// layout (Layout.Classify): never touched, reported.
	Unknown []string   `json:"unknown,omitempty"`
	Stats   StoreStats `json:"stats"`
}

// DeleteAll deletes every backup folder of one cluster, whatever its kind
// or state (manual, pre-restore, incomplete, damaged), manifests first, the
// multipart uploads into them, and its orphan marker: the end of a cluster.
// Whether the cluster still exists is the caller's check. It lists
// everything before deleting anything; a listing failure deletes nothing.
func DeleteAll(ctx context.Context, opts DeleteAllOptions) (*DeleteAllReport, error) {
	log, err := checkDelete(opts.Validate(), opts.Store, opts.Log)
	if err != nil {
		return nil, err
	}
	if opts.Reason == "" {
		opts.Reason = "deleted on request: every backup of the cluster (--all)"
	}
	start := time.Now()
	id := opts.ClusterID
	objs, err := opts.Store.List(ctx, opts.Layout.ClusterPrefix(id))
	if err != nil {
		return nil, fmt.Errorf("delete: list cluster %s, nothing was deleted: %w", id, err)
	}
	entries := catalog.GroupEntries(opts.Layout, objs)[id]
	rep := &DeleteAllReport{ClusterID: id, DryRun: opts.DryRun, Backups: []BackupAction{}, Unknown: catalog.UnknownKeys(opts.Layout, objs)}
	if len(rep.Unknown) > 0 {
		log.Warn("delete: keys not in the layout, left alone", "cluster", id, "count", len(rep.Unknown), "keys", firstKeys(rep.Unknown))
	}
	rep.Stats.ObjectsListed = len(objs)
	rep.Marker = slices.ContainsFunc(objs, func(o store.ObjectInfo) bool { return o.Key == catalog.OrphanMarkerKey(opts.Layout, id) })
	ups, err := clusterUploads(ctx, opts.Store, opts.Layout, id, entries)
	if err != nil {
		return nil, fmt.Errorf("delete: list the multipart uploads of cluster %s, nothing was deleted: %w", id, err)
	}
	escrows, err := listEscrows(ctx, opts.Store, opts.Layout, id)
	if err != nil {
		return nil, fmt.Errorf("delete: %w; nothing was deleted", err)
	}
	rep.Escrows = clusterEndEscrows(opts.Layout, id, escrows, "every backup of the cluster is deleted: its escrows go with them")
	if rep.UndeleteRecords, err = listUndeleteRecords(ctx, opts.Store, opts.Layout, id); err != nil {
		return nil, fmt.Errorf("delete: %w; nothing was deleted", err)
	}
	rep.Stats.ListDuration = time.Since(start)
	for _, e := range entries {
		a := newAction(e)
		a.Action, a.Reason = ActionDelete, opts.Reason
		if e.Damaged != "" {
			a.Reason += " (damaged: " + e.Damaged + ")"
		}
		rep.Backups = append(rep.Backups, a)
	}
	for _, u := range ups {
		pk, _ := opts.Layout.ParseKey(u.Key)
		rep.Uploads = append(rep.Uploads, UploadAction{ClusterID: id, Name: pk.Name, Key: u.Key, UploadID: u.UploadID,
			Initiated: u.Initiated, Action: ActionAbort, Reason: "multipart upload into a deleted backup folder: abandoned"})
	}
	if opts.DryRun {
		// What is locked would be retained (only read).
		ptrs := make([]*BackupAction, len(rep.Backups))
		for i := range rep.Backups {
			ptrs[i] = &rep.Backups[i]
		}
		holdLocked(ctx, opts.Store, ptrs, time.Now(), log)
		if slices.ContainsFunc(rep.Backups, func(a BackupAction) bool { return a.Action == ActionRetained }) {
			keepEscrows(rep.Escrows, "kept: a backup of the cluster is retained by object lock; the escrows go with the last")
		}
		runEscrows(ctx, opts.Store, rep.Escrows, time.Now(), true, &rep.Stats, log, nil)
		rep.Stats.Duration = time.Since(start)
		return rep, nil
	}
	t := time.Now()
	err = deleteCluster(ctx, opts.Store, opts.Layout, id, rep.Backups, rep.Uploads, rep.Escrows, rep.UndeleteRecords, &rep.Stats, log)
	rep.Stats.DeleteDuration = time.Since(t)
	rep.Stats.Duration = time.Since(start)
	if err != nil {
		return rep, fmt.Errorf("delete: %w", err)
	}
	log.Info("deleted every backup of the cluster", "cluster", id, "backups", len(rep.Backups), "uploads_aborted", len(rep.Uploads))
	return rep, nil
}
