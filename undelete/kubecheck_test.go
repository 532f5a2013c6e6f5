package undelete_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/undelete"
)

// TestUndeleteKubeChecks: on a real kube-apiserver with the real namespace
// controller and garbage collector, what undelete must not bring back:
//   - the objects of a namespace still Terminating now (a finalizer no one
//     removes holds it): the namespace controller would delete them again
//     at once; refused, nothing written;
//   - a point at which the namespace was already Terminating: refused;
//   - a Service whose cluster IP another Service took since: left alone
//     (conflict), and no two Services ever claim one IP.
func TestUndeleteKubeChecks(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 6*time.Minute)
	w := kubetest.NewUndeleteWorld(t, ctx, kubetest.UndeleteWorldOptions{Controllers: true})
	const ns, svcNS, other = "stuck", "svcns", "other"
	for _, n := range []string{ns, svcNS, other} {
		if _, err := w.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cms := w.Admin.CoreV1().ConfigMaps(ns)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/never"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c"} {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n}, Data: map[string]string{"k": n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "old"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.7.7",
		Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := w.Admin.CoreV1().Services(svcNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	point := w.Revision(t, ctx)
	if err := w.Admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	nsObj, err := w.Admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil || nsObj.DeletionTimestamp == nil {
		t.Fatalf("%s after its delete: %+v, %v", ns, nsObj, err)
	}
	marked, err := strconv.ParseInt(nsObj.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(300 * time.Millisecond) {
		l, err := cms.List(ctx, metav1.ListOptions{})
		if err == nil && len(l.Items) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the namespace controller did not empty %s but its held configmap: %v", ns, err)
		}
	}
	if err := w.Admin.CoreV1().Services(svcNS).Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The IP is free again once its IPAddress object is gone.
	svc2 := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "new"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.7.7",
		Ports: []corev1.ServicePort{{Port: 80}}}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := w.Admin.CoreV1().Services(other).Create(ctx, svc2, metav1.CreateOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("another Service cannot take 10.96.7.7: %v", err)
		}
	}
	w.WaitJournal(t, ctx, w.Revision(t, ctx))
	var ue *undelete.Error

	t.Run("NamespaceTerminatingNow", func(t *testing.T) {
		_, err := undelete.Run(ctx, kubeOpts(t, w, point, []string{ns}))
		if !errors.As(err, &ue) || ue.Step != undelete.StepCheck || !strings.Contains(err.Error(), "being deleted now: /registry/namespaces/"+ns) {
			t.Fatalf("the objects of a namespace Terminating now: %v", err)
		}
		if l, err := cms.List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 1 {
			t.Errorf("after the refusal: %d configmaps in %s (%v), want the held one alone", len(l.Items), ns, err)
		}
	})

	// The point at which the namespace was marked: refused as well (the
	// namespace is still Terminating now; once it is gone, the refusal
	// names the revision before it was marked: TestUndeleteRefusals).
	t.Run("PointWhenTerminating", func(t *testing.T) {
		_, err := undelete.Run(ctx, kubeOpts(t, w, marked, []string{ns}))
		if !errors.As(err, &ue) || ue.Step != undelete.StepCheck {
			t.Fatalf("a point where %s is Terminating: %v", ns, err)
		}
	})

	t.Run("ServiceIPTaken", func(t *testing.T) {
		o := kubeOpts(t, w, point, nil, "/registry/services/specs/"+svcNS+"/")
		o.Settle = 2 * time.Second
		res, err := undelete.Run(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		a := keyActions(res)
		if len(a[undelete.ActionConflict]) != 1 || a[undelete.ActionConflict][0] != "/registry/services/specs/"+svcNS+"/old" || res.Written() != 0 {
			t.Fatalf("a Service whose IP is taken: %v", a)
		}
		l, err := w.Admin.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range l.Items {
			if s.Spec.ClusterIP == "10.96.7.7" && (s.Namespace != other || s.Name != "new") {
				t.Errorf("%s/%s claims 10.96.7.7 too", s.Namespace, s.Name)
			}
		}
	})
}
