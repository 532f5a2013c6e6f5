package fleet_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// orphanEnv is one subtest's namespace, bucket prefix and clients.
type orphanEnv struct {
	k      *testenv.KubeAPIServer
	ns     string
	dyn    dynamic.Interface
	client *kube.Client
	store  store.Store
	layout catalog.Layout
	prefix string
	bucket string
	m      *testenv.MinIO
}

func newOrphanEnv(t *testing.T, k *testenv.KubeAPIServer, ns string) *orphanEnv {
	t.Helper()
	kubetest.CreateNamespaces(t, k.Clientset(t, ""), ns)
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	prefix := testenv.Prefix(t)
	c, err := kube.New(kube.Config{Rest: k.RestConfig(""), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	return &orphanEnv{k: k, ns: ns, dyn: k.Dynamic(t, ""), client: c, store: testfix.Store(t, m, bucket),
		layout: catalog.Layout{Prefix: prefix}, prefix: prefix, bucket: bucket, m: m}
}

// backups writes committed backup folders (manifest + snapshot objects) of
// id, taken at each of times, and an incomplete one at the oldest time.
func (e *orphanEnv) backups(t *testing.T, id string, kind catalog.Kind, times ...time.Time) {
	t.Helper()
	ctx := testfix.Context(t, time.Minute)
	for i, at := range times {
		name := catalog.NewBackupName(at, kind)
		objs := []string{catalog.StartedObject, catalog.SnapshotObjectZstd, catalog.ManifestObject}
		if i == 0 {
			objs = []string{catalog.StartedObject} // an incomplete folder
		}
		for _, o := range objs {
			if _, err := e.store.Put(ctx, e.layout.Key(id, name, o), strings.NewReader("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func (e *orphanEnv) etcdCluster(t *testing.T, name string) {
	t.Helper()
	o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": kube.APIVersion, "kind": kube.KindEtcdCluster,
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"size": int64(1), "version": "3.5.17"}}}
	if _, err := e.dyn.Resource(kube.EtcdClusterGVR).Namespace(e.ns).Create(testfix.Context(t, time.Minute), o, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *orphanEnv) deleteEtcdCluster(t *testing.T, name string) {
	t.Helper()
	if err := e.dyn.Resource(kube.EtcdClusterGVR).Namespace(e.ns).Delete(testfix.Context(t, time.Minute), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *orphanEnv) claim(t *testing.T) {
	t.Helper()
	if _, created, err := prune.ClaimPrefix(testfix.Context(t, time.Minute), e.store, e.layout, e.ns, time.Now()); err != nil || !created {
		t.Fatalf("claim: created %v, %v", created, err)
	}
}

// run is one orphan pass at now, as a fresh process would (new client).
func (e *orphanEnv) run(t *testing.T, now time.Time, c *kube.Client) (*prune.OrphanReport, error) {
	t.Helper()
	if c == nil {
		var err error
		if c, err = kube.New(kube.Config{Rest: e.k.RestConfig(""), Namespace: e.ns}); err != nil {
			t.Fatal(err)
		}
	}
	return fleet.Orphans(testfix.Context(t, time.Minute), c, e.store, e.layout, fleet.OrphanOptions{Now: func() time.Time { return now }}, nil)
}

// deleteAllBackups runs the tool's `delete --cluster-id id --all-backups`
// with args on the env's bucket and environment env, fails the test
// unless it exits wantExit, and returns its stdout and stderr.
func (e *orphanEnv) deleteAllBackups(t *testing.T, id string, wantExit int, env []string, args ...string) string {
	t.Helper()
	cos := []string{"--cos-endpoint", e.m.Endpoint, "--cos-region", e.m.Region, "--cos-ca-file", e.m.CAFile, "--bucket", e.bucket, "--prefix", e.prefix}
	out, errb, code := testfix.RunTool(t, testfix.Context(t, 2*time.Minute), testfix.Tool(t), env,
		append(append([]string{"delete", "--cluster-id", id, "--all-backups"}, args...), cos...)...)
	if code != wantExit {
		t.Fatalf("delete --all-backups %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, wantExit, out, errb)
	}
	return out + errb
}

// folders counts id's backup folders in the store.
func (e *orphanEnv) folders(t *testing.T, id string) int {
	t.Helper()
	es, err := catalog.Inventory(testfix.Context(t, time.Minute), e.store, e.layout, id)
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

func (e *orphanEnv) marker(t *testing.T, id string) *prune.OrphanMarker {
	t.Helper()
	m, err := prune.ReadOrphanMarker(testfix.Context(t, time.Minute), e.store, e.layout, id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func orphanOf(t *testing.T, rep *prune.OrphanReport, id string) prune.Orphan {
	t.Helper()
	for _, o := range rep.Orphans {
		if o.ClusterID == id {
			return o
		}
	}
	t.Fatalf("no orphan %s in the report: %+v", id, rep.Orphans)
	return prune.Orphan{}
}

// TestOrphans: backups that follow their cluster's life, against a real
// kube-apiserver and MinIO. Time is set through OrphanPlan.Now.
func TestOrphans(t *testing.T) {
	k := testenv.StartKubeAPIServer(t)
	kubetest.InstallCRDs(t, k)
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	grace := prune.DefaultOrphanGrace

	t.Run("GraceThenDeleted", func(t *testing.T) {
		t.Parallel()
		e := newOrphanEnv(t, k, "kubx-etcd-41")
		e.claim(t)
		e.etcdCluster(t, "etcd-live")
		e.backups(t, "etcd-live", catalog.KindScheduled, t0.Add(-16*time.Hour), t0.Add(-8*time.Hour), t0)
		e.backups(t, "etcd-gone", catalog.KindScheduled, t0.Add(-16*time.Hour), t0.Add(-8*time.Hour), t0)
		e.backups(t, "etcd-gone", catalog.KindManual, t0.Add(-time.Hour), t0.Add(-30*time.Minute))
		// First seen an hour after its newest backup: recorded, nothing
		// deleted; the grace runs from the later of the two, the first
		// sighting.
		seen := t0.Add(time.Hour)
		rep, err := e.run(t, seen, nil)
		if err != nil {
			t.Fatal(err)
		}
		o := orphanOf(t, rep, "etcd-gone")
		if o.State != prune.OrphanWaiting || !o.DeleteAfter.Equal(seen.Add(grace)) || len(rep.Orphans) != 1 {
			t.Fatalf("first pass: %+v", rep.Orphans)
		}
		mk := e.marker(t, "etcd-gone")
		if mk == nil || !mk.FirstSeen.Equal(seen) || !mk.DeleteAfter.Equal(seen.Add(grace)) {
			t.Fatalf("marker after the first pass: %+v", mk)
		}
		// A restart (new client, new process) just before the grace ends:
		// the marker keeps its first sighting, nothing goes.
		rep, err = e.run(t, seen.Add(grace-time.Minute), nil)
		if err != nil {
			t.Fatal(err)
		}
		if o := orphanOf(t, rep, "etcd-gone"); o.State != prune.OrphanWaiting || !o.FirstSeen.Equal(t0.Add(time.Hour)) {
			t.Fatalf("before the grace: %+v", o)
		}
		if n := e.folders(t, "etcd-gone"); n != 5 {
			t.Fatalf("before the grace: %d folders, want 5", n)
		}
		// After the grace: every folder (manual and incomplete ones too)
		// and the marker; the live cluster keeps everything.
		rep, err = e.run(t, seen.Add(grace+time.Minute), nil)
		if err != nil {
			t.Fatal(err)
		}
		if o := orphanOf(t, rep, "etcd-gone"); o.State != prune.OrphanDeleted || len(o.Deleted) != 5 {
			t.Fatalf("after the grace: %+v", o)
		}
		if n := e.folders(t, "etcd-gone"); n != 0 {
			t.Fatalf("after the grace: %d folders left", n)
		}
		if e.marker(t, "etcd-gone") != nil {
			t.Fatal("the marker is left")
		}
		if n := e.folders(t, "etcd-live"); n != 3 {
			t.Fatalf("the live cluster has %d folders, want 3", n)
		}
		if keys := testfix.Keys(t, e.store, e.layout.RootPrefix()); !slices.Contains(keys, catalog.OwnerKey(e.layout)) {
			t.Fatalf("the ownership record went: %v", keys)
		}
	})

	// Backups long past the grace when the cluster is first seen gone (a
	// namespace lost for days, then recreated): they stay the whole grace
	// after the first sighting, not just until the next run.
	t.Run("FirstSeenAfterGraceWaitsTheGrace", func(t *testing.T) {
		t.Parallel()
		e := newOrphanEnv(t, k, "kubx-etcd-42")
		e.claim(t)
		e.backups(t, "etcd-old", catalog.KindScheduled, t0.Add(-30*24*time.Hour), t0.Add(-20*24*time.Hour))
		rep, err := e.run(t, t0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if o := orphanOf(t, rep, "etcd-old"); o.State != prune.OrphanWaiting || !o.DeleteAfter.Equal(t0.Add(grace)) || e.folders(t, "etcd-old") != 2 {
			t.Fatalf("first sighting, long past the grace: %+v, want waiting until %s (one listing alone never deletes)", o, t0.Add(grace))
		}
		rep, err = e.run(t, t0.Add(8*time.Hour), nil)
		if err != nil {
			t.Fatal(err)
		}
		if o := orphanOf(t, rep, "etcd-old"); o.State != prune.OrphanWaiting || e.folders(t, "etcd-old") != 2 {
			t.Fatalf("second run, 8 h after the first sighting: %+v, want waiting with its 2 folders", o)
		}
		if _, err := e.run(t, t0.Add(grace), nil); err != nil {
			t.Fatal(err)
		}
		if n := e.folders(t, "etcd-old"); n != 0 {
			t.Fatalf("the grace after the first sighting: %d folders left", n)
		}
	})

	t.Run("FailedListingDeletesNothing", func(t *testing.T) {
		t.Parallel()
		e := newOrphanEnv(t, k, "kubx-etcd-43")
		e.claim(t)
		e.backups(t, "etcd-gone", catalog.KindScheduled, t0.Add(-8*time.Hour), t0)
		if _, err := e.run(t, t0, nil); err != nil {
			t.Fatal(err)
		}
		// A token without list rights (the namespace's default service
		// account, no Role), then an API server that cannot be reached.
		if _, err := k.Clientset(t, "").CoreV1().ServiceAccounts(e.ns).Create(testfix.Context(t, time.Minute),
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "no-rights"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tok := kubetest.SAToken(t, k.Clientset(t, ""), e.ns, "no-rights")
		noRights, err := kube.New(kube.Config{Rest: k.RestConfig(tok), Namespace: e.ns})
		if err != nil {
			t.Fatal(err)
		}
		dead := k.RestConfig("")
		dead.Host = "https://127.0.0.1:1"
		dead.Timeout = 2 * time.Second
		unreachable, err := kube.New(kube.Config{Rest: dead, Namespace: e.ns})
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]*kube.Client{"forbidden": noRights, "unreachable": unreachable} {
			rep, err := e.run(t, t0.Add(grace+time.Hour), c)
			var pe *prune.OrphanError
			if !errors.As(err, &pe) || !pe.NothingDeleted || pe.Step() != prune.OrphanStepClusters || rep != nil {
				t.Fatalf("%s: %v (report %v), want a failure at step %q, nothing deleted", name, err, rep, prune.OrphanStepClusters)
			}
			if n := e.folders(t, "etcd-gone"); n != 2 {
				t.Fatalf("%s: %d folders left, want 2", name, n)
			}
		}
	})

	t.Run("RecreatedWithinGraceKeeps", func(t *testing.T) {
		t.Parallel()
		e := newOrphanEnv(t, k, "kubx-etcd-44")
		e.claim(t)
		e.etcdCluster(t, "etcd-back")
		e.backups(t, "etcd-back", catalog.KindScheduled, t0.Add(-8*time.Hour), t0)
		e.deleteEtcdCluster(t, "etcd-back")
		if _, err := e.run(t, t0.Add(time.Hour), nil); err != nil {
			t.Fatal(err)
		}
		if e.marker(t, "etcd-back") == nil {
			t.Fatal("no marker after the first pass")
		}
		e.etcdCluster(t, "etcd-back")
		rep, err := e.run(t, t0.Add(2*time.Hour), nil)
		if err != nil {
			t.Fatal(err)
		}
		if o := orphanOf(t, rep, "etcd-back"); o.State != prune.OrphanReturned {
			t.Fatalf("recreated: %+v", o)
		}
		if e.marker(t, "etcd-back") != nil {
			t.Fatal("the marker stayed after the EtcdCluster came back")
		}
		// Long after the grace: still its backups.
		if _, err := e.run(t, t0.Add(grace+time.Hour), nil); err != nil {
			t.Fatal(err)
		}
		if n := e.folders(t, "etcd-back"); n != 2 {
			t.Fatalf("recreated: %d folders, want 2", n)
		}
	})

	t.Run("RestoreInFlightKeeps", func(t *testing.T) {
		t.Parallel()
		e := newOrphanEnv(t, k, "kubx-etcd-45")
		e.claim(t)
		e.backups(t, "etcd-restoring", catalog.KindScheduled, t0.Add(-8*time.Hour), t0)
		if _, err := e.run(t, t0, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := e.dyn.Resource(kube.EtcdRestoreGVR).Namespace(e.ns).Create(testfix.Context(t, time.Minute), kubetest.EtcdRestoreObj("etcd-restoring"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rep, err := e.run(t, t0.Add(grace+time.Hour), nil)
		if err != nil {
			t.Fatal(err)
		}
		if o := orphanOf(t, rep, "etcd-restoring"); o.State != prune.OrphanRestoring || !slices.Contains(o.Restores, "etcd-restoring") {
			t.Fatalf("restore in flight: %+v", o)
		}
		if n := e.folders(t, "etcd-restoring"); n != 2 {
			t.Fatalf("restore in flight: %d folders, want 2", n)
		}
	})

	t.Run("PrefixNotOwnedDeletesNothing", func(t *testing.T) {
		t.Parallel()
		e := newOrphanEnv(t, k, "kubx-etcd-46")
		e.backups(t, "etcd-gone", catalog.KindScheduled, t0.Add(-8*time.Hour), t0)
		check := func(what, want string) {
			t.Helper()
			for _, at := range []time.Time{t0, t0.Add(grace + time.Hour), t0.Add(grace + 9*time.Hour)} {
				rep, err := e.run(t, at, nil)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				o := orphanOf(t, rep, "etcd-gone")
				if rep.Owned || o.State != prune.OrphanNotOwned || !strings.Contains(o.Reason, want) || !strings.Contains(rep.NotOwned, want) {
					t.Fatalf("%s: owned %v, %+v; want report only, saying %q", what, rep.Owned, o, want)
				}
			}
			if n := e.folders(t, "etcd-gone"); n != 2 || e.marker(t, "etcd-gone") != nil {
				t.Fatalf("%s: %d folders (want 2), marker %v", what, n, e.marker(t, "etcd-gone"))
			}
		}
		check("unclaimed", "not claimed")
		// Claimed by another namespace.
		if _, _, err := prune.ClaimPrefix(testfix.Context(t, time.Minute), e.store, e.layout, "kubx-etcd-99", time.Now()); err != nil {
			t.Fatal(err)
		}
		check("owned by another namespace", "names namespace kubx-etcd-99")
		if _, _, err := prune.ClaimPrefix(testfix.Context(t, time.Minute), e.store, e.layout, e.ns, time.Now()); !errors.Is(err, prune.ErrOwnedByOther) {
			t.Fatalf("a second claim: %v, want ErrOwnedByOther", err)
		}
		// The bucket root: shared, never owned (the record cannot even be
		// written there).
		root := &orphanEnv{k: e.k, ns: e.ns, dyn: e.dyn, client: e.client, store: testfix.Store(t, e.m, e.m.NewBucket(t)), layout: catalog.Layout{}}
		root.backups(t, "etcd-gone", catalog.KindScheduled, t0.Add(-8*time.Hour), t0)
		if _, _, err := prune.ClaimPrefix(testfix.Context(t, time.Minute), root.store, root.layout, e.ns, time.Now()); !errors.Is(err, prune.ErrSharedPrefix) {
			t.Fatalf("claim of the bucket root: %v", err)
		}
		for _, at := range []time.Time{t0, t0.Add(grace + time.Hour)} {
			rep, err := root.run(t, at, nil)
			if err != nil {
				t.Fatal(err)
			}
			if o := orphanOf(t, rep, "etcd-gone"); o.State != prune.OrphanNotOwned || !strings.Contains(o.Reason, "prefix is empty") {
				t.Fatalf("bucket root: %+v", o)
			}
		}
		if n := root.folders(t, "etcd-gone"); n != 2 {
			t.Fatalf("bucket root: %d folders, want 2", n)
		}
	})

	// While an EtcdRestore references the cluster, its EtcdCluster may be
	// absent only because etcd-operator is recreating it (restore --via
	// etcd-operator): delete --all-backups refuses, naming the EtcdRestore,
	// with --ignore-etcdcluster too, and deletes once it is gone.
	t.Run("DeleteAllBackupsWhileRestoring", func(t *testing.T) {
		t.Parallel()
		e := newOrphanEnv(t, k, "kubx-etcd-48")
		kubetest.CreateCOSSecret(t, k.Clientset(t, ""), e.ns, e.m)
		e.backups(t, "etcd-r", catalog.KindScheduled, t0.Add(-8*time.Hour), t0)
		other := kubetest.EtcdRestoreObj("etcd-r-restore-1")
		if err := unstructured.SetNestedField(other.Object, "etcd-r", "spec", "etcdCluster", "name"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.dyn.Resource(kube.EtcdRestoreGVR).Namespace(e.ns).Create(testfix.Context(t, time.Minute), other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		run := func(wantExit int, args ...string) string {
			t.Helper()
			return e.deleteAllBackups(t, "etcd-r", wantExit, []string{"KUBECONFIG=" + k.Kubeconfig(t, "", e.ns)}, args...)
		}
		for _, args := range [][]string{nil, {"--ignore-etcdcluster"}} {
			if out := run(1, args...); !strings.Contains(out, "EtcdRestore "+e.ns+"/etcd-r-restore-1 references it") {
				t.Fatalf("refusal %v does not name the EtcdRestore:\n%s", args, out)
			}
			if n := e.folders(t, "etcd-r"); n != 2 {
				t.Fatalf("refused %v, yet %d folders left, want 2", args, n)
			}
		}
		if err := e.dyn.Resource(kube.EtcdRestoreGVR).Namespace(e.ns).Delete(testfix.Context(t, time.Minute), "etcd-r-restore-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if out := run(0, "-o", "json"); !strings.Contains(out, `"etcdRestores": "none"`) {
			t.Fatalf("the restore is over: the JSON does not say what the check found:\n%s", out)
		}
		if n := e.folders(t, "etcd-r"); n != 0 {
			t.Fatalf("the restore is over: %d folders left", n)
		}
	})

	t.Run("DeleteAllBackupsCLI", func(t *testing.T) {
		t.Parallel()
		e := newOrphanEnv(t, k, "kubx-etcd-47")
		kubetest.CreateCOSSecret(t, k.Clientset(t, ""), e.ns, e.m)
		e.etcdCluster(t, "etcd-x")
		e.backups(t, "etcd-x", catalog.KindScheduled, t0.Add(-8*time.Hour), t0)
		e.backups(t, "etcd-x", catalog.KindPreRestore, t0.Add(-2*time.Hour), t0.Add(-time.Hour))
		kc := k.Kubeconfig(t, "", e.ns)
		run := func(wantExit int, env []string, args ...string) string {
			t.Helper()
			return e.deleteAllBackups(t, "etcd-x", wantExit, env, args...)
		}
		withKube := []string{"KUBECONFIG=" + kc}
		noKube := []string{"KUBECONFIG=", "HOME=" + t.TempDir()}
		// The EtcdCluster exists: refused, nothing deleted.
		if out := run(1, withKube); !strings.Contains(out, "its EtcdCluster exists") {
			t.Fatalf("refusal does not say why:\n%s", out)
		}
		// No Kubernetes access: cannot check, refused (usage, exit 4).
		if out := run(4, noKube); !strings.Contains(out, "cannot be checked") {
			t.Fatalf("no kube access:\n%s", out)
		}
		// A dry run says what it would delete and deletes nothing.
		out := run(0, withKube, "--dry-run", "--ignore-etcdcluster", "-o", "json")
		var res struct {
			EtcdCluster string
			Delete      prune.DeleteAllReport
		}
		if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &res); err != nil {
			t.Fatalf("json: %v\n%s", err, out)
		}
		if !res.Delete.DryRun || len(res.Delete.Backups) != 4 || !strings.HasPrefix(res.EtcdCluster, "exists") {
			t.Fatalf("dry run: %+v", res)
		}
		if n := e.folders(t, "etcd-x"); n != 4 {
			t.Fatalf("the refusals or the dry run deleted: %d folders left, want 4", n)
		}
		// Forced while it exists: gone, pre-restore and incomplete too.
		run(0, withKube, "--ignore-etcdcluster")
		if n := e.folders(t, "etcd-x"); n != 0 {
			t.Fatalf("forced: %d folders left", n)
		}
		// Without an EtcdCluster: no force needed.
		e.backups(t, "etcd-x", catalog.KindManual, t0.Add(-time.Hour), t0)
		e.deleteEtcdCluster(t, "etcd-x")
		if out := run(0, withKube); !strings.Contains(out, "absent") {
			t.Fatalf("no EtcdCluster:\n%s", out)
		}
		if n := e.folders(t, "etcd-x"); n != 0 {
			t.Fatalf("no EtcdCluster: %d folders left", n)
		}
	})
}
