package kubetest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The undelete world's builder: exactly n objects through the API server,
// owner references with the owners' real uids, events besides them; a
// deleted namespace is gone with every etcd key of it, and the journal
// reaches the delete. The namespace controller and the garbage collector
// of a real kube-controller-manager run (testenv.StartKubeControllerManager):
// the namespace is emptied and finalized by them.
func TestUndeleteWorldPopulateAndDelete(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 4*time.Minute)
	w := kubetest.NewUndeleteWorld(t, ctx, kubetest.UndeleteWorldOptions{Controllers: true})
	start := time.Now()
	p := w.Populate(t, ctx, "doomed", 100, 3)
	t.Logf("populated %d objects (%d owned) and %d events in %v", p.Total(), p.Owned, p.Events, time.Since(start))
	objs := w.Objects(t, ctx, "doomed")
	if len(objs) != 100 || p.Total() != 100 {
		t.Fatalf("%d objects through the API server, population %d, want 100", len(objs), p.Total())
	}
	owned := 0
	for _, o := range objs {
		if strings.Contains(o, `"ownerReferences"`) {
			owned++
		}
	}
	if owned != p.Owned || owned < 10 {
		t.Fatalf("%d objects with ownerReferences, population says %d", owned, p.Owned)
	}
	// 100 objects, the namespace, our 3 events and any event
	// kube-apiserver's service IP repair emitted about a service.
	keys := w.NamespaceKeys(t, ctx, "doomed")
	events := 0
	for _, k := range keys {
		if strings.HasPrefix(k, "/registry/events/doomed/") {
			events++
		}
	}
	if len(keys)-events != 100+1 || events < 3 {
		t.Fatalf("%d etcd keys of the namespace, %d of them events; want 100 objects, the namespace and at least 3 events: %v", len(keys), events, keys)
	}
	start = time.Now()
	term := w.DeleteNamespace(t, ctx, "doomed")
	t.Logf("namespace Terminating at %d, gone after %v by the namespace controller", term, time.Since(start))
	if w.Namespace(t, ctx, "doomed") != nil {
		t.Fatal("the namespace is still there")
	}
	w.WaitJournal(t, ctx, w.Revision(t, ctx))
}
