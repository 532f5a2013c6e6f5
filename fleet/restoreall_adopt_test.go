package fleet_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// TestAdoptVerifiesAsFresh: a killed attempt's EtcdRestore, adopted by a
// rerun (kube.AdoptOperatorRestore), is verified as a fresh restore is
// when its staged copy is still in the store (the copy's sha256 against
// the annotation, the restored cluster's keys against the copy's), so a
// restored cluster that holds other keys, or none, fails; a missing
// revision annotation is refused; with the staged copy gone the cluster is
// verified by its revision only, and says so. Against a real
// kube-apiserver, MinIO, real etcd and the etcd-operator stand-in.
func TestAdoptVerifiesAsFresh(t *testing.T) {
	t.Parallel()
	const ns = "kubx-etcd-74"
	s := newSmallWorld(t, ns)
	w, m, bucket, st, sa := s.w, s.m, s.bucket, s.st, s.sa
	ctx := testfix.Context(t, 4*time.Minute)
	kubetest.CreateCOSSecret(t, w.Admin, ns, m)
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	fc := s.backedUp(t, ctx, "etcd-ad0", "127.0.19.40", 30, layout)
	fc.Etcd.Members[0].Kill()
	op := kubetest.StartRestoreOperator(t, kubetest.RestoreOperatorOptions{Namespace: ns, Client: w.Admin, Dynamic: w.Dyn, RunningDelay: 200 * time.Millisecond})
	op.Register(fc)
	o := kube.OperatorRestoreOptions{Kube: sa, Cluster: fc.Name, Store: st, Layout: layout, Bucket: bucket, Endpoint: m.Endpoint, ForcePathStyle: true,
		ProbeTimeout: 2 * time.Second, DialTimeout: 2 * time.Second, VerifyTimeout: 4 * time.Second, Timeout: time.Minute,
		PollInterval: 200 * time.Millisecond, TempDir: t.TempDir(), Annotations: map[string]string{fleet.AnnotationRun: "run-adopt"}}
	rep, err := kube.OperatorRestore(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	cli := op.Wait(t, fc.Name, time.Minute).Members[0].Client(t)
	er, err := w.Dyn.Resource(kube.EtcdRestoreGVR).Namespace(ns).Get(ctx, fc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	origRev := er.GetAnnotations()[kube.AnnotationRevision]

	// The staged copy as the killed attempt would have left it: a
	// snapshot of what etcd-operator restored, its sha256 in the
	// EtcdRestore's annotation.
	snap := func() []byte {
		t.Helper()
		rc, err := cli.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}()
	sum := sha256.Sum256(snap)
	stagedKey := kube.StagedKey(layout, fc.Name, rep.Backup)
	annotate := func(key string, v *string) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
		if _, err := w.Dyn.Resource(kube.EtcdRestoreGVR).Namespace(ns).Patch(ctx, fc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sha := hex.EncodeToString(sum[:])
	annotate(kube.AnnotationStagedSHA256, &sha)
	stage := func() {
		t.Helper()
		if _, err := st.Put(ctx, stagedKey, bytes.NewReader(snap)); err != nil {
			t.Fatal(err)
		}
	}
	adopt := func(what string) (*kube.OperatorRestoreReport, error) {
		t.Helper()
		r, adopted, err := kube.AdoptOperatorRestore(ctx, o)
		if !adopted {
			t.Fatalf("%s: not adopted: %v", what, err)
		}
		return r, err
	}
	failsVerify := func(what string, err error, want string) {
		t.Helper()
		var oe *kube.OperatorRestoreError
		if !errors.As(err, &oe) || oe.Step() != kube.OpStepVerify || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want a failure at %q saying %q", what, err, kube.OpStepVerify, want)
		}
	}

	// The staged copy there and the cluster as restored: verified with its
	// key count, as a fresh restore.
	stage()
	r, err := adopt("as restored")
	if err != nil || r.Verification != "" || r.Verify == nil || r.Verify.ExpectedKeys == nil || *r.Verify.ExpectedKeys != 30 {
		t.Fatalf("as restored: %v, %+v", err, r)
	}
	// Other keys besides: fails.
	if _, err := cli.Put(ctx, "/registry/other", "x"); err != nil {
		t.Fatal(err)
	}
	stage()
	_, err = adopt("other keys")
	failsVerify("other keys", err, "key")
	// Empty: fails.
	if _, err := cli.Delete(ctx, "", clientv3.WithFromKey()); err != nil {
		t.Fatal(err)
	}
	stage()
	_, err = adopt("empty")
	failsVerify("empty", err, "key")
	// A staged copy that is not what etcd-operator was given: fails.
	if _, err := st.Put(ctx, stagedKey, bytes.NewReader(append(bytes.Clone(snap), 0))); err != nil {
		t.Fatal(err)
	}
	_, err = adopt("another staged copy")
	failsVerify("another staged copy", err, "sha256")
	// No revision annotation: refused, whatever the cluster holds.
	annotate(kube.AnnotationRevision, nil)
	_, err = adopt("no revision")
	failsVerify("no revision", err, kube.AnnotationRevision)
	bad := "12x"
	annotate(kube.AnnotationRevision, &bad)
	_, err = adopt("bad revision")
	failsVerify("bad revision", err, "is not a revision")
	// The staged copy gone (the killed attempt, or prune, deleted it):
	// only the members and the revision can be checked, and the report
	// says so.
	annotate(kube.AnnotationRevision, &origRev)
	if err := st.Delete(ctx, []string{stagedKey}); err != nil {
		t.Fatal(err)
	}
	r, err = adopt("staged copy gone")
	if err != nil || r.Verification != kube.VerifiedRevisionOnly {
		t.Errorf("staged copy gone: %v, verification %q, want %q", err, r.Verification, kube.VerifiedRevisionOnly)
	}
}
