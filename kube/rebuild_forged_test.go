package kube_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// TestRebuildRefusesForeignEscrow: an escrow that is not the cluster's
// own is refused before the API server is contacted (the client points at
// a closed port, so any call would fail with a connection error instead):
// captured in another namespace, of another EtcdCluster, holding a Secret
// the EtcdCluster does not name (cos-credentials) or a Service not one of
// the cluster's. The cluster's own escrow gets past the checks (it fails
// on the closed port), so the test can tell the two apart.
func TestRebuildRefusesForeignEscrow(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	const ns, name = "kubx-etcd-09", "etcd-forged"
	kc, err := kube.New(kube.Config{Rest: &rest.Config{Host: "https://127.0.0.1:1", Timeout: 2 * time.Second}, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	item := func(l *catalog.EscrowList, kind, n string) map[string]any {
		for _, it := range l.Items {
			if md, _ := it["metadata"].(map[string]any); it["kind"] == kind && md["name"] == n {
				return it
			}
		}
		t.Fatalf("no %s %s in the fixture", kind, n)
		return nil
	}
	for _, tc := range []struct {
		what   string
		forge  func(l *catalog.EscrowList)
		refuse []string
	}{
		{"its own", func(*catalog.EscrowList) {}, nil},
		{"another namespace", func(l *catalog.EscrowList) {
			for _, it := range l.Items {
				it["metadata"].(map[string]any)["namespace"] = "kubx-etcd-07"
			}
		}, []string{"captured in namespace kubx-etcd-07, not " + ns}},
		{"another cluster", func(l *catalog.EscrowList) {
			item(l, kube.KindEtcdCluster, name)["metadata"].(map[string]any)["name"] = "etcd-other"
		}, []string{"the escrow is of EtcdCluster etcd-other, not " + name}},
		{"cos-credentials", func(l *catalog.EscrowList) {
			l.Items = append(l.Items, map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "cos-credentials"},
				"data": map[string]any{"credentials": "eA=="}})
		}, []string{"Secret cos-credentials, which EtcdCluster " + name + " does not name"}},
		{"a secret renamed", func(l *catalog.EscrowList) {
			item(l, "Secret", name+"-server-tls")["metadata"].(map[string]any)["name"] = "etcd-recovery-age-identity"
		}, []string{"Secret etcd-recovery-age-identity, which EtcdCluster " + name + " does not name"}},
		{"another service", func(l *catalog.EscrowList) {
			item(l, "Service", name+"-client")["metadata"].(map[string]any)["name"] = "etcd-recovery-metrics"
		}, []string{"Service etcd-recovery-metrics, not one of EtcdCluster " + name + "'s"}},
		{"a secret twice", func(l *catalog.EscrowList) {
			l.Items = append(l.Items, item(l, "Secret", name+"-peer-tls"))
		}, []string{"Secret " + name + "-peer-tls twice"}},
	} {
		l := escrowFixture(t, name, 31899, "")
		tc.forge(l)
		_, err := kube.Rebuild(ctx, kube.RebuildOptions{Kube: kc, Cluster: name, List: l, DryRun: true})
		var rerr *kube.RebuildError
		switch {
		case err == nil:
			t.Errorf("%s: no error", tc.what)
		case tc.refuse == nil:
			if !strings.Contains(err.Error(), "127.0.0.1:1") {
				t.Errorf("%s: %v, want the checks passed and the closed port reached", tc.what, err)
			}
		case !errors.As(err, &rerr) || strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), ns+"/"+name):
			t.Errorf("%s: %v, want a RebuildError naming %s/%s, before any API call", tc.what, err, ns, name)
		default:
			for _, w := range tc.refuse {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %v\nwant %q in it", tc.what, err, w)
				}
			}
		}
	}
}

// TestRebuildAccessByName: the break-glass grant, rendered for one
// cluster, limits every get to that cluster's objects by name (an empty
// resourceNames would grant every secret of the namespace), and nothing
// of it but create (which RBAC cannot limit by name) is namespace-wide.
func TestRebuildAccessByName(t *testing.T) {
	t.Parallel()
	const name = "etcd-abc"
	roles := 0
	for _, o := range kubetest.RebuildAccessObjects(t, name) {
		if o.GetKind() != "Role" {
			continue
		}
		roles++
		var r rbacv1.Role
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
			t.Fatal(err)
		}
		if r.Name != "etcd-recovery-rebuild-"+name {
			t.Errorf("Role %s, want it named for the cluster", r.Name)
		}
		for _, pr := range r.Rules {
			if len(pr.ResourceNames) == 0 && !slices.Equal(pr.Verbs, []string{"create"}) {
				t.Errorf("rule %v on %v has no resourceNames: namespace-wide", pr.Verbs, pr.Resources)
			}
			for _, n := range pr.ResourceNames {
				if !strings.HasPrefix(n, name) {
					t.Errorf("rule %v on %v names %s, not one of %s's objects", pr.Verbs, pr.Resources, n, name)
				}
			}
			if slices.Contains(pr.Verbs, "get") && len(pr.ResourceNames) != 3 {
				t.Errorf("get on %v names %v, want the cluster's three", pr.Resources, pr.ResourceNames)
			}
		}
	}
	if roles != 1 {
		t.Fatalf("%d Roles in %s, want 1", roles, kubetest.RebuildAccessPath)
	}
}

// TestRebuildCallTimeout: an API server that accepts the connection and
// never answers fails the rebuild after CallTimeout, naming the call and
// the timeout, instead of hanging it (the context here allows a minute).
func TestRebuildCallTimeout(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); srv.Close() })
	const name = "etcd-hang"
	kc, err := kube.New(kube.Config{Rest: &rest.Config{Host: srv.URL}, Namespace: "kubx-etcd-09"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = kube.Rebuild(ctx, kube.RebuildOptions{Kube: kc, Cluster: name, List: escrowFixture(t, name, 31898, ""), DryRun: true, CallTimeout: 300 * time.Millisecond})
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "no answer from the API server within 300ms") || !strings.Contains(err.Error(), "etcdrestore "+name) {
		t.Fatalf("a hung API server: %v, want a timeout naming the call", err)
	}
	if took > 5*time.Second {
		t.Fatalf("the rebuild returned after %v, want about the call timeout", took)
	}
}
