package restore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/ctxerr"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/probe"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
)

// DefaultBumpRevision is etcdutl's recommended revision bump: far more
// revisions than a cluster writes between its last backup and a restore.
const DefaultBumpRevision = 1_000_000_000

// Progress shows the progress of one stream (internal/output.Progress).
type Progress interface {
	Update(n int64)
	Done()
}

// Options configure a restore.
type Options struct {
	ClusterID string
	Store     store.Store
	Layout    catalog.Layout

	// Old is the old cluster (--endpoints). When any member answers, a
	// pre-restore snapshot of it is committed to the store first. No
	// endpoints, or NoLive, skips it.
	Old          etcdconn.Config
	NoLive       bool
	ProbeTimeout time.Duration // per member probe; default 5s

	// Backup forces a backup by name instead of the newest.
	Backup string
	// IncludeDeleted (--include-deleted) also considers, on a versioned
	// bucket, the backups only object versions still hold: deleted (a
	// delete marker over them) or overwritten (prune.VersionedBackups).
	// Without it they are considered only when no live backup checks out
	// (or --backup names one that is not live). A candidate read from
	// versions says so (Candidate.FromVersions, a warning in the log).
	IncludeDeleted bool

	// Targets are the members to rebuild and their data dirs.
	Targets
	// Token is --initial-cluster-token; generated when empty.
	Token string
	// BumpRevision and MarkCompacted are etcdutl's --bump-revision and
	// --mark-compacted: both set, or neither.
	BumpRevision  uint64
	MarkCompacted bool
	// PublicRestorePath writes the data dirs with etcdutl's public
	// snapshot restore alone (its own RevisionBump and MarkCompacted, in
	// each member's copy), skipping etcdinternals.PrepareSnapshot's
	// hand-written freelist and staged bump: the fallback for when an
	// etcd or bbolt upgrade breaks what that relies on. Slower, and each
	// member's restore walks the database. ETCD_RECOVERY_NO_INTERNALS=1
	// sets it for every restore (etcdinternals.Enabled).
	PublicRestorePath bool
	// Parallel is how many data dirs are written at a time; 0 writes all
	// at once. Each restore maps the database while etcdutl's code runs,
	// so resident memory grows with it; the work is mostly disk writes.
	Parallel int
	// Force moves non-empty data dirs aside (<dir>.moved-<UTC time>)
	// instead of refusing them. Nothing is ever deleted.
	Force bool
	// DryRun builds and prints the plan, runs every check the real run
	// does (the chosen backup streamed and verified, its database read
	// and its revision checked against the manifest, every data dir's
	// target writable) and changes nothing: no survivor snapshot, no data
	// dir. The database is read from a temp file in a private dir under
	// ScratchDir, removed before Run returns.
	DryRun bool
	// ScratchDir (--temp-dir) holds the staged snapshot while it is
	// verified: a dry run's (default os.TempDir(), i.e. $TMPDIR), and a
	// real run's when set (default: next to the data dirs, whose file
	// system needs room for each member's database anyway).
	ScratchDir string

	// Identities (--identity-file) decrypt an encrypted backup (its
	// manifest's Encryption). Without one of its recipients' identities
	// the restore fails at "verify backup" before anything is downloaded
	// or written, naming the recipients (seal.ErrNoIdentity). Plaintext
	// backups need none.
	Identities *seal.Identities
	// Recipients (restore's --encrypt-to / --recipients-file, from the
	// ConfigMap's variables in the toolkit) encrypt the survivor snapshot
	// restore commits before it restores. Without them, the survivor is
	// encrypted to the recipients of the cluster's newest committed
	// encrypted backup (public keys, read from its manifest): an encrypted
	// fleet never gets a plaintext backup from an incident. Restore then
	// reads the survivor back, so Identities must match one of them; that
	// is checked before the snapshot is taken.
	Recipients seal.Recipients
	// RequireEncryption refuses to commit a plaintext survivor snapshot.
	RequireEncryption bool

	// Verify, when its Etcd has endpoints, waits for the rebuilt cluster
	// (started by someone else once OnDataDirs is called) and verifies it.
	Verify VerifyOptions

	// OnDataDirs is called once every data dir is written, before Verify
	// waits: the members can be started.
	OnDataDirs func(*Plan)
	// Progress returns a progress line for a stream (nil: none).
	Progress func(label string) Progress
	Log      *slog.Logger
	Now      func() time.Time

	// OnMemberWritten, when set, is called after each member's data dir
	// is written, inside the write step (before the next one starts when
	// Parallel is 1): to report or act on each member as it is ready. Nil:
	// the FailpointEnv failpoint, when set.
	OnMemberWritten func(ctx context.Context, m Member)

	// Survivor takes the survivor snapshot (survivor.Backup: restore does
	// not import backup). Needed when Old has endpoints and NoLive is not
	// set; without it the restore fails at the survivor step.
	Survivor SurvivorBackup

	// ToRevision (--to-revision), when set, restores the cluster as of
	// exactly that revision (point in time): the chosen backup (at or
	// below it: name one with Backup) is staged and Journal's events
	// after its revision, up to ToRevision, are replayed into it (the
	// Replay stage) before Prepare bumps the revision and marks it
	// compacted, as every restore does. It needs Journal. A dry run does
	// not replay.
	ToRevision int64
	// Journal is the journal ToRevision replays (JournalSource).
	Journal JournalSource
	// AcceptUnprovenJournal (--accept-unproven-journal) replays the
	// journal even through a window whose journal proof failed
	// (catalog.JournalProof); without it such a ToRevision is refused at
	// the select step (JournalProofError).
	AcceptUnprovenJournal bool
	// ToLatest (--to-latest) restores to the newest revision Journal (a
	// JournalReacher) reaches exactly from the backup the restore starts
	// from (the best-ranked, or Backup): resolved first, it becomes
	// ToRevision (Plan.Latest says which, when it was received and how
	// old it is). Not with ToRevision. A member of Old that still answers
	// is a warning (Plan.Warnings): its survivor snapshot, a plain
	// restore, loses nothing.
	ToLatest bool
}

// Survivor is the pre-restore snapshot of a surviving member.
type Survivor struct {
	Member   string `json:"member,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Revision int64  `json:"revision,omitempty"`
	// Backup is the committed pre-restore backup.
	Backup string `json:"backup,omitempty"`
	// Planned: a dry run found the member and would take the snapshot.
	Planned bool `json:"planned,omitempty"`
	// Skipped says why no survivor snapshot was taken.
	Skipped string `json:"skipped,omitempty"`
}

// Plan is what a restore does (or, in a dry run, would do).
type Plan struct {
	ClusterID  string      `json:"clusterID"`
	DryRun     bool        `json:"dryRun"`
	Survivor   *Survivor   `json:"survivor"`
	Candidates []Candidate `json:"candidates"`
	Ignored    []Ignored   `json:"ignored,omitempty"`
	// Fallbacks are the candidates refused at verification, in the order
	// tried, each with the one tried next (no --backup: see Fallback).
	Fallbacks []Fallback `json:"fallbacks,omitempty"`
	Chosen    *Candidate `json:"chosen,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	// Checks of the chosen backup, before anything is written.
	Checks   []Check        `json:"checks"`
	Snapshot *SnapshotFacts `json:"snapshot,omitempty"`
	// Members and their data dirs.
	Members        []Member `json:"members"`
	InitialCluster string   `json:"initialCluster"`
	Token          string   `json:"initialClusterToken"`
	TokenGenerated bool     `json:"tokenGenerated,omitempty"`
	BumpRevision   uint64   `json:"bumpRevision"`
	MarkCompacted  bool     `json:"markCompacted"`
	// MinRevision is the lowest revision the rebuilt cluster may report:
	// the revision of the snapshot's last key plus the bump, as etcdutl
	// bumps it (the manifest's revision plus the bump until the snapshot
	// is read).
	MinRevision int64 `json:"minRevision"`
	// EtcdVersion is the server version the backup was taken from: start
	// the data dirs with the same minor version.
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// Problems stop the restore; a dry run lists them all.
	Problems []string `json:"problems,omitempty"`
	// Replay is the journal replayed up to Options.ToRevision.
	Replay *Replayed `json:"replay,omitempty"`
	// Latest is what Options.ToLatest resolved to.
	Latest *Latest `json:"latest,omitempty"`
	// Warnings are what the restore did that a reader must know.
	Warnings []string `json:"warnings,omitempty"`
}

// Result is a finished (or failed) restore.
type Result struct {
	Plan
	// Duration is from the start to the data dirs written.
	Duration time.Duration `json:"duration"`
	// Verify is the check of the rebuilt cluster, when asked for.
	Verify *VerifyReport `json:"verify,omitempty"`
	// TotalToVerified is from the start to a verified cluster.
	TotalToVerified time.Duration `json:"totalToVerified,omitempty"`
}

// Step names, used in errors.
const (
	StepValidate      = "validate"
	StepDataDirs      = "check data dirs"
	StepStore         = "check object store"
	StepSurvivor      = "survivor snapshot"
	StepList          = "list backups"
	StepSelect        = "select backup"
	StepVerifyBackup  = "verify backup"
	StepReplay        = "replay journal"
	StepMoveAside     = "move data dir aside"
	StepWrite         = "write data dirs"
	StepVerifyCluster = "verify cluster"
)

// Error is a failed restore: the cluster, the step and the cause.
type Error struct {
	ClusterID string
	At        string // the step that failed (Step)
	Err       error
}

// Step is the step that failed (one of the Step* constants).
func (e *Error) Step() string { return e.At }

func (e *Error) Error() string {
	if e.ClusterID == "" {
		return fmt.Sprintf("restore failed at step %q: %v", e.Step(), e.Err)
	}
	return fmt.Sprintf("restore of cluster %s failed at step %q: %v", e.ClusterID, e.Step(), e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// BackupError is a backup refused because it failed verification. Next is
// the next-newest backup that passed, empty when none did.
type BackupError struct {
	Backup       string
	Err          error
	Next         string
	NextRevision int64
	// NextErr is why the next backups could not be checked (the store
	// failed while they were read).
	NextErr error
}

func (e *BackupError) Error() string {
	msg := fmt.Sprintf("backup %s is corrupt, truncated or missing an object, refusing it: %v", e.Backup, e.Err)
	if e.NextErr != nil {
		return msg + fmt.Sprintf("; the older backups could not be checked: %v", e.NextErr)
	}
	if e.Next != "" {
		return msg + fmt.Sprintf("; the next-newest good backup is %s (revision %d, verified): restore it with --backup %s", e.Next, e.NextRevision, e.Next)
	}
	return msg + "; no other backup passed verification"
}

func (e *BackupError) Unwrap() error { return e.Err }

// ProblemsError is a restore stopped before anything was changed.
type ProblemsError struct{ Problems []string }

func (e *ProblemsError) Error() string { return strings.Join(e.Problems, "; ") }

// Validate checks the options a caller chose, before anything is
// contacted or touched. Its errors are usage errors (internal/usage):
// the CLI exits 4 for them. Run calls it first; zero durations and
// Parallel mean the defaults.
func (o Options) Validate() error {
	if o.ClusterID == "" {
		return usage.Errorf("--cluster-id is required")
	}
	if o.InitialCluster == "" {
		return usage.Errorf("--initial-cluster is required (name=peerURL,... of the new cluster)")
	}
	if err := o.validateSource(); err != nil {
		return err
	}
	if o.ProbeTimeout < 0 {
		return usage.Errorf("--probe-timeout must be positive")
	}
	if o.ToRevision < 0 {
		return usage.Errorf("--to-revision must be a revision (positive)")
	}
	if err := o.validateLatest(); err != nil {
		return err
	}
	if o.Parallel < 0 {
		return usage.Errorf("--parallel-data-dirs must be 0 (all at once) or more")
	}
	members, err := ValidateTargets(o.Targets)
	if err != nil {
		return usage.Wrap(err)
	}
	if o.Name != "" && members > 1 && (o.Backup == "" || o.Token == "") {
		// Members restored in separate runs must come from one snapshot
		// with one token, or they form separate clusters.
		return usage.Errorf("--name restores 1 of %d members: pass --backup and --initial-cluster-token so every member "+
			"comes from the same snapshot with the same token (or restore all members in one run)", members)
	}
	if len(o.Old.Endpoints) > 0 {
		// Refused even with NoLive: a malformed endpoint is a mistake.
		if err := o.Old.Validate(); err != nil {
			return usage.Wrap(err)
		}
	}
	if len(o.Verify.Etcd.Endpoints) > 0 {
		if o.DryRun {
			return usage.Errorf("--verify-endpoints with --dry-run: a dry run writes no data dir to verify")
		}
		if err := o.Verify.Etcd.Validate(); err != nil {
			return usage.Wrap(err)
		}
		if o.Verify.Timeout < 0 {
			return usage.Errorf("--verify-timeout must be positive")
		}
	}
	return nil
}

// validateSource checks what selects and reads the snapshot: the cluster,
// the backup's name, the bump and the old cluster's endpoints (also all
// SelectSnapshot needs).
func (o Options) validateSource() error {
	if err := catalog.ValidateClusterID(o.ClusterID); err != nil {
		return usage.Wrap(err)
	}
	if o.Backup != "" {
		if _, _, err := catalog.ParseBackupName(o.Backup); err != nil {
			return usage.Errorf("--backup: %w", err)
		}
	}
	if (o.BumpRevision > 0) != o.MarkCompacted {
		return usage.Errorf("--bump-revision %d with --mark-compacted=%t: set both (the default), or --bump-revision 0 with --mark-compacted=false",
			o.BumpRevision, o.MarkCompacted)
	}
	if len(o.Old.Endpoints) > 0 && !o.NoLive {
		if err := o.Old.Validate(); err != nil {
			return usage.Wrap(err)
		}
	}
	return nil
}

func (o *Options) defaults() error {
	if o.Store == nil {
		return errors.New("no object store")
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Progress == nil {
		o.Progress = func(string) Progress { return nopProgress{} }
	}
	return nil
}

type nopProgress struct{}

func (nopProgress) Update(int64) {}
func (nopProgress) Done()        {}

// Run restores a cluster: see the package documentation. It composes the
// stages (stages.go): PlanTargets, Select, Fetch, then (not in a dry run)
// Replay when Options.ToRevision is set, the data dirs moved aside,
// Prepare, WriteDataDirs and VerifyRebuilt. It
// returns the plan, and how far it got, even when it fails after building
// it.
func Run(ctx context.Context, opts Options) (_ *Result, rerr error) {
	r := newRestoreRun(opts)
	if err := r.setUp(ctx); err != nil {
		return r.res, err
	}
	if err := PlanTargets(r.opts, r.plan); err != nil {
		return r.res, err
	}
	tmpDir, tmpCreated := r.scratchDir()
	defer func() {
		if r.snapPath != "" {
			os.Remove(r.snapPath)
		}
		if rerr != nil {
			// Parent dirs this run created for nothing.
			removeEmptyDirs(tmpCreated)
		}
	}()
	if err := r.selectAndFetch(ctx, tmpDir); err != nil {
		return r.res, err
	}
	if r.opts.DryRun {
		if r.opts.ToRevision > 0 {
			if err := PlanReplay(ctx, r.opts, r.plan, ReplayOptions{ToRevision: r.opts.ToRevision, Journal: r.opts.Journal}); err != nil {
				return r.res, err
			}
		}
		return r.res, r.dryRunProblems()
	}
	if r.opts.ToRevision > 0 {
		if err := Replay(ctx, r.opts, r.plan, r.snapPath, ReplayOptions{ToRevision: r.opts.ToRevision, Journal: r.opts.Journal}); err != nil {
			return r.res, err
		}
	}
	if err := r.moveDataDirsAside(ctx); err != nil {
		return r.res, err
	}
	if err := r.prepareAndWrite(ctx); err != nil {
		return r.res, err
	}
	r.written()
	return r.res, r.verify(ctx)
}

// restoreRun is the state of one Run: its options, its result (the plan
// in it) and what it has staged and moved so far.
type restoreRun struct {
	start time.Time
	opts  Options
	log   *slog.Logger
	res   *Result
	plan  *Plan
	// snapPath is the staged snapshot Fetch wrote.
	snapPath string
	// moved are the members whose non-empty data dir was moved aside.
	moved []*Member
}

// newRestoreRun starts a run: its result holds the plan from the start.
func newRestoreRun(opts Options) *restoreRun {
	r := &restoreRun{start: time.Now(), opts: opts,
		res: &Result{Plan: Plan{ClusterID: opts.ClusterID, DryRun: opts.DryRun, Checks: []Check{}}}}
	r.plan = &r.res.Plan
	return r
}

// fail is the run's failure at step.
func (r *restoreRun) fail(ctx context.Context, step string, err error) error {
	return stepError(ctx, r.opts.ClusterID, step, err)
}

// setUp is the validate step: the options checked, then defaulted.
func (r *restoreRun) setUp(ctx context.Context) error {
	if err := r.opts.Validate(); err != nil {
		return r.fail(ctx, StepValidate, err)
	}
	if err := r.opts.defaults(); err != nil {
		return r.fail(ctx, StepValidate, err)
	}
	r.log = r.opts.Log.With("cluster", r.opts.ClusterID)
	if r.opts.ToLatest {
		if err := resolveLatest(ctx, &r.opts, r.plan, r.log); err != nil {
			return r.fail(ctx, StepLatest, err)
		}
	}
	return nil
}

// scratchDir is where the snapshot is staged (beside the first data dir
// unless ScratchDir says), with the parent dirs a run would create there.
func (r *restoreRun) scratchDir() (dir string, created []string) {
	dir = filepath.Dir(r.plan.Members[0].DataDir)
	if r.opts.ScratchDir != "" {
		dir = r.opts.ScratchDir
	}
	created, _, _ = missingDirs(dir)
	return dir, created
}

// selectAndFetch is the Select and Fetch stages: a backup (or the survivor
// snapshot) chosen, verified and staged in dir.
func (r *restoreRun) selectAndFetch(ctx context.Context, dir string) error {
	sel, err := Select(ctx, r.opts, r.plan)
	if err != nil {
		return err
	}
	r.snapPath, err = Fetch(ctx, r.opts, r.plan, sel, FetchOptions{Dir: dir})
	return err
}

// dryRunProblems ends a dry run: an error when the plan found problems.
func (r *restoreRun) dryRunProblems() error {
	if len(r.plan.Problems) > 0 {
		return &Error{ClusterID: r.opts.ClusterID, At: StepDataDirs, Err: &ProblemsError{r.plan.Problems}}
	}
	return nil
}

// moveDataDirsAside is the move-aside step: non-empty data dirs moved
// aside (--force). On any failure, or a cancel, from here on, the dirs
// moved aside are moved back: the data dirs end as they were, or all
// written.
func (r *restoreRun) moveDataDirsAside(ctx context.Context) error {
	for i := range r.plan.Members {
		m := &r.plan.Members[i]
		if m.MovedTo == "" {
			continue
		}
		if err := ctx.Err(); err != nil {
			r.moveDataDirsBack()
			return r.fail(ctx, StepMoveAside, err)
		}
		m.MovedTo = movedName(m.DataDir, r.opts.Now())
		if err := moveAside(m.DataDir, m.MovedTo); err != nil {
			r.moveDataDirsBack()
			return r.fail(ctx, StepMoveAside, fmt.Errorf("member %s: %w", m.Name, err))
		}
		r.log.Warn("moved a non-empty data dir aside", "member", m.Name, "from", m.DataDir, "to", m.MovedTo)
		m.State = DirAbsent
		r.moved = append(r.moved, m)
	}
	return nil
}

// moveDataDirsBack moves the data dirs moved aside back, after a failure.
func (r *restoreRun) moveDataDirsBack() {
	for _, m := range r.moved {
		if err := os.Rename(m.MovedTo, m.DataDir); err != nil {
			r.log.Error("could not move a data dir back after the restore failed", "member", m.Name, "from", m.MovedTo, "to", m.DataDir, "err", err)
			continue
		}
		m.State, m.MovedTo = DirNonEmpty, ""
	}
}

// prepareAndWrite is the Prepare and WriteDataDirs stages: the staged
// snapshot prepared and every data dir written, or the dirs moved aside
// moved back.
func (r *restoreRun) prepareAndWrite(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		r.moveDataDirsBack()
		return r.fail(ctx, StepWrite, err)
	}
	prep, err := Prepare(ctx, r.opts, r.plan, r.snapPath, r.opts.MarkCompacted)
	if err != nil {
		r.moveDataDirsBack()
		return err
	}
	after := r.opts.OnMemberWritten
	if after == nil {
		after = envAfterMemberWritten()
	}
	if err := WriteDataDirs(ctx, r.plan, prep, WriteOptions{Parallel: r.opts.Parallel, OnMemberWritten: after, Log: r.log}); err != nil {
		for _, m := range r.moved {
			m.State = DirAbsent
		}
		r.moveDataDirsBack()
		return err
	}
	return nil
}

// written records the data dirs written: the staged snapshot removed, the
// duration logged, OnDataDirs told.
func (r *restoreRun) written() {
	os.Remove(r.snapPath)
	r.res.Duration = time.Since(r.start)
	r.log.Info("data dirs written", "members", len(r.plan.Members), "duration", r.res.Duration.Round(time.Millisecond))
	if r.opts.OnDataDirs != nil {
		r.opts.OnDataDirs(r.plan)
	}
}

// verify is the VerifyRebuilt stage, when Options.Verify names endpoints:
// the rebuilt cluster checked against what the snapshot holds.
func (r *restoreRun) verify(ctx context.Context) error {
	if len(r.opts.Verify.Etcd.Endpoints) == 0 {
		return nil
	}
	rep, err := VerifyRebuilt(ctx, r.verifyOptions())
	r.res.Verify = rep
	if err != nil {
		return r.fail(ctx, StepVerifyCluster, err)
	}
	r.res.TotalToVerified = time.Since(r.start)
	r.log.Info("rebuilt cluster verified", "total", r.res.TotalToVerified.Round(time.Millisecond))
	return nil
}

// verifyOptions are Options.Verify completed with what the plan and the
// snapshot say the rebuilt cluster must hold.
func (r *restoreRun) verifyOptions() VerifyOptions {
	vo := r.opts.Verify
	vo.MinRevision = r.plan.MinRevision
	vo.ExpectedKeys = -1
	if r.plan.Snapshot != nil {
		r.plan.Snapshot.Expect(&vo)
	}
	if vo.ExpectedMembers == 0 {
		if _, pc, err := r.opts.Targets.resolve(); err == nil {
			vo.ExpectedMembers = len(pc.names)
		}
	}
	if vo.Log == nil {
		vo.Log = r.opts.Log
	}
	return vo
}

// stepError is a stage's failure: the cluster, the step and the cause,
// wrapped with the context's error when the run was cancelled.
func stepError(ctx context.Context, clusterID, step string, err error) error {
	return &Error{ClusterID: clusterID, At: step, Err: ctxerr.Wrap(ctx, err)}
}

// planTargets is PlanTargets without the step error: members, token and
// bump in the plan, and every data dir checked.
func planTargets(opts Options, plan *Plan) (string, error) {
	members, _, err := opts.Targets.resolve()
	if err != nil {
		return StepValidate, usage.Wrap(err)
	}
	plan.Members, plan.InitialCluster = members, opts.InitialCluster
	plan.BumpRevision, plan.MarkCompacted = opts.BumpRevision, opts.MarkCompacted
	plan.Token = opts.Token
	if plan.Token == "" {
		plan.Token, plan.TokenGenerated = newToken(opts.ClusterID, opts.Now()), true
	}

	// Local checks first: nothing happens if a data dir is in the way.
	for i := range plan.Members {
		m := &plan.Members[i]
		st, err := inspectDir(m.DataDir)
		if err != nil {
			if !opts.DryRun {
				return StepDataDirs, fmt.Errorf("member %s: %w", m.Name, err)
			}
			m.Problem = err.Error()
			plan.Problems = append(plan.Problems, fmt.Sprintf("data dir %s of member %s: %v", m.DataDir, m.Name, err))
			continue
		}
		m.State = st
		if err := checkTarget(m.DataDir, st); err != nil {
			m.Problem = err.Error()
			plan.Problems = append(plan.Problems, fmt.Sprintf("data dir %s of member %s cannot be written: %v", m.DataDir, m.Name, err))
			continue
		}
		if st != DirNonEmpty {
			continue
		}
		if !opts.Force {
			plan.Problems = append(plan.Problems, fmt.Sprintf("data dir %s of member %s is not empty: refusing to overwrite it, as etcdutl does "+
				"(--force moves it aside to %s.moved-<UTC time>; nothing is deleted)", m.DataDir, m.Name, m.DataDir))
			continue
		}
		m.MovedTo = movedName(m.DataDir, opts.Now())
	}
	if len(plan.Problems) > 0 && !opts.DryRun {
		return StepDataDirs, &ProblemsError{plan.Problems}
	}
	return "", nil
}

// selectAndVerify is the select and fetch stages together, for
// SelectSnapshot: it takes the survivor snapshot (or, in a dry run, finds
// the member it would be taken of), lists and ranks the candidates,
// chooses one and verifies it by streaming it: into a temp file in dir,
// whose path it returns (the caller removes it, also on error), except in
// a dry run. On error, step names the step that failed.
func selectAndVerify(ctx context.Context, opts Options, log *slog.Logger, plan *Plan, dir string) (snapPath, step string, err error) {
	cands, idx, step, err := selectBackup(ctx, opts, log, plan, nil)
	if err != nil {
		return "", step, err
	}
	return verifyCandidates(ctx, opts, log, plan, cands, idx, dir, fetchConfig{})
}

// selectBackup is the select stage: the store checked, the survivor
// snapshot taken (or, in a dry run, its member found), the candidates
// listed and ranked (or, with local, the local snapshot's backup alone)
// and one chosen (choose). On error, step names the step that failed.
func selectBackup(ctx context.Context, opts Options, log *slog.Logger, plan *Plan, local *localSnapshot) (cands []Candidate, idx int, step string, err error) {
	if c, ok := opts.Store.(store.Checker); ok {
		if err := c.Check(ctx); err != nil {
			return nil, 0, StepStore, err
		}
	}

	// The survivor first: its data is newer than any backup, and once it
	// is committed to the store it is safe whatever happens next.
	plan.Survivor = &Survivor{}
	var planned *Candidate
	switch {
	case opts.ToLatest:
		plan.Survivor.Skipped = "--to-latest: the newest backup and the journal after it"
	case opts.ToRevision > 0:
		plan.Survivor.Skipped = "--to-revision: a point-in-time restore starts from a backup at or below the revision"
	case opts.NoLive:
		plan.Survivor.Skipped = "--no-live"
	case len(opts.Old.Endpoints) == 0:
		plan.Survivor.Skipped = "no --endpoints of the old cluster given"
	case opts.DryRun:
		if planned, err = probeSurvivor(ctx, opts, plan.Survivor); err != nil {
			return nil, 0, StepSurvivor, err
		}
	default:
		if err := takeSurvivor(ctx, opts, log, plan.Survivor); err != nil {
			return nil, 0, StepSurvivor, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, StepSurvivor, err
	}

	if local != nil {
		cands = []Candidate{candidateOf(local.manifest)}
		plan.Candidates = cands
	} else {
		listed, err := catalog.ListBackups(ctx, opts.Store, opts.Layout, opts.ClusterID)
		if err != nil {
			return nil, 0, StepList, err
		}
		var ignored []Ignored
		cands, ignored = rankCandidates(listed)
		if wantVersions(opts, cands) {
			if listed, cands, ignored, err = withVersions(ctx, opts, log, listed); err != nil {
				return nil, 0, StepList, err
			}
		}
		if opts.ToRevision > 0 {
			var above []Candidate
			if cands, ignored, above = atOrBelow(cands, ignored, opts.ToRevision); len(cands) == 0 && opts.Backup == "" {
				plan.Ignored = ignored
				return cands, -1, StepSelect, noBackupAtOrBelow(opts.ClusterID, opts.ToRevision, above)
			}
		}
		plan.Ignored = ignored
		if planned != nil {
			cands = append([]Candidate{*planned}, cands...)
			sortCandidates(cands)
		}
		if opts.ToRevision == 0 {
			// The newest history first: after a restore without a
			// revision bump (or a cluster recreated under the same name)
			// its backups are below the old history's revisions.
			if cands, err = byLineage(ctx, opts, plan, cands); err != nil {
				return cands, -1, StepList, err
			}
		}
		cands, idx, err = selectCandidate(opts.ClusterID, opts.Layout.ClusterPrefix(opts.ClusterID), listed, cands, ignored, opts.Backup, plan.Survivor)
		plan.Candidates = cands
		if err != nil {
			return cands, idx, StepSelect, err
		}
	}
	step, err = choose(opts, log, plan, cands, idx, local == nil)
	if err == nil && local == nil {
		step, err = checkJournalProof(ctx, opts, plan)
	}
	return cands, idx, step, err
}

// choose makes cands[idx] the plan's choice, with the reason, and checks,
// from the manifest, that an encrypted backup can be decrypted (checkID:
// not for a local plaintext snapshot) before anything is downloaded or
// written.
func choose(opts Options, log *slog.Logger, plan *Plan, cands []Candidate, idx int, checkID bool) (string, error) {
	plan.Reason = chooseReason(cands, idx, opts.Backup != "", plan.Survivor)
	switch {
	case opts.ToLatest:
		plan.Reason += fmt.Sprintf("; the journal replayed after it to revision %d, the newest it reaches (--to-latest)", opts.ToRevision)
	case opts.ToRevision > 0:
		plan.Reason += fmt.Sprintf("; the newest at or below --to-revision %d, the journal replayed after it", opts.ToRevision)
	}
	cands[idx].Status = "chosen"
	chosen := cands[idx]
	plan.Chosen = &chosen
	plan.EtcdVersion = chosen.ServerVersion
	plan.MinRevision = chosen.Revision + int64(opts.BumpRevision)
	if w := chosen.versionsWarning(); w != "" {
		plan.Reason += "; " + w
		log.Warn("restoring from a backup that only object versions hold", "backup", chosen.Name, "status", chosen.Recovered,
			"versions", chosen.Versions)
	}
	log.Info("chose a snapshot", "backup", chosen.Name, "revision", chosen.Revision, "reason", plan.Reason)
	// An encrypted backup needs the identity of one of its recipients:
	// checked from the manifest before anything is downloaded or written.
	if !chosen.Planned && checkID {
		if err := checkIdentity(opts.Layout, chosen.manifest, opts.Identities); err != nil {
			return StepVerifyBackup, err
		}
	}
	return "", nil
}

// fetchConfig is how the fetch stage treats the chosen candidate
// (FetchOptions, and the selection's local snapshot).
type fetchConfig struct {
	// prove: one backup is proven (a drill); see FetchOptions.Prove.
	prove bool
	// spaceChecked: the caller checked the free space itself.
	spaceChecked bool
	// local replaces the download with a local plaintext snapshot,
	// verified in place and staged as it is.
	local *localSnapshot
}

// verifyChosen verifies the chosen cands[idx] by streaming it, as the
// fetch stage says; verifyCandidates (select.go) calls it for each
// candidate it tries.
func verifyChosen(ctx context.Context, opts Options, log *slog.Logger, plan *Plan, cands []Candidate, idx int, dir string, fc fetchConfig) (snapPath, step string, err error) {
	chosen := cands[idx]
	// Verify before anything is written.
	if chosen.Planned {
		for _, n := range []string{CheckStoredSHA, CheckEtcdHash, CheckRawSHA, CheckSizes} {
			plan.Checks = append(plan.Checks, Check{Name: n, Status: CheckPlanned, Detail: "checked while the survivor snapshot streams"})
		}
		return "", "", nil
	}
	// Room first: nothing is downloaded unless every file system it is
	// written to has space for it.
	if !fc.spaceChecked {
		if err := checkRestoreSpace(opts, plan, chosen, dir); err != nil {
			return "", StepSpace, err
		}
	}
	var dst *os.File
	switch {
	case opts.DryRun:
		// The same checks as the real run, the database's revision
		// included, so the database is read from a file: in a private
		// scratch dir, not next to the data dirs, removed on return.
		scratchRoot := ScratchRoot(opts.ScratchDir)
		scratch, err := seal.MkdirTemp(scratchRoot, ".etcd-recovery-dry-run-") // plaintext: named and registered (seal)
		if err != nil {
			return "", StepVerifyBackup, fmt.Errorf("dry run: scratch dir for the snapshot: %w", err)
		}
		defer os.RemoveAll(scratch)
		if dst, err = os.OpenFile(filepath.Join(scratch, "snapshot.db"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return "", StepVerifyBackup, fmt.Errorf("dry run: scratch file for the snapshot: %w", err)
		}
		defer dst.Close()
	case fc.local != nil:
		// The caller owns the plaintext copy the backup streamed: it is
		// verified where it is and staged as it is (a drill then renames
		// it into the data dir, takeOverMember): the database is never
		// copied.
		snapPath = fc.local.path
	default:
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return snapPath, StepVerifyBackup, err
		}
		if dst, err = seal.CreateTemp(dir, ".etcd-recovery-"+opts.ClusterID+"-", ".snapshot.db"); err != nil { // plaintext: named and registered (seal)
			return snapPath, StepVerifyBackup, fmt.Errorf("temp file for the snapshot in %s: %w", dir, err)
		}
		snapPath = dst.Name()
		defer dst.Close()
	}
	fetchStart := time.Now()
	prog := opts.Progress(fmt.Sprintf("download %s", chosen.Name))
	var fr *fetchResult
	if fc.local != nil {
		fr, err = verifyLocal(ctx, *fc.local, dst) // dst nil: verified in place
	} else {
		fr, err = fetchSnapshot(ctx, opts.Store, opts.Layout, chosen.manifest, chosen.snapshotVersion(), opts.Identities, dst, prog.Update)
	}
	prog.Done()
	if fr != nil {
		plan.Checks = append(plan.Checks, fr.Checks...)
	}
	if err != nil {
		return snapPath, StepVerifyBackup, refuse(ctx, opts, cands, idx, err, fc)
	}
	cands[idx].Status, plan.Chosen.Status = "chosen, verified", "chosen, verified"
	stagedPath := snapPath
	if dst != nil {
		if err := dst.Close(); err != nil {
			return snapPath, StepVerifyBackup, err
		}
		stagedPath = dst.Name()
	}
	log.Debug("snapshot streamed and checked", "backup", chosen.Name, "duration", time.Since(fetchStart).Round(time.Millisecond))
	facts, err := readSnapshotFacts(stagedPath)
	if err != nil {
		return snapPath, StepVerifyBackup, refuse(ctx, opts, cands, idx, &verifyError{err}, fc)
	}
	plan.Snapshot = &facts
	plan.MinRevision = facts.Revision + int64(opts.BumpRevision)
	plan.Checks = append(plan.Checks, Check{Name: "database", Status: CheckPassed,
		Detail: fmt.Sprintf("revision %d, %d live keys, %d key revisions", facts.Revision, facts.LiveKeys, facts.Revisions)})
	if facts.StoreRevision() < chosen.Revision {
		return snapPath, StepVerifyBackup, refuse(ctx, opts, cands, idx, &verifyError{fmt.Errorf(
			"the database's revision %d is below the manifest's %d", facts.StoreRevision(), chosen.Revision)}, fc)
	}
	if opts.ToRevision > 0 && facts.StoreRevision() > opts.ToRevision {
		// The manifest's revision is a lower bound: the snapshot may hold
		// revisions past the one to restore to, which no replay undoes.
		return snapPath, StepVerifyBackup, refuse(ctx, opts, cands, idx, &verifyError{fmt.Errorf(
			"the database's revision %d is above --to-revision %d (the manifest's %d is a lower bound): an older backup is needed",
			facts.StoreRevision(), opts.ToRevision, chosen.Revision)}, fc)
	}
	log.Info("backup verified", "backup", chosen.Name, "checks", len(plan.Checks), "duration", time.Since(fetchStart).Round(time.Millisecond))
	return snapPath, "", nil
}

// refuse turns a failed verification into a BackupError naming the
// next-newest backup that passes (each verified by streaming, nothing
// written). Store and disk errors are returned as they are, and so is the
// refusal of a backup being proven (fc.prove: a drill proves one backup,
// it does not look for another).
func refuse(ctx context.Context, opts Options, cands []Candidate, idx int, err error, fc fetchConfig) error {
	var ve *verifyError
	if !errors.As(err, &ve) || ctx.Err() != nil || fc.prove {
		return err
	}
	cands[idx].Status, cands[idx].Detail = "failed verification", err.Error()
	if fallsBack(opts, fc) {
		// verifyCandidates tries the next candidate itself.
		return err
	}
	be := &BackupError{Backup: cands[idx].Name, Err: err}
	for i := idx + 1; i < len(cands); i++ {
		c := &cands[i]
		if c.Planned {
			continue
		}
		prog := opts.Progress(fmt.Sprintf("verify %s", c.Name))
		_, verr := fetchSnapshot(ctx, opts.Store, opts.Layout, c.manifest, c.snapshotVersion(), opts.Identities, nil, prog.Update)
		prog.Done()
		if ctx.Err() != nil {
			return err
		}
		var cve *verifyError
		if verr != nil && !errors.As(verr, &cve) {
			// The store, not the backup: the ones after it are unknown.
			c.Status, c.Detail = "not checked", verr.Error()
			be.NextErr = verr
			break
		}
		if verr != nil {
			c.Status, c.Detail = "failed verification", verr.Error()
			opts.Log.Warn("backup failed verification", "cluster", opts.ClusterID, "backup", c.Name, "err", verr)
			continue
		}
		c.Status = "verified"
		be.Next, be.NextRevision = c.Name, c.Revision
		break
	}
	return be
}

// probeSurvivor finds, without changing anything, the member a survivor
// snapshot would be taken of; it returns it as a planned candidate.
func probeSurvivor(ctx context.Context, opts Options, s *Survivor) (*Candidate, error) {
	if opts.Survivor == nil {
		return nil, errNoSurvivorBackup
	}
	members, _ := probe.List(ctx, opts.Old, opts.ProbeTimeout)
	members = probe.Members(ctx, opts.Old, members, opts.ProbeTimeout)
	cands := opts.Survivor.Candidates(members, probe.Quorum(members))
	if len(cands) == 0 {
		s.Skipped = "no member of the old cluster answered"
		return nil, nil
	}
	m := cands[0]
	s.Member, s.Endpoint, s.Planned = m.Name, m.ClientURL, true
	if m.Status.Header != nil {
		s.Revision = m.Status.Header.Revision
	}
	return &Candidate{Name: "(survivor snapshot, dry run)", Kind: catalog.KindPreRestore,
		Time: opts.Now().UTC(), Revision: s.Revision, Source: m.Name, ServerVersion: m.Status.Version, Status: CheckPlanned, Planned: true}, nil
}

// takeSurvivor commits a pre-restore snapshot of a surviving member
// (Options.Survivor). No member answering is not an error (the cluster is
// gone: restore from the store); any other failure is, since a survivor's
// newer data would be lost.
func takeSurvivor(ctx context.Context, opts Options, log *slog.Logger, s *Survivor) error {
	if opts.Survivor == nil {
		return errNoSurvivorBackup
	}
	rs, from, err := survivorRecipients(ctx, opts)
	if err != nil {
		return err
	}
	if rs.Len() > 0 {
		log.Info("the survivor snapshot is encrypted", "recipients", rs.String(), "from", from)
	}
	prog := opts.Progress("pre-restore snapshot")
	m, err := opts.Survivor.Take(ctx, SurvivorRequest{
		ClusterID: opts.ClusterID, Old: opts.Old,
		Store: opts.Store, Layout: opts.Layout, ProbeTimeout: opts.ProbeTimeout,
		Progress: prog.Update, Log: opts.Log, Now: opts.Now,
		Recipients: rs, RequireEncryption: opts.RequireEncryption,
		OnSource: func(m probe.Member) { s.Member, s.Endpoint = m.Name, m.ClientURL },
	})
	prog.Done()
	var ne *NoSurvivorError
	if err != nil && errors.As(err, &ne) && ctx.Err() == nil {
		s.Member, s.Endpoint = "", ""
		s.Skipped = "no member of the old cluster answered"
		log.Warn("no surviving member answered: restoring from the store", "err", ne.Err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("a member of the old cluster answers but its snapshot could not be committed "+
			"(pass --no-live to restore from the store without it): %w", err)
	}
	s.Member, s.Endpoint, s.Revision, s.Backup = m.Source.Name, m.Source.Endpoint, m.Revision(), m.Name
	log.Info("survivor snapshot committed", "backup", m.Name, "member", m.Source.Name, "revision", m.Revision())
	return nil
}

// survivorRecipients are the recipients of the survivor snapshot, and
// where they come from: Options.Recipients, else those of the cluster's
// newest committed encrypted backup. With recipients, Identities must hold
// one of theirs (restore reads the survivor back); without any,
// RequireEncryption refuses. Both are checked before anything is written.
func survivorRecipients(ctx context.Context, opts Options) (seal.Recipients, string, error) {
	rs, from := opts.Recipients, "--encrypt-to / --recipients-file"
	if rs.Len() == 0 {
		listed, err := catalog.ListBackups(ctx, opts.Store, opts.Layout, opts.ClusterID)
		if err != nil {
			return rs, "", fmt.Errorf("listing the backups for the recipients of the survivor snapshot: %w", err)
		}
		for _, l := range listed { // newest first
			if l.Manifest == nil || !l.Manifest.Encryption.Encrypted() {
				continue
			}
			if rs, err = seal.ParseRecipients(l.Manifest.Encryption.Recipients); err != nil {
				return rs, "", fmt.Errorf("recipients of backup %s: %w", l.Name, err)
			}
			from = "the newest encrypted backup, " + l.Name
			break
		}
	}
	if err := seal.CheckRequired(rs, opts.RequireEncryption); err != nil {
		return rs, "", fmt.Errorf("the survivor snapshot would be written in plaintext: %w (give --encrypt-to or --recipients-file)", err)
	}
	if rs.Len() == 0 {
		return rs, "", nil
	}
	for _, have := range opts.Identities.Recipients() {
		if slices.Contains(rs.Strings(), have) {
			return rs, from, nil
		}
	}
	return rs, "", fmt.Errorf("%w: the survivor snapshot is encrypted to %s (%s) and restore reads it back, but --identity-file holds none of their identities; "+
		"give the identity, or --no-live to restore from the store without a survivor snapshot", seal.ErrNoIdentity, rs.String(), from)
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

func newToken(clusterID string, now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-restore-%s-%s", clusterID, now.UTC().Format("20060102T150405Z"), hex.EncodeToString(b[:]))
}

// checkRestoreSpace checks, before the download, that the staged snapshot
// fits where it is staged and, for a restore that writes data dirs, that
// their file systems have room for every member's database and WAL. A
// dry run reports the data dirs' shortfall as a problem (it writes none)
// and fails only when its own staged copy would not fit.
func checkRestoreSpace(opts Options, plan *Plan, chosen Candidate, dir string) error {
	raw := chosen.RawSize
	if raw <= 0 {
		return nil
	}
	stage := SpaceNeed{Bytes: StagedBytes(raw), Hint: HintScratch,
		What: fmt.Sprintf("the staged snapshot of backup %s, uncompressed", chosen.Name)}
	switch {
	case opts.DryRun:
		stage.Path = ScratchRoot(opts.ScratchDir)
	default:
		stage.Path = dir
		if opts.ScratchDir == "" && len(plan.Members) > 0 {
			stage.Hint = "or stage the snapshot elsewhere with --temp-dir"
		}
	}
	var dirs []SpaceNeed
	for _, m := range plan.Members {
		if m.Problem != "" {
			continue
		}
		dirs = append(dirs, SpaceNeed{Path: m.DataDir, Bytes: memberBytes(raw), Hint: HintDataDirs,
			What: fmt.Sprintf("member %s's data dir, database and 64 MiB WAL", m.Name)})
	}
	if opts.DryRun {
		if err := CheckSpace([]SpaceNeed{stage}); err != nil {
			return err
		}
		if err := CheckSpace(dirs); err != nil {
			plan.Problems = append(plan.Problems, "data dirs: "+err.Error())
		}
		return nil
	}
	return CheckSpace(append(dirs, stage))
}
