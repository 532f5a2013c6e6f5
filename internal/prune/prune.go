package prune

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/escrow"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
)

// Prune applies the retention policy in the store, and Delete removes
// backups by name. Both delete a backup the same way, so that a backup is
// never left committed but broken:
//
//  1. the manifests of every backup to delete are deleted first: from then
//     on a backup whose deletion stops halfway is only an incomplete folder,
//     which nothing restores from and a later prune removes;
//  2. the other objects are deleted only for the backups whose manifest is
//     gone (and for incomplete folders, which have none);
//  3. Prune then aborts the stale multipart uploads, and those under the keys
//     of the backups it deleted.
//
// Prune lists and checks everything it plans from before it deletes
// anything: if a listing or a manifest read fails (other than because the
// backup is damaged), nothing is deleted. Every committed backup is checked
// (CheckEntries): only backups that check out count for the retention
// rules, so a damaged one never pushes a good one out.

// Actions recorded in BackupAction.Action and UploadAction.Action.
const (
	ActionKeep    = "keep"
	ActionDelete  = "delete"  // planned (dry run)
	ActionDeleted = "deleted" // every object of the backup is gone
	ActionAbort   = "abort"   // planned (dry run)
	ActionAborted = "aborted"
	ActionFailed  = "FAILED"
	// ActionRetained: retention (or delete, or the orphan lifecycle) lets
	// the backup go, but object lock still holds it
	// (BackupAction.LockedUntil): not deleted, not a failure; a run after
	// LockedUntil deletes it.
	ActionRetained = "retained"
)

// Steps of a prune, named by PruneError.Step.
const (
	PruneStepValidate    = "validate"
	PruneStepList        = "list backups"
	PruneStepListUploads = "list multipart uploads"
	PruneStepCheck       = "check backups"
	// PruneStepDrills: reading the drill records (drill.json) that the
	// drilled rule keeps by.
	PruneStepDrills = "read drill records"
	PruneStepPlan   = "plan"
	PruneStepDelete = "delete"
	// PruneStepDamaged: the prune ran, but a cluster's newest backup that
	// checks out is older than its newest backup (or it has none).
	PruneStepDamaged = "damaged backups"
	// PruneStepStaged: the prune ran, but staged plaintext copies older
	// than StagedMaxAge could not be deleted (or listed).
	PruneStepStaged = "delete staged plaintext copies"
	// PruneStepListEscrows: listing the clusters' escrows (escrow.go).
	PruneStepListEscrows = "list escrows"
)

// PruneOptions configure Prune.
type PruneOptions struct {
	Store  store.Store
	Layout catalog.Layout
	// ClusterIDs are the clusters to prune. Alternatively, All prunes every
	// cluster under the layout's prefix from one listing.
	ClusterIDs []string
	All        bool
	Policy     retention.Policy
	// Now is the time the policy is applied at; default time.Now().
	Now time.Time
	// UploadMaxAge is the age after which a multipart upload is aborted;
	// default DefaultUploadMaxAge (24h).
	UploadMaxAge time.Duration
	// DryRun plans and reports without deleting anything.
	DryRun bool
	// CheckParallel is how many manifests (and exact-key upload listings)
	// are read at once; default DefaultCheckParallel.
	CheckParallel int
	Log           *slog.Logger
	// Lock, when its mode is explicit (governance or compliance), re-locks
	// each cluster's newest committed backup to at least
	// RelockUntil(Now) (lock.go), so an idle cluster keeps a locked
	// backup. Not in a dry run. Whatever Lock says, a backup whose objects
	// are still locked is never deleted (ActionRetained).
	Lock retention.LockPolicy
	// JournalRetention is how far back the journal window reaches
	// (journal retention, prunejournal.go); default
	// DefaultJournalRetention.
	JournalRetention time.Duration
	// ClockTolerance, when positive, has Prune compare Now with the
	// store's own time (store.Clock) before anything else, and refuse,
	// deleting nothing, when they differ by more (a *ClockError at
	// PruneStepClock; clock.go). 0: not checked (tests that set Now).
	// The CLI sets DefaultClockTolerance.
	ClockTolerance time.Duration
}

// BackupAction is what happened (or, in a dry run, would happen) to one
// backup folder.
type BackupAction struct {
	ClusterID string       `json:"clusterID"`
	Name      string       `json:"name"`
	Kind      catalog.Kind `json:"kind"`
	Time      time.Time    `json:"time"`
	Committed bool         `json:"committed"` // it had a manifest
	// Damaged says why a committed backup cannot restore (see Entry.Damaged).
	Damaged string `json:"damaged,omitempty"`
	Objects int    `json:"objects"`
	Bytes   int64  `json:"bytes"`

	// Drill is the backup's restore drill result; absent when never drilled.
	Drill *catalog.DrillResult `json:"drill,omitempty"`

	Keep   bool     `json:"keep"`
	Rules  []string `json:"rules,omitempty"` // why it is kept (Rule*)
	Reason string   `json:"reason"`          // why it is kept or deleted; never empty
	// Action is keep, delete (dry run), deleted, retained or FAILED.
	Action string `json:"action"`
	// LockedUntil is when the object lock of a backup retention lets go
	// ends (Action retained): it is deleted by a prune after that.
	LockedUntil *time.Time `json:"lockedUntil,omitempty"`

	// ManifestDeleted says the manifest is gone: the backup no longer
	// exists, even when some of its other objects could not be deleted.
	ManifestDeleted bool   `json:"manifestDeleted,omitempty"`
	ObjectsDeleted  int    `json:"objectsDeleted,omitempty"`
	Error           string `json:"error,omitempty"`
	// Err is the failure, wrapping a *DeleteError with the keys left.
	Err error `json:"-"`

	entry catalog.Entry
}

// UploadAction is what happened to one multipart upload in progress.
type UploadAction struct {
	ClusterID string    `json:"clusterID"`
	Name      string    `json:"name"` // the backup folder the upload writes into
	Key       string    `json:"key"`
	UploadID  string    `json:"uploadID"`
	Initiated time.Time `json:"initiated"`
	Reason    string    `json:"reason"`
	// Action is keep, abort (dry run), aborted or FAILED.
	Action string `json:"action"`
	Error  string `json:"error,omitempty"`
	Err    error  `json:"-"`
}

// ClusterPrune is the part of a prune about one cluster.
type ClusterPrune struct {
	ClusterID string         `json:"clusterID"`
	Backups   []BackupAction `json:"backups"` // newest first
	Uploads   []UploadAction `json:"uploads,omitempty"`
	// Segments are the cluster's journal segments, in revision order
	// (prunejournal.go).
	Segments []SegmentAction `json:"segments,omitempty"`
	// Escrows are the cluster's escrows (escrow.go): kept while a
	// remaining backup names them.
	Escrows []EscrowAction `json:"escrows,omitempty"`
	// Damaged counts the committed backups that do not check out.
	Damaged int `json:"damaged,omitempty"`
	// Problem is set when the newest committed backup is not the newest
	// backup that checks out (or none does): the prune then fails.
	Problem string `json:"problem,omitempty"`
}

// StoreStats are the numbers of the store work of a prune, a delete or an
// orphan pass, for logs and benchmarks.
type StoreStats struct {
	ObjectsListed  int
	UploadsListed  int
	ManifestsRead  int
	KeyUploadLists int           // exact-key multipart upload listings
	DrillsRead     int           // drill records (drill.json) read
	ListDuration   time.Duration // object and upload listings, manifest and drill record reads
	CheckDuration  time.Duration // manifest reads alone
	DrillDuration  time.Duration // drill record reads alone
	ObjectsDeleted int
	DeleteRequests int // DeleteObjects requests of up to 1,000 keys
	DeleteDuration time.Duration
	UploadsAborted int
	AbortDuration  time.Duration
	Duration       time.Duration // the whole prune
}

// MarshalJSON writes durations in seconds.
func (s StoreStats) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ObjectsListed   int     `json:"objectsListed"`
		UploadsListed   int     `json:"uploadsListed"`
		ManifestsRead   int     `json:"manifestsRead"`
		DrillsRead      int     `json:"drillsRead"`
		KeyUploadLists  int     `json:"keyUploadLists"`
		ListSeconds     float64 `json:"listSeconds"`
		CheckSeconds    float64 `json:"checkSeconds"`
		DrillSeconds    float64 `json:"drillSeconds"`
		ObjectsDeleted  int     `json:"objectsDeleted"`
		DeleteRequests  int     `json:"deleteRequests"`
		DeleteSeconds   float64 `json:"deleteSeconds"`
		UploadsAborted  int     `json:"uploadsAborted"`
		AbortSeconds    float64 `json:"abortSeconds"`
		DurationSeconds float64 `json:"durationSeconds"`
	}{s.ObjectsListed, s.UploadsListed, s.ManifestsRead, s.DrillsRead, s.KeyUploadLists, s.ListDuration.Seconds(), s.CheckDuration.Seconds(),
		s.DrillDuration.Seconds(), s.ObjectsDeleted, s.DeleteRequests,
		s.DeleteDuration.Seconds(), s.UploadsAborted, s.AbortDuration.Seconds(), s.Duration.Seconds()})
}

// PruneReport is the plan and the outcome of a prune.
type PruneReport struct {
	Now      time.Time      `json:"now"`
	DryRun   bool           `json:"dryRun"`
	Clusters []ClusterPrune `json:"clusters"` // by cluster id

	Kept        int `json:"kept"`
	Planned     int `json:"planned"` // backups to delete
	Deleted     int `json:"deleted"`
	Failed      int `json:"failed"`
	Uploads     int `json:"uploads"`      // uploads in progress seen
	Stale       int `json:"staleUploads"` // uploads to abort
	Aborted     int `json:"uploadsAborted"`
	AbortFailed int `json:"uploadsFailed"`
	Damaged     int `json:"damaged"` // committed backups that do not check out
	// Retained counts the backups retention lets go that object lock
	// still holds (ActionRetained).
	Retained int `json:"retained,omitempty"`
	// Relocked names the backups (cluster/name) whose lock was extended
	// (PruneOptions.Lock).
	Relocked []string `json:"relocked,omitempty"`

	// Journal segments (prunejournal.go): kept, to delete, deleted, not
	// deleted.
	SegmentsKept    int `json:"segmentsKept"`
	SegmentsPlanned int `json:"segmentsPlanned"`
	SegmentsDeleted int `json:"segmentsDeleted"`
	SegmentsFailed  int `json:"segmentsFailed"`
	// SegmentsRetained: segments journal retention lets go that object
	// lock still holds (retainLockedSegments): not deleted, not a failure.
	SegmentsRetained int `json:"segmentsRetained,omitempty"`

	// Escrows (escrow.go): kept, to delete (deleted or failed included),
	// deleted, retained by object lock, not deleted.
	EscrowsKept     int `json:"escrowsKept"`
	EscrowsPlanned  int `json:"escrowsPlanned"`
	EscrowsDeleted  int `json:"escrowsDeleted"`
	EscrowsRetained int `json:"escrowsRetained,omitempty"`
	EscrowsFailed   int `json:"escrowsFailed"`

	// Staged are the plaintext copies staged for etcd-operator that were
	// found (staged.go): deleted once older than StagedMaxAge.
	Staged      []catalog.StagedCopy `json:"staged,omitempty"`
	StagedError string               `json:"stagedError,omitempty"`
	// StagedDeleted and StagedFailed count the staged copies deleted and
	// those older than StagedMaxAge that could not be deleted (the prune
	// then fails: plaintext stays in the store).
	StagedDeleted int `json:"stagedDeleted"`
	StagedFailed  int `json:"stagedFailed"`

	// Unknown are the keys listed that are not in the layout
	// (Layout.Classify): never touched, reported.
	Unknown []string `json:"unknown,omitempty"`

	Stats StoreStats `json:"stats"`
}

// PruneError is a failed prune. A listing or planning failure deletes
// nothing; a delete failure is reported per backup in the report, and the
// rest of the plan still runs. Step names the step that failed.
type PruneError struct {
	step           string
	NothingDeleted bool
	Failed         int // backups not (fully) deleted
	UploadsFailed  int // stale uploads not aborted
	SegmentsFailed int // journal segments not deleted
	EscrowsFailed  int // escrows not deleted
	// StagedFailed are the keys of the staged plaintext copies that could
	// not be deleted; StagedErr is that failure (or the listing's).
	StagedFailed []string
	StagedErr    error
	// Problems are the clusters whose newest good backup is older than
	// their newest backup, or that have no good backup: one line each.
	Problems []string
	// Err joins every failure; errors.As finds the *DeleteError of each.
	Err   error
	first error
}

// Step is the step of the prune that failed (PruneStep*).
func (e *PruneError) Step() string { return e.step }

func (e *PruneError) Error() string {
	if e.NothingDeleted {
		return fmt.Sprintf("prune failed at step %q, nothing was deleted: %v", e.step, e.Err)
	}
	var parts []string
	if len(e.Problems) > 0 {
		parts = append(parts, strings.Join(e.Problems, "; "))
	}
	if e.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d backup(s) could not be deleted", e.Failed))
	}
	if e.UploadsFailed > 0 {
		parts = append(parts, fmt.Sprintf("%d stale upload(s) could not be aborted", e.UploadsFailed))
	}
	if e.SegmentsFailed > 0 {
		parts = append(parts, fmt.Sprintf("%d journal segment(s) could not be deleted", e.SegmentsFailed))
	}
	if e.EscrowsFailed > 0 {
		parts = append(parts, fmt.Sprintf("%d escrow(s) could not be deleted", e.EscrowsFailed))
	}
	switch {
	case len(e.StagedFailed) > 0:
		parts = append(parts, fmt.Sprintf("%d staged plaintext snapshot(s) older than %s could not be deleted and stay in the store: %s",
			len(e.StagedFailed), catalog.StagedMaxAge, strings.Join(e.StagedFailed, ", ")))
	case e.StagedErr != nil:
		parts = append(parts, fmt.Sprintf("staged plaintext snapshots: %v", e.StagedErr))
	}
	msg := "prune: " + strings.Join(parts, "; and ")
	if e.first != nil {
		msg += "; first: " + e.first.Error()
	}
	return msg
}

func (e *PruneError) Unwrap() error { return e.Err }

func (o *PruneOptions) defaults() error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Store == nil {
		return errNoStore
	}
	ids := slices.Clone(o.ClusterIDs)
	slices.Sort(ids)
	o.ClusterIDs = slices.Compact(ids)
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	o.Now = o.Now.UTC()
	if o.UploadMaxAge <= 0 {
		o.UploadMaxAge = retention.DefaultUploadMaxAge
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.CheckParallel <= 0 {
		o.CheckParallel = catalog.DefaultCheckParallel
	}
	if o.JournalRetention <= 0 {
		o.JournalRetention = retention.DefaultJournalRetention
	}
	return nil
}

// Prune applies opts.Policy to the backups of the chosen clusters and
// aborts their stale multipart uploads. It lists once, plans everything,
// then deletes (see the top of this file): listPrune, planPrune and
// executePrune, in that order. The report is returned whenever the plan was
// made, also with an error; the error is a *PruneError.
func Prune(ctx context.Context, opts PruneOptions) (*PruneReport, error) {
	if err := opts.defaults(); err != nil {
		return nil, &PruneError{step: PruneStepValidate, NothingDeleted: true, Err: err}
	}
	start := time.Now()
	log := opts.Log
	rep := &PruneReport{Now: opts.Now, DryRun: opts.DryRun}
	failList := func(pe *PruneError) (*PruneReport, error) {
		log.Error("prune: failed before deleting anything; nothing was deleted", "step", pe.step, "err", pe.Err)
		return nil, pe
	}

	if err := checkClock(ctx, opts.Store, opts.Now, opts.ClockTolerance, pruneWhose(opts)); err != nil {
		return failList(nothingDeleted(PruneStepClock, err))
	}
	inv, pe := listPrune(ctx, opts, &rep.Stats)
	if pe != nil {
		return failList(pe)
	}
	if rep.Unknown = inv.unknown; len(rep.Unknown) > 0 {
		log.Warn("prune: keys not in the layout, left alone", "count", len(rep.Unknown), "keys", firstKeys(rep.Unknown))
	}
	plan, pe := planPrune(ctx, opts, inv, rep, start)
	if pe != nil {
		return failList(pe)
	}
	// Plaintext copies staged for etcd-operator, left behind (staged.go).
	staged, serr := catalog.PruneStaged(ctx, opts.Store, opts.Layout, opts.ClusterIDs, opts.Now, catalog.StagedMaxAge, opts.DryRun, log)
	if rep.Staged = staged; serr != nil {
		rep.StagedError = serr.Error()
		log.Error("prune: staged plaintext snapshots", "err", serr)
	}
	for _, c := range staged {
		switch c.Action {
		case catalog.StagedDeleted:
			rep.StagedDeleted++
		case catalog.StagedFailed:
			rep.StagedFailed++
		}
	}
	if opts.DryRun {
		pruneEscrows(ctx, opts, inv, rep) // only reads: nothing fails
		rep.Stats.Duration = time.Since(start)
		log.Info("prune dry run: nothing deleted", "kept", rep.Kept, "would_delete", rep.Planned, "would_abort_uploads", rep.Stale, "damaged", rep.Damaged)
		return rep, withStaged(plan.damagedErr(), rep, serr)
	}
	rep, err := executePrune(ctx, opts, inv, plan, rep, start)
	return rep, withStaged(err, rep, serr)
}

// withStaged adds the staged copies that could not be deleted (or
// listed), serr, to the prune's error err: a prune that leaves plaintext
// behind fails, naming its keys.
func withStaged(err error, rep *PruneReport, serr error) error {
	if serr == nil {
		return err
	}
	var keys []string
	for _, c := range rep.Staged {
		if c.Action == catalog.StagedFailed {
			keys = append(keys, c.Key)
		}
	}
	var pe *PruneError
	if err == nil || !errors.As(err, &pe) {
		pe = &PruneError{step: PruneStepStaged, Err: errors.Join(err, serr)}
	} else {
		pe.Err = errors.Join(pe.Err, serr)
	}
	pe.StagedFailed, pe.StagedErr = keys, serr
	if pe.first == nil && pe.step == PruneStepStaged {
		pe.first = serr
	}
	return pe
}

// nothingDeleted is the error of a prune step before any delete.
func nothingDeleted(step string, err error) *PruneError {
	return &PruneError{step: step, NothingDeleted: true, Err: err}
}

// pruneInventory is everything Prune's plan is made from, all read before
// any delete.
type pruneInventory struct {
	ids        []string                     // the chosen clusters, sorted
	groups     map[string][]catalog.Entry   // by cluster: checked, with drills and uploads
	manifestOf map[string]*catalog.Manifest // cluster/name -> manifest of a committed backup
	uploads    []store.Upload               // every upload listed, also outside the chosen clusters
	wanted     func(clusterID string) bool
	unknown    []string                      // keys listed outside the layout
	journal    map[string][]store.ObjectInfo // by cluster: its journal segments
	escrows    map[string][]store.ObjectInfo // by cluster: its escrows
}

// listPrune is Prune's steps 1 and 2: it lists the objects and multipart
// uploads under the chosen clusters, checks every committed backup (its
// manifest and the objects it names), reads the drill records, and lists
// the uploads under the exact keys of every incomplete folder (they make
// it young). Any failure is returned before anything is deleted. Its
// steps: listPruneKeys, pruneClusters, checkPruneEntries, loadPruneDrills,
// listIncompleteUploads and regroupEntries.
func listPrune(ctx context.Context, opts PruneOptions, stats *StoreStats) (*pruneInventory, *PruneError) {
	// 1. List: everything the plan needs, before any delete.
	objs, uploads, pe := listPruneKeys(ctx, opts, stats)
	if pe != nil {
		return nil, pe
	}

	// 2. Check every committed backup of the chosen clusters: its manifest
	// and the objects it names. Then list the uploads under the exact keys
	// of every incomplete folder: they make it young.
	groups := catalog.GroupEntries(opts.Layout, objs)
	wanted := func(id string) bool { return opts.All || slices.Contains(opts.ClusterIDs, id) }
	ids := pruneClusters(opts.ClusterIDs, groups, wanted)
	var flat []catalog.Entry
	for _, id := range ids {
		flat = append(flat, groups[id]...)
	}
	manifestOf, pe := checkPruneEntries(ctx, opts, flat, stats)
	if pe != nil {
		return nil, pe
	}
	if pe := loadPruneDrills(ctx, opts, flat, stats); pe != nil {
		return nil, pe
	}
	uploads, pe = listIncompleteUploads(ctx, opts, flat, uploads, stats)
	if pe != nil {
		return nil, pe
	}
	regroupEntries(opts.Layout, ids, groups, flat, uploads, wanted)
	journal, pe := listPruneJournal(ctx, opts, ids, objs, stats)
	if pe != nil {
		return nil, pe
	}
	escrows, pe := listPruneEscrows(ctx, opts, ids, objs, stats)
	if pe != nil {
		return nil, pe
	}
	return &pruneInventory{ids: ids, groups: groups, manifestOf: manifestOf, uploads: uploads, wanted: wanted,
		unknown: catalog.UnknownKeys(opts.Layout, objs), journal: journal, escrows: escrows}, nil
}

// listPruneKeys is listPrune's step 1: the objects, then the multipart
// uploads, under the chosen clusters (or the whole prefix with All).
func listPruneKeys(ctx context.Context, opts PruneOptions, stats *StoreStats) ([]store.ObjectInfo, []store.Upload, *PruneError) {
	prefixes := []string{opts.Layout.RootPrefix()}
	if !opts.All {
		prefixes = prefixes[:0]
		for _, id := range opts.ClusterIDs {
			prefixes = append(prefixes, opts.Layout.ClusterPrefix(id))
		}
	}
	var objs []store.ObjectInfo
	for _, p := range prefixes {
		o, err := opts.Store.List(ctx, p)
		if err != nil {
			return nil, nil, nothingDeleted(PruneStepList, err)
		}
		objs = append(objs, o...)
	}
	var uploads []store.Upload
	for _, p := range prefixes {
		u, err := catalog.ListUploads(ctx, opts.Store, p)
		if err != nil {
			return nil, nil, nothingDeleted(PruneStepListUploads, err)
		}
		uploads = append(uploads, u...)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, nothingDeleted(PruneStepList, err)
	}
	stats.ObjectsListed, stats.UploadsListed = len(objs), len(uploads)
	return objs, uploads, nil
}

// pruneClusters are the cluster ids to prune, sorted: those asked for,
// and those listed that are wanted.
func pruneClusters(asked []string, groups map[string][]catalog.Entry, wanted func(string) bool) []string {
	var ids []string
	for _, id := range asked {
		ids = append(ids, id)
	}
	for id := range groups {
		if wanted(id) && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// checkPruneEntries checks every committed backup of flat (its manifest
// and the objects it names) and returns the manifests by cluster/name.
func checkPruneEntries(ctx context.Context, opts PruneOptions, flat []catalog.Entry, stats *StoreStats) (map[string]*catalog.Manifest, *PruneError) {
	t := time.Now()
	manifests, _, err := catalog.CheckEntries(ctx, opts.Store, opts.Layout, flat, opts.CheckParallel)
	stats.CheckDuration = time.Since(t)
	for _, e := range flat {
		if e.Committed {
			stats.ManifestsRead++
		}
	}
	if err != nil {
		return nil, nothingDeleted(PruneStepCheck, err)
	}
	manifestOf := map[string]*catalog.Manifest{} // cluster/name -> manifest
	for i, e := range flat {
		if manifests[i] != nil {
			manifestOf[e.ClusterID+"/"+e.Name] = manifests[i]
		}
	}
	return manifestOf, nil
}

// loadPruneDrills reads the drill records of the backups that have one:
// the drilled rule keeps the newest proven backup. A record the store
// failed to return leaves the proof unknown: nothing is deleted (a bad
// record is read and proves nothing).
func loadPruneDrills(ctx context.Context, opts PruneOptions, flat []catalog.Entry, stats *StoreStats) *PruneError {
	t := time.Now()
	err := catalog.LoadDrills(ctx, opts.Store, opts.Layout, flat, opts.CheckParallel)
	stats.DrillDuration = time.Since(t)
	for _, e := range flat {
		if e.Committed && e.HasDrill() {
			stats.DrillsRead++
		}
	}
	if err != nil {
		return nothingDeleted(PruneStepDrills, drillReadError(flat, err))
	}
	return nil
}

// listIncompleteUploads lists the uploads under the exact keys of every
// incomplete folder of flat and merges them into uploads.
func listIncompleteUploads(ctx context.Context, opts PruneOptions, flat []catalog.Entry, uploads []store.Upload, stats *StoreStats) ([]store.Upload, *PruneError) {
	var incompleteKeys []string
	for _, e := range flat {
		if !e.Committed {
			incompleteKeys = append(incompleteKeys, catalog.UploadKeys(opts.Layout, e, nil)...)
		}
	}
	exact, err := catalog.ListUploadsAt(ctx, opts.Store, incompleteKeys, opts.CheckParallel)
	stats.KeyUploadLists += len(incompleteKeys)
	if err != nil {
		return nil, nothingDeleted(PruneStepListUploads, err)
	}
	return mergeUploads(uploads, exact), nil
}

// regroupEntries writes the checked entries of flat back into groups, each
// with the uploads into its folder. Uploads outside the layout belong to
// something else: never touched.
func regroupEntries(layout catalog.Layout, ids []string, groups map[string][]catalog.Entry, flat []catalog.Entry, uploads []store.Upload, wanted func(string) bool) {
	uploadsOf := map[string][]store.Upload{} // cluster/name -> uploads into the folder
	for _, u := range uploads {
		if pk, ok := layout.ParseKey(u.Key); ok && wanted(pk.ClusterID) {
			uploadsOf[pk.ClusterID+"/"+pk.Name] = append(uploadsOf[pk.ClusterID+"/"+pk.Name], u)
		}
	}
	k := 0
	for _, id := range ids {
		for i := range groups[id] {
			groups[id][i] = flat[k]
			groups[id][i].Uploads = uploadsOf[id+"/"+flat[k].Name]
			k++
		}
	}
}

// prunePlan is what Prune's execute step does: pointers into the report's
// actions, which it updates with each outcome.
type prunePlan struct {
	toDelete []*BackupAction
	toAbort  []*UploadAction
	segments []*SegmentAction // journal segments to delete
	problems []string         // damaged clusters, one line each
}

// damagedErr is the error of a prune that deleted what it planned but
// found damaged clusters, or nil.
func (p *prunePlan) damagedErr() error {
	if len(p.problems) == 0 {
		return nil
	}
	return &PruneError{step: PruneStepDamaged, Problems: p.problems,
		Err: errors.New(strings.Join(p.problems, "; "))}
}

// clusterPrunes are the per-cluster plans, made on first use.
type clusterPrunes map[string]*ClusterPrune

func (cs clusterPrunes) get(id string) *ClusterPrune {
	c := cs[id]
	if c == nil {
		c = &ClusterPrune{ClusterID: id, Backups: []BackupAction{}}
		cs[id] = c
	}
	return c
}

// planPrune is Prune's step 3: it applies the policy to every cluster
// (refusing a plan guardPlan rejects), lists the uploads under the keys of
// the backups to delete, decides every upload, and fills rep with the plan
// and its counts. ListDuration is measured from start.
func planPrune(ctx context.Context, opts PruneOptions, inv *pruneInventory, rep *PruneReport, start time.Time) (*prunePlan, *PruneError) {
	byCluster := clusterPrunes{}
	deleteKeys, deletedFolder, pe := planBackups(opts, inv, byCluster)
	if pe != nil {
		return nil, pe
	}
	if deleteKeys, pe = retainLocked(ctx, opts, byCluster, deleteKeys, deletedFolder); pe != nil {
		return nil, pe
	}
	if pe = retainLockedSegments(ctx, opts, byCluster); pe != nil {
		return nil, pe
	}
	// The uploads under the keys of the backups to delete: once the folder
	// is gone, nothing would look for them again.
	exact, err := catalog.ListUploadsAt(ctx, opts.Store, deleteKeys, opts.CheckParallel)
	rep.Stats.KeyUploadLists += len(deleteKeys)
	if err != nil {
		return nil, nothingDeleted(PruneStepListUploads, err)
	}
	uploads := mergeUploads(inv.uploads, exact)
	rep.Stats.ListDuration = time.Since(start)

	planUploads(opts, inv.wanted, uploads, deletedFolder, byCluster)
	return collectPlan(opts, byCluster, rep), nil
}

// planBackups applies the policy to each cluster's backups. It returns the
// exact upload keys of the committed backups to delete and the folders
// (cluster/name) to delete.
func planBackups(opts PruneOptions, inv *pruneInventory, byCluster clusterPrunes) (deleteKeys []string, deletedFolder map[string]bool, pe *PruneError) {
	deletedFolder = map[string]bool{}
	for _, id := range inv.ids {
		c := byCluster.get(id)
		plan := retention.ApplyPolicy(inv.groups[id], opts.Now, opts.Policy)
		if err := retention.GuardPlan(plan); err != nil {
			return nil, nil, nothingDeleted(PruneStepPlan, fmt.Errorf("cluster %s: %w", id, err))
		}
		plan = planJournal(opts, inv, id, plan, c)
		c.Problem = damageProblem(id, plan)
		for _, d := range plan.Decisions {
			a := newAction(d.Entry)
			a.Keep, a.Rules, a.Reason = d.Keep, d.Rules, d.Reason
			a.Action = ActionKeep
			if d.Entry.Damaged != "" {
				c.Damaged++
			}
			if !a.Keep {
				a.Action = ActionDelete
				deletedFolder[id+"/"+d.Entry.Name] = true
				if d.Entry.Committed {
					deleteKeys = append(deleteKeys, catalog.UploadKeys(opts.Layout, d.Entry, inv.manifestOf[id+"/"+d.Entry.Name])...)
				}
			}
			c.Backups = append(c.Backups, a)
		}
	}
	return deleteKeys, deletedFolder, nil
}

// planUploads decides every multipart upload of the chosen clusters: a
// stale one, or one into a folder being deleted, is aborted; the others
// are kept.
func planUploads(opts PruneOptions, wanted func(string) bool, uploads []store.Upload, deletedFolder map[string]bool, byCluster clusterPrunes) {
	var mine []store.Upload
	for _, u := range uploads {
		if pk, ok := opts.Layout.ParseKey(u.Key); ok && wanted(pk.ClusterID) {
			mine = append(mine, u)
		}
	}
	stale := map[store.Upload]bool{}
	for _, u := range retention.StaleUploads(mine, opts.Now, opts.UploadMaxAge) {
		stale[u] = true
	}
	for _, u := range mine {
		pk, _ := opts.Layout.ParseKey(u.Key)
		ua := UploadAction{ClusterID: pk.ClusterID, Name: pk.Name, Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated, Action: ActionKeep}
		age := opts.Now.Sub(u.Initiated)
		switch {
		case stale[u]:
			ua.Action = ActionAbort
			ua.Reason = fmt.Sprintf("multipart upload initiated %s ago, older than %s: abandoned", retention.FormatDuration(age), retention.FormatDuration(opts.UploadMaxAge))
		case deletedFolder[pk.ClusterID+"/"+pk.Name]:
			ua.Action = ActionAbort
			ua.Reason = "multipart upload into a backup folder that is deleted: abandoned"
		case u.Initiated.IsZero():
			ua.Reason = "multipart upload without an initiation time: never aborted automatically"
		default:
			ua.Reason = fmt.Sprintf("multipart upload initiated %s ago, not older than %s: may be in flight", retention.FormatDuration(max(age, 0)), retention.FormatDuration(opts.UploadMaxAge))
		}
		c := byCluster.get(pk.ClusterID)
		c.Uploads = append(c.Uploads, ua)
	}
}

// collectPlan puts the cluster plans into rep by cluster id, counts them,
// logs each cluster's plan and damaged backups, and returns the actions to
// execute.
func collectPlan(opts PruneOptions, byCluster clusterPrunes, rep *PruneReport) *prunePlan {
	log := opts.Log
	var ids []string
	for id := range byCluster { // with the clusters that only have uploads
		ids = append(ids, id)
	}
	slices.Sort(ids)
	plan := &prunePlan{}
	for _, id := range ids {
		c := byCluster[id]
		slices.SortStableFunc(c.Uploads, func(a, b UploadAction) int {
			return cmp.Or(a.Initiated.Compare(b.Initiated), strings.Compare(a.Key, b.Key), strings.Compare(a.UploadID, b.UploadID))
		})
		rep.Clusters = append(rep.Clusters, *c)
		if c.Problem != "" {
			plan.problems = append(plan.problems, c.Problem)
		}
	}
	for ci := range rep.Clusters {
		c := &rep.Clusters[ci]
		var del int
		rep.Damaged += c.Damaged
		for i := range c.Backups {
			if c.Backups[i].Keep {
				rep.Kept++
			} else if c.Backups[i].Action == ActionRetained {
				rep.Retained++
			} else {
				del++
				plan.toDelete = append(plan.toDelete, &c.Backups[i])
			}
		}
		for i := range c.Uploads {
			rep.Uploads++
			if c.Uploads[i].Action == ActionAbort {
				plan.toAbort = append(plan.toAbort, &c.Uploads[i])
			}
		}
		for i := range c.Segments {
			if c.Segments[i].Keep {
				rep.SegmentsKept++
			} else if c.Segments[i].Action == ActionRetained {
				rep.SegmentsRetained++ // still locked: not deleted, not a failure
			} else {
				plan.segments = append(plan.segments, &c.Segments[i])
			}
		}
		if del > 0 || len(c.Uploads) > 0 || c.Damaged > 0 {
			log.Debug("prune plan", "cluster", c.ClusterID, "backups", len(c.Backups), "keep", len(c.Backups)-del, "delete", del,
				"damaged", c.Damaged, "uploads", len(c.Uploads), "dry_run", opts.DryRun)
		}
		for _, a := range c.Backups {
			if a.Damaged != "" {
				log.Warn("prune: damaged backup", "cluster", a.ClusterID, "backup", a.Name, "damaged", a.Damaged, "keep", a.Keep, "reason", a.Reason)
			}
		}
	}
	rep.Planned, rep.Stale, rep.SegmentsPlanned = len(plan.toDelete), len(plan.toAbort), len(plan.segments)
	return plan
}

// executePrune is Prune's step 4: it deletes the planned backups
// (manifests first, then the rest: deleteBackups), then aborts the planned
// uploads, and completes rep with the outcome. A failure of one backup or
// upload does not stop the others.
func executePrune(ctx context.Context, opts PruneOptions, inv *pruneInventory, plan *prunePlan, rep *PruneReport, start time.Time) (*PruneReport, error) {
	log := opts.Log
	relockNewest(ctx, opts, rep)
	t := time.Now()
	deleteBackups(ctx, opts.Store, plan.toDelete, &rep.Stats, log)
	deleteSegments(ctx, opts.Store, plan.segments, &rep.Stats, log)
	// Last, from the backups that remain: an escrow goes with the last
	// backup that names it.
	escrowErrs := pruneEscrows(ctx, opts, inv, rep)
	rep.Stats.DeleteDuration = time.Since(t)

	t = time.Now()
	for _, ua := range plan.toAbort {
		if err := catalog.AbortUpload(ctx, opts.Store, store.Upload{Key: ua.Key, UploadID: ua.UploadID, Initiated: ua.Initiated}); err != nil {
			ua.Action, ua.Err = ActionFailed, fmt.Errorf("abort upload %s of %s: %w", ua.UploadID, ua.Key, err)
			ua.Error = ua.Err.Error()
			log.Warn("prune: could not abort a stale multipart upload", "key", ua.Key, "upload_id", ua.UploadID, "err", err)
			continue
		}
		ua.Action = ActionAborted
		rep.Stats.UploadsAborted++
		log.Info("aborted stale multipart upload", "key", ua.Key, "initiated", ua.Initiated, "reason", ua.Reason)
	}
	rep.Stats.AbortDuration = time.Since(t)

	pe := &PruneError{step: PruneStepDelete, Problems: plan.problems}
	var errs []error
	for _, a := range plan.toDelete {
		if a.Action == ActionDeleted {
			rep.Deleted++
		} else {
			rep.Failed++
			errs = append(errs, a.Err)
		}
	}
	for _, ua := range plan.toAbort {
		if ua.Action == ActionAborted {
			rep.Aborted++
		} else {
			rep.AbortFailed++
			errs = append(errs, ua.Err)
		}
	}
	errs = append(errs, segmentErrs(plan.segments, rep)...)
	errs = append(errs, escrowErrs...)
	rep.Stats.Duration = time.Since(start)
	log.Info("prune finished", "kept", rep.Kept, "deleted", rep.Deleted, "failed", rep.Failed, "damaged", rep.Damaged,
		"uploads_aborted", rep.Aborted, "uploads_failed", rep.AbortFailed,
		"segments_kept", rep.SegmentsKept, "segments_deleted", rep.SegmentsDeleted, "segments_failed", rep.SegmentsFailed,
		"escrows_kept", rep.EscrowsKept, "escrows_deleted", rep.EscrowsDeleted, "escrows_retained", rep.EscrowsRetained, "escrows_failed", rep.EscrowsFailed,
		"objects_listed", rep.Stats.ObjectsListed, "objects_deleted", rep.Stats.ObjectsDeleted,
		"duration", rep.Stats.Duration.Round(time.Millisecond))
	if len(errs) == 0 {
		return rep, plan.damagedErr()
	}
	if len(plan.problems) > 0 {
		errs = append(errs, errors.New(strings.Join(plan.problems, "; ")))
	}
	pe.Failed, pe.UploadsFailed, pe.SegmentsFailed, pe.EscrowsFailed, pe.Err, pe.first = rep.Failed, rep.AbortFailed, rep.SegmentsFailed, rep.EscrowsFailed, errors.Join(errs...), errs[0]
	return rep, pe
}

// mergeUploads appends the uploads of more that are not in have.
func mergeUploads(have, more []store.Upload) []store.Upload {
	seen := map[[2]string]bool{}
	for _, u := range have {
		seen[[2]string{u.Key, u.UploadID}] = true
	}
	for _, u := range more {
		if k := [2]string{u.Key, u.UploadID}; !seen[k] {
			seen[k] = true
			have = append(have, u)
		}
	}
	return have
}

// damageProblem says, for one cluster's plan, when its newest committed
// backup is not the newest one that checks out: "" when it is (or the
// cluster has no committed backup).
func damageProblem(id string, p retention.Plan) string {
	var newest, newestGood *catalog.Entry
	var newer []string
	for i := range p.Decisions {
		e := &p.Decisions[i].Entry
		if !e.Committed {
			continue
		}
		if newest == nil {
			newest = e
		}
		if e.Good() {
			newestGood = e
			break
		}
		newer = append(newer, fmt.Sprintf("%s (%s)", e.Name, e.Damaged))
	}
	switch {
	case newest == nil || newest == newestGood:
		return ""
	case newestGood == nil:
		return fmt.Sprintf("cluster %s: no backup checks out: %d damaged: %s", id, len(newer), strings.Join(newer, ", "))
	}
	return fmt.Sprintf("cluster %s: the newest backup that checks out, %s, is older than the newest backup: %d damaged backup(s) newer: %s",
		id, newestGood.Name, len(newer), strings.Join(newer, ", "))
}

// drillReadError names the cluster whose drill record could not be read.
func drillReadError(flat []catalog.Entry, err error) error {
	for _, e := range flat {
		if e.Drill != nil && e.Drill.Err != "" && strings.Contains(err.Error(), " "+e.ClusterID+"/"+e.Name+":") {
			return fmt.Errorf("cluster %s: %w", e.ClusterID, err)
		}
	}
	return err
}

func newAction(e catalog.Entry) BackupAction {
	a := BackupAction{ClusterID: e.ClusterID, Name: e.Name, Kind: e.Kind, Time: e.Time, Committed: e.Committed,
		Damaged: e.Damaged, Objects: len(e.Objects), Drill: e.Drill.Result(), entry: e}
	for _, o := range e.Objects {
		a.Bytes += o.Size
	}
	return a
}

// manifestKeys returns the keys of the backup's manifest objects.
func manifestKeys(e catalog.Entry) []string {
	var out []string
	for _, o := range e.Objects {
		if path.Base(o.Key) == catalog.ManifestObject {
			out = append(out, o.Key)
		}
	}
	return out
}

// deleteBackups deletes the folders of acts, manifest first, and records
// each outcome in its action.
func deleteBackups(ctx context.Context, st store.Store, acts []*BackupAction, stats *StoreStats, log *slog.Logger) {
	if len(acts) == 0 {
		return
	}
	// Phase 1: the manifests. A backup whose manifest is gone is no longer
	// a backup, whatever happens next.
	var manifests []string
	for _, a := range acts {
		manifests = append(manifests, manifestKeys(a.entry)...)
	}
	failed1 := storeDelete(ctx, st, manifests, stats)

	// Phase 2: the other objects, only of backups without a manifest now.
	var rest []string
	for _, a := range acts {
		mk := manifestKeys(a.entry)
		if f := subset(failed1, mk); len(f) > 0 {
			a.fail(fmt.Errorf("delete backup %s/%s: its manifest could not be deleted, so the backup was left complete: %w",
				a.ClusterID, a.Name, failedKeys(f)))
			a.ObjectsDeleted = len(mk) - len(f)
			log.Warn("prune: could not delete a manifest; the backup is left complete", "cluster", a.ClusterID, "backup", a.Name, "err", a.Err)
			continue
		}
		a.ManifestDeleted = a.Committed
		for _, o := range a.entry.Objects {
			if !slices.Contains(mk, o.Key) {
				rest = append(rest, o.Key)
			}
		}
	}
	failed2 := storeDelete(ctx, st, rest, stats)

	for _, a := range acts {
		if a.Action == ActionFailed {
			continue
		}
		f := subset(failed2, a.entry.Keys())
		a.ObjectsDeleted = a.Objects - len(f)
		if len(f) > 0 {
			what := "incomplete folder"
			if a.Committed {
				what = "manifest deleted, so the backup no longer exists, but"
			}
			a.fail(fmt.Errorf("delete backup %s/%s: %s %d of %d objects were left (a later prune removes them): %w",
				a.ClusterID, a.Name, what, len(f), a.Objects, failedKeys(f)))
			log.Warn("prune: could not delete every object of a backup", "cluster", a.ClusterID, "backup", a.Name, "err", a.Err)
			continue
		}
		a.Action = ActionDeleted
		log.Debug("deleted backup", "cluster", a.ClusterID, "backup", a.Name, "kind", a.Kind, "reason", a.Reason)
	}
}

func (a *BackupAction) fail(err error) {
	a.Action, a.Err, a.Error = ActionFailed, err, err.Error()
}

// storeDeleteEach is storeDelete of the key of each of acts.
func storeDeleteEach[A any](ctx context.Context, st store.Store, acts []A, key func(A) string, stats *StoreStats) map[string]error {
	keys := make([]string, len(acts))
	for i, a := range acts {
		keys[i] = key(a)
	}
	return storeDelete(ctx, st, keys, stats)
}

// storeDelete deletes keys and returns the keys that may still exist. An
// error that is not a *DeleteError leaves every key's fate unknown: all
// count as failed.
func storeDelete(ctx context.Context, st store.Store, keys []string, stats *StoreStats) map[string]error {
	if len(keys) == 0 {
		return nil
	}
	stats.DeleteRequests += (len(keys) + 999) / 1000
	err := st.Delete(ctx, keys)
	failed := map[string]error{}
	var de *store.DeleteError
	switch {
	case err == nil:
	case errors.As(err, &de) && len(de.Failed) > 0:
		for _, k := range keys {
			if e, ok := de.Failed[k]; ok {
				failed[k] = e
			}
		}
	default:
		for _, k := range keys {
			failed[k] = err
		}
	}
	stats.ObjectsDeleted += len(keys) - len(failed)
	return failed
}

// keysError is a *DeleteError whose causes errors.Is and errors.As see too.
type keysError struct{ *store.DeleteError }

func (e keysError) Unwrap() []error {
	out := []error{e.DeleteError}
	keys := make([]string, 0, len(e.Failed))
	for k := range e.Failed {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	seen := map[string]bool{} // by message: errors need not be comparable
	for _, k := range keys {
		if c := e.Failed[k]; c != nil && !seen[c.Error()] {
			seen[c.Error()] = true
			out = append(out, c)
		}
	}
	return out
}

func failedKeys(f map[string]error) error { return keysError{&store.DeleteError{Failed: f}} }

func subset(failed map[string]error, keys []string) map[string]error {
	var out map[string]error
	for _, k := range keys {
		if e, ok := failed[k]; ok {
			if out == nil {
				out = map[string]error{}
			}
			out[k] = e
		}
	}
	return out
}

// Errors of Delete.
var (
	ErrBackupNotFound = errors.New("no such backup")
	ErrNewestBackup   = errors.New("it is the newest committed backup of the cluster that checks out")
	ErrNewestProven   = errors.New("it is the newest backup of the cluster whose restore drill passed (the only proven restore point)")
)

// DeleteOptions configure Delete.
type DeleteOptions struct {
	Store     store.Store
	Layout    catalog.Layout
	ClusterID string
	Names     []string // backup folder names
	// Force allows deleting the newest committed backup.
	Force bool
	Log   *slog.Logger
}

// DeleteReport is the outcome of Delete.
type DeleteReport struct {
	ClusterID string         `json:"clusterID"`
	Backups   []BackupAction `json:"backups"`
	// Unknown are the keys under the cluster's prefix that are not in the
	// layout (Layout.Classify): never touched, reported.
	Unknown []string `json:"unknown,omitempty"`
	// Escrows are the cluster's escrows (escrow.go), decided after the
	// backups were deleted from those that remain.
	Escrows []EscrowAction `json:"escrows,omitempty"`
	Stats   StoreStats     `json:"stats"`
}

// Delete removes the named backups of one cluster, whatever their kind: the
// only way manual and pre-restore backups are deleted. It lists the cluster
// once and refuses, deleting nothing, names that do not exist and (without
// Force) the newest committed backup. Each backup is deleted manifest
// first. A failure is reported per backup and returned as an error
// wrapping a *DeleteError. Its steps: listDelete, refuseDelete,
// deleteActions, deleteBackups and deleteOutcome, in that order.
func Delete(ctx context.Context, opts DeleteOptions) (*DeleteReport, error) {
	log, err := checkDelete(opts.Validate(), opts.Store, opts.Log)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range opts.Names {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	start := time.Now()
	entries, manifests, escrows, unknown, err := listDelete(ctx, opts)
	if err != nil {
		return nil, err
	}
	newest, newestProven := newestGoodAndProven(entries)
	rep := &DeleteReport{ClusterID: opts.ClusterID, Backups: []BackupAction{}, Unknown: unknown}
	if len(unknown) > 0 {
		log.Warn("delete: keys not in the layout, left alone", "cluster", opts.ClusterID, "count", len(unknown), "keys", firstKeys(unknown))
	}
	rep.Stats.ListDuration = time.Since(start)
	for _, e := range entries {
		rep.Stats.ObjectsListed += len(e.Objects)
		if e.Committed {
			rep.Stats.ManifestsRead++
		}
	}
	if err := refuseDelete(opts, entries, names, newest, newestProven); err != nil {
		return nil, err
	}
	acts := deleteActions(rep, entries, names, newest, newestProven)
	t := time.Now()
	deleteBackups(ctx, opts.Store, holdLocked(ctx, opts.Store, acts, time.Now(), log), &rep.Stats, log)
	escrowErrs := deleteNamedEscrows(ctx, opts, rep, entries, manifests, escrows, log)
	rep.Stats.DeleteDuration = time.Since(t)
	rep.Stats.Duration = time.Since(start)
	return rep, errors.Join(deleteOutcome(acts, log), errEscrows(escrowErrs))
}

// deleteNamedEscrows is Delete's escrow step: the cluster's escrows that
// no remaining backup names go, once older than the default policy's
// escrow grace.
func deleteNamedEscrows(ctx context.Context, opts DeleteOptions, rep *DeleteReport, entries []catalog.Entry, manifests []*catalog.Manifest,
	escrows []store.ObjectInfo, log *slog.Logger) []error {
	if len(escrows) == 0 {
		return nil
	}
	gone := map[string]bool{}
	for _, a := range rep.Backups {
		gone[a.Name] = a.ManifestDeleted
	}
	byName := map[string]*catalog.Manifest{}
	for i, e := range entries {
		byName[e.Name] = manifests[i]
	}
	named, unreadable := namedEscrows(entries, func(n string) *catalog.Manifest { return byName[n] }, func(n string) bool { return gone[n] })
	now, grace := time.Now(), retention.DefaultPolicy().EscrowGrace()
	rep.Escrows = decideEscrows(opts.Layout, opts.ClusterID, escrows, named, unreadable, inFlightOf(entries, now, grace), now, grace)
	return runEscrows(ctx, opts.Store, rep.Escrows, now, false, &rep.Stats, log,
		recheckEscrows(ctx, opts.Store, opts.Layout, opts.ClusterID, listedCommitted(entries), now, grace))
}

// listDelete is Delete's first step: it lists the cluster, checks its
// backups and reads their drill records (the proven restore point's must
// be readable), deleting nothing on a failure.
func listDelete(ctx context.Context, opts DeleteOptions) ([]catalog.Entry, []*catalog.Manifest, []store.ObjectInfo, []string, error) {
	entries, unknown, err := catalog.ClusterInventory(ctx, opts.Store, opts.Layout, opts.ClusterID)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("delete: list cluster %s, nothing was deleted: %w", opts.ClusterID, err)
	}
	manifests, _, err := catalog.CheckEntries(ctx, opts.Store, opts.Layout, entries, catalog.DefaultCheckParallel)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("delete: check the backups of cluster %s, nothing was deleted: %w", opts.ClusterID, err)
	}
	// The newest backup whose drill passed is the proven restore point:
	// deleting it needs Force too, so its record must be readable.
	if err := catalog.LoadDrills(ctx, opts.Store, opts.Layout, entries, catalog.DefaultCheckParallel); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("delete: read the drill records of cluster %s, nothing was deleted: %w", opts.ClusterID, err)
	}
	// Its escrows: each goes with the last backup that names it.
	escrows, err := listEscrows(ctx, opts.Store, opts.Layout, opts.ClusterID)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("delete: %w; nothing was deleted", err)
	}
	return entries, manifests, escrows, unknown, nil
}

// newestGoodAndProven are the names of the newest backup that checks out,
// which a restore would use, and of the newest one whose drill passed, the
// proven restore point: deleting either needs Force (damaged backups newer
// than them may go). Either is "" when there is none.
func newestGoodAndProven(entries []catalog.Entry) (newest, newestProven string) {
	for _, e := range entries {
		if e.Good() && e.Drill.Proven() {
			newestProven = e.Name
			break
		}
	}
	for _, e := range entries {
		if e.Good() {
			newest = e.Name
			break
		}
	}
	return newest, newestProven
}

// refuseDelete is Delete's second step: it refuses, deleting nothing,
// names that do not exist and (without Force) the newest backup that
// checks out or the newest proven one.
func refuseDelete(opts DeleteOptions, entries []catalog.Entry, names []string, newest, newestProven string) error {
	byName := map[string]catalog.Entry{}
	for _, e := range entries {
		byName[e.Name] = e
	}
	var missing []string
	for _, n := range names {
		if _, ok := byName[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("delete: cluster %s has no backup %s, nothing was deleted: %w",
			opts.ClusterID, strings.Join(missing, ", "), ErrBackupNotFound)
	}
	if slices.Contains(names, newest) && !opts.Force {
		return fmt.Errorf("delete: refusing to delete %s/%s, nothing was deleted: %w", opts.ClusterID, newest, ErrNewestBackup)
	}
	if newestProven != "" && slices.Contains(names, newestProven) && !opts.Force {
		return fmt.Errorf("delete: refusing to delete %s/%s, nothing was deleted: %w", opts.ClusterID, newestProven, ErrNewestProven)
	}
	return nil
}

// deleteActions is Delete's third step: the action of each named backup,
// newest first like every other listing, in rep.Backups; it returns
// pointers to them.
func deleteActions(rep *DeleteReport, entries []catalog.Entry, names []string, newest, newestProven string) []*BackupAction {
	for _, e := range entries {
		if !slices.Contains(names, e.Name) {
			continue
		}
		a := newAction(e)
		a.Action = ActionDelete
		a.Reason = "deleted on request"
		if e.Damaged != "" {
			a.Reason += " (damaged: " + e.Damaged + ")"
		}
		if e.Name == newest {
			a.Reason = "deleted on request, forced: it was the newest committed backup that checks out"
		} else if e.Name == newestProven {
			a.Reason = "deleted on request, forced: it was the newest backup whose restore drill passed"
		}
		rep.Backups = append(rep.Backups, a)
	}
	var acts []*BackupAction
	for i := range rep.Backups {
		acts = append(acts, &rep.Backups[i])
	}
	return acts
}

// deleteOutcome is Delete's last step: it logs each deleted backup and
// returns the failures joined, or nil.
func deleteOutcome(acts []*BackupAction, log *slog.Logger) error {
	var errs []error
	for _, a := range acts {
		if a.Action == ActionRetained {
			continue // not a failure: it goes when its lock ends
		}
		if a.Action != ActionDeleted {
			errs = append(errs, a.Err)
			continue
		}
		log.Info("deleted backup", "cluster", a.ClusterID, "backup", a.Name, "kind", a.Kind, "objects", a.Objects)
	}
	if len(errs) > 0 {
		return fmt.Errorf("delete: %d of %d backups could not be deleted: %w", len(errs), len(acts), errors.Join(errs...))
	}
	return nil
}

// firstKeys are the first keys of a list, for a log line.
func firstKeys(keys []string) []string {
	return keys[:min(len(keys), catalog.UnknownShown)]
}

// retainLocked is the object-lock part of the plan: on a bucket with
// object lock, a backup retention lets go whose objects are still locked
// at opts.Now is retained (ActionRetained, LockedUntil), not deleted: a
// Delete would only hide it under delete markers. It returns deleteKeys
// without the retained backups' keys, and takes them out of
// deletedFolder. A bucket without object lock (or a store without
// Locker) changes nothing, as does a configuration the credential cannot
// read, unless opts.Lock is on. Reading a retention fails the plan:
// nothing is deleted.
func retainLocked(ctx context.Context, opts PruneOptions, byCluster clusterPrunes, deleteKeys []string, deletedFolder map[string]bool) ([]string, *PruneError) {
	if len(deletedFolder) == 0 {
		return deleteKeys, nil
	}
	info, err := catalog.LockConfigOf(ctx, opts.Store)
	switch {
	case err != nil && opts.Lock.Enabled():
		return nil, nothingDeleted(PruneStepPlan, fmt.Errorf("reading the bucket's object-lock configuration: %w", err))
	case err != nil:
		// A credential that may not read it (a bucket configured
		// without lock): prune as before. On a locked bucket a Delete
		// only hides a locked backup under delete markers.
		opts.Log.Warn("prune: could not read the bucket's object-lock configuration; pruning as without object lock", "err", err)
		return deleteKeys, nil
	}
	if !info.Enabled {
		return deleteKeys, nil
	}
	retained := map[string]bool{}
	for _, c := range byCluster {
		for i := range c.Backups {
			a := &c.Backups[i]
			if a.Keep {
				continue
			}
			r, err := catalog.EntryLock(ctx, opts.Store, a.entry, opts.Now)
			if err != nil {
				return nil, nothingDeleted(PruneStepPlan, fmt.Errorf("cluster %s: reading the retention of %s: %w", a.ClusterID, a.Name, err))
			}
			if r.Until.IsZero() {
				continue
			}
			until := r.Until.UTC()
			a.Action, a.LockedUntil = ActionRetained, &until
			a.Reason += fmt.Sprintf("; retained until %s (%s object lock): deleted by a prune after that",
				until.Format(time.RFC3339), strings.ToLower(string(r.Mode)))
			folder := a.ClusterID + "/" + a.Name
			retained[folder] = true
			delete(deletedFolder, folder)
		}
	}
	if len(retained) == 0 {
		return deleteKeys, nil
	}
	var keep []string
	for _, k := range deleteKeys {
		if pk, ok := opts.Layout.ParseKey(k); ok && retained[pk.ClusterID+"/"+pk.Name] {
			continue
		}
		keep = append(keep, k)
	}
	return keep, nil
}

// relockEscrow extends the lock of the escrow backup name names (if it
// names a stored one) to at least ret.
func relockEscrow(ctx context.Context, opts PruneOptions, cluster, name string, ret store.Retention) error {
	m, err := catalog.LoadManifest(ctx, opts.Store, opts.Layout, cluster, name)
	if err != nil {
		return err
	}
	if !m.Escrow.Stored() {
		return nil
	}
	return escrow.Extend(ctx, opts.Store, opts.Layout.EscrowKey(cluster, m.Escrow.Address), &ret)
}

// relockNewest re-locks each pruned cluster's newest committed backup
// that checks out to at least RelockUntil(opts.Now) (opts.Lock with an
// explicit mode). Best effort: a failure is logged, not a prune failure.
func relockNewest(ctx context.Context, opts PruneOptions, rep *PruneReport) {
	lp := opts.Lock.WithDefaults()
	if !lp.Mode.Explicit() {
		return
	}
	until := retention.RelockUntil(opts.Now, opts.Policy, lp)
	for _, c := range rep.Clusters {
		var entries []catalog.Entry
		for _, a := range c.Backups {
			entries = append(entries, a.entry)
		}
		newest, ok := catalog.NewestCommitted(entries)
		if !ok {
			continue
		}
		n, err := Relock(ctx, opts.Store, newest, lp.Mode.StoreMode(), until)
		if err != nil {
			opts.Log.Warn("prune: could not re-lock the newest backup", "cluster", c.ClusterID, "backup", newest.Name, "until", until, "err", err)
			continue
		}
		// The escrow it names stays locked at least as long (as backup's
		// re-lock does).
		if err := relockEscrow(ctx, opts, c.ClusterID, newest.Name, store.Retention{Mode: lp.Mode.StoreMode(), Until: until}); err != nil {
			opts.Log.Warn("prune: could not extend the lock of the newest backup's escrow", "cluster", c.ClusterID, "backup", newest.Name, "until", until, "err", err)
		}
		if n > 0 {
			rep.Relocked = append(rep.Relocked, c.ClusterID+"/"+newest.Name)
			opts.Log.Info("prune: re-locked the newest backup", "cluster", c.ClusterID, "backup", newest.Name, "until", until, "objects", n)
		}
	}
}
