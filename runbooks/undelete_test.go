package runbooks

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/mdblocks"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func init() {
	scenarios = append(scenarios, scenario{"undelete", undeleteRunbook})
}

const undeleteRB = "undelete.md"

// shopObjects is the namespace's workload: what undelete must bring back,
// by kind/name, with each object's uid.
type shopObjects map[string]types.UID

// undeleteWorkload writes into ns 30 ConfigMaps, 10 Secrets, a Deployment
// and a ReplicaSet it owns, a Service and an Event, and returns the
// objects (the Event apart: kube-apiserver stores it on a lease).
func undeleteWorkload(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) shopObjects {
	t.Helper()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s in %s: %v", what, ns, err)
		}
	}
	objs := shopObjects{}
	for i := range 30 {
		cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)},
			Data: map[string]string{"value": fmt.Sprintf("v%d", i)}}, metav1.CreateOptions{})
		must("create configmap", err)
		objs["ConfigMap/"+cm.Name] = cm.UID
	}
	for i := range 10 {
		s, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%03d", i)},
			Data: map[string][]byte{"token": fmt.Appendf(nil, "s3cret-%d", i)}}, metav1.CreateOptions{})
		must("create secret", err)
		objs["Secret/"+s.Name] = s.UID
	}
	labels := map[string]string{"app": "web"}
	one := int32(1)
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1"}}}}
	d, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}, metav1.CreateOptions{})
	must("create deployment", err)
	objs["Deployment/web"] = d.UID
	yes := true
	rs, err := cs.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-5d4f8", Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: d.UID, Controller: &yes, BlockOwnerDeletion: &yes}}},
		Spec: appsv1.ReplicaSetSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl}}, metav1.CreateOptions{})
	must("create replicaset", err)
	objs["ReplicaSet/"+rs.Name] = rs.UID
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	must("create service", err)
	objs["Service/web"] = svc.UID
	_, err = cs.CoreV1().Events(ns).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "web.scaled"},
		InvolvedObject: corev1.ObjectReference{Kind: "Deployment", Namespace: ns, Name: "web", UID: d.UID},
		Reason:         "ScalingReplicaSet", Message: "Scaled up replica set web-5d4f8 to 1", Type: corev1.EventTypeNormal}, metav1.CreateOptions{})
	must("create event", err)
	return objs
}

// shopNow is the objects of ns the API server returns now, by kind/name,
// with their uids, and how many of its Events are the workload's (the API
// server writes its own, such as its repair of the Service's cluster IP
// once the Service is back).
func shopNow(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) (shopObjects, int) {
	t.Helper()
	out := shopObjects{}
	cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range cms.Items {
		if o.Data["value"] == "" {
			t.Errorf("configmap %s came back without its data: %v", o.Name, o.Data)
		}
		out["ConfigMap/"+o.Name] = o.UID
	}
	ss, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ss.Items {
		if !strings.HasPrefix(string(o.Data["token"]), "s3cret-") {
			t.Errorf("secret %s came back without its data", o.Name)
		}
		out["Secret/"+o.Name] = o.UID
	}
	ds, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ds.Items {
		out["Deployment/"+o.Name] = o.UID
	}
	rss, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range rss.Items {
		if refs := o.OwnerReferences; len(refs) != 1 || refs[0].UID != out["Deployment/"+refs[0].Name] {
			t.Errorf("replicaset %s's owner %+v is not the deployment that came back", o.Name, refs)
		}
		out["ReplicaSet/"+o.Name] = o.UID
	}
	svcs, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range svcs.Items {
		out["Service/"+o.Name] = o.UID
	}
	evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ours := 0
	for _, e := range evs.Items {
		if e.Name == "web.scaled" {
			ours++
		}
	}
	return out, ours
}

// undeleteRunbook: a real kube-apiserver storing into a mutual-TLS etcd
// 3.5 that is backed up and journaled (1 s segments). A namespace "shop"
// of 30 ConfigMaps, 10 Secrets, a Deployment, the ReplicaSet it owns, a
// Service and an Event is deleted as kubectl and the namespace controller
// delete it (the namespace Terminating, its objects deleted, finalized,
// gone); another namespace changes afterwards. The runbook's blocks run
// as an SRE's shell: kubectl says NotFound, journal find shows the
// namespace turning Terminating at T (the revision the test saw), the dry
// run (at T-1, the point the runbook says) lists every object and writes
// nothing, a dry run at D-1 refuses naming T-1, the undelete writes them
// back, a second run writes nothing (its record: no key written), and
// kubectl shows them. Through the API
// server: every object is back with its uid, data and owner, the Event is
// not (leased), the namespace is Active, and the other namespace's later
// write is untouched.
func undeleteRunbook(t *testing.T, rb mdblocks.Set) {
	const shop, other = "shop", "other"
	ctx := testfix.Context(t, 5*time.Minute)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	k := testenv.StartKubeAPIServerWith(t, testenv.KubeOptions{EtcdServers: c.Endpoints(), ExtraArgs: []string{
		"--etcd-cafile=" + c.PKI.CAFile, "--etcd-certfile=" + c.PKI.ClientCertFile, "--etcd-keyfile=" + c.PKI.ClientKeyFile}})
	cs := k.Clientset(t, "")
	f := mdblocks.NewFixture(t, c.PKI, c.Endpoints())
	base := f.Backup(t, ctx, c, backup.Options{V2: backup.V2Off})
	cp := startCapture(t, ctx, f, c.Client(t), base, time.Second, nil)

	kubetest.CreateNamespaces(t, cs, shop, other)
	want := undeleteWorkload(t, ctx, cs, shop)
	if _, err := cs.CoreV1().ConfigMaps(other).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data: map[string]string{"mode": "before"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The mistake: kubectl delete namespace shop, then what the namespace
	// controller does (no controller-manager runs here).
	nsAPI := cs.CoreV1().Namespaces()
	if err := nsAPI.Delete(ctx, shop, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, err := nsAPI.Get(ctx, shop, metav1.GetOptions{})
	if err != nil || ns.DeletionTimestamp == nil {
		t.Fatalf("shop after its delete: %+v %v", ns, err)
	}
	terminating, err := strconv.ParseInt(ns.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	del := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	for _, err := range []error{
		cs.CoreV1().ConfigMaps(shop).DeleteCollection(ctx, del, metav1.ListOptions{}),
		cs.CoreV1().Secrets(shop).DeleteCollection(ctx, del, metav1.ListOptions{}),
		cs.AppsV1().ReplicaSets(shop).DeleteCollection(ctx, del, metav1.ListOptions{}),
		cs.AppsV1().Deployments(shop).DeleteCollection(ctx, del, metav1.ListOptions{}),
		cs.CoreV1().Events(shop).DeleteCollection(ctx, del, metav1.ListOptions{}),
		cs.CoreV1().Services(shop).Delete(ctx, "web", del),
	} {
		if err != nil {
			t.Fatalf("emptying %s: %v", shop, err)
		}
	}
	ns.Spec.Finalizers = nil
	if _, err := nsAPI.Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("finalize %s: %v", shop, err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := nsAPI.Get(ctx, shop, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still there after its finalize", shop)
		}
	}
	// Life goes on elsewhere.
	if _, err := cs.CoreV1().ConfigMaps(other).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data: map[string]string{"mode": "after the delete"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cli := c.Client(t)
	revision := func() int64 {
		t.Helper()
		r, err := cli.Get(ctx, "/registry/namespaces/"+other, clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	last := revision()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		segs, err := journal.ListSegments(ctx, f.Store, f.Layout, f.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		var reach int64
		for _, s := range segs.All {
			reach = max(reach, s.LastRev)
		}
		if reach >= last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the journal reaches %d, not %d", reach, last)
		}
	}
	cp.stop(t)

	s := newScenario(t, rb, f.Vars)
	s.Vars["kube-namespace"] = shop
	s.Tools["kubectl"] = kubetest.KubectlBin(t)
	s.ExtraEnv = []string{"KUBECONFIG=" + k.Kubeconfig(t, "", "default")}

	rs := s.Run(undeleteRB + "#see-what-is-gone")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "kubectl get namespace", 0), "NotFound")
	mdblocks.MustContain(t, mdblocks.One(t, rs, "journal find", 0), "/registry/namespaces/"+shop, strconv.FormatInt(terminating, 10), "delete")

	// A dry run just before the namespace key's delete (D - 1, read off
	// journal find's rows) refuses and names the point: T - 1.
	d := int64(0)
	for _, l := range strings.Split(mdblocks.One(t, rs, "journal find", 0).Output, "\n") {
		if f := strings.Fields(strings.ReplaceAll(l, "│", " ")); len(f) > 3 && f[3] == "delete" {
			if d, err = strconv.ParseInt(f[0], 10, 64); err != nil {
				t.Fatalf("journal find's delete row %q: %v", l, err)
			}
		}
	}
	if d <= terminating {
		t.Fatalf("journal find shows the namespace's delete at %d, not after its Terminating put %d", d, terminating)
	}
	s.Vars["before-delete"] = strconv.FormatInt(d-1, 10)
	rs = s.Run(undeleteRB + "#when-it-refuses")
	mdblocks.MustContain(t, rs[0], "already being deleted", "/registry/namespaces/"+shop, fmt.Sprintf("run again with --to-revision %d", terminating-1),
		"--accept-terminating")

	// The point the runbook says: the revision before the put at which
	// the namespace turned Terminating.
	s.Vars["point"] = strconv.FormatInt(terminating-1, 10)
	rs = s.Run(undeleteRB + "#dry-run")
	dry := mdblocks.One(t, rs, "--dry-run", 0)
	mdblocks.MustContain(t, dry, "dry run", "would-restore", "leased", "/registry/namespaces/"+shop, "/registry/configmaps/"+shop+"/cm-029")
	if _, err := nsAPI.Get(ctx, shop, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the dry run, namespace %s: %v; want still NotFound", shop, err)
	}

	rs = s.Run(undeleteRB + "#undelete")
	if len(rs) != 2 {
		t.Fatalf("the undelete section ran %d blocks, want the run and the run again", len(rs))
	}
	mdblocks.MustContain(t, rs[0], "restored", "record")
	mdblocks.MustContain(t, rs[1], "present")
	// The second run wrote nothing: its record says so key by key (the
	// revision is no witness: the API server writes its own leases).
	recs, err := catalog.ListUndeleteRecords(ctx, f.Store, f.Layout, f.ID)
	if err != nil || len(recs) != 2 {
		t.Fatalf("%d undelete records (%v), want the run and the run again", len(recs), err)
	}
	for i, n := range []int{len(want) + 1, 0} { // the objects and the namespace, then nothing
		written := 0
		for _, k := range recs[i].Keys {
			if k.Written > 0 {
				written++
			}
		}
		if recs[i].Outcome != catalog.UndeleteComplete || written != n {
			t.Errorf("run %d: outcome %q, %d keys written; want complete, %d\n%s", i+1, recs[i].Outcome, written, n, rs[i].Output)
		}
	}

	rs = s.Run(undeleteRB + "#check")
	mdblocks.MustContain(t, rs[0], "Active", "cm-029", "secret-009", "web", string(want["Deployment/web"]), string(want["ConfigMap/cm-000"]))

	// Through the API server: every object with its uid, data and owner;
	// not the Event.
	back, events := shopNow(t, ctx, cs, shop)
	for obj, uid := range want {
		if back[obj] != uid {
			t.Errorf("%s: uid %q after the undelete, %q before", obj, back[obj], uid)
		}
	}
	if len(back) != len(want) {
		t.Errorf("%d objects in %s after the undelete, want %d: %v", len(back), shop, len(want), back)
	}
	if events != 0 {
		t.Errorf("the workload's Event came back; Events are on a lease and are not brought back")
	}
	if ns, err := nsAPI.Get(ctx, shop, metav1.GetOptions{}); err != nil || ns.Status.Phase != corev1.NamespaceActive || ns.DeletionTimestamp != nil {
		t.Errorf("namespace %s after the undelete: %+v %v; want Active, no deletionTimestamp", shop, ns, err)
	}
	if cm, err := cs.CoreV1().ConfigMaps(other).Get(ctx, "settings", metav1.GetOptions{}); err != nil || cm.Data["mode"] != "after the delete" {
		t.Errorf("the other namespace's later write: %+v %v; want untouched", cm, err)
	}
}
