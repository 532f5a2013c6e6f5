package fleet_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// TestProveAllNamespace: with Kube (a real kube-apiserver, the backup
// Role's service account), ProveAll works on the cluster ids with a
// journal in MinIO that are EtcdClusters of the namespace only: another
// namespace's cluster with a journal under the same prefix is counted, not
// listed; an EtcdCluster without a journal is not listed. Without Kube,
// every id with a journal is.
func TestProveAllNamespace(t *testing.T) {
	t.Parallel()
	const ns, otherNS = "kubx-etcd-09", "kubx-etcd-10"
	ctx := testfix.Context(t, 2*time.Minute)
	k := testenv.StartKubeAPIServer(t)
	admin, dyn := k.Clientset(t, ""), k.Dynamic(t, "")
	kubetest.InstallCRDs(t, k)
	kubetest.CreateNamespaces(t, admin, ns, otherNS)
	kubetest.NewApplier(t, k).ApplyFile(t, kubetest.DeployPath(t, "10-rbac.yaml"), ns)
	for n, names := range map[string][]string{ns: {"mine-a", "mine-b", "mine-nojournal"}, otherNS: {"theirs"}} {
		for _, name := range names {
			ec := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": kube.APIVersion, "kind": kube.KindEtcdCluster,
				"metadata": map[string]any{"name": name, "namespace": n},
				"spec":     map[string]any{"size": int64(1), "version": "3.5.35"},
			}}
			if _, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(n).Create(ctx, ec, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	rig := testfix.NewStoreRig(t)
	st, layout := rig.Store, rig.Layout
	// A journal segment's key for each (no backup: nothing to prove, each
	// listed cluster passes with no proof).
	for _, id := range []string{"mine-a", "mine-b", "theirs"} {
		if _, err := st.Put(ctx, layout.JournalSegmentKey(id, 10, 20), strings.NewReader("segment")); err != nil {
			t.Fatal(err)
		}
	}
	sa, err := kube.New(kube.Config{Rest: k.RestConfig(kubetest.SAToken(t, admin, ns, "etcd-recovery-toolkit")), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := drill.ProveOptions{Store: st, Layout: layout, ScratchDir: t.TempDir(), Timeout: time.Minute}
	ids := func(rep *fleet.ProveAllReport) []string {
		var out []string
		for _, c := range rep.Clusters {
			out = append(out, c.Cluster)
		}
		return out
	}
	listed := &listRecorder{Store: st}
	tmplNS := tmpl
	tmplNS.Store = listed
	rep, err := fleet.ProveAll(ctx, fleet.ProveAllOptions{Template: tmplNS, Kube: sa})
	if err != nil {
		t.Fatalf("ProveAll with Kube: %v", err)
	}
	if got := ids(rep); !slices.Equal(got, []string{"mine-a", "mine-b"}) || rep.NoJournal != 1 || rep.Namespace != ns {
		t.Errorf("ProveAll with Kube: clusters %q, without a journal %d, namespace %q; want [mine-a mine-b], 1, %s", got, rep.NoJournal, rep.Namespace, ns)
	}
	if f := rep.Table().Footer; !strings.Contains(f, "namespace "+ns) || !strings.Contains(f, "1 EtcdCluster(s) of the namespace without a journal") {
		t.Errorf("footer %q: want the namespace and the count of its clusters without a journal", f)
	}
	// Only the namespace's own clusters' folders were listed, never the
	// shared journal prefix (1,800 clusters' journals at fleet scale).
	prefixes := listed.prefixes()
	for _, p := range prefixes {
		if p == layout.JournalPrefix("") || p == layout.RootPrefix() || strings.HasPrefix(p, layout.JournalPrefix("theirs")) {
			t.Errorf("ProveAll with Kube listed %q: only the namespace's clusters' folders may be", p)
		}
	}
	if !slices.Contains(prefixes, layout.JournalPrefix("mine-nojournal")) {
		t.Errorf("ProveAll with Kube listed %q: want each EtcdCluster's journal folder", prefixes)
	}
	rep, err = fleet.ProveAll(ctx, fleet.ProveAllOptions{Template: tmpl})
	if err != nil {
		t.Fatalf("ProveAll without Kube: %v", err)
	}
	if got := ids(rep); !slices.Equal(got, []string{"mine-a", "mine-b", "theirs"}) || rep.NoJournal != 0 || rep.Namespace != "" {
		t.Errorf("ProveAll without Kube: clusters %q, without a journal %d, namespace %q; want every id with a journal", got, rep.NoJournal, rep.Namespace)
	}
	// A listing the API refuses (a namespace the account has no Role in)
	// fails the run, naming the step: never a fallback to every cluster.
	foreign, err := kube.New(kube.Config{Rest: k.RestConfig(kubetest.SAToken(t, admin, ns, "etcd-recovery-toolkit")), Namespace: otherNS})
	if err != nil {
		t.Fatal(err)
	}
	rep, err = fleet.ProveAll(ctx, fleet.ProveAllOptions{Template: tmpl, Kube: foreign})
	if err == nil || !strings.Contains(err.Error(), "list EtcdClusters") || !strings.Contains(err.Error(), otherNS) || len(rep.Clusters) != 0 {
		t.Errorf("ProveAll in a namespace the account cannot list: %v, %d clusters; want an error naming the step and %s", err, len(rep.Clusters), otherNS)
	}
}

// listRecorder is a store that records the prefixes it is asked to list.
type listRecorder struct {
	store.Store
	mu     sync.Mutex
	listed []string
}

func (l *listRecorder) List(ctx context.Context, prefix string) ([]store.ObjectInfo, error) {
	l.mu.Lock()
	l.listed = append(l.listed, prefix)
	l.mu.Unlock()
	return l.Store.List(ctx, prefix)
}

func (l *listRecorder) prefixes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.listed)
}
