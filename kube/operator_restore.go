package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/restore/survivor"
)

// OperatorRestoreOptions configure OperatorRestore: a restore of an
// EtcdCluster done by etcd-operator's restore operator (an EtcdRestore
// object), from one of our backups.
type OperatorRestoreOptions struct {
	Kube    *Client
	Cluster string // the EtcdCluster; also the cluster id in COS
	// Backup is the backup's name; default the newest committed one.
	Backup string
	Store  store.Store
	Layout catalog.Layout
	// Bucket and Endpoint are what the operator is told (spec.s3.path is
	// "<bucket>/<key>").
	Bucket   string
	Endpoint string
	// AWSSecret is the secret the operator reads S3 credentials from, in
	// etcd-operator's format (files "credentials" and "config"); default
	// cos-credentials.
	AWSSecret      string
	ForcePathStyle bool

	// Used by OperatorRestore only.
	// NoLive skips the survivor snapshot of the EtcdCluster's members.
	NoLive bool
	// ProbeTimeout bounds each probe of a member; DialTimeout each dial.
	ProbeTimeout, DialTimeout time.Duration
	// Timeout bounds the wait for etcd-operator to bring the cluster back
	// (default 10m); VerifyTimeout the wait for its members to be healthy
	// after that (default 2m); PollInterval is how often the EtcdCluster is
	// read while waiting (default 2s).
	Timeout, VerifyTimeout, PollInterval time.Duration
	// TempDir (--temp-dir) is where the verified snapshot is staged
	// before it is uploaded uncompressed: it needs room for the whole
	// database, which is checked before the download. Default
	// os.TempDir() ($TMPDIR, else /tmp). The client-TLS files go to a
	// small private dir in the system's temp dir.
	TempDir string
	// DryRun changes nothing (see OperatorRestore).
	DryRun bool
	// Identities (--identity-file) decrypt an encrypted backup; the
	// staged copy is plaintext (etcd-operator cannot decrypt) and is
	// deleted as soon as the restored cluster is verified, or the restore
	// failed or was cancelled before the EtcdRestore was created (after
	// that, a cancel or a failed wait keeps it for etcd-operator; a rerun's
	// adoption or prune deletes it: removeStaged).
	Identities *seal.Identities
	// Recipients and RequireEncryption encrypt the survivor snapshot
	// (restore.Options).
	Recipients        seal.Recipients
	RequireEncryption bool
	Log               *slog.Logger
	Progress          func(label string) restore.Progress

	// Point in time (restore's --to-revision, --to-time, --to-latest):
	// ToRevision, ToTime or ToLatest, with Journal (restore.Options),
	// resolved by restore before it selects the backup. The staged
	// copy is then the backup with the journal replayed into it, its
	// revision bumped by restore.DefaultBumpRevision and marked compacted
	// (etcd-operator's restore applies no bump), with etcd's sha256
	// trailer written again for etcdutl's check
	// (restore.SelectSnapshot); the restored cluster is verified at that
	// revision plus the bump.
	ToRevision int64
	ToTime     time.Time
	ToLatest   bool
	Journal    restore.JournalSource
	// NoBump stages the backup without a revision bump (restore
	// --bump-revision 0). By default every staged copy, a plain backup's
	// too, is bumped by restore.DefaultBumpRevision and marked compacted
	// (etcd-operator's restore applies none): a restored cluster never
	// reuses revisions its journal, watchers and caches already saw. The
	// restored cluster is verified at the snapshot's revision plus the
	// bump.
	NoBump bool
	// BumpRevision is that bump (restore --bump-revision; 0:
	// restore.DefaultBumpRevision unless NoBump).
	BumpRevision uint64
	// AcceptUnprovenJournal: restore.Options.AcceptUnprovenJournal.
	AcceptUnprovenJournal bool

	// OnStep, when set, is called as each step (OpStep*) begins, from
	// the restore's goroutine: restore-all's live table and its log line
	// per step.
	OnStep func(step string)
	// Annotations are put on the EtcdRestore besides the tool's own
	// (restore-all's run, so that a rerun finds the EtcdRestore of a
	// killed attempt).
	Annotations map[string]string
}

// step reports that step begins (OnStep).
func (o *OperatorRestoreOptions) step(step string) {
	if o.OnStep != nil {
		o.OnStep(step)
	}
}

// Steps of OperatorRestore, named in its errors.
const (
	OpStepCluster = "read etcdcluster"
	// OpStepAWSSecret checks the secret etcd-operator is told to read the
	// S3 credentials from (spec.s3.awsSecret).
	OpStepAWSSecret = "check aws secret"
	OpStepSelect    = "select and verify snapshot"
	OpStepStage     = "stage snapshot"
	OpStepRequest   = "create etcdrestore"
	OpStepWait      = "wait for the restored etcdcluster"
	OpStepVerify    = "verify the restored cluster"
)

// Annotations OperatorRestore puts on the EtcdRestore, so nothing about the
// replaced EtcdCluster is lost.
const (
	AnnotationBackup       = "etcd-recovery.armada.ibm.com/backup"
	AnnotationRevision     = "etcd-recovery.armada.ibm.com/revision"
	AnnotationStagedSHA256 = "etcd-recovery.armada.ibm.com/staged-sha256"
	AnnotationClusterUID   = "etcd-recovery.armada.ibm.com/etcdcluster-uid"
	// AnnotationClusterSpec is the replaced EtcdCluster's spec, as JSON.
	AnnotationClusterSpec = "etcd-recovery.armada.ibm.com/etcdcluster-spec"
)

// LabelManagedBy marks the objects the tool creates (value ManagedBy): an
// EtcdRestore with it is the tool's own, which a later restore of the same
// cluster may delete once etcd-operator is done with it.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "etcd-recovery"
)

// DefaultOperatorRestoreTimeout bounds the wait for etcd-operator.
const DefaultOperatorRestoreTimeout = 10 * time.Minute

// StagedKey is where OperatorRestore stages the uncompressed snapshot of a
// backup for etcd-operator: catalog's Layout.StagedKey,
// <prefix>/_staged/<cluster>/<backup>/snapshot.db,
// outside the backup folders (retention never touches it).
func StagedKey(l catalog.Layout, cluster, backupName string) string {
	return l.StagedKey(cluster, backupName)
}

// OperatorRestoreError is a failed OperatorRestore: the cluster, the step
// and the cause (for the wait, what was last seen).
type OperatorRestoreError struct {
	Namespace, Cluster string
	At                 string // the step that failed (Step)
	Err                error
}

// Step is the step that failed (one of the OpStep* constants).
func (e *OperatorRestoreError) Step() string { return e.At }

func (e *OperatorRestoreError) Error() string {
	return fmt.Sprintf("restore of etcdcluster %s/%s via etcd-operator failed at step %q: %v", e.Namespace, e.Cluster, e.Step(), e.Err)
}

func (e *OperatorRestoreError) Unwrap() error { return e.Err }

// OperatorAction is one change OperatorRestore makes (or, in a dry run,
// would make).
type OperatorAction struct {
	Verb   string         `json:"verb"` // stage, create, replace (by etcd-operator)
	What   string         `json:"what"`
	Object map[string]any `json:"object,omitempty"`
}

// OperatorRestoreReport is what OperatorRestore did, and how far it got.
type OperatorRestoreReport struct {
	Namespace string        `json:"namespace"`
	Cluster   string        `json:"cluster"`
	DryRun    bool          `json:"dryRun"`
	Plan      *restore.Plan `json:"plan,omitempty"`
	Backup    string        `json:"backup,omitempty"`
	// The replaced EtcdCluster: its uid and spec (also in the EtcdRestore's
	// annotations).
	OldUID  types.UID      `json:"oldUID"`
	OldSpec map[string]any `json:"oldSpec"`
	// The staged snapshot: key, "<bucket>/<key>" as the operator is told,
	// and the sha256 of the object as read back.
	StagedKey    string `json:"stagedKey,omitempty"`
	S3Path       string `json:"s3Path,omitempty"`
	StagedSHA256 string `json:"stagedSHA256,omitempty"`
	StagedSize   int64  `json:"stagedSize,omitempty"`
	// StagedRemoved: the staged (plaintext) copy was deleted, once the
	// restored cluster was verified or because the restore failed or was
	// cancelled. StagedRemoveError: it could not be (prune deletes staged
	// copies older than an hour; list shows them).
	StagedRemoved     bool   `json:"stagedRemoved,omitempty"`
	StagedRemoveError string `json:"stagedRemoveError,omitempty"`
	// StagedKept: why the staged copy was kept (the restore was cancelled
	// or its wait failed after the EtcdRestore was created, so
	// etcd-operator may still fetch it); a rerun's adoption or prune
	// removes it.
	StagedKept string `json:"stagedKept,omitempty"`
	// Actions, in order.
	Actions []OperatorAction `json:"actions"`
	// Replaced is the EtcdRestore of an earlier, finished restore of the
	// cluster that was deleted to create this one (etcd-operator acts on
	// an EtcdRestore only once, and the name is the cluster's).
	Replaced *ReplacedRestore `json:"replacedEtcdRestore,omitempty"`
	// Warnings: what could not be checked (the awsSecret when it cannot
	// be read).
	Warnings []string `json:"warnings,omitempty"`
	// The restored EtcdCluster, once etcd-operator recreated it.
	NewUID    types.UID             `json:"newUID,omitempty"`
	LastSeen  string                `json:"lastSeen,omitempty"`
	Waited    time.Duration         `json:"waited,omitempty"`
	Endpoints []string              `json:"endpoints,omitempty"`
	Verify    *restore.VerifyReport `json:"verify,omitempty"`
	// Verification is VerifiedRevisionOnly when the key count could not be
	// checked (an adopted restore whose staged copy was gone); empty: as
	// fully as a fresh restore.
	Verification string        `json:"verification,omitempty"`
	Duration     time.Duration `json:"duration,omitempty"`
	// Steps are the durations of the steps done (OpStep*), in order.
	Steps []StepTime `json:"steps,omitempty"`
}

// StepTime is how long one step took.
type StepTime struct {
	Step     string        `json:"step"`
	Duration time.Duration `json:"duration"`
}

// timed records the duration of step since t0 and returns now.
func (r *OperatorRestoreReport) timed(step string, t0 time.Time) time.Time {
	r.Steps = append(r.Steps, StepTime{Step: step, Duration: time.Since(t0)})
	return time.Now()
}

// ReplacedRestore is an EtcdRestore an earlier restore left, deleted (in
// a dry run: to be deleted) to create the new one.
type ReplacedRestore struct {
	Name        string            `json:"name"`
	UID         types.UID         `json:"uid"`
	Created     time.Time         `json:"created"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Status      map[string]any    `json:"status,omitempty"`
	// Why it was safe to delete.
	Why string `json:"why"`
}

// OperatorRestore restores an EtcdCluster with etcd-operator's restore
// operator (restore --via etcd-operator):
//
//  0. checks that no EtcdRestore of the cluster is in the way (one the tool
//     created for a finished earlier restore is deleted in step 3; any other
//     refuses the restore), and that the awsSecret is in etcd-operator's
//     format (CheckAWSSecret; when it cannot be read, a warning);
//  1. selects and verifies the snapshot as restore does (a survivor
//     snapshot of the EtcdCluster's members when one answers, unless
//     NoLive; else the newest backup by revision; Backup forces one), with
//     every hash checked while it streams to a temp file;
//  2. stages that verified, uncompressed snapshot at StagedKey and checks
//     the sha256 of the object as read back;
//  3. creates the EtcdRestore (spec.etcdCluster.name, S3 at
//     "<bucket>/<key>", awsSecret, endpoint, forcePathStyle), with the
//     EtcdCluster's spec and uid in its annotations. The EtcdCluster is
//     not deleted here: etcd-operator's restore operator reads it as the
//     template of the restored cluster, then deletes it and creates the
//     restored one under the same name (deleting it first would fail the
//     restore with "failed to get reference EtcdCluster"). When one of
//     that name already exists and it is the tool's own from a finished
//     restore (see leftoverFinished), it is deleted first and logged with
//     its annotations (the report's Replaced);
//  4. waits, up to Timeout, for the EtcdCluster recreated by the operator
//     (a new uid) to be Running with status.members.ready as many as
//     spec.size;
//  5. discovers its members again and verifies it: every member healthy,
//     spec.size members, the revision at least the snapshot's plus the
//     bump the staged copy got (etcd-operator's restore applies none, so
//     the tool bumps the staged copy unless NoBump), the live key count
//     the snapshot's.
//
// DryRun does step 1 (without taking the survivor snapshot or writing
// anything) and reports the actions it would take; the EtcdRestore is
// validated by the API server with a server-side dry run.
func OperatorRestore(ctx context.Context, o OperatorRestoreOptions) (_ *OperatorRestoreReport, rerr error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	k := o.Kube
	if k == nil || o.Store == nil || o.Bucket == "" || o.Cluster == "" {
		return nil, errors.New("operator restore: need the kubernetes client, the cluster, the store and the bucket")
	}
	o.defaults()
	r := &operatorRestore{o: &o, k: k, start: start,
		rep: &OperatorRestoreReport{Namespace: k.Namespace, Cluster: o.Cluster, DryRun: o.DryRun, Actions: []OperatorAction{}},
		log: o.Log.With("namespace", k.Namespace, "etcdcluster", o.Cluster)}
	rep := r.rep

	// The EtcdCluster: it must exist (it is the operator's template), and
	// no EtcdRestore of the same name may be pending.
	o.step(OpStepCluster)
	if err := r.readCluster(ctx); err != nil {
		return rep, err
	}
	// 0. The secret etcd-operator will read the snapshot with.
	o.step(OpStepAWSSecret)
	if err := r.checkAWSSecret(ctx); err != nil {
		return rep, err
	}

	// 1. Select and verify, with the survivor's endpoints from the pods.
	tmp, err := PrivateDir("etcd-recovery-tls-")
	if err != nil {
		return rep, r.fail(ctx, OpStepSelect, err)
	}
	defer os.RemoveAll(tmp)
	scratch := ""
	if !o.DryRun {
		// The staged snapshot: in --temp-dir, not the small TLS dir.
		if scratch, err = PrivateDirIn(restore.ScratchRoot(o.TempDir), "etcd-recovery-operator-restore-"); err != nil {
			return rep, r.fail(ctx, OpStepSelect, fmt.Errorf("scratch dir for the snapshot (--temp-dir / TMPDIR): %w", err))
		}
		defer os.RemoveAll(scratch)
	}
	t0 := time.Now()
	o.step(OpStepSelect)
	if err := r.selectSnapshot(ctx, tmp, scratch); err != nil {
		return rep, err
	}
	t0 = rep.timed(OpStepSelect, t0)

	// 2. Stage.
	r.planStage()
	if !o.DryRun {
		// From here on the staged copy is removed on every return: after
		// the verification, or on failure or cancellation before the
		// EtcdRestore exists. Once it exists, a cancel or a failed wait
		// keeps it (removeStaged): etcd-operator's seed member may still
		// have to fetch it.
		defer func() { o.removeStaged(ctx, rep, r.log, rerr, r.created || r.restoreExists(ctx)) }()
		o.step(OpStepStage)
		if err := r.stage(ctx); err != nil {
			return rep, err
		}
		t0 = rep.timed(OpStepStage, t0)
	}

	// 3. The EtcdRestore; etcd-operator replaces the EtcdCluster.
	o.step(OpStepRequest)
	if err := r.createRestore(ctx); err != nil {
		return rep, err
	}
	r.created = !o.DryRun
	if o.DryRun {
		rep.Duration = time.Since(start)
		return rep, nil
	}
	r.log.Info("etcdrestore created: etcd-operator now replaces the etcdcluster", "s3_path", rep.S3Path, "timeout", o.Timeout)

	// 4. Wait for the restored EtcdCluster.
	t0 = time.Now()
	o.step(OpStepWait)
	size, err := o.waitRestored(ctx, rep)
	if err != nil {
		return rep, r.fail(ctx, OpStepWait, err)
	}
	r.log.Info("restored etcdcluster ready", "uid", rep.NewUID, "waited", rep.Waited.Round(time.Millisecond))

	// 5. Verify it, discovered again.
	t0 = rep.timed(OpStepWait, t0)
	o.step(OpStepVerify)
	if err := r.verify(ctx, size); err != nil {
		return rep, err
	}
	rep.timed(OpStepVerify, t0)
	r.log.Info("restored cluster verified", "total", rep.Duration.Round(time.Millisecond))
	return rep, nil
}

// operatorRestore is one OperatorRestore in progress: its options, its
// report, and what a step leaves for the next ones. Each step's method
// returns an *OperatorRestoreError naming its step.
type operatorRestore struct {
	o     *OperatorRestoreOptions
	k     *Client
	rep   *OperatorRestoreReport
	log   *slog.Logger
	start time.Time
	// readCluster: the EtcdCluster to be replaced, its spec as JSON.
	ec       *unstructured.Unstructured
	specJSON []byte
	// selectSnapshot: the plan, the verified local snapshot and its
	// revision; planStage: the backup's name as the EtcdRestore records it.
	plan       *restore.Plan
	snapPath   string
	revision   int64
	backupName string
	// minRevision is the lowest revision the restored cluster may report:
	// revision, plus the bump of a point-in-time snapshot.
	minRevision int64
	// created: the EtcdRestore was created (not in a dry run).
	created bool
}

// restoreExists says, when the EtcdRestore's create returned an error (a
// cancel may end the call after the API server stored it), whether the
// EtcdRestore of this restore exists: one named o.Cluster whose
// AnnotationStagedSHA256 is this staged copy's and AnnotationClusterUID
// this EtcdCluster's. It reads with a context
// of its own, bounded by StagedRemoveTimeout.
func (r *operatorRestore) restoreExists(ctx context.Context) bool {
	if r.created || r.rep.StagedSHA256 == "" || r.o.DryRun {
		return r.created
	}
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StagedRemoveTimeout)
	defer cancel()
	er, err := r.k.Dynamic.Resource(EtcdRestoreGVR).Namespace(r.k.Namespace).Get(gctx, r.o.Cluster, metav1.GetOptions{})
	if err != nil {
		return false
	}
	ann := er.GetAnnotations()
	return ann[AnnotationStagedSHA256] == r.rep.StagedSHA256 && ann[AnnotationClusterUID] == string(r.rep.OldUID)
}

// fail is the error of a step: the cluster, the step and the cause (with
// the context's end, when it ended).
func (r *operatorRestore) fail(ctx context.Context, step string, err error) error {
	return &OperatorRestoreError{Namespace: r.k.Namespace, Cluster: r.o.Cluster, At: step, Err: ctxErr(ctx, err)}
}

// readCluster reads the EtcdCluster (it must exist: etcd-operator needs
// it as the template of the restored cluster), records its uid and spec,
// and refuses an EtcdRestore of the same name in the way (a finished one
// of ours is deleted when the new one is created: removeLeftover).
func (r *operatorRestore) readCluster(ctx context.Context) error {
	o, k, rep := r.o, r.k, r.rep
	ec, err := k.Dynamic.Resource(EtcdClusterGVR).Namespace(k.Namespace).Get(ctx, o.Cluster, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// etcd-operator needs it as the template of the restored cluster.
		return r.fail(ctx, OpStepCluster, fmt.Errorf("%w: etcd-operator restores from the EtcdCluster's spec; if it was deleted, "+
			"create it again (its spec is in the annotation %s of an earlier EtcdRestore, if any) and retry",
			&NotFoundError{Namespace: k.Namespace, Name: o.Cluster}, AnnotationClusterSpec))
	}
	if err != nil {
		return r.fail(ctx, OpStepCluster, fmt.Errorf("reading etcdcluster: %w", err))
	}
	r.ec = ec
	rep.OldUID = ec.GetUID()
	rep.OldSpec, _, _ = unstructured.NestedMap(ec.Object, "spec")
	if r.specJSON, err = json.Marshal(rep.OldSpec); err != nil {
		return r.fail(ctx, OpStepCluster, err)
	}
	r.log.Info("etcdcluster to be replaced by etcd-operator", "uid", rep.OldUID, "spec", string(r.specJSON))
	if old, err := k.Dynamic.Resource(EtcdRestoreGVR).Namespace(k.Namespace).Get(ctx, o.Cluster, metav1.GetOptions{}); err == nil {
		// Fail now if it is in the way; a finished one of ours is deleted
		// when the new one is created.
		why, ok := leftoverFinished(old, ec, time.Now())
		if !ok {
			return r.fail(ctx, OpStepCluster, leftoverError(old, why))
		}
		r.log.Info("an EtcdRestore of a finished earlier restore is left: it is deleted before the new one is created",
			"etcdrestore", old.GetName(), "uid", old.GetUID(), "why", why)
	} else if !apierrors.IsNotFound(err) {
		return r.fail(ctx, OpStepCluster, fmt.Errorf("reading etcdrestore %s: %w", o.Cluster, err))
	}
	return nil
}

// checkAWSSecret checks the secret etcd-operator will read the snapshot
// with (CheckAWSSecret); one that cannot be read is a warning.
func (r *operatorRestore) checkAWSSecret(ctx context.Context) error {
	warning, err := r.k.CheckAWSSecret(ctx, r.o.AWSSecret)
	if err != nil {
		return r.fail(ctx, OpStepAWSSecret, err)
	}
	if warning != "" {
		r.rep.Warnings = append(r.rep.Warnings, warning)
		r.log.Warn(warning, "step", OpStepAWSSecret)
	}
	return nil
}

// selectSnapshot selects and verifies the snapshot as restore does
// (restore.SelectSnapshot), with the survivor's endpoints from the pods
// (their client TLS in tmp) unless NoLive; the verified snapshot goes to
// scratch (none in a dry run).
func (r *operatorRestore) selectSnapshot(ctx context.Context, tmp, scratch string) error {
	o, k, rep := r.o, r.k, r.rep
	ropts := restore.Options{ClusterID: o.Cluster, Store: o.Store, Layout: o.Layout, NoLive: o.NoLive,
		ProbeTimeout: o.ProbeTimeout, Backup: o.Backup, DryRun: o.DryRun, Log: o.Log, Progress: o.Progress,
		ScratchDir: o.TempDir, Identities: o.Identities, Recipients: o.Recipients, RequireEncryption: o.RequireEncryption,
		Survivor: survivor.Backup{}, ToRevision: o.ToRevision, ToTime: o.ToTime, ToLatest: o.ToLatest, Journal: o.Journal,
		AcceptUnprovenJournal: o.AcceptUnprovenJournal}
	if !o.NoBump {
		ropts.BumpRevision, ropts.MarkCompacted = restore.DefaultBumpRevision, true
		if o.BumpRevision > 0 {
			ropts.BumpRevision = o.BumpRevision
		}
	}
	if !o.NoLive && (o.ToRevision > 0 || !o.ToTime.IsZero() || o.ToLatest) {
		// Point in time takes no survivor snapshot: the members are
		// probed only to warn when one still answers, so members not
		// found (every pod gone) are no reason to stop.
		if cs, err := k.Clusters(ctx, o.Cluster); err != nil {
			r.log.Warn("point in time: the old members were not found, so none is probed for a survivor", "err", err)
		} else if cfg, err := k.EtcdConfig(ctx, cs[0], tmp, o.DialTimeout); err != nil {
			r.log.Warn("point in time: the old members cannot be probed for a survivor", "err", err)
		} else {
			ropts.Old = cfg
		}
	} else if !o.NoLive {
		cs, err := k.Clusters(ctx, o.Cluster)
		if err != nil {
			return r.fail(ctx, OpStepSelect, fmt.Errorf("finding the members for a survivor snapshot (--no-live skips it): %w", err))
		}
		if ropts.Old, err = k.EtcdConfig(ctx, cs[0], tmp, o.DialTimeout); err != nil {
			return r.fail(ctx, OpStepSelect, fmt.Errorf("connecting to the members for a survivor snapshot (--no-live skips it): %w", err))
		}
		r.log.Info("old members", "endpoints", strings.Join(cs[0].Endpoints, ","), "source", cs[0].EndpointSource)
	}
	plan, snapPath, err := restore.SelectSnapshot(ctx, ropts, scratch)
	rep.Plan = plan
	if err != nil {
		return r.fail(ctx, OpStepSelect, err)
	}
	r.plan, r.snapPath = plan, snapPath
	if plan.Chosen != nil {
		rep.Backup = plan.Chosen.Name
	}
	switch {
	case plan.Snapshot != nil:
		r.revision = plan.Snapshot.Revision
	case plan.Chosen != nil:
		r.revision = plan.Chosen.Revision
	}
	r.minRevision = r.revision
	if plan.BumpRevision > 0 && plan.MinRevision > r.minRevision {
		r.minRevision = plan.MinRevision // bumped in the staged copy
	}
	if plan.Replay != nil {
		// Point in time: the replayed revision, bumped in the staged copy.
		r.revision, r.minRevision = plan.Replay.ToRevision, plan.MinRevision
	}
	rep.Warnings = append(rep.Warnings, plan.Warnings...)
	return nil
}

// planStage names the staged copy (StagedKey, the operator's S3 path) and
// records the "stage" action.
func (r *operatorRestore) planStage() {
	o, rep := r.o, r.rep
	r.backupName = rep.Backup
	if r.plan.Chosen != nil && r.plan.Chosen.Planned {
		r.backupName = "<pre-restore snapshot>"
	}
	rep.StagedKey = StagedKey(o.Layout, o.Cluster, r.backupName)
	rep.S3Path = path.Join(o.Bucket, rep.StagedKey)
	rep.Actions = append(rep.Actions, OperatorAction{Verb: "stage", What: fmt.Sprintf("uncompressed snapshot of %s at s3://%s", r.backupName, rep.S3Path)})
}

// stage uploads the verified snapshot to StagedKey and checks it as read
// back (stageVerified), then removes the local copy.
func (r *operatorRestore) stage(ctx context.Context) error {
	rep := r.rep
	var err error
	if rep.StagedSHA256, rep.StagedSize, err = stageVerified(ctx, r.o.Store, r.snapPath, rep.StagedKey); err != nil {
		return r.fail(ctx, OpStepStage, err)
	}
	r.log.Info("snapshot staged", "key", rep.StagedKey, "sha256", rep.StagedSHA256, "size", rep.StagedSize)
	// The local plaintext copy is no longer needed.
	if err := os.Remove(r.snapPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.Warn("could not remove the local staged snapshot (removed with its private dir on return)", "path", r.snapPath, "err", err)
	}
	return nil
}

// etcdRestore is the EtcdRestore to create: spec.etcdCluster.name, S3 at
// "<bucket>/<key>", awsSecret, endpoint, forcePathStyle, with the
// EtcdCluster's spec and uid in its annotations.
func (r *operatorRestore) etcdRestore() *unstructured.Unstructured {
	o, k, rep := r.o, r.k, r.rep
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": APIVersion,
		"kind":       "EtcdRestore",
		"metadata": map[string]any{
			"name":      o.Cluster,
			"namespace": k.Namespace,
			"labels":    map[string]any{LabelManagedBy: ManagedBy, LabelCluster: o.Cluster},
			"annotations": map[string]any{
				AnnotationBackup:       r.backupName,
				AnnotationRevision:     fmt.Sprint(r.revision),
				AnnotationStagedSHA256: rep.StagedSHA256,
				AnnotationClusterUID:   string(rep.OldUID),
				AnnotationClusterSpec:  string(r.specJSON),
			},
		},
		"spec": map[string]any{
			"etcdCluster":       map[string]any{"name": o.Cluster},
			"backupStorageType": "S3",
			"s3": map[string]any{
				"path":           rep.S3Path,
				"awsSecret":      o.AWSSecret,
				"endpoint":       o.Endpoint,
				"forcePathStyle": o.ForcePathStyle,
			},
		},
	}}
}

// createRestore creates the EtcdRestore (in a dry run, validated by the
// API server with a server-side dry run), deleting the tool's own
// EtcdRestore of a finished restore of that name first (removeLeftover).
func (r *operatorRestore) createRestore(ctx context.Context) error {
	o, k, rep := r.o, r.k, r.rep
	er := r.etcdRestore()
	for k, v := range o.Annotations {
		if _, ours := er.GetAnnotations()[k]; !ours {
			_ = unstructured.SetNestedField(er.Object, v, "metadata", "annotations", k)
		}
	}
	rep.Actions = append(rep.Actions,
		OperatorAction{Verb: "create", What: "EtcdRestore " + k.Namespace + "/" + o.Cluster, Object: er.Object},
		OperatorAction{Verb: "replace", What: fmt.Sprintf("EtcdCluster %s/%s (uid %s): etcd-operator's restore operator deletes it and creates "+
			"the restored cluster with the same name and spec (kept in the EtcdRestore's annotation %s)", k.Namespace, o.Cluster, rep.OldUID, AnnotationClusterSpec),
			Object: r.ec.Object})
	createOpts := metav1.CreateOptions{}
	if o.DryRun {
		createOpts.DryRun = []string{metav1.DryRunAll}
	}
	if rep.StagedSHA256 == "" {
		unstructured.RemoveNestedField(er.Object, "metadata", "annotations", AnnotationStagedSHA256)
	}
	for attempt := 0; ; attempt++ {
		_, err := k.Dynamic.Resource(EtcdRestoreGVR).Namespace(k.Namespace).Create(ctx, er, createOpts)
		if err == nil {
			break
		}
		if !apierrors.IsAlreadyExists(err) || attempt == 3 {
			return r.fail(ctx, OpStepRequest, fmt.Errorf("creating etcdrestore %s: %w", o.Cluster, err))
		}
		// An EtcdRestore of that name: the tool's own from a finished
		// restore is deleted, anything else refuses.
		if err := o.removeLeftover(ctx, rep, r.log); err != nil {
			return r.fail(ctx, OpStepRequest, err)
		}
		if o.DryRun {
			// The dry-run create cannot pass while the old one exists.
			break
		}
	}
	return nil
}

// verify discovers the restored cluster again and verifies it
// (restore.VerifyRebuilt): every member healthy, size members, the revision at
// least the snapshot's, its keys.
func (r *operatorRestore) verify(ctx context.Context, size int64) error {
	o, k, rep := r.o, r.k, r.rep
	cs, err := k.Clusters(ctx, o.Cluster)
	if err != nil {
		return r.fail(ctx, OpStepVerify, err)
	}
	rep.Endpoints = cs[0].Endpoints
	cfg, release, err := k.Connect(ctx, cs[0], o.DialTimeout)
	defer release()
	if err != nil {
		return r.fail(ctx, OpStepVerify, err)
	}
	vo := restore.VerifyOptions{Etcd: cfg, Timeout: o.VerifyTimeout, MinRevision: r.minRevision, ExpectedKeys: -1,
		ExpectedMembers: int(size), ProbeTimeout: o.ProbeTimeout, Log: o.Log}
	if r.plan.Snapshot != nil {
		// Keys without a lease must all be back; leased ones may have
		// expired since the restored members started (reported apart).
		r.plan.Snapshot.Expect(&vo)
	}
	rep.Verify, err = restore.VerifyRebuilt(ctx, vo)
	rep.Duration = time.Since(r.start)
	if err != nil {
		return r.fail(ctx, OpStepVerify, err)
	}
	return nil
}

// leftoverFinished says whether er, an EtcdRestore named like the one to
// create, may be deleted (and why, or why not): only one the tool created
// (label LabelManagedBy=ManagedBy), and only once etcd-operator is done with
// it. etcd-operator's restore operator acts on an EtcdRestore without a
// status once, then sets status.succeeded (or a reason when it failed) and
// never looks at it again, except that the restored cluster's seed member
// fetches the snapshot through it: so a succeeded one (or one whose
// EtcdCluster was replaced: the current one is not the uid in
// AnnotationClusterUID) is finished once the current EtcdCluster has a
// ready member or is older than DefaultOperatorRestoreTimeout. ec is the
// current EtcdCluster, nil when there is none.
func leftoverFinished(er, ec *unstructured.Unstructured, now time.Time) (why string, ok bool) {
	if er.GetLabels()[LabelManagedBy] != ManagedBy {
		return fmt.Sprintf("it was not created by etcd-recovery (no label %s=%s)", LabelManagedBy, ManagedBy), false
	}
	succeeded, hasStatus, _ := unstructured.NestedBool(er.Object, "status", "succeeded")
	reason, _, _ := unstructured.NestedString(er.Object, "status", "reason")
	if hasStatus && !succeeded && reason != "" {
		return "etcd-operator reported that restore failed: " + reason, true
	}
	oldUID := er.GetAnnotations()[AnnotationClusterUID]
	if ec == nil {
		return "etcd-operator may still be restoring from it: the EtcdCluster is deleted and not yet recreated", false
	}
	replaced := oldUID != "" && types.UID(oldUID) != ec.GetUID()
	if !succeeded && !replaced {
		return fmt.Sprintf("etcd-operator has not acted on it yet: it has no status, and the EtcdCluster is still the one it references (uid %s)", ec.GetUID()), false
	}
	acted := "etcd-operator reported it succeeded"
	if !succeeded {
		acted = fmt.Sprintf("etcd-operator replaced the EtcdCluster it references (uid %s; now uid %s)", oldUID, ec.GetUID())
	}
	ready, _, _ := unstructured.NestedStringSlice(ec.Object, "status", "members", "ready")
	age := now.Sub(ec.GetCreationTimestamp().Time)
	switch {
	case len(ready) > 0:
		return fmt.Sprintf("%s, and the restored EtcdCluster has %d ready member(s)", acted, len(ready)), true
	case age > DefaultOperatorRestoreTimeout:
		return fmt.Sprintf("%s, and the EtcdCluster was created %s ago", acted, age.Round(time.Second)), true
	}
	return fmt.Sprintf("%s, but the restored EtcdCluster (uid %s, created %s ago) has no ready member yet: its seed member may still be "+
		"fetching the snapshot through this EtcdRestore", acted, ec.GetUID(), age.Round(time.Second)), false
}

// leftoverError refuses a restore because of an existing EtcdRestore.
func leftoverError(er *unstructured.Unstructured, why string) error {
	return fmt.Errorf("an EtcdRestore %s already exists (created %s) and %s: etcd-operator acts on an EtcdRestore once, and etcd-recovery "+
		"deletes only its own once that restore is over; when it is over, run this again, or delete it if etcd-operator will never act on it "+
		"(kubectl -n %s delete etcdrestore %s, from a machine with kubectl; its annotations keep the replaced EtcdCluster's spec)",
		er.GetName(), er.GetCreationTimestamp().UTC().Format(time.RFC3339), why, er.GetNamespace(), er.GetName())
}

// removeLeftover deletes the EtcdRestore named o.Cluster when
// leftoverFinished allows it (in a dry run, a server-side dry-run delete),
// records it in rep (Replaced, and a "delete" action before "create"), logs
// its annotations, and waits until it is gone.
func (o *OperatorRestoreOptions) removeLeftover(ctx context.Context, rep *OperatorRestoreReport, log *slog.Logger) error {
	k := o.Kube
	ers := k.Dynamic.Resource(EtcdRestoreGVR).Namespace(k.Namespace)
	old, err := ers.Get(ctx, o.Cluster, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // gone meanwhile
	}
	if err != nil {
		return fmt.Errorf("reading the existing etcdrestore %s: %w", o.Cluster, err)
	}
	ec, err := k.Dynamic.Resource(EtcdClusterGVR).Namespace(k.Namespace).Get(ctx, o.Cluster, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		ec, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("reading etcdcluster %s: %w", o.Cluster, err)
	}
	why, ok := leftoverFinished(old, ec, time.Now())
	if !ok {
		return leftoverError(old, why)
	}
	uid := old.GetUID()
	status, _, _ := unstructured.NestedMap(old.Object, "status")
	rep.Replaced = &ReplacedRestore{Name: old.GetName(), UID: uid, Created: old.GetCreationTimestamp().UTC(),
		Annotations: old.GetAnnotations(), Status: status, Why: why}
	obj := old.DeepCopy()
	unstructured.RemoveNestedField(obj.Object, "metadata", "managedFields")
	action := OperatorAction{Verb: "delete", What: fmt.Sprintf("EtcdRestore %s/%s (uid %s, created %s) of an earlier restore: %s",
		k.Namespace, old.GetName(), uid, rep.Replaced.Created.Format(time.RFC3339), why), Object: obj.Object}
	at := slices.IndexFunc(rep.Actions, func(a OperatorAction) bool { return a.Verb == "create" })
	if at < 0 {
		at = len(rep.Actions)
	}
	rep.Actions = slices.Insert(rep.Actions, at, action)
	log.Info("deleting the EtcdRestore of an earlier restore", "etcdrestore", old.GetName(), "uid", uid,
		"created", rep.Replaced.Created.Format(time.RFC3339), "why", why, "annotations", old.GetAnnotations(), "status", status, "dry_run", o.DryRun)
	del := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	if o.DryRun {
		del.DryRun = []string{metav1.DryRunAll}
	}
	if err := ers.Delete(ctx, old.GetName(), del); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting etcdrestore %s of an earlier restore (the toolkit's Role needs delete on etcdrestores): %w", old.GetName(), err)
	}
	if o.DryRun {
		return nil
	}
	// Without finalizers it is gone at once; wait a little in case.
	deadline := time.Now().Add(30 * time.Second)
	for {
		cur, err := ers.Get(ctx, old.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && cur.GetUID() != uid {
			return nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("waiting for etcdrestore %s to be deleted: %w", old.GetName(), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcdrestore %s (uid %s) was deleted but is still there after 30s (finalizers %v)", old.GetName(), uid, cur.GetFinalizers())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (o *OperatorRestoreOptions) defaults() {
	if o.AWSSecret == "" {
		o.AWSSecret = COSSecretName
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultOperatorRestoreTimeout
	}
	if o.VerifyTimeout <= 0 {
		o.VerifyTimeout = 2 * time.Minute
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 5 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// waitRestored polls the EtcdCluster until etcd-operator's restored one (a
// uid other than the replaced one's) is Running with spec.size ready
// members, and returns that size. A failed EtcdRestore (status.succeeded
// false with a reason) stops the wait.
func (o *OperatorRestoreOptions) waitRestored(ctx context.Context, rep *OperatorRestoreReport) (int64, error) {
	k := o.Kube
	start := time.Now()
	deadline := start.Add(o.Timeout)
	rep.LastSeen = "nothing yet"
	for {
		size, uid, done, seen, err := o.checkRestored(ctx, rep.OldUID)
		rep.Waited = time.Since(start)
		if seen != "" {
			if seen != rep.LastSeen {
				o.Log.Info("waiting for etcd-operator", "etcdcluster", o.Cluster, "seen", seen)
			}
			rep.LastSeen = seen
		}
		if err != nil {
			return 0, err
		}
		if done {
			rep.NewUID = uid
			return size, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("etcd-operator did not bring etcdcluster %s/%s back with all members ready within %v; last seen: %s",
				k.Namespace, o.Cluster, o.Timeout, rep.LastSeen)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w; last seen: %s", ctx.Err(), rep.LastSeen)
		case <-time.After(min(o.PollInterval, time.Until(deadline)+time.Millisecond)):
		}
	}
}

// checkRestored looks once. Errors reading the objects are what is seen
// (the API server may blip during a long wait), except a refusal.
func (o *OperatorRestoreOptions) checkRestored(ctx context.Context, oldUID types.UID) (size int64, uid types.UID, done bool, seen string, err error) {
	k := o.Kube
	if er, gerr := k.Dynamic.Resource(EtcdRestoreGVR).Namespace(k.Namespace).Get(ctx, o.Cluster, metav1.GetOptions{}); gerr == nil {
		ok, found, _ := unstructured.NestedBool(er.Object, "status", "succeeded")
		reason, _, _ := unstructured.NestedString(er.Object, "status", "reason")
		if found && !ok && reason != "" {
			return 0, "", false, "etcdrestore failed: " + reason, fmt.Errorf("%w: %s", errEtcdRestoreFailed, reason)
		}
	} else if apierrors.IsForbidden(gerr) || apierrors.IsUnauthorized(gerr) {
		return 0, "", false, "", gerr
	}
	ec, gerr := k.Dynamic.Resource(EtcdClusterGVR).Namespace(k.Namespace).Get(ctx, o.Cluster, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(gerr):
		return 0, "", false, "etcdcluster deleted by the restore operator, not yet recreated", nil
	case apierrors.IsForbidden(gerr) || apierrors.IsUnauthorized(gerr):
		return 0, "", false, "", gerr
	case gerr != nil:
		return 0, "", false, "reading the etcdcluster: " + gerr.Error(), nil
	}
	if ec.GetUID() == oldUID {
		phase, _, _ := unstructured.NestedString(ec.Object, "status", "phase")
		return 0, "", false, fmt.Sprintf("the old etcdcluster (uid %s, phase %q): not yet replaced by the restore operator", oldUID, phase), nil
	}
	c, ferr := fromObject(ec)
	if ferr != nil {
		return 0, "", false, ferr.Error(), nil
	}
	ready, _, _ := unstructured.NestedStringSlice(ec.Object, "status", "members", "ready")
	unready, _, _ := unstructured.NestedStringSlice(ec.Object, "status", "members", "unready")
	seen = fmt.Sprintf("restored etcdcluster (uid %s): phase %q, %d/%d members ready", ec.GetUID(), c.Phase, len(ready), c.Size)
	if len(unready) > 0 {
		seen += " (unready: " + strings.Join(unready, ", ") + ")"
	}
	if c.Phase == "Failed" {
		reason, _, _ := unstructured.NestedString(ec.Object, "status", "reason")
		return 0, "", false, seen, fmt.Errorf("the restored etcdcluster failed: %s", reason)
	}
	return c.Size, ec.GetUID(), c.Phase == "Running" && c.Size > 0 && int64(len(ready)) == c.Size, seen, nil
}

// StagedRemoveTimeout bounds the deletion of the staged copy, which runs
// with a fresh context when the restore was cancelled.
const StagedRemoveTimeout = 30 * time.Second

// errEtcdRestoreFailed: etcd-operator reported the EtcdRestore failed (it
// is done with it, and with the staged copy).
var errEtcdRestoreFailed = errors.New("etcd-operator reports the EtcdRestore failed")

// removeStaged deletes the staged plaintext copy (rep.StagedKey) and
// records it in rep: as soon as the restored cluster is verified (or its
// verification failed: etcd-operator brought it up, so it is done with the
// copy), and when the restore failed or was cancelled before the
// EtcdRestore existed (created false) or etcd-operator reported the
// EtcdRestore failed.
//
// It keeps the copy when the EtcdRestore exists and the restore was
// cancelled or its wait failed before the restored cluster was seen ready
// (rep.NewUID empty): etcd-operator deletes the reference EtcdCluster
// first and its seed member fetches the snapshot afterwards, so deleting
// it then could leave a seed member with no data. The kept copy is
// reported (rep.StagedKept, a warning, the log): a rerun's adoption
// (AdoptOperatorRestore) deletes it once the restored cluster is verified,
// and prune deletes it once older than catalog.StagedMaxAge.
//
// It runs with a context of its own (not cancelled with ctx), bounded by
// StagedRemoveTimeout.
func (o *OperatorRestoreOptions) removeStaged(ctx context.Context, rep *OperatorRestoreReport, log *slog.Logger, rerr error, created bool) {
	if rep.StagedKey == "" {
		return
	}
	why := "the restored cluster is verified"
	if rerr != nil {
		why = "the restore failed"
		if ctx.Err() != nil {
			why = "the restore was cancelled"
		}
	}
	if rerr != nil && created && rep.NewUID == "" && !errors.Is(rerr, errEtcdRestoreFailed) {
		rep.StagedKept = fmt.Sprintf("%s after the EtcdRestore was created: etcd-operator's seed member may still fetch the staged copy "+
			"(it does so after deleting the reference EtcdCluster); a rerun's adoption of that EtcdRestore deletes it once the restored cluster "+
			"is verified, else prune deletes it once older than %v", why, catalog.StagedMaxAge)
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("the staged plaintext snapshot %s is kept: %s", rep.StagedKey, rep.StagedKept))
		log.Warn("staged plaintext snapshot kept: etcd-operator may still fetch it; the rerun's adoption or prune removes it",
			"key", rep.StagedKey, "why", why, "prune_after", catalog.StagedMaxAge)
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StagedRemoveTimeout)
	defer cancel()
	if rerr != nil && created {
		switch {
		case errors.Is(rerr, errEtcdRestoreFailed):
			why += " (etcd-operator reported the EtcdRestore failed)"
		case rep.NewUID != "":
			why += " (after etcd-operator brought the restored cluster up)"
		}
	}
	if err := o.Store.Delete(dctx, []string{rep.StagedKey}); err != nil {
		rep.StagedRemoveError = err.Error()
		msg := fmt.Sprintf("the staged plaintext snapshot %s could not be deleted (%s): %v; prune deletes staged copies older than an hour, or delete it by hand",
			rep.StagedKey, why, err)
		rep.Warnings = append(rep.Warnings, msg)
		log.Error("could not delete the staged plaintext snapshot", "key", rep.StagedKey, "why", why, "err", err)
		return
	}
	rep.StagedRemoved = true
	rep.Actions = append(rep.Actions, OperatorAction{Verb: "remove", What: fmt.Sprintf("staged plaintext snapshot s3://%s: deleted, %s", rep.S3Path, why)})
	log.Info("staged plaintext snapshot deleted", "key", rep.StagedKey, "why", why)
}

// stageVerified uploads the verified snapshot file to key, reads the object
// back and checks its sha256 and size against the file's; on a mismatch the
// object is removed.
func stageVerified(ctx context.Context, st store.Store, file, key string) (string, int64, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	w, err := objectio.Write(ctx, st, key, f, objectio.Encoding{Compression: objectio.CompressNone})
	if err != nil {
		return "", 0, fmt.Errorf("uploading %s: %w", key, err)
	}
	if err := objectio.ReadBack(ctx, st, key, w.Expect(objectio.CompressNone)); err != nil {
		var oe *objectio.Error
		if !errors.As(err, &oe) {
			return "", 0, fmt.Errorf("reading back %s: %w", key, err)
		}
		_ = st.Delete(context.WithoutCancel(ctx), []string{key})
		return "", 0, fmt.Errorf("staged object %s reads back as sha256 %s (%d bytes), uploaded %s (%d bytes): removed it",
			key, oe.Got.StoredSHA256, oe.Got.StoredSize, w.StoredSHA256, w.StoredSize)
	}
	return w.StoredSHA256, w.StoredSize, nil
}
