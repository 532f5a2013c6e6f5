package prune

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
)

// Steps of List, named in its errors.
const (
	ListStepList      = "list backups"
	ListStepManifests = "read manifests"
	ListStepUploads   = "list multipart uploads"
	ListStepDrills    = "read drill records"
	ListStepDecrypts  = catalog.StepCheckDecrypts
	ListStepVersions  = "list object versions"
	ListStepJournal   = "list journal segments"
)

// ListOptions configure List.
type ListOptions struct {
	Store     store.Store
	Layout    catalog.Layout
	ClusterID string
	// Policy is applied to show why each backup would be kept or deleted;
	// nothing is deleted.
	Policy retention.Policy
	// Now is the time the policy is applied at; default time.Now().
	Now time.Time
	// Identities, when set (list --identity-file), are tried on the age
	// header of every encrypted committed backup (CheckDecrypts): each
	// row then says whether one opens it (ListRow.Decrypt).
	Identities *seal.Identities
	// IncludeDeleted (list --include-deleted) adds, on a versioned
	// bucket, the backups only object versions hold (deleted or
	// overwritten: VersionedBackups), at the versions they wrote.
	IncludeDeleted bool
	// JournalRetention is the journal retention the retention column
	// applies with the backup rule, as prune does (prunejournal.go);
	// default DefaultJournalRetention.
	JournalRetention time.Duration
}

// Validate checks the cluster id and the policy (usage errors).
func (o ListOptions) Validate() error {
	if o.ClusterID == "" {
		return usage.Errorf("list: --cluster-id is required")
	}
	if err := catalog.ValidateClusterID(o.ClusterID); err != nil {
		return usage.Wrap(err)
	}
	return usage.Wrap(o.Policy.Validate())
}

// ListError is a failure of List before its rows were made: Step says
// which (ListStep*).
type ListError struct {
	ClusterID string
	step      string
	Err       error
}

// Step is the step of List that failed (ListStep*).
func (e *ListError) Step() string { return e.step }

func (e *ListError) Error() string { return e.Err.Error() }
func (e *ListError) Unwrap() error { return e.Err }

// ListResult is what `list` shows.
type ListResult struct {
	Rows ListRows
	// MarkerErr: the cluster's orphan marker could not be read (a note
	// under the table).
	MarkerErr error
	// Err: the rows were made, but the state of some backups is unknown
	// (a manifest the store failed to return) or some drill records could
	// not be read: they are shown, and the command fails.
	Err error
	// Staged are the cluster's plaintext copies staged for etcd-operator
	// (staged.go), shown after the backups; StagedErr says their listing
	// failed (a warning, not a failure of the list).
	Staged    []catalog.StagedCopy
	StagedErr error
	// Unknown are the keys under the cluster's prefix that are not in the
	// layout (Layout.Classify): a warning under the table.
	Unknown []string
	// LockErr: the bucket has object lock, but the lock configuration or
	// a manifest's retention could not be read (a note under the table).
	LockErr error
	// Journal are the cluster's journal segments as listed (under
	// Layout.JournalPrefix), which the retention column decided with the
	// backups (journal-base) and the restorable window is made from.
	Journal []store.ObjectInfo

	id string
}

// Tables are the backups' table, with the orphan marker's read error
// below, then the staged copies when there are any (-o json is Rows).
func (r *ListResult) Tables() []output.Table {
	t := r.Rows.Table()
	if r.MarkerErr != nil {
		t.Notes = append(t.Notes, fmt.Sprintf("orphan marker of cluster %s could not be read: %v", r.id, r.MarkerErr))
	}
	if r.StagedErr != nil {
		t.Notes = append(t.Notes, fmt.Sprintf("staged plaintext snapshots of cluster %s could not be listed: %v", r.id, r.StagedErr))
	}
	if len(r.Unknown) > 0 {
		t.Notes = append(t.Notes, catalog.UnknownNote(r.Unknown))
	}
	if r.LockErr != nil {
		t.Notes = append(t.Notes, fmt.Sprintf("object lock of cluster %s's backups could not be read: %v", r.id, r.LockErr))
	}
	out := []output.Table{t}
	if len(r.Staged) > 0 {
		out = append(out, catalog.StagedTable(r.Staged))
	}
	return out
}

// List is `list`: the same inventory and checks as Prune (every committed
// backup's manifest is read and the objects it names are checked against
// the listing; incomplete folders are aged with their multipart uploads),
// the drill records, the retention decision for each backup (only shown)
// and the orphan marker. Nothing is written. A failure before the rows
// exist is a *ListError; the options are checked first (Validate).
func List(ctx context.Context, opts ListOptions) (*ListResult, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Store == nil {
		return nil, fmt.Errorf("list: %w", errNoStore)
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	st, layout, id := opts.Store, opts.Layout, opts.ClusterID
	fail := func(step string, err error) (*ListResult, error) {
		return nil, &ListError{ClusterID: id, step: step, Err: err}
	}
	entries, unknown, err := catalog.ClusterInventory(ctx, st, layout, id)
	if err != nil {
		return fail(ListStepList, fmt.Errorf("list cluster %s: %w", id, err))
	}
	manifests, merrs, unknownErr := catalog.CheckEntries(ctx, st, layout, entries, catalog.DefaultCheckParallel)
	if err := ctx.Err(); err != nil {
		return fail(ListStepManifests, fmt.Errorf("list cluster %s: read manifests: %w", id, err))
	}
	if err := attachUploads(ctx, st, layout, id, entries); err != nil {
		return fail(ListStepUploads, fmt.Errorf("list cluster %s: %w", id, err))
	}
	// The drill records, as prune reads them: the drilled rule keeps by
	// them. One the store failed to return is shown as unreadable, and the
	// result has an error (its proof is unknown).
	drillErr := catalog.LoadDrills(ctx, st, layout, entries, catalog.DefaultCheckParallel)
	if err := ctx.Err(); err != nil {
		return fail(ListStepDrills, fmt.Errorf("list cluster %s: read drill records: %w", id, err))
	}
	// The journal's segments: journal retention keeps the backups they
	// start from (journal-base), as prune does.
	jobjs, err := st.List(ctx, layout.JournalPrefix(id))
	if err != nil {
		return fail(ListStepJournal, fmt.Errorf("list cluster %s: %s under %s: %w", id, ListStepJournal, layout.JournalPrefix(id), err))
	}
	// Pure: the plan is only shown, nothing is deleted.
	plan := retention.ApplyPolicy(entries, opts.Now, opts.Policy)
	if len(jobjs) > 0 {
		byName := map[string]*catalog.Manifest{}
		for i, e := range entries {
			if manifests[i] != nil {
				byName[e.Name] = manifests[i]
			}
		}
		plan, _ = withJournal(layout, plan, func(name string) *catalog.Manifest { return byName[name] }, jobjs, opts.Now, opts.JournalRetention)
	}
	decisions := map[string]retention.Decision{}
	for _, d := range plan.Decisions {
		decisions[d.Entry.Name] = d
	}
	res := &ListResult{Rows: make(ListRows, 0, len(entries)), Unknown: unknown, Journal: jobjs, id: id}
	for i, e := range entries {
		res.Rows = append(res.Rows, listRow(catalog.Listed{Entry: e, Manifest: manifests[i], ManifestErr: merrs[i]}, decisions[e.Name]))
	}
	if opts.IncludeDeleted {
		vbs, err := VersionedBackups(ctx, st, layout, id)
		if err != nil {
			return fail(ListStepVersions, fmt.Errorf("list cluster %s: %s: %w", id, ListStepVersions, err))
		}
		res.Rows = withRecoveredRows(res.Rows, vbs)
	}
	res.LockErr = lockRows(ctx, st, layout, id, res.Rows)
	// The orphan marker (prune --orphans, backup --all --prune): one read.
	marker, markerErr := ReadOrphanMarker(ctx, st, layout, id)
	for i := range res.Rows {
		res.Rows[i].Orphan = marker
	}
	res.MarkerErr = markerErr
	var decryptErr error
	if opts.Identities != nil {
		decryptErr = checkRowsDecrypt(ctx, st, layout, res.Rows, opts.Identities)
		if err := ctx.Err(); err != nil {
			return fail(ListStepDecrypts, fmt.Errorf("list cluster %s: %s: %w", id, catalog.StepCheckDecrypts, err))
		}
	}
	res.Staged, res.StagedErr = catalog.ListStaged(ctx, st, layout, []string{id}, opts.Now)
	switch {
	case unknownErr != nil:
		res.Err = fmt.Errorf("list cluster %s: %w", id, unknownErr)
	case drillErr != nil:
		res.Err = fmt.Errorf("list cluster %s: %w", id, drillErr)
	case decryptErr != nil:
		res.Err = fmt.Errorf("list cluster %s: %w", id, decryptErr)
	}
	return res, nil
}

// checkRowsDecrypt opens the age header of every committed, undamaged,
// encrypted backup among rows with ids (CheckDecrypts, in parallel) and
// sets each one's Decrypt. It returns the first check that could not be
// made (a store failure: that backup's state is unknown); a backup no
// identity opens is a state, not an error.
func checkRowsDecrypt(ctx context.Context, st store.Store, layout catalog.Layout, rows ListRows, ids *seal.Identities) error {
	var idx []int
	for i, r := range rows {
		if r.Manifest != nil && r.Manifest.Encrypted() && r.Status == "committed" {
			idx = append(idx, i)
		}
	}
	errs := make([]error, len(idx))
	fanout.ForEach(ctx, len(idx), catalog.DefaultCheckParallel, func(ctx context.Context, k int) {
		r := &rows[idx[k]]
		r.Decrypt, errs[k] = DecryptResultOf(catalog.CheckDecrypts(ctx, st, layout, r.Manifest, ids))
	})
	for k, i := range idx {
		if rows[i].Decrypt == nil {
			rows[i].Decrypt = &DecryptResult{State: DecryptUnknown, Error: "not checked: " + ctxErrText(ctx)}
		}
		if errs[k] != nil {
			return errs[k]
		}
	}
	return nil
}

func ctxErrText(ctx context.Context) string {
	if err := ctx.Err(); err != nil {
		return err.Error()
	}
	return "not started"
}

// DecryptResult is whether a mounted identity opens an encrypted backup
// (CheckDecrypts), as list and inspect --all show it.
type DecryptResult struct {
	// State is DecryptOpens, DecryptNoIdentity, DecryptDamaged or
	// DecryptUnknown.
	State string `json:"state"`
	// Error is CheckDecrypts' error (absent when it opens).
	Error string `json:"error,omitempty"`
}

// States of DecryptResult.
const (
	// DecryptOpens: an identity given opens the snapshot's age header.
	DecryptOpens = "opens"
	// DecryptNoIdentity: none does (seal.ErrNoIdentity): a restore
	// with these identities fails at "verify backup".
	DecryptNoIdentity = "no identity opens it"
	// DecryptDamaged: the object does not start with a well-formed age
	// header (seal.ErrTampered).
	DecryptDamaged = "damaged"
	// DecryptUnknown: the check could not be made (the store failed).
	DecryptUnknown = "unknown"
)

// DecryptResultOf classifies CheckDecrypts' error; the error is returned
// again only when the check could not be made (DecryptUnknown).
func DecryptResultOf(err error) (*DecryptResult, error) {
	switch {
	case err == nil:
		return &DecryptResult{State: DecryptOpens}, nil
	case errors.Is(err, seal.ErrNoIdentity):
		return &DecryptResult{State: DecryptNoIdentity, Error: err.Error()}, nil
	case errors.Is(err, seal.ErrTampered):
		return &DecryptResult{State: DecryptDamaged, Error: err.Error()}, nil
	}
	return &DecryptResult{State: DecryptUnknown, Error: err.Error()}, err
}

// attachUploads lists the multipart uploads under the cluster and under
// the exact keys of every incomplete folder, and gives each folder its own.
func attachUploads(ctx context.Context, st store.Store, layout catalog.Layout, id string, entries []catalog.Entry) error {
	var uploads []store.Upload
	var err error
	if mp, ok := st.(store.Multipart); ok {
		uploads, err = mp.ListUploads(ctx, layout.ClusterPrefix(id))
	}
	if err == nil {
		var keys []string
		for _, e := range entries {
			if !e.Committed {
				keys = append(keys, catalog.UploadKeys(layout, e, nil)...)
			}
		}
		var exact []store.Upload
		exact, err = catalog.ListUploadsAt(ctx, st, keys, catalog.DefaultCheckParallel)
		uploads = append(uploads, exact...)
	}
	if err != nil {
		return err
	}
	for i := range entries {
		prefix := layout.BackupPrefix(id, entries[i].Name)
		seen := map[string]bool{}
		for _, u := range uploads {
			if len(u.Key) > len(prefix) && strings.HasPrefix(u.Key, prefix) && !seen[u.UploadID] {
				seen[u.UploadID] = true
				entries[i].Uploads = append(entries[i].Uploads, u)
			}
		}
	}
	return nil
}

// listRow is one backup's row: its state, what its manifest says, its
// drill and the retention decision.
func listRow(l catalog.Listed, d retention.Decision) ListRow {
	r := ListRow{Name: l.Name, Kind: l.Kind, Time: l.Time, Status: "committed",
		Retention: ListRetention{Keep: d.Keep, Rules: d.Rules, Reason: d.Reason}, Drill: l.Drill.Result()}
	for _, o := range l.Objects {
		r.TotalSize += o.Size
	}
	r.Damaged = l.Damaged
	switch {
	case !l.Committed:
		r.Status = "incomplete"
	case l.ManifestErr != nil && l.Damaged == "":
		r.Status, r.Error = "unknown: manifest could not be read", l.ManifestErr.Error()
	case l.ManifestErr != nil:
		r.Status, r.Error = "damaged: "+l.Damaged, l.ManifestErr.Error()
	default:
		if l.Damaged != "" {
			r.Status = "damaged: " + l.Damaged
		}
		m := l.Manifest
		r.Revision, r.RawSize, r.Source, r.Manifest = m.RevisionBefore, m.Snapshot.RawSize, m.Source.Name, m
		r.StoredSize = m.Snapshot.StoredSize
		r.Recipients = m.Recipients()
		r.Escrow = m.Escrow
		if m.V2 != nil {
			r.V2Keys = &m.V2.Keys
		}
	}
	return r
}
