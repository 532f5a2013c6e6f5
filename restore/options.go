package restore

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
)

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
	// delete marker over them) or overwritten (catalog.VersionedBackups).
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
