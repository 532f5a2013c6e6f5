package restore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/probe"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
)

// The stages of a restore, in order (see the package documentation).
// Run composes them all; a drill (package drill) composes PlanTargets,
// SelectLocal or Select, Fetch, Prepare and WriteDataDirs with its own
// checks; SelectSnapshot (etcd-operator's restore) is Select and Fetch.
// Each returns an *Error naming its step.

// PlanTargets is the first stage: it resolves opts.Targets into the
// plan's members and data dirs, sets the token (generated when
// opts.Token is empty) and the bump, and checks every data dir (it, or
// its nearest existing ancestor, writable; a non-empty one refused, or
// with Force marked to be moved aside). A dry run lists the problems in
// plan.Problems; a real run fails at StepDataDirs on the first.
func PlanTargets(opts Options, plan *Plan) error {
	if err := opts.defaults(); err != nil {
		return &Error{ClusterID: opts.ClusterID, At: StepValidate, Err: err}
	}
	if step, err := planTargets(opts, plan); err != nil {
		return &Error{ClusterID: opts.ClusterID, At: step, Err: err}
	}
	return nil
}

// Selection is what the select stage chose: the candidates, ranked
// (also in Plan.Candidates), and the index of the chosen one.
type Selection struct {
	Candidates []Candidate
	Index      int
	// local is the local plaintext snapshot SelectLocal chose.
	local *localSnapshot
}

// Chosen is the chosen candidate.
func (s *Selection) Chosen() Candidate { return s.Candidates[s.Index] }

// Select is the select stage: the store is checked, the survivor
// snapshot taken (opts.Survivor; in a dry run its member is only
// found), the committed backups listed and ranked, and one chosen: the
// best, or opts.Backup (see Plan.Reason). An encrypted backup is checked
// against opts.Identities from its manifest, before anything is
// downloaded.
func Select(ctx context.Context, opts Options, plan *Plan) (*Selection, error) {
	return selectStage(ctx, opts, plan, nil)
}

// SelectLocal is the select stage for a local plaintext snapshot of a
// committed backup (the plaintext a backup streamed, drilled by the
// backup job): the store is checked and the backup m describes is the one
// candidate. Fetch then verifies the file at path in place, against m,
// and stages it as it is (the caller owns it: nothing is downloaded or
// copied).
func SelectLocal(ctx context.Context, opts Options, plan *Plan, path string, m *catalog.Manifest) (*Selection, error) {
	return selectStage(ctx, opts, plan, &localSnapshot{path: path, manifest: m})
}

func selectStage(ctx context.Context, opts Options, plan *Plan, local *localSnapshot) (*Selection, error) {
	if err := opts.defaults(); err != nil {
		return nil, stepError(ctx, opts.ClusterID, StepValidate, err)
	}
	log := opts.Log.With("cluster", opts.ClusterID)
	cands, idx, step, err := selectBackup(ctx, opts, log, plan, local)
	if err != nil {
		return nil, stepError(ctx, opts.ClusterID, step, err)
	}
	return &Selection{Candidates: cands, Index: idx, local: local}, nil
}

// FetchOptions configure the fetch stage.
type FetchOptions struct {
	// Dir holds the staged snapshot file of a real run (a dry run stages
	// it in a private dir under opts.ScratchDir, removed before Fetch
	// returns).
	Dir string
	// Prove is set by a run that proves the chosen backup (a drill): a
	// refused backup's verification error is returned as it is (no
	// BackupError), and no other backup is tried or verified.
	Prove bool
	// SpaceChecked: the caller has checked the free space for the staged
	// file and what follows it (a drill, whose data dir takes the staged
	// file over); Fetch then does not check it.
	SpaceChecked bool
}

// Fetch is the fetch stage: the chosen backup is downloaded, decrypted
// and decompressed into a staged file in fo.Dir while every hash and size
// is checked against its manifest (or a local snapshot is verified in
// place), and the staged database is read (Plan.Snapshot) and its
// revision checked against the manifest's. A backup refused for its bytes
// makes Run, which chose it itself, try the next candidate
// (Plan.Fallbacks); one named with opts.Backup is refused with a
// BackupError naming the next good one. It returns the staged file's path
// ("" in a dry run, and for the survivor a dry run plans); the caller
// removes it. On error it is already removed.
//
// A journal's replay, when there is one, is the stage after this one: it
// applies to the staged file, before Prepare.
func Fetch(ctx context.Context, opts Options, plan *Plan, sel *Selection, fo FetchOptions) (string, error) {
	if err := opts.defaults(); err != nil {
		return "", stepError(ctx, opts.ClusterID, StepValidate, err)
	}
	log := opts.Log.With("cluster", opts.ClusterID)
	fc := fetchConfig{prove: fo.Prove, spaceChecked: fo.SpaceChecked, local: sel.local}
	path, step, err := verifyCandidates(ctx, opts, log, plan, sel.Candidates, sel.Index, fo.Dir, fc)
	if err != nil {
		if path != "" {
			os.Remove(path)
		}
		return "", stepError(ctx, opts.ClusterID, step, err)
	}
	return path, nil
}

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

// SurvivorRequest is a survivor snapshot to take: a pre-restore backup
// (catalog.KindPreRestore) of the best member of Old, committed to Store
// as backup.Run commits any backup.
type SurvivorRequest struct {
	ClusterID         string
	Old               etcdconn.Config
	Store             store.Store
	Layout            catalog.Layout
	ProbeTimeout      time.Duration
	Progress          func(n int64)
	Log               *slog.Logger
	Now               func() time.Time
	Recipients        seal.Recipients
	RequireEncryption bool
	// OnSource is called with the member chosen, before it streams.
	OnSource func(probe.Member)
}

// SurvivorBackup takes restore's survivor snapshot (Options.Survivor).
// survivor.Backup is the one implementation, with backup's member choice
// and backup.Run: restore does not import backup.
type SurvivorBackup interface {
	// Candidates orders the probed members of the old cluster to
	// snapshot, best first; a dry run names the first.
	Candidates(members []probe.Member, quorum bool) []probe.Member
	// Take commits the survivor snapshot and returns its manifest. When
	// no member of the old cluster answers, its error is a
	// *NoSurvivorError.
	Take(ctx context.Context, req SurvivorRequest) (*catalog.Manifest, error)
}

// NoSurvivorError is SurvivorBackup.Take finding no member of the old
// cluster that answers: restore then restores from the store.
type NoSurvivorError struct{ Err error }

func (e *NoSurvivorError) Error() string { return e.Err.Error() }
func (e *NoSurvivorError) Unwrap() error { return e.Err }

var errNoSurvivorBackup = errors.New("a survivor snapshot was asked for (endpoints of the old cluster) but Options.Survivor is not set")

// IsVerifyError reports whether err is a backup refused for its bytes (a
// checksum, a truncated or undecodable stream, an object gone, a database
// below the manifest's revision), not a store or disk failure.
func IsVerifyError(err error) bool {
	var ve *verifyError
	return errors.As(err, &ve)
}

// IsLocalFailure tells a failure of the local file system (no room, no
// permission, read-only, an I/O error, a data dir changed under the run)
// from a backup's database being refused.
func IsLocalFailure(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EROFS) ||
		errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrPermission) || strings.Contains(err.Error(), "changed since it was checked")
}

// Manifest is the candidate's manifest (nil for the survivor a dry run
// plans).
func (c Candidate) Manifest() *catalog.Manifest { return c.manifest }

// JournalSource is where Replay reads a journal (the segment reader over
// catalog.Layout.JournalPrefix reads one store's; a test, events it
// watched).
type JournalSource interface {
	// Leases are the leases the journal saw up to toRev (Lease.Rev <=
	// toRev, or granted before a key of revisions fromRev..toRev was put
	// on them), each with its Revoked revision when it was revoked or
	// expired. Replay asks for them before the events.
	Leases(ctx context.Context, fromRev, toRev int64) ([]journal.Lease, error)
	// Events yields every event of revisions fromRev to toRev, inclusive,
	// in revision and sub order. A gap or a refused segment is an error
	// yielded, never a silent end: Replay refuses a journal that ends
	// before toRev, naming the last revision it reached.
	Events(ctx context.Context, fromRev, toRev int64) (iter.Seq2[journal.Event, error], error)
}

// ReplayOptions configure the replay stage.
type ReplayOptions struct {
	// ToRevision is the revision to restore to (Options.ToRevision): the
	// staged snapshot's revision or above.
	ToRevision int64
	// Journal holds the events after the snapshot (Options.Journal).
	Journal JournalSource
}

// Replayed is what the replay stage applied (Plan.Replay).
type Replayed struct {
	// FromRevision is the snapshot's revision: the events start after it.
	FromRevision int64 `json:"fromRevision"`
	// ToRevision is the revision the data dirs hold.
	ToRevision int64 `json:"toRevision"`
	Events     int64 `json:"events"`
	// LeasesPut and LeasesDeleted count the changes to the lease bucket.
	LeasesPut     int `json:"leasesPut,omitempty"`
	LeasesDeleted int `json:"leasesDeleted,omitempty"`
	// Segments are the journal's segments a dry run would read (with a
	// JournalPlanner), in order.
	Segments []string `json:"segments,omitempty"`
}

// JournalPlanner is a JournalSource that can say, without reading an
// event, which segments a replay of revisions from to to would read, or
// why it cannot (journal.Source: a chain that stops before to is a
// *journal.ReachError naming the last revision reachable).
type JournalPlanner interface {
	Segments(ctx context.Context, fromRev, toRev int64) ([]journal.SegmentInfo, error)
}

// PlanReplay is the replay stage of a dry run: nothing is written. The
// staged snapshot's revision (read by Fetch; the chosen backup's when
// the dry run did not stage it) must be at or below ro.ToRevision, and a
// journal that is a JournalPlanner must reach ro.ToRevision from it:
// Plan.Replay then says what would be replayed (the revisions and the
// segments), and a check "journal" the same.
func PlanReplay(ctx context.Context, opts Options, plan *Plan, ro ReplayOptions) error {
	if err := opts.defaults(); err != nil {
		return stepError(ctx, opts.ClusterID, StepValidate, err)
	}
	if ro.Journal == nil {
		return stepError(ctx, opts.ClusterID, StepReplay, errNoJournal)
	}
	var from int64
	switch {
	case plan.Snapshot != nil:
		from = plan.Snapshot.StoreRevision()
	case plan.Chosen != nil:
		from = plan.Chosen.Revision
	default:
		return stepError(ctx, opts.ClusterID, StepReplay, errors.New("no backup chosen to replay the journal into"))
	}
	if ro.ToRevision < from {
		return stepError(ctx, opts.ClusterID, StepReplay, fmt.Errorf("the backup is at revision %d, above the revision to restore to, %d: restore an older backup (--backup)", from, ro.ToRevision))
	}
	rep := &Replayed{FromRevision: from, ToRevision: ro.ToRevision}
	detail := fmt.Sprintf("would replay revisions %d to %d", from+1, ro.ToRevision)
	if ro.ToRevision == from {
		detail = fmt.Sprintf("the backup is at revision %d already: nothing to replay", from)
	} else if p, ok := ro.Journal.(JournalPlanner); ok {
		segs, err := p.Segments(ctx, from+1, ro.ToRevision)
		if err != nil {
			plan.Checks = append(plan.Checks, Check{Name: "journal", Status: CheckFailed, Detail: err.Error()})
			return stepError(ctx, opts.ClusterID, StepReplay, err)
		}
		for _, s := range segs {
			rep.Segments = append(rep.Segments, s.Key)
		}
		if len(segs) > 0 {
			detail += fmt.Sprintf(" from %d segments (%s to %s)", len(segs), segs[0].Key, segs[len(segs)-1].Key)
		}
	}
	plan.Replay = rep
	plan.Checks = append(plan.Checks, Check{Name: "journal", Status: CheckPlanned, Detail: detail})
	return nil
}

// Replay is the replay stage, between Fetch and Prepare, for a
// point-in-time restore (Options.ToRevision): the journal's events after
// the staged snapshot's revision, up to ro.ToRevision, are applied
// straight into the staged file at path (etcdinternals.ApplyEvents,
// exactly as etcd's MVCC writes them; no etcd runs), with the leases as
// they were at that revision: one granted after it is left out, one
// revoked after it kept. The plan's snapshot facts and MinRevision are
// then those of the replayed database (Prepare bumps above ro.ToRevision,
// and VerifyRebuilt expects its keys), and Plan.Replay says what was
// applied. A journal that does not continue the snapshot exactly (an
// event at or below its revision, a gap, a repeat) or that ends before
// ro.ToRevision is refused: the error names the last revision reached.
// On error the staged file holds part of the journal: the caller removes
// it, as after a failed Fetch.
func Replay(ctx context.Context, opts Options, plan *Plan, path string, ro ReplayOptions) error {
	if err := opts.defaults(); err != nil {
		return stepError(ctx, opts.ClusterID, StepValidate, err)
	}
	log := opts.Log.With("cluster", opts.ClusterID)
	rep, err := replay(ctx, plan, path, ro)
	if err != nil {
		return stepError(ctx, opts.ClusterID, StepReplay, err)
	}
	facts, err := readSnapshotFacts(path)
	if err != nil {
		return stepError(ctx, opts.ClusterID, StepReplay, fmt.Errorf("read the replayed database: %w", err))
	}
	plan.Snapshot = &facts
	plan.MinRevision = facts.Revision + int64(opts.BumpRevision)
	plan.Replay = rep
	plan.Checks = append(plan.Checks, Check{Name: "journal", Status: CheckPassed,
		Detail: fmt.Sprintf("%d events of revisions %d to %d replayed: revision %d, %d live keys", rep.Events, rep.FromRevision+1,
			rep.ToRevision, facts.StoreRevision(), facts.LiveKeys)})
	log.Info("journal replayed", "from_revision", rep.FromRevision, "to_revision", rep.ToRevision, "events", rep.Events)
	if vu, ok := ro.Journal.(interface{ VersionsUnread() error }); ok && vu.VersionsUnread() != nil {
		w := fmt.Sprintf("the bucket's object versions could not be read (%v): the journal's segments were read at their current versions, "+
			"so a segment written over since would not be seen by its version (its sha256 is still checked against the next segment and the proofs)", vu.VersionsUnread())
		plan.Warnings = append(plan.Warnings, w)
		log.Warn("journal read without object versions", "err", vu.VersionsUnread())
	}
	if rs, ok := ro.Journal.(JournalReplacedLister); ok {
		for _, seg := range rs.Replaced() {
			w := fmt.Sprintf("journal segment %s: its own (earliest) version %s was replayed; ", seg.Key, seg.VersionID)
			if seg.Replaced > 0 {
				w += fmt.Sprintf("%d newer version(s) written over it were passed over", seg.Replaced)
			}
			if seg.Hidden {
				if seg.Replaced > 0 {
					w += ", and "
				}
				w += "a delete marker hides it"
			}
			plan.Warnings = append(plan.Warnings, w+": something wrote over the journal")
			log.Warn("journal segment written over: replayed its own version", "segment", seg.Key, "version", seg.VersionID,
				"newer_versions", seg.Replaced, "delete_marker", seg.Hidden)
		}
	}
	return nil
}

// JournalReplacedLister is a JournalSource that says which segments it
// read were written over (journal.Source.Replaced): a newer version passed
// over, or a delete marker read behind.
type JournalReplacedLister interface {
	Replaced() []journal.SegmentInfo
}

// JournalPinner is a JournalSource that can be told the segments a
// passed proof replayed (journal.Source.Pin): a replay then reads those
// versions and refuses a segment hashing otherwise.
type JournalPinner interface {
	Pin([]catalog.ProvenSegment)
}

// replay is Replay without the step error and the plan's new facts.
func replay(ctx context.Context, plan *Plan, path string, ro ReplayOptions) (*Replayed, error) {
	if ro.Journal == nil {
		return nil, errNoJournal
	}
	if ro.ToRevision <= 0 {
		return nil, fmt.Errorf("revision %d to restore to: not a revision", ro.ToRevision)
	}
	if path == "" {
		return nil, errors.New("no staged snapshot to replay the journal into")
	}
	if plan.Snapshot == nil {
		return nil, errors.New("the staged snapshot was not read: Fetch comes first")
	}
	from := plan.Snapshot.StoreRevision()
	if ro.ToRevision < from {
		return nil, fmt.Errorf("the backup is at revision %d, above the revision to restore to, %d: restore an older backup (--backup)", from, ro.ToRevision)
	}
	rep := &Replayed{FromRevision: from, ToRevision: ro.ToRevision}
	if ro.ToRevision == from {
		return rep, nil
	}
	all, err := ro.Journal.Leases(ctx, from+1, ro.ToRevision)
	if err != nil {
		return nil, fmt.Errorf("read the journal's leases: %w", err)
	}
	leases := leasesAt(all, ro.ToRevision)
	events, err := ro.Journal.Events(ctx, from+1, ro.ToRevision)
	if err != nil {
		return nil, fmt.Errorf("read the journal: %w", err)
	}
	upTo := func(yield func(journal.Event, error) bool) {
		for ev, err := range events {
			if err == nil && ev.Rev > ro.ToRevision {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
			if ctx.Err() != nil {
				yield(journal.Event{}, ctx.Err())
				return
			}
		}
	}
	a, err := etcdinternals.ApplyEvents(path, upTo, leases)
	if err != nil {
		if a.LastRevision > 0 {
			return nil, fmt.Errorf("%w (the journal reached revision %d)", err, a.LastRevision)
		}
		return nil, err
	}
	if a.LastRevision != ro.ToRevision {
		reached := max(a.LastRevision, from)
		return nil, fmt.Errorf("the journal reaches revision %d only, not %d: the last revision this backup can be restored to is %d", reached, ro.ToRevision, reached)
	}
	rep.Events, rep.LeasesPut, rep.LeasesDeleted = a.Events, a.LeasesPut, a.LeasesDeleted
	return rep, nil
}

// leasesAt are the leases as they were at revision rev: those granted
// after it left out, those revoked after it alive.
func leasesAt(all []journal.Lease, rev int64) []journal.Lease {
	var out []journal.Lease
	for _, l := range all {
		if l.Rev > rev {
			continue
		}
		if l.Revoked > rev {
			l.Revoked = 0
		}
		out = append(out, l)
	}
	return out
}

var errNoJournal = errors.New("a revision to restore to was given, but no journal to replay up to it")
