package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// kubePITRResources are the namespaced resources the workload writes.
var kubePITRResources = []schema.GroupVersionResource{
	{Version: "v1", Resource: "configmaps"},
	{Version: "v1", Resource: "secrets"},
	{Version: "v1", Resource: "serviceaccounts"},
	{Group: "apps", Version: "v1", Resource: "deployments"},
}

// kubeObjects is every object of kubePITRResources in the namespaces, and
// the namespaces themselves, as the API server returns them (JSON, so
// uid, resourceVersion, managedFields and data are all compared), keyed
// by resource/namespace/name.
func kubeObjects(t *testing.T, ctx context.Context, dc dynamic.Interface, namespaces ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	add := func(key string, obj any) {
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		out[key] = string(b)
	}
	for _, ns := range namespaces {
		n, err := dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get namespace %s: %v", ns, err)
		}
		add("namespaces//"+ns, n.Object)
		for _, gvr := range kubePITRResources {
			l, err := dc.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("list %s in %s: %v", gvr.Resource, ns, err)
			}
			for _, it := range l.Items {
				add(gvr.Resource+"/"+ns+"/"+it.GetName(), it.Object)
			}
		}
	}
	return out
}

// kubeKeys is the etcd dump (pitrDump) of the keys of the namespaces:
// their objects (/registry/<resource>/<ns>/...) and the namespace
// objects themselves. rev 0 is the newest; the header's revision is
// returned too.
func kubeKeys(t *testing.T, ctx context.Context, cli *clientv3.Client, namespaces ...string) (map[string]string, int64) {
	t.Helper()
	r, err := cli.Get(ctx, "/registry/namespaces/"+namespaces[0])
	if err != nil {
		t.Fatal(err)
	}
	rev := r.Header.Revision
	all := pitrDump(t, cli, rev)
	out := map[string]string{}
	for k, v := range all {
		for _, ns := range namespaces {
			if k == "/registry/namespaces/"+ns || strings.Contains(k, "/"+ns+"/") {
				out[k] = v
			}
		}
	}
	return out, rev
}

func diffMaps(want, got map[string]string) []string {
	return testfix.DiffMaps(want, got, "not in the source")
}

// kubePITRWorkload writes ~50 objects into ns: configmaps, secrets,
// service accounts, deployments (wave 1, or wave 2 with updates and
// deletes of what the waves made).
func kubePITRWorkload(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string, wave int) {
	t.Helper()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s in %s: %v", what, ns, err)
		}
	}
	cm := func(i int, v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i), Labels: map[string]string{"wave": fmt.Sprint(wave)}},
			Data: map[string]string{"value": v, "pad": strings.Repeat(ns, 20)}}
	}
	secret := func(i int, v string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%03d", i)},
			Data: map[string][]byte{"token": []byte(v)}}
	}
	cmAPI, secAPI := cs.CoreV1().ConfigMaps(ns), cs.CoreV1().Secrets(ns)
	switch wave {
	case 1:
		for i := range 25 {
			_, err := cmAPI.Create(ctx, cm(i, "v1"), metav1.CreateOptions{})
			must("create configmap", err)
		}
		for i := range 6 {
			_, err := secAPI.Create(ctx, secret(i, "s1"), metav1.CreateOptions{})
			must("create secret", err)
		}
		for i := range 4 {
			_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sa-%d", i)}}, metav1.CreateOptions{})
			must("create service account", err)
		}
	case 2:
		for i := 25; i < 30; i++ {
			_, err := cmAPI.Create(ctx, cm(i, "v1"), metav1.CreateOptions{})
			must("create configmap", err)
		}
		for i := 6; i < 12; i++ {
			_, err := secAPI.Create(ctx, secret(i, "s1"), metav1.CreateOptions{})
			must("create secret", err)
		}
		one := int32(1)
		for i := range 2 {
			name := fmt.Sprintf("app-%d", i)
			labels := map[string]string{"app": name}
			_, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}},
			}, metav1.CreateOptions{})
			must("create deployment", err)
		}
		time.Sleep(1100 * time.Millisecond) // the updates in another segment
		for _, i := range []int{0, 3, 7, 11, 15, 22, 25, 26, 28, 29} {
			_, err := cmAPI.Update(ctx, cm(i, "v2"), metav1.UpdateOptions{})
			must("update configmap", err)
		}
		for i := range 3 {
			_, err := secAPI.Update(ctx, secret(i, "s2"), metav1.UpdateOptions{})
			must("update secret", err)
		}
		three := int32(3)
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "app-0", metav1.GetOptions{})
		must("get deployment", err)
		d.Spec.Replicas = &three
		_, err = cs.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
		must("update deployment", err)
		for i := 20; i < 25; i++ {
			must("delete configmap", cmAPI.Delete(ctx, fmt.Sprintf("cm-%03d", i), metav1.DeleteOptions{}))
		}
		for _, i := range []int{10, 11} {
			must("delete secret", secAPI.Delete(ctx, fmt.Sprintf("secret-%03d", i), metav1.DeleteOptions{}))
		}
	}
}

// journalFind runs `journal find --key-prefix p -o json`.
func journalFind(t *testing.T, ctx context.Context, cos []string, id, p string) []journal.Change {
	t.Helper()
	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"journal", "find", "--cluster-id", id, "--key-prefix", p, "-o", "json"}, cos)...)
	if code != 0 {
		t.Fatalf("journal find --key-prefix %s: exit %d\n%s\n%s", p, code, out, errOut)
	}
	var res journalFindResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("journal find -o json: %v\n%s", err, out)
	}
	return res.Changes
}

// A namespace deleted by mistake, brought back through a real
// kube-apiserver. etcd 3.5 holds a kube-apiserver that compacts it every
// 2 s (--etcd-compaction-interval); the journal (1 s segments) runs from
// a full backup taken before the API server starts, and a second full
// backup is taken once the namespaces hold objects. Through the API
// server: ns-keep and ns-doomed get ~50 objects each (configmaps,
// secrets, service accounts, deployments), some updated, some deleted,
// over several segments; the API server compacts past the second backup
// while the journal runs. Then ns-doomed is deleted as kubectl and the
// namespace controller would do it (the namespace turns Terminating at
// revision T, its objects are deleted, the namespace is finalized and
// deleted at D), and ns-keep changes after that.
//
// `journal find --key-prefix /registry/namespaces/ns-doomed` names T
// (the put that set the deletionTimestamp) and D, and the objects'
// deletes lie between them. `restore --to-revision T-1` (from the second
// backup plus segments) into a new data dir, etcd on it, a new
// kube-apiserver (watch cache on, as in production) on that: the
// apiserver is ready, both namespaces hold exactly what the first API
// server returned before the delete (every object's JSON: uid,
// resourceVersion, data, managedFields), ns-keep's later changes are
// gone, every etcd key of the namespaces equals the source's (value,
// create and mod revision, version); an old resourceVersion is gone
// (410: clients relist), and a list, a watch and a write in ns-doomed
// work above the bumped revision.
func TestPointInTimeRestoreKubeNamespace(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 4*time.Minute)
	const id, keep, doomed = "kube-pitr", "ns-keep", "ns-doomed"
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	cos := cosArgs(t, m, bucket, prefix)
	backup := func() {
		t.Helper()
		backupCLI(t, ctx, c, cos, id)
	}
	etcdRev := func() int64 {
		t.Helper()
		r, err := cli.Get(ctx, "compact_rev_key")
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	backup()

	stopJournal := journalRun(t, ctx, concatArgs([]string{"--cluster-id", id, "--segment-interval", "1s"}, clusterArgs(c), cos)...)
	k := testenv.StartKubeAPIServerWith(t, testenv.KubeOptions{EtcdServers: c.Endpoints(),
		ExtraArgs: []string{"--etcd-compaction-interval=2s"}})
	cs := k.Clientset(t, "")
	for _, ns := range []string{keep, doomed} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		kubePITRWorkload(t, ctx, cs, ns, 1)
	}
	b2From := etcdRev()
	backup()
	b2To := etcdRev()
	for _, ns := range []string{keep, doomed} {
		kubePITRWorkload(t, ctx, cs, ns, 2)
	}
	// The API server compacts past the second backup while the journal
	// watches: the journal must not lose anything to it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		_, err := cli.Get(ctx, "compact_rev_key", clientv3.WithRev(b2To))
		if err != nil && strings.Contains(err.Error(), "compacted") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server did not compact past revision %d within 30 s: %v", b2To, err)
		}
	}

	// Just before the mistake: what the API server returns, and the keys.
	dc := k.Dynamic(t, "")
	wantObjs := kubeObjects(t, ctx, dc, keep, doomed)
	wantKeys, x := kubeKeys(t, ctx, cli, keep, doomed)
	if len(wantObjs) < 80 || len(wantKeys) != len(wantObjs) {
		t.Fatalf("before the delete: %d objects through the API server, %d etcd keys", len(wantObjs), len(wantKeys))
	}

	// The mistake: kubectl delete namespace ns-doomed, then what the
	// namespace controller does (no controller-manager runs here).
	nsAPI := cs.CoreV1().Namespaces()
	if err := nsAPI.Delete(ctx, doomed, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, err := nsAPI.Get(ctx, doomed, metav1.GetOptions{})
	if err != nil || ns.DeletionTimestamp == nil || ns.Status.Phase != corev1.NamespaceTerminating {
		t.Fatalf("ns-doomed after its delete: %+v %v", ns, err)
	}
	tRev, err := strconv.ParseInt(ns.ResourceVersion, 10, 64)
	if err != nil || tRev <= x {
		t.Fatalf("the Terminating namespace's resourceVersion %q, the dump at %d", ns.ResourceVersion, x)
	}
	for _, gvr := range kubePITRResources {
		if err := dc.Resource(gvr).Namespace(doomed).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatalf("delete the %s of %s: %v", gvr.Resource, doomed, err)
		}
	}
	ns.Spec.Finalizers = nil
	if _, err := nsAPI.Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("finalize %s: %v", doomed, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := nsAPI.Get(ctx, doomed, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ns-doomed is still there after its finalize: %v", err)
		}
	}
	if n, err := cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly()); err != nil {
		t.Fatal(err)
	} else {
		for _, kv := range n.Kvs {
			if strings.Contains(string(kv.Key), doomed) {
				t.Fatalf("etcd still holds %s after the namespace is gone", kv.Key)
			}
		}
	}
	// Life goes on in ns-keep (lost by the restore, as everything after R).
	if _, err := cs.CoreV1().ConfigMaps(keep).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-the-delete"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps(keep).Delete(ctx, "cm-001", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	last := etcdRev()

	// Wait for the journal to hold it all, then stop everything: the
	// cluster is lost.
	st := testfix.Store(t, m, bucket)
	testfix.WaitJournalReach(t, ctx, st, catalog.Layout{Prefix: prefix}, id, last, 30*time.Second)
	k.Stop()
	if code, jerr := stopJournal(); code != 0 {
		t.Fatalf("journal: exit %d (the API server compacts every 2 s): %s", code, jerr)
	}
	c.Members[0].Stop()

	// journal find names the Terminating put T and the delete D of the
	// namespace; the objects' deletes lie between them, nothing of the
	// namespace changed between the dump and T.
	nsChanges := journalFind(t, ctx, cos, id, "/registry/namespaces/"+doomed)
	var d int64
	sawT := false
	for _, ch := range nsChanges {
		switch {
		case ch.Key != "/registry/namespaces/"+doomed:
			t.Fatalf("journal find --key-prefix /registry/namespaces/%s lists %s", doomed, ch.Key)
		case ch.Rev > x && ch.Rev < tRev:
			t.Fatalf("the namespace changed at %d, between the dump (%d) and its delete (%d): %+v", ch.Rev, x, tRev, ch)
		case ch.Rev == tRev && ch.Type == journal.Put:
			sawT = true
		case ch.Type == journal.Delete:
			d = ch.Rev
		}
	}
	if n := len(nsChanges); !sawT || d <= tRev || nsChanges[n-1].Rev != d {
		t.Fatalf("journal find: want the Terminating put at %d and the delete last, got %+v", tRev, nsChanges)
	}
	t.Logf("journal find: %s Terminating at revision %d, deleted at %d", doomed, tRev, d)
	if code, table, _ := runCtx(t, ctx, concatArgs([]string{"journal", "find", "--cluster-id", id, "--exact-key", "/registry/namespaces/" + doomed}, cos)...); code == 0 {
		t.Logf("journal find --exact-key /registry/namespaces/%s:\n%s", doomed, table)
	}
	deleted := map[string]bool{}
	for _, gvr := range kubePITRResources {
		for _, ch := range append(journalFind(t, ctx, cos, id, "/registry/"+gvr.Resource+"/"+doomed+"/"),
			journalFind(t, ctx, cos, id, "/registry/"+gvr.Resource+"/"+keep+"/")...) {
			if ch.Rev > x && ch.Rev <= tRev {
				t.Fatalf("%s changed at %d, between the dump (%d) and the namespace's delete (%d)", ch.Key, ch.Rev, x, tRev)
			}
			if ch.Type == journal.Delete && ch.Rev > tRev && strings.Contains(ch.Key, "/"+doomed+"/") {
				if ch.Rev >= d {
					t.Fatalf("%s deleted at %d, after the namespace (%d)", ch.Key, ch.Rev, d)
				}
				deleted[ch.Key] = true
			}
		}
	}
	for key := range wantKeys {
		if strings.Contains(key, "/"+doomed+"/") && !deleted[key] {
			t.Fatalf("journal find does not show the delete of %s after %d", key, tRev)
		}
	}
	r := tRev - 1

	// restore --to-revision T-1 into a new data dir.
	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	client := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	root := filepath.Join(t.TempDir(), "data")
	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"restore", "--cluster-id", id, "--initial-cluster", "r0=" + peer,
		"--data-dir-root", root, "--to-revision", fmt.Sprint(r), "-o", "json"}, cos)...)
	if code != 0 {
		t.Fatalf("restore --to-revision %d: exit %d\n%s\n%s", r, code, out, errOut)
	}
	var res restore.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("restore -o json: %v\n%s", err, out)
	}
	if res.Replay == nil || res.Replay.ToRevision != r || res.Replay.Events == 0 || len(res.Members) != 1 ||
		res.Replay.FromRevision < b2From || res.Replay.FromRevision > b2To {
		t.Fatalf("restore result (want the second backup, at %d..%d, plus the journal to %d): %+v %+v", b2From, b2To, r, res, res.Replay)
	}
	t.Logf("restore: backup at %d, %d events replayed to %d", res.Replay.FromRevision, res.Replay.Events, r)
	ncli := startRestored(t, res, client, peer)
	bumped := r + int64(restore.DefaultBumpRevision)
	gotKeys, rev := kubeKeys(t, ctx, ncli, keep, doomed)
	if rev != bumped {
		t.Fatalf("the restored revision is %d, want %d", rev, bumped)
	}
	if diffs := diffMaps(wantKeys, gotKeys); len(diffs) > 0 {
		t.Fatalf("the restored etcd keys of the namespaces differ from the source's at %d in %d keys:\n%s", r, len(diffs), strings.Join(diffs[:min(5, len(diffs))], "\n"))
	}

	// The API server's leased keys (its master lease) keep their lease.
	all, err := ncli.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	leased := 0
	for _, kv := range all.Kvs {
		if kv.Lease == 0 {
			continue
		}
		leased++
		if ttl, err := ncli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err != nil || ttl.TTL <= 0 {
			t.Fatalf("the restored %s is on lease %x, which the restored etcd does not hold: %+v %v", kv.Key, kv.Lease, ttl, err)
		}
	}
	if leased == 0 {
		t.Fatal("no restored key is on a lease: the API server's master lease is missing")
	}

	// A new API server on the restored etcd.
	k2 := testenv.StartKubeAPIServerWith(t, testenv.KubeOptions{EtcdServers: []string{client}, ExtraArgs: []string{"--watch-cache=true"}})
	dc2, cs2 := k2.Dynamic(t, ""), k2.Clientset(t, "")
	if diffs := diffMaps(wantObjs, kubeObjects(t, ctx, dc2, keep, doomed)); len(diffs) > 0 {
		t.Fatalf("the restored API server's objects differ from the source's before the delete in %d: %s", len(diffs), strings.Join(diffs[:min(5, len(diffs))], "\n"))
	}
	// Clients: an old resourceVersion is compacted (410, so informers
	// relist); a list, a watch and a write work above the bump.
	cmAPI := cs2.CoreV1().ConfigMaps(doomed)
	_, err = cmAPI.List(ctx, metav1.ListOptions{ResourceVersion: fmt.Sprint(r), ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("a list at the old revision %d: %v, want 410 Gone", r, err)
	}
	l, err := cmAPI.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	listRV, err := strconv.ParseInt(l.ResourceVersion, 10, 64)
	if err != nil || listRV < bumped {
		t.Fatalf("the list's resourceVersion %q, want at least %d", l.ResourceVersion, bumped)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	w, err := cmAPI.Watch(wctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatalf("watch from %s: %v", l.ResourceVersion, err)
	}
	defer w.Stop()
	created, err := cmAPI.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-the-restore"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a write into the restored %s: %v", doomed, err)
	}
	if rv, _ := strconv.ParseInt(created.ResourceVersion, 10, 64); rv <= bumped {
		t.Fatalf("the new object's resourceVersion %s, want above %d", created.ResourceVersion, bumped)
	}
	seen := false
	for ev := range w.ResultChan() {
		if obj, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type == watch.Added && obj.Name == created.Name {
			if obj.ResourceVersion != created.ResourceVersion || obj.UID != created.UID {
				t.Fatalf("the watch saw %s at %s, the create returned %s", obj.UID, obj.ResourceVersion, created.ResourceVersion)
			}
			seen = true
			break
		}
		if ev.Type == watch.Error {
			t.Fatalf("watch from %s: %v", l.ResourceVersion, apierrors.FromObject(ev.Object))
		}
	}
	if !seen {
		t.Fatalf("the watch from %s ended without the new object: %v", l.ResourceVersion, errors.Join(wctx.Err(), ctx.Err()))
	}
	l2, err := cmAPI.List(ctx, metav1.ListOptions{ResourceVersion: created.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil || len(l2.Items) != len(l.Items)+1 {
		t.Fatalf("a list not older than %s: %d items (before the write %d), %v", created.ResourceVersion, len(l2.Items), len(l.Items), err)
	}
}
