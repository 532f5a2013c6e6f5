package undelete_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/undelete"
)

// BenchmarkUndelete: the time to undelete a namespace of
// BENCH_UNDELETE_OBJECTS (1000,10000) objects against a whole-cluster
// point-in-time restore of the same cluster to the same revision. For
// each size, an undelete world (kubetest.NewUndeleteWorld: etcd 3.5, the
// journal, a real kube-apiserver): the namespace populated through the
// API server (configmaps, secrets, deployments, services, custom
// resources; a fifth owned by another by uid) after the world's full
// backup (so both replay the journal of the namespace's making, as from a
// backup hours old), the namespace deleted (the namespace controller
// emulated) and the journal synced. Then undelete.Run --namespace NS --to-revision R (in process),
// and restore.Run --to-revision R into a new data dir (in process, as
// `restore --to-revision` builds it: the same backup and journal replay,
// bumped and marked compacted; no member started, no kube-apiserver
// restarted, nothing else lost, all of which a real PITR also costs). The
// cluster holds the namespace and kube-apiserver's own keys only, the
// case least favourable to undelete (a PITR restores the whole cluster,
// which in production is mostly other namespaces). Target: 1,000
// objects in at most 60 s.
func BenchmarkUndelete(b *testing.B) {
	sizes := testfix.BenchSizesMB("BENCH_UNDELETE_OBJECTS", 1000, 10000)
	var summary []string
	for _, n := range sizes {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			ctx := testfix.Context(b, 30*time.Minute)
			const ns = "doomed"
			w := kubetest.NewUndeleteWorld(b, ctx, kubetest.UndeleteWorldOptions{ClusterID: fmt.Sprintf("bench-%d", n)})
			t0 := time.Now()
			w.Populate(b, ctx, ns, n, 0)
			populated := time.Since(t0)
			r := w.DeleteNamespace(b, ctx, ns) - 1
			w.WaitJournal(b, ctx, w.Revision(b, ctx))
			fmt.Printf("BenchmarkUndelete %d objects: populated through the API server in %s; point %d, cluster at %d\n",
				n, populated.Round(time.Millisecond), r, w.Revision(b, ctx))

			for range b.N {
				o := undelete.Options{ClusterID: w.ClusterID, Store: w.Rig.Store, Layout: w.Rig.Layout, Etcd: testfix.EtcdConfig(w.Etcd),
					Namespaces: []string{ns}, ToRevision: r, ScratchDir: b.TempDir(), Operator: "bench", Log: testfix.Logger(b)}
				t0 := time.Now()
				res, err := undelete.Run(ctx, o)
				ud := time.Since(t0)
				if err != nil {
					b.Fatalf("undelete: %v", err)
				}
				if got := res.Counts[undelete.ActionRestored]; got != n+1 {
					b.Fatalf("undelete restored %d keys, want %d (the objects and the namespace): %v", got, n+1, res.Counts)
				}
				peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(b))
				t0 = time.Now()
				pres, err := restore.Run(ctx, restore.Options{ClusterID: w.ClusterID, Store: w.Rig.Store, Layout: w.Rig.Layout, NoLive: true,
					ToRevision: r, Journal: journal.NewSource(w.Rig.Store, w.Rig.Layout, w.ClusterID, nil),
					BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true,
					Targets: restore.Targets{InitialCluster: "r0=" + peer, DataDirRoot: filepath.Join(b.TempDir(), "data")}, Log: testfix.Logger(b)})
				pitr := time.Since(t0)
				if err != nil {
					b.Fatalf("restore --to-revision %d: %v", r, err)
				}
				if pres.Replay == nil || pres.Replay.ToRevision != r {
					b.Fatalf("restore --to-revision %d: replay %+v", r, pres.Replay)
				}
				per1k := ud.Seconds() * 1000 / float64(n)
				line := fmt.Sprintf("| %d | %.2f s | %.2f s | %.2f s | %.2f× | %d events |", n, ud.Seconds(), per1k, pitr.Seconds(), ud.Seconds()/pitr.Seconds(), pres.Replay.Events)
				fmt.Printf("BenchmarkUndelete %d objects: undelete %.2f s (%.2f s per 1,000 objects, %d keys written); whole-cluster restore --to-revision %d into a data dir %.2f s (%d events replayed): undelete/PITR %.2fx\n",
					n, ud.Seconds(), per1k, res.Written(), r, pitr.Seconds(), pres.Replay.Events, ud.Seconds()/pitr.Seconds())
				summary = append(summary, line)
				b.ReportMetric(ud.Seconds(), "undelete-s")
				b.ReportMetric(per1k, "undelete-s/1000obj")
				b.ReportMetric(pitr.Seconds(), "pitr-s")
				if n >= 1000 && per1k > 60 {
					b.Errorf("undelete took %.1f s per 1,000 objects, the target is 60 s", per1k)
				}
			}
		})
	}
	fmt.Println("BenchmarkUndelete summary (markdown):")
	fmt.Println("| objects | undelete | per 1,000 | whole-cluster PITR (data dir only) | undelete/PITR | journal replayed |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, l := range summary {
		fmt.Println(l)
	}
}
