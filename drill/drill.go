package drill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/usage"
	"github.com/armada/etcd-recovery/internal/version"
	"github.com/armada/etcd-recovery/restore"
)

// Options configure a restore drill of one backup (see Run).
type Options struct {
	ClusterID string
	Store     store.Store
	Layout    catalog.Layout
	// Backup is the backup to drill; empty: the newest committed one.
	Backup string
	// Source is the cluster the backup was taken of. When it has
	// endpoints, the member the snapshot came from (the manifest's source
	// endpoint, else any member of Source) is asked for HashKV at the
	// snapshot's revision and the restored keyspace must hash the same.
	// Without endpoints, or when the source can no longer answer for that
	// revision, the drill checks self-consistency only and says so.
	Source etcdconn.Config
	// EtcdBinDir holds the etcd servers a drill runs, named etcd-<minor>
	// (etcd-3.5, etcd-3.6). Empty: looked up as etcd-<minor> in $PATH.
	EtcdBinDir string
	// ScratchDir is the parent of the drill's private scratch directory
	// (default os.TempDir(), i.e. $TMPDIR). It needs room for about the
	// database's size twice; checked before anything is downloaded.
	ScratchDir string
	// StartTimeout bounds the wait for the drill's etcd to serve (default
	// 2m plus a second per 4 MiB of database, 256 s per GiB: etcd reads
	// every value at start-up, from a disk the pod shares. Measured for
	// 1.2 GiB in the 1-CPU, 512 MiB CronJob pod: 21 s on an idle node,
	// 87 s on a node busy with other I/O, and more than 3 minutes on a
	// slower one, where the old 1 s per 16 MiB made the drill
	// inconclusive); ProbeTimeout each request to it or to the source
	// (default 10s).
	StartTimeout time.Duration
	// EtcdMemoryLimit is the Go soft memory limit (GOMEMLIMIT, bytes) of
	// the drill's etcd, which runs with GOGC=50 too: etcd 3.5 copies every
	// value it reads (at start-up, and for a keys-only range), and without
	// a limit that garbage piles up to twice its live heap, which
	// OOM-killed a drill of a 1 GiB database of 1 MiB values in the
	// CronJob pod. Default DefaultEtcdMemoryLimit; negative: none.
	// It is a soft limit: an etcd whose index needs more still runs, the
	// GC just works harder.
	EtcdMemoryLimit int64
	ProbeTimeout    time.Duration
	// NoRecord skips writing drill.json (the result is only returned).
	NoRecord bool
	// ToRevision (drill --to-revision) drills a point-in-time restore:
	// the newest backup at or below it (or Backup) is restored with the
	// journal's events after it replayed up to ToRevision (restore's
	// Replay stage), and the restored member is checked and compared
	// with the source's HashKV at ToRevision, when the source still has
	// it. Its record (DrillRecord.ToRevision) is written only when it
	// passed: a journal's failure must not mark the backup failed.
	ToRevision int64
	// Journal is the journal ToRevision replays; nil: the store's
	// (journal.NewSource over Store and Layout).
	Journal restore.JournalSource
	// NoJournalProof: a drill of a stored backup does not prove the
	// journal before it (ProveJournal, see proveJournal).
	NoJournalProof bool
	// IncludeDeleted (--include-deleted) also drills, on a versioned
	// bucket, a backup only object versions hold (deleted or
	// overwritten: restore.Options.IncludeDeleted): the newest backup is
	// chosen among them too. Without it one is chosen only when no live
	// committed backup is left. Such a drill's result is not recorded
	// (drill.json would make the deleted folder reappear, incomplete).
	IncludeDeleted bool
	// Identities (--identity-file) decrypt an encrypted backup. Without
	// one of its recipients' identities the drill fails before anything is
	// downloaded, and nothing is recorded.
	Identities *seal.Identities
	// Plaintext is the path of a local plaintext snapshot of the backup
	// Manifest describes (the database plus etcd's sha256 trailer, as
	// `etcdctl snapshot save` writes it): the drill after a backup drills
	// the plaintext the backup streamed, so the backup job needs no
	// identity. The drill then never downloads: the file's sha256 must
	// equal the manifest's raw sha256 (else the drill fails at "download
	// and verify", recorded like a damaged download). The drill takes the
	// file over: it is staged where it is and renamed into the drill's data
	// dir, so that the database is in scratch once, not twice; the caller
	// removes whatever is left. Manifest must be set with it, and is the
	// committed manifest (Backup, if set, must name it).
	Plaintext string
	Manifest  *catalog.Manifest
	Progress  func(label string) restore.Progress
	Log       *slog.Logger
	Now       func() time.Time

	// onStep, for tests, is called as each step begins.
	onStep func(ctx context.Context, step string)
	// onEtcd, for tests, is called once the drill's etcd is started.
	onEtcd func(pid int, ports []int)
}

// DefaultEtcdMemoryLimit is the drill etcd's default GOMEMLIMIT.
const DefaultEtcdMemoryLimit = 128 << 20

// Steps of a drill, used in errors and in catalog.DrillRecord.Steps.
const (
	StepValidate = "validate"
	StepSelect   = "select backup"
	StepEtcd     = "find etcd"
	StepSpace    = "check free space"
	StepVerify   = "download and verify"
	StepRestore  = "restore"
	StepStart    = "start etcd"
	StepChecks   = "check restored member"
	StepCompare  = "compare with source"
	StepRecord   = "record result"
	StepCleanup  = "clean up"
	// Steps that are timed in the record, inside the ones above.
	StepHashSource   = "hash source"
	StepHashRestored = "hash restored"
)

// Versions are the etcd minor versions a drill can run: it runs the
// backup's own minor version, found as etcd-<minor>.
var Versions = []string{"3.5", "3.6"}

// Names of the checks a drill records.
const (
	CheckVerify     = "verify backup"
	CheckStart      = "start etcd"
	CheckHealth     = "health"
	CheckRevision   = "revision"
	CheckKeys       = "live keys"
	CheckLeasedKeys = "leased keys"
	CheckPrefixes   = "keys per prefix"
	CheckRead       = "linearizable read"
	CheckWrite      = "write"
	CheckHashKV     = "hashkv at snapshot revision"
	CheckCompare    = "source hash"
	CheckCompaction = "compaction mark"
)

// Error is a drill that failed: the cluster, the backup, the step and
// the cause. Record is the result when the failure is the backup's (a
// check failed, etcd could not start on it: the record says passed=false);
// nil when the drill could not run (the store failed, no room, no etcd of
// the backup's version, cancelled), and then nothing was recorded.
type Error struct {
	ClusterID string
	Backup    string
	At        string // the step that failed (Step)
	Err       error
	Record    *catalog.DrillRecord
	// Inconclusive is set when the drill could not judge the backup for a
	// cause of the node (the drill's etcd killed by a signal or the OOM
	// killer, a full scratch disk, a deadline): the cause, in words.
	// Nothing is recorded then (Record is nil), so restore never skips
	// the backup for it, and an earlier verdict stays.
	Inconclusive string
}

// Step is the step that failed (one of the Step* constants).
func (e *Error) Step() string { return e.At }

func (e *Error) Error() string {
	b := e.Backup
	if b == "" {
		b = "(newest)"
	}
	if e.Inconclusive != "" {
		return fmt.Sprintf("drill of cluster %s backup %s inconclusive at step %q, nothing recorded: %s (the node, not the backup): %v",
			e.ClusterID, b, e.At, e.Inconclusive, e.Err)
	}
	return fmt.Sprintf("drill of cluster %s backup %s failed at step %q: %v", e.ClusterID, b, e.At, e.Err)
}

// Verdict judges a drill by every check: failed when any check
// failed (a property of the backup), whatever came before it; else
// inconclusive when any check could not be made for a cause of the node;
// else passed. It returns every failure ("<check>: <detail>") and every
// inconclusive cause, in check order.
func Verdict(checks []catalog.DrillCheck) (verdict string, failures, inconclusive []string) {
	for _, c := range checks {
		switch c.Status {
		case catalog.DrillCheckFailed:
			failures = append(failures, c.Name+": "+c.Detail)
		case catalog.DrillCheckInconclusive:
			inconclusive = append(inconclusive, c.Name+": "+c.Detail)
		}
	}
	switch {
	case len(failures) > 0:
		return catalog.VerdictFailed, failures, inconclusive
	case len(inconclusive) > 0:
		return catalog.VerdictInconclusive, failures, inconclusive
	}
	return catalog.VerdictPassed, nil, nil
}

func (e *Error) Unwrap() error { return e.Err }

// Validate checks the options a caller chose, before anything is
// contacted; its errors are usage errors (internal/usage). An empty
// ClusterID passes (a template for several clusters); Run requires it.
func (o Options) Validate() error {
	if o.ClusterID != "" {
		if err := catalog.ValidateClusterID(o.ClusterID); err != nil {
			return usage.Wrap(err)
		}
	}
	if o.Backup != "" {
		if _, _, err := catalog.ParseBackupName(o.Backup); err != nil {
			return usage.Errorf("--backup: %w", err)
		}
	}
	if len(o.Source.Endpoints) > 0 {
		if err := o.Source.Validate(); err != nil {
			return usage.Errorf("source: %w", err)
		}
	}
	if o.ToRevision < 0 {
		return usage.Errorf("--to-revision must be a revision (positive)")
	}
	if o.ToRevision > 0 && o.Plaintext != "" {
		return usage.Errorf("--to-revision drills a stored backup and the journal, not a local plaintext snapshot")
	}
	if o.Plaintext != "" {
		switch {
		case o.Manifest == nil:
			return usage.Errorf("a plaintext snapshot (%s) needs the backup's manifest", o.Plaintext)
		case o.ClusterID != "" && o.Manifest.ClusterID != o.ClusterID:
			return usage.Errorf("the manifest of the plaintext snapshot is of cluster %s, not %s", o.Manifest.ClusterID, o.ClusterID)
		case o.Backup != "" && o.Backup != o.Manifest.Name:
			return usage.Errorf("the manifest of the plaintext snapshot is of backup %s, not %s", o.Manifest.Name, o.Backup)
		}
	}
	for _, d := range []struct{ flag, dir string }{{"etcd-bin-dir", o.EtcdBinDir}, {"temp-dir", o.ScratchDir}} {
		if d.dir == "" {
			continue
		}
		if st, err := os.Stat(d.dir); err != nil || !st.IsDir() {
			if err == nil {
				err = errors.New("not a directory")
			}
			return usage.Errorf("--%s %s: %w", d.flag, d.dir, err)
		}
	}
	return nil
}

func (o *Options) defaults() error {
	if err := catalog.ValidateClusterID(o.ClusterID); err != nil {
		return usage.Wrap(err)
	}
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Store == nil {
		return errors.New("no object store")
	}
	o.EtcdMemoryLimit = cmp.Or(o.EtcdMemoryLimit, DefaultEtcdMemoryLimit)
	if o.StartTimeout < 0 {
		o.StartTimeout = 0
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	// A nil Progress is restore's: none.
	return nil
}

// drill is one run of Run.
type drill struct {
	opts    Options
	log     *slog.Logger
	rec     *catalog.DrillRecord
	chosen  restore.Candidate
	facts   restore.SnapshotFacts
	bin     string
	scratch string
	dataDir string
	peerURL string
	token   string
	proc    *etcdProc
	// verifyStart is when the download and verification began.
	verifyStart time.Time
	src         *sourceHash
	// failStep is the step of the first failed check; incStep of the
	// first inconclusive one.
	failStep, incStep string
	// causes are the node's causes of the inconclusive checks.
	causes []string
	// exitTold: a check's detail has told how etcd exited.
	exitTold bool
}

// sourceHash is the source member's HashKV at the snapshot's revision.
type sourceHash struct {
	endpoint string
	// manifest: the member asked is the one the snapshot came from.
	manifest bool
	hash     uint32
	compact  int64
}

// Run downloads and verifies a backup exactly as restore does, restores
// it into a private scratch directory with restore's own stages (the revision
// bump included, see package restore), starts a real single-member etcd of the
// backup's minor version on it on loopback ports chosen at run time, checks
// that it serves and holds what the snapshot holds, compares it with the
// source where it can, records the result next to the backup (drill.json)
// and removes everything it started and wrote, on every exit path.
//
// The compaction mark is deferred. restore marks the bumped revision
// compacted in the database (etcdutl's --mark-compacted), so etcd compacts
// there as it starts; after that, HashKV at the snapshot's revision answers
// "compacted" and no comparison with the source is possible. The drill
// therefore restores with the bump but without the mark, hashes the
// snapshot's revision, and then applies the same compaction through the
// API (a physical compaction at the snapshot's revision plus the bump) and
// checks that the member reports that compact revision and still serves.
//
// HashKV at revision R (etcd's mvcc hashByRev) covers every key revision
// in (compact revision, R] plus the revisions kept at R below it, so two
// members hash alike only with equal compact revisions; the answer carries
// the member's compact revision. The source is asked first, as soon as the
// snapshot is verified and R known (before the restore: Kubernetes'
// apiserver compacts every 5 minutes), and the restored member is compacted
// to the source's compact revision, when that is later than its own and not
// past R, before it is hashed.
func Run(ctx context.Context, opts Options) (*catalog.DrillRecord, error) {
	d := &drill{opts: opts}
	rec, err := d.run(ctx)
	var de *Error
	if err != nil && errors.As(err, &de) && de.Record == nil && de.Inconclusive == "" {
		de.Inconclusive = failCause(ctx, de.Step(), de.Err)
	}
	return rec, err
}

// failCause is the node's cause of a drill that could not run to its
// verdict, "" when it is not the node's (a store failure, no etcd of the
// backup's version, a cancelled run: those are not inconclusive, the
// drill did not run).
func failCause(ctx context.Context, step string, err error) string {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "the drill's deadline passed"
	case ctx.Err() != nil:
		return ""
	case step == StepSpace:
		return "not enough free scratch space for the drill"
	case step == StepRestore || step == StepStart || step == StepChecks || step == StepCompare || step == StepVerify:
		return localCause(err)
	}
	return ""
}

func (d *drill) step(ctx context.Context, name string) {
	if d.opts.onStep != nil {
		d.opts.onStep(ctx, name)
	}
}

// addStep records how long a step took.
func (d *drill) addStep(name string, start time.Time, err error) {
	s := catalog.DrillStep{Name: name, Duration: time.Since(start)}
	if err != nil {
		s.Error = err.Error()
	}
	d.rec.Steps = append(d.rec.Steps, s)
}

// check records a check. A failed check whose cause is the node's (see
// nodeCause) is recorded as inconclusive, with that cause; the verdict
// looks at every check (Verdict).
func (d *drill) check(step string, c catalog.DrillCheck) {
	if c.Status == catalog.DrillCheckFailed {
		if cause := d.nodeCause(c.Detail); cause != "" {
			c.Status, c.Detail = catalog.DrillCheckInconclusive, c.Detail+" ("+cause+")"
			d.causes = append(d.causes, cause)
		} else if p := d.proc; p != nil && p.exited() && !d.exitTold {
			// etcd exited on its own while checked: it refused the data.
			d.exitTold = true
			c.Detail += fmt.Sprintf(" (the drill's etcd exited: %v; its log ends: %s)", p.waitErr, p.logTail())
		}
	}
	d.rec.Checks = append(d.rec.Checks, c)
	switch {
	case c.Status == catalog.DrillCheckFailed && d.failStep == "":
		d.failStep = step
	case c.Status == catalog.DrillCheckInconclusive && d.incStep == "":
		d.incStep = step
	}
	d.log.Debug("drill check", "check", c.Name, "status", c.Status, "detail", c.Detail)
}

// nodeCause says why a check that failed with detail failed for a cause of
// the node, not of the backup: the drill's etcd killed by a signal or the
// OOM killer, out of memory or of disk (see exitCause), the drill's
// deadline, or the drill's etcd not answering in time. "" when none.
func (d *drill) nodeCause(detail string) string {
	if p := d.proc; p != nil {
		// A check failing because etcd just died: give the exit a moment
		// to be seen.
		select {
		case <-p.done:
		case <-time.After(300 * time.Millisecond):
		}
		if cause := p.exitCause(); cause != "" {
			return cause
		}
	}
	if cause := logCause(detail); cause != "" {
		return cause
	}
	if isTimeout(detail) {
		return "the drill's etcd did not answer in time: a slow or overloaded node"
	}
	return ""
}

// The default start timeout (Options.StartTimeout): StartTimeoutBase plus
// a second per StartTimeoutBytesPerSecond of database.
const (
	StartTimeoutBase           = 2 * time.Minute
	StartTimeoutBytesPerSecond = 4 << 20
)

// DefaultStartTimeout is how long a drill waits for its etcd to serve a
// database of dbSize bytes when Options.StartTimeout is 0.
func DefaultStartTimeout(dbSize int64) time.Duration {
	return StartTimeoutBase + time.Duration(dbSize/StartTimeoutBytesPerSecond)*time.Second
}

// startTimeout is how long the drill waits for its etcd to serve.
func (d *drill) startTimeout() time.Duration {
	if d.opts.StartTimeout > 0 {
		return d.opts.StartTimeout
	}
	return DefaultStartTimeout(d.rec.DBSize)
}

// isTimeout reports whether a check's detail is a deadline the drill's own
// etcd missed.
func isTimeout(detail string) bool {
	return strings.Contains(detail, context.DeadlineExceeded.Error()) || strings.Contains(detail, "DeadlineExceeded") ||
		strings.Contains(detail, "did not serve within")
}

func (d *drill) fail(step string, err error) (*catalog.DrillRecord, error) {
	return nil, d.errAt(step, err)
}

func (d *drill) backupName() string {
	if d.rec != nil && d.rec.Backup != "" {
		return d.rec.Backup
	}
	return d.opts.Backup
}

// run is the drill's sequence of steps: the backup chosen, the scratch dir
// made, the backup restored into it, etcd started on it, its checks and the
// comparison with the source, then finish (the verdict and the record). A
// step that records a failed check ends the drill at its verdict.
func (d *drill) run(ctx context.Context) (_ *catalog.DrillRecord, rerr error) {
	if err := d.opts.defaults(); err != nil {
		return d.fail(StepValidate, err)
	}
	if err := d.chooseBackup(ctx); err != nil {
		return nil, err
	}
	d.begin()
	scratch, err := d.makeScratch()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := d.cleanupOnExit(scratch); err != nil && rerr == nil {
			rerr = err
		}
	}()
	if err := d.setUpScratch(); err != nil {
		return nil, err
	}
	if verdict, err := d.restoreBackup(ctx); verdict || err != nil {
		return d.endStep(ctx, verdict, err)
	}
	if verdict, err := d.startEtcd(ctx); verdict || err != nil {
		return d.endStep(ctx, verdict, err)
	}
	cli, err := etcdconn.Config{Endpoints: []string{d.proc.clientURL}, DialTimeout: d.opts.ProbeTimeout}.Client(ctx)
	if err != nil {
		return d.fail(StepChecks, err)
	}
	defer cli.Close()
	// The checks end as soon as etcd exits: a dead member answers nothing,
	// and waiting for each check's deadline would only delay the verdict.
	cctx := d.proc.untilExit(ctx)
	if err := d.runChecks(ctx, cctx, cli); err != nil {
		return nil, err
	}
	if err := d.runCompare(ctx, cctx, cli); err != nil {
		return nil, err
	}
	return d.finish(ctx)
}

// endStep ends the drill after a step that stopped it: at its verdict
// (finish) when the step recorded a failed check, else with the step's
// error.
func (d *drill) endStep(ctx context.Context, verdict bool, err error) (*catalog.DrillRecord, error) {
	if verdict {
		return d.finish(ctx)
	}
	return nil, err
}

// errAt is the drill's error at step, naming the cluster and the backup.
func (d *drill) errAt(step string, err error) error {
	return &Error{ClusterID: d.opts.ClusterID, Backup: d.backupName(), At: step, Err: err}
}

// chooseBackup is the select step: the local copy's backup, the one asked
// for, or else the newest committed backup.
func (d *drill) chooseBackup(ctx context.Context) error {
	if d.opts.Plaintext != "" {
		d.opts.Backup = d.opts.Manifest.Name
	}
	if d.opts.Backup != "" || d.opts.ToRevision > 0 {
		// With ToRevision, restore's select stage chooses the newest
		// backup at or below it.
		return nil
	}
	// The newest committed backup, whatever its earlier drills said:
	// restore's own choice would skip one whose drill failed, and an
	// idle cluster's newest backup would never be drilled again.
	entries, err := catalog.Inventory(ctx, d.opts.Store, d.opts.Layout, d.opts.ClusterID)
	if err != nil {
		return d.errAt(StepSelect, err)
	}
	var newest time.Time
	for _, e := range entries {
		if e.Committed {
			d.opts.Backup, newest = e.Name, e.Time
			break
		}
	}
	if d.opts.IncludeDeleted || d.opts.Backup == "" {
		// The newest backup object versions hold, if newer (restore
		// reads it from its versions: IncludeDeleted).
		vbs, err := prune.VersionedBackups(ctx, d.opts.Store, d.opts.Layout, d.opts.ClusterID)
		if err != nil {
			return d.errAt(StepSelect, err)
		}
		for _, b := range vbs {
			if b.Recovered() && (d.opts.Backup == "" || !b.Time.Before(newest)) {
				d.opts.Backup = b.Name
				d.opts.IncludeDeleted = true
			}
			break
		}
	}
	if d.opts.Backup == "" {
		return d.errAt(StepSelect, fmt.Errorf("no committed backup of cluster %s under %s",
			d.opts.ClusterID, d.opts.Layout.ClusterPrefix(d.opts.ClusterID)))
	}
	return nil
}

// begin starts the drill's log and its record.
func (d *drill) begin() {
	opts := d.opts
	d.log = opts.Log.With("cluster", opts.ClusterID, "drill", true)
	d.rec = &catalog.DrillRecord{Format: catalog.DrillFormat, ClusterID: opts.ClusterID, Backup: opts.Backup,
		StartedAt: opts.Now().UTC(), ToolVersion: version.Version, BumpRevision: restore.DefaultBumpRevision, ToRevision: opts.ToRevision}
}

// makeScratch makes the private scratch dir: the staged snapshot and the
// data dir, and etcd's log. Everything the drill writes is in it, and it
// goes on every exit path (cleanupOnExit), after the etcd using it has
// exited.
func (d *drill) makeScratch() (string, error) {
	root := restore.ScratchRoot(d.opts.ScratchDir)
	scratch, err := seal.MkdirTemp(root, ".etcd-recovery-drill-"+d.opts.ClusterID+"-") // named and registered so no exit leaves it (seal.RemoveAllScratch, seal.RemoveLeftovers)
	if err != nil {
		return "", d.errAt(StepValidate, fmt.Errorf("scratch dir in %s: %w (%s)", root, err, restore.HintScratch))
	}
	d.scratch = scratch
	return scratch, nil
}

// cleanupOnExit is the clean-up on every exit path of run: etcd stopped
// and the scratch dir removed; its error is the cleanup step's.
func (d *drill) cleanupOnExit(scratch string) error {
	cerr := d.cleanup()
	if cerr == nil {
		return nil
	}
	d.log.Error("drill clean-up failed", "scratch", scratch, "err", cerr)
	return &Error{ClusterID: d.opts.ClusterID, Backup: d.backupName(), At: StepCleanup, Err: cerr}
}

// setUpScratch makes the scratch dir private and chooses the data dir and
// the peer URL of the drill's etcd.
func (d *drill) setUpScratch() error {
	if err := os.Chmod(d.scratch, 0o700); err != nil {
		return d.errAt(StepValidate, err)
	}
	d.dataDir = filepath.Join(d.scratch, "drill.etcd")
	peerPort, err := freeLoopbackPort()
	if err != nil {
		return d.errAt(StepValidate, err)
	}
	d.peerURL = fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	return nil
}

// restoreBackup is the verify and restore steps: download, verify and
// restore with restore's own stages, one member, no survivor snapshot.
// The etcd is found before the download, and the source asked for its
// hash before the restore. verdict: the backup's fault was recorded as a
// failed check.
func (d *drill) restoreBackup(ctx context.Context) (verdict bool, err error) {
	opts := d.opts
	ro := restore.Options{
		ClusterID: opts.ClusterID, Store: opts.Store, Layout: opts.Layout, NoLive: true, Backup: opts.Backup,
		Targets:      restore.Targets{InitialCluster: "drill=" + d.peerURL, DataDir: d.dataDir},
		BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, Parallel: 1, ScratchDir: d.scratch,
		ProbeTimeout: opts.ProbeTimeout, Progress: opts.Progress, Log: opts.Log, Now: opts.Now,
		Identities: opts.Identities, IncludeDeleted: opts.IncludeDeleted,
	}
	d.pointInTime(&ro)
	restoreStart, err := d.restore(ctx, ro)
	if err != nil {
		step := stepOf(err)
		if ctx.Err() != nil {
			return false, d.errAt(step, err)
		}
		cause := err
		var re *restore.Error
		if errors.As(err, &re) {
			cause = re.Err
		}
		switch {
		case step == StepVerify && restore.IsVerifyError(err):
			// The backup's fault: recorded.
			d.addStep(StepVerify, d.verifyStart, cause)
			d.check(StepVerify, catalog.DrillCheck{Name: CheckVerify, Status: catalog.DrillCheckFailed, Detail: cause.Error()})
			return true, nil
		case step == StepRestore && !restore.IsLocalFailure(err):
			// etcd's restore code refused the verified database.
			d.addStep(StepRestore, restoreStart, cause)
			d.check(StepRestore, catalog.DrillCheck{Name: StepRestore, Status: catalog.DrillCheckFailed, Detail: cause.Error()})
			return true, nil
		}
		return false, d.errAt(step, cause)
	}
	d.addStep(StepRestore, restoreStart, nil)
	if st, err := os.Stat(filepath.Join(d.dataDir, "member", "snap", "db")); err == nil {
		d.rec.DBSize = st.Size()
	}
	return false, nil
}

// startEtcd is the start step: a real etcd started on the restored data
// dir, its start recorded as a check. verdict: it did not start, recorded
// as a failed (or inconclusive) check.
func (d *drill) startEtcd(ctx context.Context) (verdict bool, err error) {
	d.step(ctx, StepStart)
	if err := ctx.Err(); err != nil {
		return false, d.errAt(StepStart, err)
	}
	t := time.Now()
	d.proc, err = startDrillEtcd(ctx, etcdStart{bin: d.bin, dataDir: d.dataDir, scratch: d.scratch, peerURL: d.peerURL,
		token: d.token, dbSize: d.rec.DBSize, timeout: d.startTimeout(), probe: d.opts.ProbeTimeout, memLimit: d.opts.EtcdMemoryLimit, log: d.log, onStart: d.opts.onEtcd})
	d.addStep(StepStart, t, err)
	if err != nil {
		if ctx.Err() != nil {
			return false, d.errAt(StepStart, err)
		}
		c := catalog.DrillCheck{Name: CheckStart, Status: catalog.DrillCheckFailed, Detail: err.Error()}
		var se *etcdStartError
		if errors.As(err, &se) && se.Cause != "" {
			c.Status, c.Detail = catalog.DrillCheckInconclusive, err.Error()+" ("+se.Cause+")"
			d.causes = append(d.causes, se.Cause)
		}
		d.check(StepStart, c)
		return true, nil
	}
	d.check(StepStart, catalog.DrillCheck{Name: CheckStart, Status: catalog.DrillCheckPassed,
		Detail: fmt.Sprintf("etcd %s serving on %s", d.rec.EtcdVersion, d.proc.clientURL)})
	return false, nil
}

// runChecks is the checks step: the restored member checked on cctx
// (which ends when etcd exits); only a cancel of ctx stops the drill.
func (d *drill) runChecks(ctx, cctx context.Context, cli *clientv3.Client) error {
	d.step(ctx, StepChecks)
	t := time.Now()
	d.checkServing(cctx, cli)
	d.addStep(StepChecks, t, nil)
	if err := ctx.Err(); err != nil {
		return d.errAt(StepChecks, err)
	}
	return nil
}

// runCompare is the compare step: the restored member compared with the
// source on cctx; only a cancel of ctx stops the drill.
func (d *drill) runCompare(ctx, cctx context.Context, cli *clientv3.Client) error {
	d.step(ctx, StepCompare)
	t := time.Now()
	d.compare(cctx, cli)
	d.addStep(StepCompare, t, nil)
	if err := ctx.Err(); err != nil {
		return d.errAt(StepCompare, err)
	}
	return nil
}

// finish stops etcd, removes the scratch dir, and records the result.
func (d *drill) finish(ctx context.Context) (*catalog.DrillRecord, error) {
	t := time.Now()
	cerr := d.cleanup()
	d.addStep(StepCleanup, t, cerr)
	if cerr != nil {
		return d.fail(StepCleanup, cerr)
	}
	d.proveJournal(ctx)
	d.step(ctx, StepRecord)
	if err := ctx.Err(); err != nil {
		// A cancelled drill proves nothing either way: no record.
		return d.fail(StepRecord, err)
	}
	rec := d.rec
	verdict, failures, inconclusive := Verdict(rec.Checks)
	rec.Verdict, rec.Failures, rec.Passed = verdict, failures, verdict == catalog.VerdictPassed
	if len(failures) > 0 {
		rec.Failed = failures[0]
	}
	rec.FinishedAt = d.opts.Now().UTC()
	if verdict == catalog.VerdictInconclusive {
		// The node, not the backup: a record would be a false failure
		// (restore skips a backup whose drill failed) or replace an
		// earlier verdict with none. Nothing is recorded.
		d.log.Warn("drill inconclusive, nothing recorded", "backup", rec.Backup, "why", strings.Join(inconclusive, "; "))
		return nil, &Error{ClusterID: rec.ClusterID, Backup: rec.Backup, At: d.incStep,
			Err: errors.New(strings.Join(inconclusive, "; ")), Inconclusive: d.cause()}
	}
	if d.chosen.FromVersions {
		d.log.Warn("drilled a backup that only object versions hold: nothing recorded", "backup", rec.Backup, "status", d.chosen.Recovered)
	} else if d.opts.ToRevision > 0 && !rec.Passed {
		d.log.Warn("point-in-time drill failed: not recorded (the backup's own drill judges it)", "backup", rec.Backup, "to_revision", d.opts.ToRevision)
	} else if !d.opts.NoRecord {
		if err := catalog.PutDrill(ctx, d.opts.Store, d.opts.Layout, rec); err != nil {
			return d.fail(StepRecord, err)
		}
	}
	d.log.Info("drill finished", "backup", rec.Backup, "verdict", rec.Verdict, "failed", rec.Failed,
		"comparison", rec.Comparison.Mode, "drilled", rec.Drilled, "encrypted", rec.Encrypted,
		"duration", rec.FinishedAt.Sub(rec.StartedAt).Round(time.Millisecond))
	if !rec.Passed {
		step := d.failStep
		if step == "" {
			step = StepChecks
		}
		return rec, &Error{ClusterID: rec.ClusterID, Backup: rec.Backup, At: step, Err: errors.New(strings.Join(failures, "; ")), Record: rec}
	}
	return rec, nil
}

// cause is the first inconclusive check's cause.
func (d *drill) cause() string {
	if len(d.causes) == 0 {
		return "a cause of the node"
	}
	return d.causes[0]
}

// cleanup stops the drill's etcd and removes the scratch dir. It is
// idempotent.
func (d *drill) cleanup() error {
	var errs []error
	if d.proc != nil {
		if err := d.proc.stop(); err != nil {
			errs = append(errs, err)
		}
		d.proc = nil
	}
	if d.scratch != "" {
		if err := os.RemoveAll(d.scratch); err != nil {
			errs = append(errs, fmt.Errorf("remove scratch dir: %w", err))
		} else {
			d.scratch = ""
		}
	}
	return errors.Join(errs...)
}
