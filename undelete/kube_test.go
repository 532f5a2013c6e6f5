package undelete_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/undelete"
)

// kubeOpts are an undelete's options on an undelete world.
func kubeOpts(t *testing.T, w *kubetest.UndeleteWorld, rev int64, namespaces []string, prefixes ...string) undelete.Options {
	return undelete.Options{ClusterID: w.ClusterID, Store: w.Rig.Store, Layout: w.Rig.Layout, Etcd: testfix.EtcdConfig(w.Etcd),
		Namespaces: namespaces, Prefixes: prefixes, ToRevision: rev, ScratchDir: t.TempDir(), Operator: "test@" + t.Name(),
		Log: testfix.Logger(t)}
}

// otherResources are what the other namespace holds and its writer changes.
var otherResources = []schema.GroupVersionResource{
	{Version: "v1", Resource: "configmaps"},
	{Version: "v1", Resource: "secrets"},
	{Group: "apps", Version: "v1", Resource: "deployments"},
}

// churn is a namespace that keeps changing through the API server while
// a test runs: 20 configmaps, 5 secrets and 2 deployments made first,
// then, until stopped, a new configmap "churn-N" every 50 ms and an
// update of "churn-0". Stable is everything but the churn-* configmaps.
type churn struct {
	ns     string
	stop   context.CancelFunc
	done   chan struct{}
	writes int
	errs   []error
}

func startChurn(t *testing.T, ctx context.Context, w *kubetest.UndeleteWorld, ns string) *churn {
	t.Helper()
	cs := w.Admin
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("keep-%02d", i)},
			Data: map[string]string{"i": fmt.Sprint(i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("keep-%02d", i)},
			Data: map[string][]byte{"k": []byte(fmt.Sprint(i))}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	one := int32(1)
	for i := range 2 {
		sel := map[string]string{"app": fmt.Sprintf("keep-%d", i)}
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("keep-%d", i)},
			Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: sel},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cctx, stop := context.WithCancel(ctx)
	c := &churn{ns: ns, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		cm := cs.CoreV1().ConfigMaps(ns)
		for i := 0; cctx.Err() == nil; i++ {
			_, err := cm.Create(cctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%d", i)},
				Data: map[string]string{"i": fmt.Sprint(i)}}, metav1.CreateOptions{})
			if err == nil && i > 0 {
				_, err = cm.Update(cctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "churn-0"},
					Data: map[string]string{"i": fmt.Sprint(i)}}, metav1.UpdateOptions{})
			}
			if err != nil && cctx.Err() == nil {
				c.errs = append(c.errs, err)
			} else if err == nil {
				c.writes++
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	t.Cleanup(c.halt)
	return c
}

func (c *churn) halt() {
	c.stop()
	<-c.done
}

// stable is the namespace's objects but the churn-* configmaps.
func (c *churn) stable(t *testing.T, ctx context.Context, w *kubetest.UndeleteWorld) map[string]string {
	t.Helper()
	out := kubetest.ObjectsOf(t, ctx, w.Dyn, c.ns, otherResources...)
	for k := range out {
		if strings.HasPrefix(k, "configmaps/churn-") {
			delete(out, k)
		}
	}
	return out
}

func diffObjects(want, got map[string]string) []string {
	return testfix.DiffMaps(want, got, "not there before")
}

func firstDiffs(d []string) string { return strings.Join(d[:min(5, len(d))], "\n") }

// keyActions is the result's keys by action.
func keyActions(res *undelete.Result) map[undelete.Action][]string {
	out := map[undelete.Action][]string{}
	for _, k := range res.Keys {
		out[k.Action] = append(out[k.Action], k.Key)
	}
	return out
}

// TestUndeleteNamespace: the acceptance test of undelete on a real
// Kubernetes. A namespace of 1,000 objects (configmaps, secrets,
// deployments, services, custom resources of a CRD; a fifth of them
// owned by another object of the namespace by uid) and 5 events is
// deleted and finalized by the real namespace controller
// (kube-controller-manager, with the garbage collector running all
// along); then its CRD is deleted too. Meanwhile another namespace keeps
// changing, and once the namespace is gone one of the same name is made
// again with a new configmap. undelete --namespace NS --prefix <the CRD's
// key> --to-revision <the one before the namespace turned Terminating>
// brings back, through the API server (watch cache on), every one of the
// 1,000 objects exactly as they were (uid, data, spec, labels,
// ownerReferences, creationTimestamp) and the CRD; it leaves the new
// namespace object (differs), the new configmap and the other
// namespace's objects alone, and skips the events (leased). The API server
// has compacted the live cluster past the point (only the journal holds
// it). kube-controller-manager is stopped during the undelete and started
// after it (its garbage collector would collect restored dependents
// whose owners' uids it remembers as deleted); once
// its new garbage collector has synced and collected a probe (a configmap
// owned by a missing widget), and 10 s more, it has collected nothing
// restored. A second run writes nothing: every key present, none written
// (a watch sees no PUT of them).
func TestUndeleteNamespace(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 10*time.Minute)
	const ns, other, objects, events = "doomed", "other", 1000, 5
	t0 := time.Now()
	w := kubetest.NewUndeleteWorld(t, ctx, kubetest.UndeleteWorldOptions{Members: 3, Controllers: true, ExtraArgs: []string{"--watch-cache=true"}})
	t.Logf("world ready in %v", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	pop := w.Populate(t, ctx, ns, objects, events)
	t.Logf("populated %s with %d objects (%d owned by another by uid) and %d events in %v", ns, pop.Total(), pop.Owned, events, time.Since(t0).Round(time.Millisecond))
	ch := startChurn(t, ctx, w, other)

	want := w.Objects(t, ctx, ns)
	if len(want) != objects {
		t.Fatalf("%d objects in %s through the API server, want %d", len(want), ns, objects)
	}
	wantKeys := w.NamespaceKeys(t, ctx, ns)
	// Besides the objects: the namespace and events (ours, and those
	// kube-apiserver's service IP repair may emit about a service).
	eventKey := func(k string) bool { return strings.HasPrefix(k, "/registry/events/"+ns+"/") }
	nEvents := 0
	for _, k := range oddKeys(wantKeys, want, ns) {
		if !eventKey(k) && k != "/registry/namespaces/"+ns {
			t.Fatalf("etcd holds %s in %s, none of the objects, the namespace or an event", k, ns)
		}
		if eventKey(k) {
			nEvents++
		}
	}
	if len(wantKeys) != objects+1+nEvents || nEvents < events {
		t.Fatalf("%d etcd keys of %s, want %d objects, the namespace and at least %d events (%d)", len(wantKeys), ns, objects, events, nEvents)
	}
	otherBefore := ch.stable(t, ctx, w)
	crdKey := "/registry/apiextensions.k8s.io/customresourcedefinitions/" + kubetest.WidgetCRD
	crdBefore, err := w.Cli.Get(ctx, crdKey)
	if err != nil || len(crdBefore.Kvs) != 1 {
		t.Fatalf("the CRD's key %s: %v %v", crdKey, crdBefore, err)
	}

	// The mistake, finalized by the namespace controller; then the CRD.
	t0 = time.Now()
	term := w.DeleteNamespace(t, ctx, ns)
	r := term - 1
	t.Logf("%s Terminating at revision %d, gone after %v; the point is %d", ns, term, time.Since(t0).Round(time.Millisecond), r)
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if err := w.Dyn.Resource(crdGVR).Delete(ctx, kubetest.WidgetCRD, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		g, err := w.Cli.Get(ctx, crdKey, clientv3.WithCountOnly())
		if err == nil && g.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the CRD is still there a minute after its delete: %v", err)
		}
	}
	// A namespace of the same name, with a new object.
	if _, err := w.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newCM, err := w.Admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new-after-the-delete"}, Data: map[string]string{"new": "yes"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	newNS := w.Namespace(t, ctx, ns)
	newNSJSON := kubetest.Comparable(t, newNS)
	w.WaitJournal(t, ctx, w.Revision(t, ctx))
	// The API server has compacted the live cluster past the point: only
	// the journal holds it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		_, err := w.Cli.Get(ctx, crdKey, clientv3.WithRev(r))
		if err != nil && strings.Contains(err.Error(), "compacted") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server did not compact past revision %d within 30 s: %v", r, err)
		}
	}

	// The undelete, with kube-controller-manager stopped and started
	// again after it: its garbage collector remembers the uids of owners
	// it found deleted (absentOwnerCache) and deletes, without asking the
	// API server, any dependent naming one of them, so with it running
	// restored dependents of restored owners were collected (3 widgets of
	// 1,000 objects, owned by restored deployments, in one run out of
	// four). A new controller-manager starts with an empty cache and finds
	// every owner.
	w.CM.Stop()
	o := kubeOpts(t, w, r, []string{ns}, crdKey)
	t0 = time.Now()
	res, err := undelete.Run(ctx, o)
	took := time.Since(t0)
	if err != nil {
		t.Fatalf("undelete: %v", err)
	}
	w.CM.Start(t)
	byAction := keyActions(res)
	t.Logf("undelete of %d objects and the CRD: %v; counts %v", objects, took.Round(time.Millisecond), res.Counts)
	nsKey := "/registry/namespaces/" + ns
	if got := byAction[undelete.ActionDiffers]; len(got) != 1 || got[0] != nsKey {
		t.Errorf("differs: %v, want the re-created namespace object %s only", got, nsKey)
	}
	leased := byAction[undelete.ActionLeased]
	for _, k := range leased {
		if !eventKey(k) {
			t.Errorf("%s is leased: only events are", k)
		}
	}
	for _, k := range res.Keys {
		if eventKey(k.Key) && k.Action != undelete.ActionLeased {
			t.Errorf("the event %s is %s, want leased", k.Key, k.Action)
		}
	}
	if len(leased) < events {
		t.Errorf("leased: %v, want at least our %d events", leased, events)
	}
	restored := map[string]bool{}
	for _, k := range byAction[undelete.ActionRestored] {
		restored[k] = true
	}
	if len(restored) != objects+1 || !restored[crdKey] {
		t.Errorf("restored %d keys (the CRD among them: %v), want the %d objects and the CRD", len(restored), restored[crdKey], objects)
	}
	for _, k := range wantKeys {
		if !restored[k] && k != nsKey && !strings.HasPrefix(k, "/registry/events/") {
			t.Errorf("%s (an object of %s at the point) is not restored", k, ns)
		}
	}
	if len(res.Keys) != objects+2+len(leased) || res.Written() != objects+1 || res.Revision != r || res.Record == "" {
		t.Errorf("result: %d keys (want %d), %d written, point %d (want %d), record %q", len(res.Keys), objects+2+len(leased), res.Written(), res.Revision, r, res.Record)
	}

	// Through the API server: everything back exactly, the new objects
	// and the other namespace left alone; and again once the garbage
	// collector has had 10 s to collect a dependent it took for orphaned.
	w.WaitWidgetsServed(t, ctx)
	check := func(when string) {
		t.Helper()
		got := w.Objects(t, ctx, ns)
		if g := got["configmaps/"+newCM.Name]; !strings.Contains(g, `"uid":"`+string(newCM.UID)+`"`) {
			t.Errorf("%s: the new configmap is %s, want uid %s untouched", when, g, newCM.UID)
		}
		delete(got, "configmaps/"+newCM.Name)
		if d := diffObjects(want, got); len(d) > 0 {
			t.Fatalf("%s: %d of the %d objects differ from before the delete:\n%s", when, len(d), objects, firstDiffs(d))
		}
		if cm, err := w.Admin.CoreV1().ConfigMaps(ns).Get(ctx, newCM.Name, metav1.GetOptions{}); err != nil || cm.ResourceVersion != newCM.ResourceVersion {
			t.Errorf("%s: the new configmap %+v %v, want resourceVersion %s", when, cm, err, newCM.ResourceVersion)
		}
		if g := kubetest.Comparable(t, w.Namespace(t, ctx, ns)); g != newNSJSON {
			t.Errorf("%s: the namespace object is\n  %s\nwant the new one left alone\n  %s", when, g, newNSJSON)
		}
		if d := diffObjects(otherBefore, ch.stable(t, ctx, w)); len(d) > 0 {
			t.Errorf("%s: the other namespace's objects changed:\n%s", when, firstDiffs(d))
		}
	}
	check("right after the undelete")
	w.CM.WaitSynced(t, 2*time.Minute)
	// The garbage collector acts on widgets' dependents again: a configmap
	// owned by a widget that does not exist is collected.
	probe, err := w.Admin.CoreV1().ConfigMaps(other).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gc-probe",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: kubetest.WidgetGVR.GroupVersion().String(), Kind: "Widget", Name: "no-such-widget", UID: "00000000-0000-0000-0000-000000000001"}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		_, err := w.Admin.CoreV1().ConfigMaps(other).Get(ctx, probe.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the garbage collector did not collect a configmap owned by a missing widget within a minute: %v", err)
		}
	}
	t.Logf("the garbage collector collected an orphaned widget dependent in %v", time.Since(t0).Round(time.Millisecond))
	time.Sleep(10 * time.Second)
	check("10 s after the undelete, the garbage collector running")
	if crd, err := w.Cli.Get(ctx, crdKey); err != nil || len(crd.Kvs) != 1 {
		t.Errorf("the CRD's key after the undelete: %v %v", crd, err)
	}

	// A second run writes nothing.
	ch.halt()
	if len(ch.errs) > 0 || ch.writes < 10 {
		t.Errorf("the other namespace's writer: %d writes, errors %v", ch.writes, ch.errs)
	}
	// (kube-apiserver's own leases and compactions move etcd's revision
	// meanwhile: a watch from before it shows no write of its keys.)
	pc := countPuts(t, ctx, w.Cli, "/registry/", w.Revision(t, ctx)+1)
	res2, err := undelete.Run(ctx, kubeOpts(t, w, r, []string{ns}, crdKey))
	if err != nil {
		t.Fatalf("second undelete: %v", err)
	}
	puts := pc.upTo(t, w.Revision(t, ctx))
	for _, k := range res2.Keys {
		if puts[k.Key] > 0 || k.Written != 0 {
			t.Errorf("the second run wrote %s (%d PUTs seen, written at %d)", k.Key, puts[k.Key], k.Written)
		}
	}
	if len(res2.Keys) != len(res.Keys) {
		t.Errorf("the second run considered %d keys, the first %d", len(res2.Keys), len(res.Keys))
	}
	if res2.Written() != 0 || res2.Counts[undelete.ActionPresent] != objects+1 {
		t.Errorf("second run: %d written, counts %v; want %d present", res2.Written(), res2.Counts, objects+1)
	}
	recs, err := catalog.ListUndeleteRecords(ctx, w.Rig.Store, w.Rig.Layout, w.ClusterID)
	if err != nil || len(recs) != 2 || recs[0].Outcome != catalog.UndeleteComplete || recs[0].Counts[string(undelete.ActionRestored)] != objects+1 ||
		recs[1].Outcome != catalog.UndeleteComplete || recs[1].Counts[string(undelete.ActionPresent)] != objects+1 {
		t.Errorf("the runs' records: %+v %v", recs, err)
	}
}

// oddKeys are the etcd keys of ns that are none of the objects (keyed
// resource/name) at their keys.
func oddKeys(keys []string, objects map[string]string, ns string) []string {
	at := map[string]string{"configmaps": "configmaps", "secrets": "secrets", "deployments": "deployments",
		"services": "services/specs", "widgets": kubetest.WidgetGVR.Group + "/widgets"}
	is := map[string]bool{}
	for o := range objects {
		res, name, _ := strings.Cut(o, "/")
		is["/registry/"+at[res]+"/"+ns+"/"+name] = true
	}
	var odd []string
	for _, k := range keys {
		if !is[k] {
			odd = append(odd, k)
		}
	}
	return odd
}

// putCounter counts the PUT events of every key under a prefix from a
// watch opened before the runs.
type putCounter struct {
	mu   sync.Mutex
	puts map[string]int
	last int64
	seen chan string // each PUT's key, dropped when nobody reads
}

func countPuts(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string, from int64) *putCounter {
	t.Helper()
	pc := &putCounter{puts: map[string]int{}, seen: make(chan string, 1)}
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	wc := cli.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(from))
	go func() {
		for wr := range wc {
			pc.mu.Lock()
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					pc.puts[string(ev.Kv.Key)]++
					select {
					case pc.seen <- string(ev.Kv.Key):
					default:
					}
				}
			}
			pc.last = max(pc.last, wr.Header.Revision)
			pc.mu.Unlock()
		}
	}()
	return pc
}

// upTo waits until the watch has seen revision rev.
func (pc *putCounter) upTo(t *testing.T, rev int64) map[string]int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		pc.mu.Lock()
		last := pc.last
		out := make(map[string]int, len(pc.puts))
		for k, v := range pc.puts {
			out[k] = v
		}
		pc.mu.Unlock()
		if last >= rev {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watch did not reach revision %d (at %d)", rev, last)
		}
	}
}

// TestUndeleteInterrupted: one world (the namespace controller emulated),
// two namespaces of 300 objects each, deleted.
//
// resume: the first undelete (transactions of 10 keys) is cancelled as
// soon as its first key lands (as on SIGTERM); its record says
// interrupted, and its result names what it had not written. A second run
// writes the rest: every object is back exactly, and a watch from before
// the first run saw exactly one PUT of each key brought back.
//
// kube-apiserver restart: kube-apiserver (watch cache on) is killed as
// soon as the undelete's first key lands (transactions of one key) and
// started again: keys were written both while it ran and while it was
// down, and through the restarted API server every object is back
// exactly.
func TestUndeleteInterrupted(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 8*time.Minute)
	const objects = 300
	w := kubetest.NewUndeleteWorld(t, ctx, kubetest.UndeleteWorldOptions{ExtraArgs: []string{"--watch-cache=true"}})
	wants, points := map[string]map[string]string{}, map[string]int64{}
	for _, ns := range []string{"resume", "restart"} {
		w.Populate(t, ctx, ns, objects, 2)
		wants[ns] = w.Objects(t, ctx, ns)
		points[ns] = w.DeleteNamespace(t, ctx, ns) - 1
	}
	w.WaitJournal(t, ctx, w.Revision(t, ctx))

	t.Run("resume", func(t *testing.T) {
		const ns = "resume"
		pc := countPuts(t, ctx, w.Cli, "/registry/", w.Revision(t, ctx)+1)
		o := kubeOpts(t, w, points[ns], []string{ns})
		o.MaxTxnOps = 10
		rctx, cancel := context.WithCancel(ctx)
		go func() {
			for k := range pc.seen {
				if kubetest.IsNamespaceKey(k, "/registry", ns) {
					cancel()
					return
				}
			}
		}()
		res1, err := undelete.Run(rctx, o)
		cancel()
		if err == nil {
			t.Fatalf("the cancelled undelete succeeded: counts %v", res1.Counts)
		}
		t.Logf("the cancelled run: %v; counts %v", err, res1.Counts)
		if res1.Counts[undelete.ActionRestored] == 0 || res1.Counts[undelete.ActionPending] == 0 {
			t.Errorf("the cancelled run: counts %v, want some restored and some pending", res1.Counts)
		}
		recs, err := catalog.ListUndeleteRecords(ctx, w.Rig.Store, w.Rig.Layout, w.ClusterID)
		if err != nil || len(recs) == 0 || recs[len(recs)-1].Run != res1.Run || recs[len(recs)-1].Outcome != catalog.UndeleteInterrupted {
			t.Errorf("the cancelled run's record (run %s): %+v %v; want it interrupted", res1.Run, recs, err)
		}

		res2, err := undelete.Run(ctx, o)
		if err != nil {
			t.Fatalf("the rerun: %v", err)
		}
		t.Logf("the rerun: counts %v", res2.Counts)
		if res2.Counts[undelete.ActionRestored]+res1.Counts[undelete.ActionRestored] != objects+1 ||
			res2.Counts[undelete.ActionPresent] != res1.Counts[undelete.ActionRestored] {
			t.Errorf("restored %d then %d (then present %d), want %d (the objects and the namespace) in all", res1.Counts[undelete.ActionRestored],
				res2.Counts[undelete.ActionRestored], res2.Counts[undelete.ActionPresent], objects+1)
		}
		puts := pc.upTo(t, w.Revision(t, ctx))
		n := 0
		for _, k := range res2.Keys {
			if k.Action != undelete.ActionRestored && k.Action != undelete.ActionPresent {
				continue
			}
			n++
			if puts[k.Key] != 1 {
				t.Errorf("%s: %d PUTs seen, want exactly 1", k.Key, puts[k.Key])
			}
		}
		if n != objects+1 {
			t.Errorf("%d keys brought back, want %d", n, objects+1)
		}
		if d := diffObjects(wants[ns], w.Objects(t, ctx, ns)); len(d) > 0 {
			t.Fatalf("%d of the objects differ after the rerun:\n%s", len(d), firstDiffs(d))
		}
	})

	t.Run("kube-apiserver-restart", func(t *testing.T) {
		const ns = "restart"
		pc := countPuts(t, ctx, w.Cli, "/registry/", w.Revision(t, ctx)+1)
		o := kubeOpts(t, w, points[ns], []string{ns})
		o.MaxTxnOps = 1 // a transaction a key: the writes outlast the API server's stop
		done := make(chan error, 1)
		var res *undelete.Result
		go func() {
			var err error
			res, err = undelete.Run(ctx, o)
			done <- err
		}()
	wait:
		for {
			select {
			case k := <-pc.seen:
				if kubetest.IsNamespaceKey(k, "/registry", ns) {
					break wait
				}
			case err := <-done:
				t.Fatalf("undelete ended before its first key was seen: %v", err)
			}
		}
		t0 := time.Now()
		w.K.Kill()
		down := w.Revision(t, ctx)
		w.K.Start(t)
		t.Logf("kube-apiserver restarted in %v (down at revision %d)", time.Since(t0).Round(time.Millisecond), down)
		if err := <-done; err != nil {
			t.Fatalf("undelete: %v", err)
		}
		if res.Counts[undelete.ActionRestored] != objects+1 {
			t.Errorf("counts %v, want %d restored", res.Counts, objects+1)
		}
		before, after := 0, 0
		for _, k := range res.Keys {
			switch {
			case k.Written == 0:
			case k.Written <= down:
				before++
			default:
				after++
			}
		}
		t.Logf("keys written before kube-apiserver was down: %d, after: %d", before, after)
		if before == 0 || after == 0 {
			t.Fatalf("the restart was not in the middle of the writes: %d keys written before the API server was down (revision %d), %d after", before, down, after)
		}
		w.WaitWidgetsServed(t, ctx)
		if d := diffObjects(wants[ns], w.Objects(t, ctx, ns)); len(d) > 0 {
			t.Fatalf("through the restarted API server, %d of the objects differ:\n%s", len(d), firstDiffs(d))
		}
	})
}
