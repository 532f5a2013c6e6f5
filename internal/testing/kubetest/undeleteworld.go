package kubetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// The custom resource of an UndeleteWorld: a namespaced CRD (served and
// stored v1, a schema that keeps unknown fields), installed by
// NewUndeleteWorld.
var (
	WidgetGVR = schema.GroupVersionResource{Group: "undelete.example.com", Version: "v1", Resource: "widgets"}
	// WidgetCRD is the CRD's name; its etcd key is
	// /registry/apiextensions.k8s.io/customresourcedefinitions/<WidgetCRD>.
	WidgetCRD = "widgets.undelete.example.com"
	crdGVR    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	nsGVR     = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// UndeleteResources are the resources an UndeleteWorld populates, in the
// order they are created (owners first).
var UndeleteResources = []schema.GroupVersionResource{
	{Group: "apps", Version: "v1", Resource: "deployments"},
	WidgetGVR,
	{Version: "v1", Resource: "configmaps"},
	{Version: "v1", Resource: "secrets"},
	{Version: "v1", Resource: "services"},
}

// UndeleteWorld is a Kubernetes whose etcd a journal watches, as undelete
// finds it: an etcd 3.5 cluster with a full backup taken before anything
// was written (the journal's base), the journal capturing it into the
// test's bucket on the shared MinIO (1 s segments), and a real
// kube-apiserver on it that compacts etcd every few seconds (so the
// revisions undelete reads are compacted in the live cluster), with the
// Widget CRD installed. With Controllers, a kube-controller-manager runs
// the namespace controller and the garbage collector: a deleted namespace
// is emptied and finalized by them, and a dependent whose owner is missing
// is collected.
type UndeleteWorld struct {
	ClusterID string
	Etcd      *testenv.EtcdCluster
	Cli       *clientv3.Client
	Rig       *testfix.StoreRig
	Base      *catalog.Manifest
	K         *testenv.KubeAPIServer
	CM        *testenv.KubeControllerManager // nil without Controllers
	Admin     *kubernetes.Clientset
	Dyn       *dynamic.DynamicClient

	stopCapture context.CancelFunc
	capDone     chan error
	stopOnce    sync.Once
	capErr      error
}

// UndeleteWorldOptions configures NewUndeleteWorld.
type UndeleteWorldOptions struct {
	ClusterID string // default "undelete"
	Members   int    // etcd members, default 1
	// Controllers starts a kube-controller-manager (namespace controller,
	// garbage collector) and waits until the garbage collector has synced.
	Controllers bool
	// CompactionInterval is kube-apiserver's --etcd-compaction-interval
	// (default 5s).
	CompactionInterval time.Duration
	// ExtraArgs are more kube-apiserver flags.
	ExtraArgs []string
}

// NewUndeleteWorld builds an UndeleteWorld; everything is stopped when
// tb's test ends.
func NewUndeleteWorld(tb testing.TB, ctx context.Context, o UndeleteWorldOptions) *UndeleteWorld {
	tb.Helper()
	if o.ClusterID == "" {
		o.ClusterID = "undelete"
	}
	if o.Members == 0 {
		o.Members = 1
	}
	if o.CompactionInterval == 0 {
		o.CompactionInterval = 5 * time.Second
	}
	w := &UndeleteWorld{ClusterID: o.ClusterID}
	w.Etcd = testenv.StartEtcd(tb, testenv.EtcdOptions{Version: testenv.V35, Members: o.Members})
	w.Cli = w.Etcd.Client(tb)
	w.Rig = testfix.NewStoreRig(tb)
	// A backup of an empty etcd (revision 1, nothing in its database) does
	// not verify: one key first, outside kube-apiserver's prefix.
	if _, err := w.Cli.Put(ctx, "/undelete-world/before", "x"); err != nil {
		tb.Fatalf("etcd of %s: %v", w.ClusterID, err)
	}
	w.Base = w.Rig.TakeBackup(tb, w.Etcd, w.ClusterID, catalog.KindScheduled)

	// The capture's own client, made before the cleanup that stops the
	// capture is registered, so closed after it.
	co := journal.CaptureOptions{Client: w.Etcd.Client(tb), ClusterID: w.ClusterID,
		BaseBackup: w.Base.Name, BaseRev: w.Base.Revision(), Store: w.Rig.Store, Layout: w.Rig.Layout,
		Encoding: objectio.Encoding{Compression: objectio.CompressZstd}, SegmentInterval: time.Second, Log: testfix.Logger(tb)}
	cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	w.stopCapture, w.capDone = stop, make(chan error, 1)
	go func() { w.capDone <- journal.Capture(cctx, co) }()
	tb.Cleanup(func() { w.StopJournal(tb) })

	args := append([]string{"--etcd-compaction-interval=" + o.CompactionInterval.String()}, o.ExtraArgs...)
	w.K = testenv.StartKubeAPIServerWith(tb, testenv.KubeOptions{EtcdServers: w.Etcd.Endpoints(), ExtraArgs: args})
	w.Admin, w.Dyn = w.K.Clientset(tb, ""), w.K.Dynamic(tb, "")
	w.installWidgetCRD(tb, ctx)
	if o.Controllers {
		w.CM = testenv.StartKubeControllerManager(tb, w.K)
		w.CM.WaitSynced(tb, 2*time.Minute)
	}
	return w
}

// StopJournal stops the journal's capture (it writes what it holds) and
// fails tb if the capture had failed. Idempotent.
func (w *UndeleteWorld) StopJournal(tb testing.TB) {
	tb.Helper()
	w.stopOnce.Do(func() {
		w.stopCapture()
		select {
		case err := <-w.capDone:
			if err != nil && !errors.Is(err, context.Canceled) {
				w.capErr = err
			}
		case <-time.After(time.Minute):
			w.capErr = errors.New("the capture did not stop within a minute")
		}
	})
	if w.capErr != nil {
		tb.Errorf("journal of %s: %v", w.ClusterID, w.capErr)
	}
}

// Revision is the live etcd's revision.
func (w *UndeleteWorld) Revision(tb testing.TB, ctx context.Context) int64 {
	tb.Helper()
	r, err := w.Cli.Get(ctx, "compact_rev_key")
	if err != nil {
		tb.Fatalf("etcd of %s: %v", w.ClusterID, err)
	}
	return r.Header.Revision
}

// WaitJournal waits until the journal's stored segments reach rev.
func (w *UndeleteWorld) WaitJournal(tb testing.TB, ctx context.Context, rev int64) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := journal.ListSegments(ctx, w.Rig.Store, w.Rig.Layout, w.ClusterID, w.Base.Revision())
		if err == nil && c.Reach >= rev {
			return
		}
		if time.Now().After(deadline) {
			reach := int64(-1)
			if c != nil {
				reach = c.Reach
			}
			tb.Fatalf("the journal of %s does not reach revision %d within a minute (reach %d, %v)", w.ClusterID, rev, reach, err)
		}
		select {
		case err := <-w.capDone:
			w.capDone <- err
			tb.Fatalf("the journal of %s stopped: %v", w.ClusterID, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (w *UndeleteWorld) installWidgetCRD(tb testing.TB, ctx context.Context) {
	tb.Helper()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": WidgetCRD},
		"spec": map[string]any{
			"group": WidgetGVR.Group, "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	if _, err := w.Dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("create CRD %s: %v", WidgetCRD, err)
	}
	w.WaitWidgetsServed(tb, ctx)
}

// WaitWidgetsServed waits until the Widget resource is served (after
// the CRD is created, or written back).
func (w *UndeleteWorld) WaitWidgetsServed(tb testing.TB, ctx context.Context) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := w.Dyn.Resource(WidgetGVR).Namespace("default").List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s not served: %v", WidgetGVR, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Population is what Populate created, per resource.
type Population struct {
	Namespace string
	Counts    map[string]int // resource -> objects
	Owned     int            // objects with an ownerReference
	Events    int            // Events (leased keys) besides the objects
}

// Total is the number of objects (Events excluded).
func (p Population) Total() int {
	n := 0
	for _, c := range p.Counts {
		n += c
	}
	return n
}

// Populate creates the namespace ns and exactly n objects in it through
// the API server, with `workers` creates in flight: about 5% deployments,
// 15% widgets (each other one owned by a deployment), 25% secrets, 5%
// services, and the rest configmaps (each fourth one owned by a widget),
// so that the garbage collector would collect the owned ones if their
// owner were missing; and events (leased keys, not among the n).
func (w *UndeleteWorld) Populate(tb testing.TB, ctx context.Context, ns string, n, events int) Population {
	tb.Helper()
	if _, err := w.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": "undelete"}}}, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("create namespace %s: %v", ns, err)
	}
	nDep, nWid, nSec, nSvc := max(1, n/20), max(1, 3*n/20), n/4, max(1, n/20)
	nCM := n - nDep - nWid - nSec - nSvc
	if nCM < 1 {
		tb.Fatalf("Populate: %d objects are too few (at least 5)", n)
	}
	p := Population{Namespace: ns, Counts: map[string]int{"deployments": nDep, "widgets": nWid, "secrets": nSec, "services": nSvc, "configmaps": nCM}, Events: events}
	labels := func(r string, i int) map[string]string {
		return map[string]string{"app": fmt.Sprintf("%s-%d", r, i%7), "undelete-world": ns}
	}
	cs := w.Admin

	// Deployments, then widgets owned by them, then configmaps owned by
	// widgets.
	deps := make([]types.UID, nDep)
	parallel(tb, nDep, func(i int) error {
		one := int32(1)
		sel := map[string]string{"app": fmt.Sprintf("dep-%04d", i)}
		d, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("dep-%04d", i), Labels: labels("dep", i), Annotations: map[string]string{"undelete/index": strconv.Itoa(i)}},
			Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: sel},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
						Env: []corev1.EnvVar{{Name: "INDEX", Value: strconv.Itoa(i)}}}}}}},
		}, metav1.CreateOptions{})
		if err == nil {
			deps[i] = d.UID
		}
		return err
	})
	wids := make([]types.UID, nWid)
	parallel(tb, nWid, func(i int) error {
		meta := map[string]any{"name": fmt.Sprintf("widget-%04d", i), "namespace": ns, "labels": toAny(labels("widget", i))}
		owned := i%2 == 0
		if owned {
			d := i / 2 % nDep
			p.addOwned()
			meta["ownerReferences"] = []any{map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
				"name": fmt.Sprintf("dep-%04d", d), "uid": string(deps[d]), "controller": true}}
		}
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": WidgetGVR.GroupVersion().String(), "kind": "Widget", "metadata": meta,
			"spec": map[string]any{"size": int64(i), "color": []any{"red", "green", "blue"}[i%3], "nested": map[string]any{"free": fmt.Sprintf("form-%d", i)}}}}
		got, err := w.Dyn.Resource(WidgetGVR).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
		if err == nil {
			wids[i] = got.GetUID()
		}
		return err
	})
	parallel(tb, nCM, func(i int) error {
		om := metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i), Labels: labels("cm", i)}
		if i%4 == 0 {
			x := i / 4 % nWid
			p.addOwned()
			om.OwnerReferences = []metav1.OwnerReference{{APIVersion: WidgetGVR.GroupVersion().String(), Kind: "Widget", Name: fmt.Sprintf("widget-%04d", x), UID: wids[x]}}
		}
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: om,
			Data: map[string]string{"index": strconv.Itoa(i), "payload": strings.Repeat(fmt.Sprintf("%04d", i), 50)}}, metav1.CreateOptions{})
		return err
	})
	parallel(tb, nSec, func(i int) error {
		_, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%04d", i), Labels: labels("secret", i)},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"token": fmt.Appendf(nil, "s3cr3t-%d-%d", i, time.Now().UnixNano())}}, metav1.CreateOptions{})
		return err
	})
	parallel(tb, nSvc, func(i int) error {
		_, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%04d", i), Labels: labels("svc", i)},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": fmt.Sprintf("dep-%04d", i%nDep)},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{})
		return err
	})
	parallel(tb, events, func(i int) error {
		_, err := cs.CoreV1().Events(ns).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("event-%04d", i)},
			InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: ns, Name: fmt.Sprintf("cm-%04d", i%nCM)},
			Reason:         "Tested", Message: "an event of the undelete world", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "kubetest"}}, metav1.CreateOptions{})
		return err
	})
	return p
}

var popMu sync.Mutex

func (p *Population) addOwned() {
	popMu.Lock()
	p.Owned++
	popMu.Unlock()
}

// parallel runs f(0..n-1) on 8 workers, failing tb with the first error.
func parallel(tb testing.TB, n int, f func(i int) error) {
	tb.Helper()
	const workers = 8
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("object %d: %w", i, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		tb.Fatalf("kubetest: %v", first)
	}
}

// Objects is every object of UndeleteResources in ns through the API
// server, keyed resource/name, each as JSON without what changes when an
// object is written again unchanged (metadata.resourceVersion and
// managedFields): uid, labels, annotations, ownerReferences,
// creationTimestamp, data, spec and status are compared.
func (w *UndeleteWorld) Objects(tb testing.TB, ctx context.Context, ns string) map[string]string {
	tb.Helper()
	return ObjectsOf(tb, ctx, w.Dyn, ns, UndeleteResources...)
}

// ObjectsOf is Objects for resources of any API server.
func ObjectsOf(tb testing.TB, ctx context.Context, dc dynamic.Interface, ns string, resources ...schema.GroupVersionResource) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for _, gvr := range resources {
		l, err := dc.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			tb.Fatalf("list %s in %s: %v", gvr.Resource, ns, err)
		}
		for _, it := range l.Items {
			out[gvr.Resource+"/"+it.GetName()] = Comparable(tb, &it)
		}
	}
	return out
}

// Comparable is o as JSON without metadata.resourceVersion and
// metadata.managedFields.
func Comparable(tb testing.TB, o *unstructured.Unstructured) string {
	tb.Helper()
	c := o.DeepCopy()
	unstructured.RemoveNestedField(c.Object, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(c.Object, "metadata", "managedFields")
	b, err := json.Marshal(c.Object)
	if err != nil {
		tb.Fatalf("%s: %v", o.GetName(), err)
	}
	return string(b)
}

// Namespace returns the namespace object ns (nil when it does not exist).
func (w *UndeleteWorld) Namespace(tb testing.TB, ctx context.Context, ns string) *unstructured.Unstructured {
	tb.Helper()
	n, err := w.Dyn.Resource(nsGVR).Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		tb.Fatalf("get namespace %s: %v", ns, err)
	}
	return n
}

// DeleteNamespace deletes ns as `kubectl delete namespace` does and waits
// until it is gone, with everything in it: finalized by the namespace
// controller when one runs (Controllers), else as the namespace
// controller would (every resource's DeleteCollection, then the finalize
// subresource). It returns the revision the namespace turned Terminating
// at; the revision before it is the point to undelete to.
func (w *UndeleteWorld) DeleteNamespace(tb testing.TB, ctx context.Context, ns string) int64 {
	tb.Helper()
	nsAPI := w.Admin.CoreV1().Namespaces()
	if err := nsAPI.Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		tb.Fatalf("delete namespace %s: %v", ns, err)
	}
	n, err := nsAPI.Get(ctx, ns, metav1.GetOptions{})
	if err != nil || n.DeletionTimestamp == nil {
		tb.Fatalf("namespace %s after its delete: %+v %v", ns, n, err)
	}
	term, err := strconv.ParseInt(n.ResourceVersion, 10, 64)
	if err != nil {
		tb.Fatal(err)
	}
	if w.CM == nil {
		for _, gvr := range append(UndeleteResources, schema.GroupVersionResource{Version: "v1", Resource: "events"}) {
			if err := w.Dyn.Resource(gvr).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
				tb.Fatalf("delete the %s of %s: %v", gvr.Resource, ns, err)
			}
		}
		n.Spec.Finalizers = nil
		if _, err := nsAPI.Finalize(ctx, n, metav1.UpdateOptions{}); err != nil {
			tb.Fatalf("finalize %s: %v", ns, err)
		}
	}
	w.WaitNamespaceGone(tb, ctx, ns, 3*time.Minute)
	return term
}

// WaitNamespaceGone waits until ns is gone from the API server and no
// etcd key of it (namespaced objects included) is left.
func (w *UndeleteWorld) WaitNamespaceGone(tb testing.TB, ctx context.Context, ns string, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		left := w.NamespaceKeys(tb, ctx, ns)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("namespace %s not gone after %v: %d etcd keys left, e.g. %s", ns, timeout, len(left), left[0])
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// NamespaceKeys is every etcd key of ns (its namespace object and its
// namespaced objects), sorted.
func (w *UndeleteWorld) NamespaceKeys(tb testing.TB, ctx context.Context, ns string) []string {
	tb.Helper()
	r, err := w.Cli.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, kv := range r.Kvs {
		if IsNamespaceKey(string(kv.Key), "/registry", ns) {
			out = append(out, string(kv.Key))
		}
	}
	sort.Strings(out)
	return out
}

// IsNamespaceKey reports whether key is ns's namespace object or a
// namespaced object of ns under kubePrefix: <p>/namespaces/<ns>,
// <p>/<resource>/<ns>/<name> or <p>/<group>/<resource>/<ns>/<name>.
func IsNamespaceKey(key, kubePrefix, ns string) bool {
	rest, ok := strings.CutPrefix(key, strings.TrimSuffix(kubePrefix, "/")+"/")
	if !ok {
		return false
	}
	if rest == "namespaces/"+ns {
		return true
	}
	parts := strings.Split(rest, "/")
	switch len(parts) {
	case 3:
		return parts[1] == ns && parts[0] != "namespaces"
	case 4:
		return parts[2] == ns
	}
	return false
}
