// Package backup takes one etcd backup into an object store, and nothing
// else: Run chooses the member to snapshot (a healthy one, preferring a
// follower), streams its snapshot compressed and hashed into the store,
// optionally exports the v2 store (catalog.ExportV2), and writes the manifest last,
// through internal/catalog, so the backup exists only once it is complete.
// With Options.Recipients the snapshot and the v2 export are age-encrypted
// after compression, in the same stream (internal/seal; `.age` keys, the
// recipients in Manifest.Encryption). With Options.Prune the retention
// policy is then applied to the cluster (prune.Prune). The object
// layout, the manifest, listing, retention, prune and delete live in
// internal/catalog.
//
// Run is the whole of it. What follows a backup in the same job (its
// restore drill) is the composer's (backup/drilled): Take stops at the
// committed backup, keeping, with Options.KeepPlaintext, the plaintext an
// encrypted backup streamed (Taken.Plaintext), and Taken.Prune applies the
// retention policy after whatever the composer ran. This package never
// calls a drill.
package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/ctxerr"
	"github.com/armada/etcd-recovery/internal/escrow"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/probe"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
	"github.com/armada/etcd-recovery/internal/version"
)

// Options configure one backup run of one cluster.
type Options struct {
	ClusterID   string
	Kind        catalog.Kind
	V2          V2Mode
	Compression objectio.Compression
	Etcd        etcdconn.Config
	Store       store.Store
	Layout      catalog.Layout

	// ProbeTimeout bounds each member probe. Default 5s.
	ProbeTimeout time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// Progress is called with the raw bytes streamed so far.
	Progress func(int64)
	// ProgressTotal, when set, is called before a member's snapshot
	// streams with the size it will have: the member's status dbSize
	// (the snapshot is the database file), for a percentage and a time
	// left.
	ProgressTotal func(int64)
	// OnSource is called when a snapshot stream from a member starts.
	OnSource func(probe.Member)
	Log      *slog.Logger

	// Prune, when set, applies this retention policy to the cluster once
	// the backup is committed (never after a failed backup).
	Prune *retention.Policy
	// JournalRetention is the journal retention Prune applies
	// (prune.PruneOptions.JournalRetention); default
	// retention.DefaultJournalRetention.
	JournalRetention time.Duration
	// ClockTolerance is the prune's (prune.PruneOptions.ClockTolerance):
	// when positive, Prune first compares Now with the store's own time
	// and refuses, deleting nothing, when they differ by more. 0: not
	// checked. The CLI sets prune.DefaultClockTolerance.
	ClockTolerance time.Duration

	// KeepPlaintext keeps, for an encrypted backup, a plaintext copy of
	// the snapshot this run streams (database and etcd's trailer, as
	// etcdutl expects it), for a restore drill that follows the backup
	// (backup/drilled) and needs no identity: Taken.Plaintext checks it
	// against the manifest's raw sha256 and returns its path, a private
	// 0600 file under ScratchDir, which the drill may take over (drill.Run
	// renames it into its data dir rather than copying it). Whatever is
	// left of it is removed by Taken.Release, and on every failed return
	// of Take. Without encryption nothing is kept (the drill reads the
	// store).
	KeepPlaintext bool

	// Recipients, when not empty, encrypt the backup's data objects (age,
	// after compression, in the same stream; keys end in seal.Suffix).
	// The manifest stays plaintext and records the recipients' public
	// keys (Manifest.Encryption).
	Recipients seal.Recipients
	// RequireEncryption refuses a run without Recipients (a usage error):
	// a misconfigured job fails instead of writing plaintext.
	RequireEncryption bool
	// ScratchDir is the parent of the private directory holding the
	// plaintext copy of an encrypted backup (KeepPlaintext; default
	// os.TempDir(), i.e. $TMPDIR). Nothing is written there without
	// KeepPlaintext or without encryption.
	ScratchDir string
	// CheckScratch, when set, is asked before the snapshot streams
	// whether the scratch space holds the plaintext copy and the drill of
	// an encrypted backup of a database of dbSize bytes (the source
	// member's status dbSize); the CLI wires restore.CheckDrillScratch
	// into it (it honours ETCD_RECOVERY_SCRATCH_LIMIT). When it refuses,
	// no plaintext is written, the backup is still taken, and
	// Taken.Plaintext returns the refusal, naming the database size and
	// the limit (the drill then does not run).
	CheckScratch func(dbSize int64) error

	// Lock locks every object of the backup with object lock (LockPolicy;
	// the zero value: off): governance or compliance with the retain-until
	// time retention.LockPlan derives from the retention policy (Prune, or
	// retention.DefaultPolicy), or bucket-default. A bucket without object
	// lock is refused (a usage error) before anything is written. After
	// the run, committed or not, the cluster's newest committed backup is
	// re-locked to at least retention.RelockUntil (explicit modes).
	Lock retention.LockPolicy
	// LockRetention is the retention policy the lock is derived from when
	// Prune is nil (default retention.DefaultPolicy).
	LockRetention *retention.Policy

	// Escrow, when set, captures the cluster's escrow (what a restore
	// needs besides the data: kube.Client.CaptureEscrow) after the data
	// objects are stored and before the manifest: the versions are
	// filled in, the server certificate each member serves is compared
	// with the escrowed one (a TLS handshake per member, bounded by
	// ProbeTimeout), and it is stored sealed to EscrowRecipients (else
	// Recipients), create-only, with the backup's lock, and named by the
	// manifest (Manifest.Escrow). It never fails the backup: a failure
	// is the escrow's state (missing, mismatch) with its problems.
	// Without any recipient nothing is stored (state none). Nil: see
	// NoEscrow.
	Escrow EscrowCapture
	// NoEscrow, when Escrow is nil, is why there is no capture: the
	// manifest records the escrow missing with it as the problem (none,
	// without a recipient). Both empty: no escrow step (Manifest.Escrow
	// nil).
	NoEscrow string
	// EscrowRecipients, when not empty, seal the escrow instead of
	// Recipients (the break-glass recipients, --escrow-recipient).
	EscrowRecipients seal.Recipients

	// putOpts are the write options of every object of the run (the
	// retention), set once the lock is checked.
	putOpts objectio.PutOptions

	// chunkHook, when set, sees (and may change) each snapshot chunk as it
	// arrives, before it is hashed: tests inject a damaged stream with it
	// (export_test.go).
	chunkHook func([]byte)
}

// Result is a committed backup.
type Result struct {
	Manifest *catalog.Manifest
	Prefix   string // the backup's folder
	Duration time.Duration
	// Pruned is the prune that followed the backup (Options.Prune).
	Pruned *prune.PruneReport
}

// Step names, used in errors so an SRE sees where a backup failed.
const (
	StepValidate = "validate"
	StepStore    = "check object store"
	StepMembers  = "find a member"
	StepSnapshot = "stream snapshot"
	StepUpload   = "upload snapshot"
	StepV2       = "export v2 keys"
	StepObjects  = "check stored objects"
	StepManifest = "write manifest"
	StepLock     = "check object lock"
	StepPrune    = "prune"
	// StepDrill is the restore drill a composer runs after the commit
	// (backup/drilled): its failure is reported as a committed backup's,
	// as a prune's is.
	StepDrill = "drill"
)

// Error is a failed backup: the cluster, the step and the cause.
type Error struct {
	ClusterID string
	At        string // the step that failed (Step)
	Err       error
}

// Step is the step that failed (one of the Step* constants).
func (e *Error) Step() string { return e.At }

func (e *Error) Error() string {
	if e.Step() == StepPrune || e.Step() == StepDrill {
		// The backup exists; only retention or its drill failed. Say so first.
		return fmt.Sprintf("backup of cluster %s committed, but step %q failed: %v", e.ClusterID, e.Step(), e.Err)
	}
	return fmt.Sprintf("backup of cluster %s failed at step %q: %v", e.ClusterID, e.Step(), e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Validate checks the options' values before anything is contacted; its
// errors are usage errors (internal/usage: the CLI exits 4). Zero values
// that have a default are accepted.
func (o Options) Validate() error {
	if err := catalog.ValidateClusterID(o.ClusterID); err != nil {
		return usage.Wrap(err)
	}
	if err := o.ValidateTemplate(); err != nil {
		return err
	}
	if err := o.Etcd.Validate(); err != nil {
		return usage.Wrap(err)
	}
	return nil
}

// ValidateTemplate is Validate without the per-cluster fields (ClusterID,
// Etcd): the template of a fleet backup (fleet.BackupAll).
func (o Options) ValidateTemplate() error {
	// Library callers (the fleet backup, tests) get the CLI's check: a
	// prefix that writes keys the store cannot list back is refused.
	if _, err := catalog.ValidatePrefix(o.Layout.Prefix); err != nil {
		return usage.Wrap(err)
	}
	if o.Kind != "" {
		if _, err := catalog.ParseKind(string(o.Kind)); err != nil {
			return usage.Wrap(err)
		}
	}
	if o.V2 != "" {
		if _, err := ParseV2Mode(string(o.V2)); err != nil {
			return usage.Wrap(err)
		}
	}
	if o.Compression != "" {
		if _, err := objectio.ParseCompression(string(o.Compression)); err != nil {
			return usage.Wrap(err)
		}
	}
	if err := o.Lock.Validate(); err != nil {
		return usage.Errorf("--lock-mode: %w", err)
	}
	if err := seal.CheckRequired(o.Recipients, o.RequireEncryption); err != nil {
		return usage.Errorf("--require-encryption is set but no recipient is configured (--encrypt-to, --recipients-file, %s, %s): %w",
			seal.EnvEncryptTo, seal.EnvRecipientsFile, err)
	}
	return nil
}

func (o *Options) defaults() error {
	if err := o.Validate(); err != nil {
		return err
	}
	o.Layout.Prefix, _ = catalog.ValidatePrefix(o.Layout.Prefix)
	if o.Kind == "" {
		o.Kind = catalog.KindManual
	}
	if o.V2 == "" {
		o.V2 = V2Auto
	}
	if o.Compression == "" {
		o.Compression = objectio.CompressZstd
	}
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
	return nil
}

// Run takes one backup: it picks a member, streams its snapshot into the
// store, exports the v2 keys, and writes the manifest last; with
// Options.Prune it then applies the retention policy (Take, then
// Taken.Prune). On failure it leaves nothing that looks like a backup: the
// multipart upload is aborted, objects already written are removed, and
// no manifest exists. With Options.Recipients the snapshot and the v2
// export are encrypted (age) in the same stream, after compression; the
// manifest stays plaintext.
func Run(ctx context.Context, opts Options) (*Result, error) {
	t, err := Take(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer t.Release()
	return t.Prune(ctx)
}

// Taken is a committed backup whose run is not over: what follows the
// commit (a drill, the prune) is still to come. Release it when done.
type Taken struct {
	r   *run
	res *Result
}

// Take is Run up to the committed backup (the newest backup re-locked):
// nothing is pruned and, with Options.KeepPlaintext, the plaintext copy
// of an encrypted backup is kept for Taken.Plaintext. Its error is Run's;
// on error nothing is kept.
func Take(ctx context.Context, opts Options) (*Taken, error) {
	if err := opts.defaults(); err != nil {
		return nil, &Error{ClusterID: opts.ClusterID, At: StepValidate, Err: err}
	}
	r := &run{opts: opts, log: opts.Log.With("cluster", opts.ClusterID), start: opts.Now().UTC()}
	// The plaintext copy of an encrypted backup is removed on every way
	// out but a committed backup (a panic included): only a Taken holds
	// it, until Release.
	committed := false
	defer func() {
		if !committed {
			r.removePlain()
		}
	}()
	if err := r.take(ctx); err != nil {
		r.cleanup(ctx)
		if err.step != StepLock {
			r.relock(ctx)
		}
		return nil, &Error{ClusterID: opts.ClusterID, At: err.step, Err: ctxerr.Wrap(ctx, err.err)}
	}
	r.relock(ctx)
	m := r.m
	committed = true
	return &Taken{r: r, res: &Result{Manifest: m, Prefix: opts.Layout.BackupPrefix(opts.ClusterID, r.name), Duration: m.FinishedAt.Sub(r.start)}}, nil
}

// Result is the committed backup (Pruned once Prune ran).
func (t *Taken) Result() *Result { return t.res }

// Plaintext is the path of the plaintext copy of an encrypted backup's
// snapshot (Options.KeepPlaintext), checked against the manifest first;
// "" for an unencrypted backup, which a drill reads from the store. Its
// error says why there is no copy (none was asked for, no room in the
// scratch space, a write failed, it differs from the manifest).
func (t *Taken) Plaintext() (string, error) {
	if !t.r.m.Encrypted() {
		return "", nil
	}
	path, err := t.r.plain.verify(t.r.m)
	if err != nil {
		return "", fmt.Errorf("the plaintext copy for the drill (encrypted backup, no identity needed): %w", err)
	}
	return path, nil
}

// Release removes what is left of the plaintext copy (idempotent).
func (t *Taken) Release() { t.r.removePlain() }

// Prune applies the retention policy to the cluster (Options.Prune; a
// no-op without it): only a committed backup is followed by deletions.
// Its failure is an *Error at StepPrune saying the backup was committed.
func (t *Taken) Prune(ctx context.Context) (*Result, error) {
	opts, res := t.r.opts, t.res
	if opts.Prune == nil {
		return res, nil
	}
	rep, err := prune.Prune(ctx, prune.PruneOptions{Store: opts.Store, Layout: opts.Layout, ClusterIDs: []string{opts.ClusterID},
		Policy: *opts.Prune, Now: opts.Now(), Log: opts.Log, Lock: opts.Lock, JournalRetention: opts.JournalRetention,
		ClockTolerance: opts.ClockTolerance})
	res.Pruned = rep
	if err != nil {
		return res, &Error{ClusterID: opts.ClusterID, At: StepPrune,
			Err: fmt.Errorf("the backup itself was committed (%s); pruning older backups failed: %w", t.r.name, err)}
	}
	return res, nil
}

// policy is the retention policy the lock is derived from.
func (o Options) policy() retention.Policy {
	if o.Prune != nil {
		return *o.Prune
	}
	if o.LockRetention != nil {
		return *o.LockRetention
	}
	return retention.DefaultPolicy()
}

// checkLock checks the bucket's object lock and decides the run's
// retention, before anything is written.
func (r *run) checkLock(ctx context.Context) *stepError {
	opts := r.opts
	lp := opts.Lock.WithDefaults()
	if !lp.Enabled() {
		return nil
	}
	info, err := catalog.LockConfigOf(ctx, opts.Store)
	if err != nil {
		return failAt(StepLock, err)
	}
	bucket := catalog.BucketName(opts.Store)
	if !info.Enabled {
		return failAt(StepLock, usage.Errorf("--lock-mode %s: %s has no object lock (create it with object lock enabled, or drop --lock-mode)", lp.Mode, bucket))
	}
	if lp.Mode == catalog.LockBucketDefault {
		if info.DefaultMode == "" || info.DefaultPeriod <= 0 {
			return failAt(StepLock, usage.Errorf("--lock-mode %s: %s has object lock but no default retention", lp.Mode, bucket))
		}
		r.m.Lock = &catalog.ManifestLock{Mode: lp.Mode, Until: r.start.Add(info.DefaultPeriod)}
		r.log.Info("backup locked by the bucket's default retention", "mode", info.DefaultMode, "until", r.m.Lock.Until)
		return nil
	}
	entries, err := catalog.Inventory(ctx, opts.Store, opts.Layout, opts.ClusterID)
	if err != nil {
		return failAt(StepLock, fmt.Errorf("listing the cluster's backups for the lock period: %w", err))
	}
	term := retention.LockPlan(opts.Kind, r.start, retention.AnchorCandidate(entries, r.start), opts.policy(), lp)
	if !term.Locked() {
		r.log.Info("backup not locked: retention may delete it at once", "reason", term.Reason)
		return nil
	}
	r.opts.putOpts.Retention = &store.Retention{Mode: lp.Mode.StoreMode(), Until: term.Until}
	r.m.Lock = &catalog.ManifestLock{Mode: lp.Mode, Until: term.Until}
	r.log.Info("backup locked", "mode", lp.Mode, "until", term.Until, "rule", term.Rule, "reason", term.Reason)
	return nil
}

// relock extends the lock of the cluster's newest committed backup to at
// least retention.RelockUntil at the run's start (explicit lock modes only:
// bucket-default has no permission to set a retention). Best effort: a
// failure is logged.
func (r *run) relock(ctx context.Context) {
	lp := r.opts.Lock.WithDefaults()
	if !lp.Mode.Explicit() || ctx.Err() != nil {
		return
	}
	until := retention.RelockUntil(r.start, r.opts.policy(), lp)
	entries, err := catalog.Inventory(ctx, r.opts.Store, r.opts.Layout, r.opts.ClusterID)
	var n int
	if err == nil {
		newest, ok := catalog.NewestCommitted(entries)
		if !ok {
			return
		}
		n, err = prune.Relock(ctx, r.opts.Store, newest, lp.Mode.StoreMode(), until)
		if n > 0 {
			r.log.Info("re-locked the newest backup", "backup", newest.Name, "until", until, "objects", n)
		}
		if err == nil {
			err = r.relockEscrow(ctx, newest.Name, store.Retention{Mode: lp.Mode.StoreMode(), Until: until})
		}
	}
	if err != nil {
		r.log.Warn("could not re-lock the cluster's newest backup", "until", until, "err", err)
	}
}

// run is one backup in progress.
type run struct {
	opts  Options
	log   *slog.Logger
	start time.Time
	name  string
	m     *catalog.Manifest
	// written are the objects stored so far, removed when the run fails.
	written []string
	// plain is the plaintext copy of an encrypted backup (KeepPlaintext).
	plain *plainCopy
	// probed are the members as probed (the escrow's versions and served
	// certificates).
	probed []probe.Member
}

// stepError is a failure at one of Run's steps.
type stepError struct {
	step string
	err  error
}

// relockEscrow extends the lock of the escrow the newest backup names to
// the backup's new lock: an escrow lives as long as any backup that names
// it (it is deleted with the last one).
func (r *run) relockEscrow(ctx context.Context, name string, ret store.Retention) error {
	m := r.m
	if m == nil || m.Name != name {
		var err error
		if m, err = catalog.LoadManifest(ctx, r.opts.Store, r.opts.Layout, r.opts.ClusterID, name); err != nil {
			return err
		}
	}
	if !m.Escrow.Stored() {
		return nil
	}
	return escrow.Extend(ctx, r.opts.Store, r.opts.Layout.EscrowKey(r.opts.ClusterID, m.Escrow.Address), &ret)
}

func failAt(step string, err error) *stepError { return &stepError{step, err} }

// cleanup removes the objects of a failed run.
func (r *run) cleanup(ctx context.Context) {
	if len(r.written) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := r.opts.Store.Delete(cctx, r.written); err != nil {
		r.log.Error("could not remove the objects of the failed backup; they have no manifest and prune removes them after 24h",
			"backup", r.name, "err", err)
	}
}

// take runs the steps up to the committed manifest.
func (r *run) take(ctx context.Context) *stepError {
	opts := r.opts
	if c, ok := opts.Store.(store.Checker); ok {
		if err := c.Check(ctx); err != nil {
			return failAt(StepStore, err)
		}
	}
	cands, quorum, serr := r.members(ctx)
	if serr != nil {
		return serr
	}
	// A fresh name per run: two runs started in the same millisecond, in
	// one process or many, never share a folder. Every object is written
	// with a conditional create where the store has one, so even a
	// colliding name could not replace another backup's object.
	r.name = catalog.NewBackupName(r.start, opts.Kind)
	r.m = &catalog.Manifest{
		Format:      catalog.ManifestFormat,
		ClusterID:   opts.ClusterID,
		Name:        r.name,
		Kind:        opts.Kind,
		StartedAt:   r.start,
		ToolVersion: version.Version,
		Encryption:  seal.NewInfo(opts.Recipients),
	}
	if err := r.checkLock(ctx); err != nil {
		return err
	}
	if err := r.startFolder(ctx); err != nil {
		return err
	}
	src, err := r.snapshot(ctx, cands, quorum)
	if err != nil {
		return err
	}
	hc, herr := opts.Etcd.HTTPClient()
	if herr != nil {
		return failAt(StepSnapshot, herr)
	}
	r.versions(ctx, hc, src)
	if err := r.exportV2(ctx, hc, src); err != nil {
		return err
	}
	r.escrow(ctx, r.probed)
	return r.commit(ctx)
}

// anyAnsweredWithoutStatus: some member served a read while its Status
// call failed.
func anyAnsweredWithoutStatus(members []probe.Member) bool {
	for _, m := range members {
		if m.Answered() && !m.Alive() && !m.Learner() {
			return true
		}
	}
	return false
}

// members lists and probes the members and orders the snapshot
// candidates.
func (r *run) members(ctx context.Context) ([]probe.Member, bool, *stepError) {
	opts := r.opts
	members, listErr := probe.List(ctx, opts.Etcd, opts.ProbeTimeout)
	if listErr != nil {
		r.log.Warn("no endpoint returned the member list; probing the endpoints as given", "err", listErr)
	}
	members = probe.Members(ctx, opts.Etcd, members, opts.ProbeTimeout)
	r.probed = members
	quorum := probe.Quorum(members)
	cands := SnapshotCandidates(members, quorum)
	if len(cands) == 0 && anyAnsweredWithoutStatus(members) {
		// A member that serves reads but whose Status call failed (a
		// slow moment on a loaded member) is alive: probe once more
		// rather than fail a backup a second read would have saved.
		r.log.Warn("a member served reads but not its Status call; probing again")
		members = probe.Members(ctx, opts.Etcd, members, opts.ProbeTimeout)
		r.probed = members
		quorum = probe.Quorum(members)
		cands = SnapshotCandidates(members, quorum)
	}
	if len(cands) == 0 {
		var errs []error
		for _, m := range members {
			cause := m.Err()
			if cause == nil {
				cause = fmt.Errorf("served reads, but its Status call failed: %v", m.StatusErr)
			}
			errs = append(errs, fmt.Errorf("%s: %w", etcdconn.Host(m.ClientURL), cause))
		}
		return nil, false, failAt(StepMembers, fmt.Errorf("no member answered: %w", errors.Join(errs...)))
	}
	if !quorum {
		r.log.Warn("cluster has no quorum; backing up a surviving member", "member", cands[0].Name)
	}
	return cands, quorum, nil
}

// startFolder writes the folder's first object: from now on prune sees the
// folder (as incomplete, kept while young) and lists uploads under its
// exact keys, which finds an upload leaked by a run killed mid-stream.
func (r *run) startFolder(ctx context.Context) *stepError {
	key := r.opts.Layout.Key(r.opts.ClusterID, r.name, catalog.StartedObject)
	marker := fmt.Sprintf("{\"startedAt\":%q,\"toolVersion\":%q}\n", r.start.Format(time.RFC3339Nano), version.Version)
	if _, err := putObject(ctx, r.opts, key, strings.NewReader(marker)); err != nil {
		return failAt(StepStore, err)
	}
	r.written = append(r.written, key)
	return nil
}

// snapshot streams the best candidate's snapshot into the store; if its
// stream breaks (the member died mid-stream), the next one's. A store
// failure is not retried on another member: the store is the problem.
func (r *run) snapshot(ctx context.Context, cands []probe.Member, quorum bool) (probe.Member, *stepError) {
	opts, m := r.opts, r.m
	obj := catalog.SnapshotObject(opts.Compression, m.Encrypted())
	key := opts.Layout.Key(opts.ClusterID, r.name, obj)
	if m.Encrypted() && opts.KeepPlaintext {
		// The drill after an encrypted backup runs on the plaintext this
		// stream carries, so the backup job never needs an identity.
		// Room for it (and for the drill) is checked before anything
		// streams: a refusal keeps the backup and skips the drill.
		var p *plainCopy
		err := r.checkScratch(cands[0])
		if err == nil {
			p, err = newPlainCopy(opts.ScratchDir)
		}
		if err != nil {
			r.log.Warn("no scratch space for the drill's plaintext copy; the drill will not run", "err", err)
			r.plain = &plainCopy{err: err}
		} else {
			r.plain = p
		}
	}
	for i, cand := range cands {
		r.log.Info("streaming snapshot", "member", cand.Name, "endpoint", cand.ClientURL, "leader", cand.IsLeader(), "quorum", quorum,
			"encrypted", m.Encrypted())
		if opts.OnSource != nil {
			opts.OnSource(cand)
		}
		r.plain.reset()
		res, revBefore, revAfter, step, err := snapshotMember(ctx, opts, cand, key, r.plain)
		if err == nil {
			m.RevisionBefore, m.RevisionAfter = revBefore, revAfter
			r.written = append(r.written, key)
			m.Source = catalog.Member{Name: cand.Name, ID: cand.IDHex(), Endpoint: cand.ClientURL}
			m.Snapshot = catalog.SnapshotInfo{
				Object: obj, Compression: opts.Compression,
				RawSize: res.RawSize, RawSHA256: res.RawSHA256,
				StoredSize: res.StoredSize, StoredSHA256: res.StoredSHA256,
			}
			r.log.Info("snapshot stored", "key", key, "raw_bytes", res.RawSize, "stored_bytes", res.StoredSize,
				"revision", m.RevisionBefore, "member", cand.Name)
			return cand, nil
		}
		err = fmt.Errorf("member %s (%s): %w", cand.Name, etcdconn.Host(cand.ClientURL), err)
		// A stalled or refusing store is the store's failure, whatever the
		// stream saw meanwhile: another member would meet the same store.
		if step != StepSnapshot || errors.Is(err, store.ErrStalled) || errors.Is(err, store.ErrExists) || ctx.Err() != nil || i == len(cands)-1 {
			return probe.Member{}, failAt(step, err)
		}
		r.log.Warn("snapshot stream failed; trying the next member", "member", cand.Name, "err", err)
	}
	return probe.Member{}, failAt(StepSnapshot, errors.New("no snapshot candidate"))
}

// StepScratch is the check, before the snapshot streams, that the scratch
// space holds the plaintext copy and the drill of an encrypted backup.
const StepScratch = "check free space"

// checkScratch asks Options.CheckScratch about the drill of a database of
// the size the first candidate reports.
func (r *run) checkScratch(src probe.Member) error {
	if r.opts.CheckScratch == nil || src.Status == nil || src.Status.DbSize <= 0 {
		return nil
	}
	if err := r.opts.CheckScratch(src.Status.DbSize); err != nil {
		err = fmt.Errorf("step %q, before the snapshot streamed: member %s reports a database of %d bytes (status dbSize): %w; "+
			"the backup is taken without the drill's plaintext copy",
			StepScratch, src.Name, src.Status.DbSize, err)
		r.log.Error("no room in the scratch space for the drill of this encrypted backup; the drill will not run", "err", err)
		return err
	}
	return nil
}

// versions records the source's server and cluster versions.
func (r *run) versions(ctx context.Context, hc *http.Client, src probe.Member) {
	vctx, cancel := context.WithTimeout(ctx, r.opts.ProbeTimeout)
	defer cancel()
	var err error
	r.m.ServerVersion, r.m.ClusterVersion, err = probe.Versions(vctx, hc, src.ClientURL)
	if err != nil {
		r.log.Warn("could not read /version; taking the server version from status", "err", err)
		r.m.ServerVersion = src.Status.Version
	}
}

// exportV2 stores the v2 keyspace (unless --v2 off, or not served with
// --v2 auto).
func (r *run) exportV2(ctx context.Context, hc *http.Client, src probe.Member) *stepError {
	opts, m := r.opts, r.m
	if opts.V2 == V2Off {
		m.V2Skipped = "--v2 off"
		return nil
	}
	info, err := exportV2(ctx, opts, hc, src.ClientURL, r.name)
	switch {
	case errors.Is(err, ErrV2Unavailable) && opts.V2 == V2Auto:
		m.V2Skipped = ErrV2Unavailable.Error()
		r.log.Info("skipping v2 export: the member does not serve the v2 API", "member", src.Name, "version", m.ServerVersion)
		return nil
	case err != nil:
		if info != nil {
			r.written = append(r.written, opts.Layout.Key(opts.ClusterID, r.name, info.Object))
		}
		return failAt(StepV2, err)
	}
	r.written = append(r.written, opts.Layout.Key(opts.ClusterID, r.name, info.Object))
	m.V2 = info
	r.log.Info("v2 keys stored", "keys", info.Keys, "dirs", info.Dirs)
	return nil
}

// commit writes the manifest, last, once every object it names is stored,
// reads it back and checks the objects once more.
func (r *run) commit(ctx context.Context) *stepError {
	opts, m := r.opts, r.m
	// A manifest is never written for objects that are not there: each
	// object it names must be stored with the size recorded (a prune or a
	// lifecycle rule may have removed it while the backup ran).
	if err := checkStored(ctx, opts, r.name, m); err != nil {
		return failAt(StepObjects, err)
	}
	m.FinishedAt = opts.Now().UTC()
	body, err := catalog.MarshalManifest(m)
	if err != nil {
		return failAt(StepManifest, err)
	}
	mkey := opts.Layout.Key(opts.ClusterID, r.name, catalog.ManifestObject)
	if _, err := putObject(ctx, opts, mkey, bytes.NewReader(body)); err != nil {
		if errors.Is(err, store.ErrExists) {
			r.written = nil // another writer's: touch nothing
		}
		return failAt(StepManifest, err)
	}
	// Read the manifest back: the backup reports success only if the
	// store now holds exactly what was written.
	if err := readBack(ctx, opts.Store, mkey, body); err != nil {
		if errors.Is(err, errManifestReplaced) {
			r.written = nil
		} else {
			// Unreadable: the backup cannot be shown to restore. Its
			// objects are this run's (the name is unique): remove them,
			// manifest first.
			r.written = append([]string{mkey}, r.written...)
		}
		return failAt(StepManifest, err)
	}
	// And check the objects once more: a prune that saw the folder without
	// a manifest may have deleted an object between the first check and
	// the manifest's write. After this check the backup is committed, and
	// prune treats it as one.
	if err := checkStored(ctx, opts, r.name, m); err != nil {
		r.written = append([]string{mkey}, r.written...)
		return failAt(StepObjects, err)
	}
	r.log.Info("backup committed", "backup", r.name, "manifest", mkey, "encrypted", m.Encrypted(),
		"duration", m.FinishedAt.Sub(r.start).Round(time.Millisecond))
	return nil
}

func (r *run) removePlain() {
	if err := r.plain.remove(); err != nil {
		r.log.Error("could not remove the drill's plaintext copy", "dir", r.plain.dir(), "err", err)
	}
}

// snapshotMember streams one member's snapshot into key. The returned step
// says whether the source or the store failed.
func snapshotMember(ctx context.Context, opts Options, cand probe.Member, key string, plain *plainCopy) (res streamResult, revBefore, revAfter int64, step string, err error) {
	cli, err := opts.Etcd.Client(ctx, cand.ClientURL)
	if err != nil {
		return res, 0, 0, StepSnapshot, err
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, opts.ProbeTimeout)
	st, err := cli.Status(sctx, cand.ClientURL)
	cancel()
	if err != nil {
		return res, 0, 0, StepSnapshot, fmt.Errorf("status before snapshot: %w", err)
	}
	revBefore = st.Header.Revision
	if opts.ProgressTotal != nil && st.DbSize > 0 {
		// The stream is the database file and etcd's sha256 of it.
		opts.ProgressTotal(st.DbSize + sha256.Size)
	}

	// The stream is cancelled with the upload: if the store fails, etcd
	// stops sending.
	streamCtx, cancelStream := context.WithCancel(ctx)
	defer cancelStream()
	stream, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Snapshot(streamCtx, &pb.SnapshotRequest{}, etcdinternals.SnapshotCallOptions()...)
	if err != nil {
		return res, 0, 0, StepSnapshot, fmt.Errorf("open snapshot stream: %w", err)
	}
	raw := objectio.NewSnapshotHasher()
	chunks := receive(func() (etcdinternals.SnapshotChunk, error) {
		c, err := etcdinternals.RecvSnapshotChunk(stream)
		if err == nil && opts.chunkHook != nil {
			opts.chunkHook(c.Blob)
		}
		return c, err
	}, raw, opts.Progress)

	pr, pw := io.Pipe()
	type out struct {
		res streamResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		r, err := compressStream(chunks, raw, pw, opts.Compression, opts.Recipients, plain)
		done <- out{r, err}
	}()
	_, putErr := putObject(streamCtx, opts, key, pr)
	if putErr != nil {
		cancelStream()
		pr.CloseWithError(putErr)
	}
	o := <-done
	var srcErr *sourceError
	switch {
	case putErr != nil && (errors.Is(putErr, store.ErrStalled) || errors.Is(putErr, store.ErrExists)):
		// The store stalled (or refused the key): whatever the stream saw
		// since is a consequence, not a member failure.
		return res, 0, 0, StepUpload, putErr
	case errors.As(o.err, &srcErr):
		return res, 0, 0, StepSnapshot, fmt.Errorf("snapshot stream broke after %d bytes: %w", raw.Size(), srcErr.err)
	case o.err != nil && putErr == nil:
		// A checksum mismatch or compression failure; the upload saw the
		// error through the pipe, so putErr is normally set too.
		return res, 0, 0, StepSnapshot, o.err
	case o.err != nil && !errors.Is(o.err, putErr) && !errors.Is(o.err, io.ErrClosedPipe):
		return res, 0, 0, StepSnapshot, fmt.Errorf("%w (upload: %v)", o.err, putErr)
	case putErr != nil:
		return res, 0, 0, StepUpload, putErr
	}
	sctx, cancel = context.WithTimeout(ctx, opts.ProbeTimeout)
	st, err = cli.Status(sctx, cand.ClientURL)
	cancel()
	if err != nil {
		// The snapshot is complete and verified; the member died after.
		opts.Log.Warn("status after snapshot failed; recording the revision before", "member", cand.Name, "err", err)
		revAfter = revBefore
	} else {
		revAfter = st.Header.Revision
	}
	return o.res, revBefore, revAfter, "", nil
}

// exportV2 exports the v2 keyspace and stores it through objectio:
// compressed, then encrypted with Recipients.
func exportV2(ctx context.Context, opts Options, hc *http.Client, clientURL, name string) (*catalog.V2Info, error) {
	exp, err := catalog.ExportV2(ctx, hc, clientURL)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(exp)
	if err != nil {
		return nil, err
	}
	obj := catalog.V2Object(opts.Compression, opts.Recipients.Len() > 0)
	w, err := objectio.CreateWith(ctx, opts.Store, opts.Layout.Key(opts.ClusterID, name, obj), bytes.NewReader(raw),
		objectio.Encoding{Compression: opts.Compression, Recipients: opts.Recipients}, opts.putOpts)
	keys, dirs := exp.Counts()
	info := &catalog.V2Info{
		Object: obj, Compression: opts.Compression, Keys: keys, Dirs: dirs, EtcdIndex: exp.EtcdIndex,
		SHA256: w.RawSHA256, StoredSize: w.StoredSize, StoredSHA256: w.StoredSHA256,
	}
	if err != nil {
		return info, err
	}
	return info, nil
}

// putObject writes key with the store's conditional create when it has one
// (objectio.Put), so that a backup never replaces an existing object, with
// the run's retention (objectio.PutWith) when it is locked.
func putObject(ctx context.Context, opts Options, key string, r io.Reader) (int64, error) {
	return objectio.PutWith(ctx, opts.Store, key, r, opts.putOpts)
}

// errObjectVanished and errManifestReplaced fail a backup before or after
// its manifest is written.
var (
	errObjectVanished   = errors.New("object vanished during backup")
	errManifestReplaced = errors.New("the manifest read back differs from the one written: another writer replaced it")
)

// checkStored checks that every object the manifest names is stored with
// the size recorded.
func checkStored(ctx context.Context, opts Options, name string, m *catalog.Manifest) error {
	want := map[string]int64{opts.Layout.Key(opts.ClusterID, name, m.Snapshot.Object): m.Snapshot.StoredSize}
	if m.V2 != nil {
		want[opts.Layout.Key(opts.ClusterID, name, m.V2.Object)] = m.V2.StoredSize
	}
	objs, err := opts.Store.List(ctx, opts.Layout.BackupPrefix(opts.ClusterID, name))
	if err != nil {
		return fmt.Errorf("listing the backup's objects: %w", err)
	}
	got := map[string]int64{}
	for _, o := range objs {
		got[o.Key] = o.Size
	}
	for _, key := range slices.Sorted(maps.Keys(want)) {
		size, ok := got[key]
		switch {
		case !ok:
			return fmt.Errorf("%w: %s is no longer in the store (deleted by a prune or a lifecycle rule?); no manifest written", errObjectVanished, key)
		case size != want[key]:
			return fmt.Errorf("%w: %s is %d bytes in the store, %d were written; no manifest written", errObjectVanished, key, size, want[key])
		}
	}
	return nil
}

// readBack reads key back through objectio and compares it with want.
func readBack(ctx context.Context, st store.Store, key string, want []byte) error {
	err := objectio.ReadBack(ctx, st, key, objectio.ExpectPlain(want))
	var oe *objectio.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &oe):
		return fmt.Errorf("%s: %w", key, errManifestReplaced)
	}
	return fmt.Errorf("reading the manifest back: %w", err)
}
