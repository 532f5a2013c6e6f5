package kube

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/armada/etcd-recovery/restore"
)

// AdoptOperatorRestore finishes a restore that an earlier, killed process
// began (restore-all's rerun of a run): when an EtcdRestore named
// o.Cluster exists that the tool created (LabelManagedBy) with every
// annotation of o.Annotations, and etcd-operator has not reported it
// failed, it
//
//  1. waits, up to o.Timeout, for the restored EtcdCluster (a uid other
//     than the one in the EtcdRestore's AnnotationClusterUID) to be
//     Running with every member ready, as OperatorRestore's step 4 (at
//     once when etcd-operator finished meanwhile);
//  2. verifies it as OperatorRestore's step 5: every member healthy,
//     spec.size members, the revision at least the staged copy's
//     (AnnotationRevision, required) plus the bump it got, and, when the
//     staged copy is still in the store, its key count: the copy's sha256
//     must be AnnotationStagedSHA256.
//     With the copy gone only the members and the revision are checked:
//     Verification says VerifiedRevisionOnly;
//  3. deletes the staged copy the earlier process left (it kept it for
//     etcd-operator when it was cancelled after creating the EtcdRestore),
//     once the restored cluster is verified; a cancel or failed wait here
//     keeps it as OperatorRestore does (removeStaged).
//
// adopted is false, and nothing is done, when there is no such
// EtcdRestore (none, another's, another run's, or one etcd-operator
// failed): the caller restores as usual (OperatorRestore deletes a
// finished one of ours, and refuses one in flight).
func AdoptOperatorRestore(ctx context.Context, o OperatorRestoreOptions) (_ *OperatorRestoreReport, adopted bool, rerr error) {
	k := o.Kube
	if len(o.Annotations) == 0 || k == nil || o.Store == nil || o.Cluster == "" {
		return nil, false, nil
	}
	o.defaults()
	fail := func(step string, err error) error {
		return &OperatorRestoreError{Namespace: k.Namespace, Cluster: o.Cluster, At: step, Err: ctxErr(ctx, err)}
	}
	er, err := k.Dynamic.Resource(EtcdRestoreGVR).Namespace(k.Namespace).Get(ctx, o.Cluster, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fail(OpStepCluster, fmt.Errorf("reading etcdrestore %s: %w", o.Cluster, err))
	}
	ann := er.GetAnnotations()
	if er.GetLabels()[LabelManagedBy] != ManagedBy {
		return nil, false, nil
	}
	for key, v := range o.Annotations {
		if ann[key] != v {
			return nil, false, nil
		}
	}
	succeeded, hasStatus, _ := unstructured.NestedBool(er.Object, "status", "succeeded")
	reason, _, _ := unstructured.NestedString(er.Object, "status", "reason")
	if hasStatus && !succeeded && reason != "" {
		return nil, false, nil
	}
	start := time.Now()
	log := o.Log.With("namespace", k.Namespace, "etcdcluster", o.Cluster)
	rep := &OperatorRestoreReport{Namespace: k.Namespace, Cluster: o.Cluster, Backup: ann[AnnotationBackup],
		OldUID: types.UID(ann[AnnotationClusterUID]), StagedSHA256: ann[AnnotationStagedSHA256], Actions: []OperatorAction{}}
	rep.StagedKey = StagedKey(o.Layout, o.Cluster, ann[AnnotationBackup])
	rep.S3Path, _, _ = unstructured.NestedString(er.Object, "spec", "s3", "path")
	log.Info("an earlier attempt created the EtcdRestore: waiting for it and verifying the restored cluster", "etcdrestore", er.GetName(),
		"created", er.GetCreationTimestamp().UTC().Format(time.RFC3339), "backup", rep.Backup, "old_uid", rep.OldUID)
	defer func() { o.removeStaged(ctx, rep, log, rerr, true) }()

	o.step(OpStepWait)
	size, err := o.waitRestored(ctx, rep)
	if err != nil {
		return rep, true, fail(OpStepWait, err)
	}
	rep.Steps = append(rep.Steps, StepTime{Step: OpStepWait, Duration: time.Since(start)})
	t0 := time.Now()
	o.step(OpStepVerify)
	minRev, err := adoptedRevision(ann, er.GetName())
	if err != nil {
		return rep, true, fail(OpStepVerify, err)
	}
	facts, err := o.adoptedFacts(ctx, rep)
	if err != nil {
		return rep, true, fail(OpStepVerify, err)
	}
	if !o.NoBump {
		bump := uint64(restore.DefaultBumpRevision)
		if o.BumpRevision > 0 {
			bump = o.BumpRevision
		}
		minRev += int64(bump)
	}
	cs, err := k.Clusters(ctx, o.Cluster)
	if err != nil {
		return rep, true, fail(OpStepVerify, err)
	}
	rep.Endpoints = cs[0].Endpoints
	cfg, release, err := k.Connect(ctx, cs[0], o.DialTimeout)
	defer release()
	if err != nil {
		return rep, true, fail(OpStepVerify, err)
	}
	vo := restore.VerifyOptions{Etcd: cfg, Timeout: o.VerifyTimeout, MinRevision: minRev,
		ExpectedKeys: -1, ExpectedMembers: int(size), ProbeTimeout: o.ProbeTimeout, Log: o.Log}
	if facts != nil {
		// As a fresh restore: the snapshot's keys, the leased ones apart.
		facts.Expect(&vo)
	} else {
		rep.Verification = VerifiedRevisionOnly
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("the staged snapshot %s is gone: the adopted restore is verified by its members and revision only, not its key count", rep.StagedKey))
		log.Warn("the staged snapshot is gone: verifying the adopted restore by its revision only", "key", rep.StagedKey)
	}
	rep.Verify, err = restore.VerifyRebuilt(ctx, vo)
	rep.Duration = time.Since(start)
	if err != nil {
		return rep, true, fail(OpStepVerify, err)
	}
	rep.Steps = append(rep.Steps, StepTime{Step: OpStepVerify, Duration: time.Since(t0)})
	log.Info("the earlier attempt's restore is verified", "total", rep.Duration.Round(time.Millisecond))
	return rep, true, nil
}
