package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/probe"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
)

// Options configure a restore.
type Options struct {
	ClusterID string
	Store     store.Store
	Layout    catalog.Layout
	// Site names the store when it is not the primary ("second site",
	// with why it was read: internal/site's Chosen.Describe); it is in
	// the report (Plan.Site), so no reader of the report can take a
	// restore from the second site's copies for one from the primary.
	Site string

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
	// once the data dirs are written (someone else starts its members:
	// the log says when) and verifies it (Result.CheckRebuilt).
	Verify VerifyOptions

	// Progress returns a progress line for a stream (nil: none).
	Progress func(label string) Progress
	Log      *slog.Logger
	Now      func() time.Time

	// Survivor takes the survivor snapshot (survivor.Backup: restore does
	// not import backup). Needed when Old has endpoints and NoLive is not
	// set; without it the restore fails at the survivor step.
	Survivor SurvivorBackup

	// ToRevision (--to-revision), when set, restores the cluster as of
	// exactly that revision (point in time): the chosen backup (at or
	// below it: name one with Backup) is staged and the journal's events
	// after its revision, up to ToRevision, are replayed into it (the
	// Replay stage) before Prepare bumps the revision and marks it
	// compacted, as every restore does. It needs Journal (or
	// JournalInStore). A dry run does not replay.
	ToRevision int64
	// ToTime (--to-time) restores the cluster as of the last revision
	// the journal received at or before it (a JournalClock says which):
	// resolved before the stages run, it is then a ToRevision. Not with
	// ToRevision or ToLatest.
	ToTime time.Time
	// Journal is the journal a point in time replays (JournalSource).
	Journal JournalSource
	// JournalInStore, instead of Journal, reads the journal Store holds
	// for the cluster (journal.Source over Layout.JournalPrefix, listed
	// once): what the CLI gives, since the store is set up after the
	// options are checked.
	JournalInStore bool
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
	if err := o.validatePointInTime(); err != nil {
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

// validatePointInTime checks the point-in-time options: one of ToRevision,
// ToTime and ToLatest, and a journal for it.
func (o Options) validatePointInTime() error {
	if o.ToRevision < 0 {
		return usage.Errorf("--to-revision must be a revision (positive)")
	}
	given := 0
	for _, set := range []bool{o.ToRevision > 0, !o.ToTime.IsZero(), o.ToLatest} {
		if set {
			given++
		}
	}
	if given > 1 {
		return usage.Errorf("--to-latest and --to-revision (or --to-time): give one")
	}
	if given == 1 && o.Journal == nil && !o.JournalInStore {
		return usage.Wrap(errNoJournal)
	}
	return nil
}

// Target is the point in time a restore rebuilds, resolved before the
// stages run (Resolve: --to-time and --to-latest become a revision). The
// zero Target is none: the chosen backup as it is.
type Target struct {
	// Revision is the revision to restore to; 0: no point in time.
	Revision int64
	// Journal holds the events after the chosen backup up to Revision.
	Journal JournalSource
	// AcceptUnproven replays through a window whose journal proof failed
	// (Options.AcceptUnprovenJournal).
	AcceptUnproven bool
	// latest: Revision is what Options.ToLatest resolved to.
	latest bool
}

// source is where a restore reads the backups and how: the cluster, the
// store, the identities that decrypt, and the run's log, progress lines
// and clock.
type source struct {
	clusterID string
	store     store.Store
	layout    catalog.Layout
	ids       *seal.Identities
	// log is Options.Log, without the cluster (the caller's attributes).
	log      *slog.Logger
	progress func(label string) Progress
	now      func() time.Time
}

// survivorConfig is how the survivor snapshot is taken: of a member of
// old, by take, encrypted to recipients.
type survivorConfig struct {
	old               etcdconn.Config
	noLive            bool
	probeTimeout      time.Duration
	take              SurvivorBackup
	recipients        seal.Recipients
	requireEncryption bool
}

// Config is a restore's Options checked once and completed (Resolve): the
// defaults filled in and the point in time resolved. The stages are its
// methods, each reading only its part: Run, SelectSnapshot and package
// drill start from one.
type Config struct {
	src source
	// log is src.log with the cluster.
	log      *slog.Logger
	dryRun   bool
	survivor survivorConfig
	// backup (Options.Backup) and includeDeleted choose the candidates.
	backup         string
	includeDeleted bool
	to             Target
	targets        Targets
	token          string
	force          bool
	scratchDir     string
	bump           uint64
	markCompacted  bool
	publicPath     bool
	parallel       int
	verify         VerifyOptions
}

// ClusterID is the cluster restored.
func (c *Config) ClusterID() string { return c.src.clusterID }

// Target is the point in time resolved (zero: none).
func (c *Config) Target() Target { return c.to }

// Resolve checks opts once (Validate; its errors are usage errors), fills
// in the defaults and resolves the point in time: ToTime to the revision
// the journal received last at or before it, ToLatest to the newest
// revision the journal reaches from the backup the selection would start
// from (Plan.Latest). It returns the Config the stages read and the plan
// they fill in. Its errors are an *Error at StepValidate, StepToTime or
// StepLatest.
func Resolve(ctx context.Context, opts Options) (*Config, *Plan, error) {
	return resolve(ctx, opts, opts.Validate)
}

// resolve is Resolve with the check the caller needs (SelectSnapshot's
// restore writes no data dirs: no targets to check).
func resolve(ctx context.Context, opts Options, validate func() error) (*Config, *Plan, error) {
	plan := &Plan{ClusterID: opts.ClusterID, DryRun: opts.DryRun, Checks: []Check{}, Site: opts.Site}
	fail := func(step string, err error) (*Config, *Plan, error) {
		return nil, plan, stepError(ctx, opts.ClusterID, step, err)
	}
	if err := validate(); err != nil {
		return fail(StepValidate, err)
	}
	if opts.Store == nil {
		return fail(StepValidate, errors.New("no object store"))
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Progress == nil {
		opts.Progress = func(string) Progress { return nopProgress{} }
	}
	c := &Config{
		src: source{clusterID: opts.ClusterID, store: opts.Store, layout: opts.Layout, ids: opts.Identities,
			log: opts.Log, progress: opts.Progress, now: opts.Now},
		log:    opts.Log.With("cluster", opts.ClusterID),
		dryRun: opts.DryRun,
		survivor: survivorConfig{old: opts.Old, noLive: opts.NoLive, probeTimeout: opts.ProbeTimeout, take: opts.Survivor,
			recipients: opts.Recipients, requireEncryption: opts.RequireEncryption},
		backup: opts.Backup, includeDeleted: opts.IncludeDeleted,
		targets: opts.Targets, token: opts.Token, force: opts.Force, scratchDir: opts.ScratchDir,
		bump: opts.BumpRevision, markCompacted: opts.MarkCompacted, publicPath: opts.PublicRestorePath,
		parallel: opts.Parallel, verify: opts.Verify,
	}
	if opts.ToRevision <= 0 && opts.ToTime.IsZero() && !opts.ToLatest {
		return c, plan, nil
	}
	c.to = Target{Revision: opts.ToRevision, Journal: opts.Journal, AcceptUnproven: opts.AcceptUnprovenJournal}
	if c.to.Journal == nil {
		c.to.Journal = journal.NewSource(opts.Store, opts.Layout, opts.ClusterID, opts.Identities).ListOnce()
	}
	switch {
	case !opts.ToTime.IsZero():
		rev, err := revisionAt(ctx, c.to.Journal, opts.ToTime, c.survivor, c.log)
		if err != nil {
			return fail(StepToTime, err)
		}
		c.to.Revision = rev
	case opts.ToLatest:
		rev, err := resolveLatest(ctx, c.src, c.backup, c.survivor, c.to.Journal, plan, c.log)
		if err != nil {
			return fail(StepLatest, err)
		}
		c.to.Revision, c.to.latest = rev, true
	}
	return c, plan, nil
}

// StepToTime is the step that resolves --to-time (Options.ToTime), named
// in its errors.
const StepToTime = "find the revision at --to-time"

// JournalClock is a JournalSource that says which revision it received
// last at or before a time (journal.Source.RevisionAt): what
// Options.ToTime restores to.
type JournalClock interface {
	RevisionAt(ctx context.Context, t time.Time) (int64, error)
}

// JournalPointer is a JournalClock that also says whether the journal
// shows the state at the time (journal.Source.PointAt).
type JournalPointer interface {
	PointAt(ctx context.Context, t time.Time) (journal.Point, error)
}

// revisionAt is the revision Options.ToTime restores to. A time in a gap
// of the journal is refused (journal.TimeGapError). A time after the
// journal's last stored revision is refused unless the old cluster
// answers a linearizable read at or below that revision (idle since):
// otherwise the changes between the two, if any, are in no segment, and
// the restore would be older than the time it names, with exit 0.
func revisionAt(ctx context.Context, j JournalSource, t time.Time, sv survivorConfig, log *slog.Logger) (int64, error) {
	text := t.Format(time.RFC3339Nano)
	var p journal.Point
	var err error
	switch jc := j.(type) {
	case JournalPointer:
		p, err = jc.PointAt(ctx, t)
	case JournalClock:
		p.Revision, err = jc.RevisionAt(ctx, t)
	default:
		return 0, fmt.Errorf("--to-time %s: the journal cannot say which revision it received when", text)
	}
	if err != nil {
		return 0, fmt.Errorf("--to-time %s: %w; restore to a revision before it with --to-revision (journal find lists them)", text, err)
	}
	if p.PastEnd {
		if err := idleSince(ctx, p, sv, text, log); err != nil {
			return 0, err
		}
	}
	log.Info("--to-time: the last revision the journal received at or before it", "time", text, "revision", p.Revision)
	return p.Revision, nil
}

// idleSince accepts a --to-time after the journal's end only when the old
// cluster's revision, read linearizably (a quorum answers), is the
// journal's last, and its etcd cluster ID the one the journal's last
// segment names: nothing changed since. A member's own revision without a
// quorum proves nothing (the lost majority may have committed more); a
// revision below the journal's last is a cluster that went back (a
// restore without a revision bump, a cluster recreated under its name),
// whose state is not the journal's.
func idleSince(ctx context.Context, p journal.Point, sv survivorConfig, text string, log *slog.Logger) error {
	ended := fmt.Sprintf("--to-time %s is after the journal's last stored revision %d, received %s", text, p.LastRev,
		p.LastReceived.UTC().Format(time.RFC3339Nano))
	var live int64
	var liveID string
	if len(sv.old.Endpoints) > 0 && !sv.noLive {
		members, _ := probe.List(ctx, sv.old, sv.probeTimeout)
		for _, m := range probe.Members(ctx, sv.old, members, sv.probeTimeout) {
			if m.Revision > live {
				live, liveID = m.Revision, journal.EtcdID(m.ClusterID)
			}
		}
	}
	switch {
	case live > 0 && p.EtcdClusterID != "" && liveID != p.EtcdClusterID:
		return fmt.Errorf("%s, and the endpoints answer etcd cluster ID %s, not the journal's %s: another cluster, or one recreated since; "+
			"restore to a revision the journal holds with --to-revision (%d at most) or --to-latest", ended, liveID, p.EtcdClusterID, p.LastRev)
	case live == p.LastRev:
		log.Info("--to-time: after the journal's end, and the cluster has not changed since", "time", text, "revision", p.LastRev, "cluster_revision", live)
		return nil
	case live > p.LastRev:
		return fmt.Errorf("%s, and the cluster is at revision %d: revisions %d to %d are in no segment (the journal stopped, lags, or has not stored its newest segment yet), "+
			"so which of them it held then is unknown; run again once the journal reaches --to-time, or restore to a revision the journal holds with --to-revision (%d at most) or --to-latest",
			ended, live, p.LastRev+1, live, p.LastRev)
	case live > 0:
		return fmt.Errorf("%s, and the cluster is at revision %d, below it: its history went back (a restore without a revision bump, a cluster recreated under its name), "+
			"so its state then is not the journal's; restore to a revision the journal holds with --to-revision (%d at most)", ended, live, p.LastRev)
	default:
		return fmt.Errorf("%s, and no quorum of the old cluster answered a read (--endpoints, --no-live): whether it changed after revision %d is unknown, "+
			"and the changes after it, if any, are in no segment; restore the journal's end with --to-latest, or a revision with --to-revision",
			ended, p.LastRev)
	}
}

// The store's journal answers every question a restore asks of one.
var (
	_ JournalClock   = (*journal.Source)(nil)
	_ JournalPointer = (*journal.Source)(nil)
	_ JournalReacher = (*journal.Source)(nil)
	_ JournalPlanner = (*journal.Source)(nil)
)
