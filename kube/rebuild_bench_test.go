package kube_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// BenchmarkRebuildFromStore measures the time from an empty namespace to
// a verified cluster for a database of BENCH_REBUILD_MB (default 1024)
// MiB, one member, split into its steps (choose the backup, read the
// escrow, rebuild the objects, select and verify the snapshot, stage it,
// etcd-operator's restore: the stand-in's fetch and etcdutl restore,
// verify), and the escrow's size and PUTs per cluster per day: three
// encrypted backups a day of an unchanged cluster, the escrow's objects
// listed after each (a PUT would add an object or change its
// LastModified).
func BenchmarkRebuildFromStore(b *testing.B) {
	sizeMB := testfix.BenchInt("BENCH_REBUILD_MB", 1024)
	const ns, name = "kubx-etcd-16", "etcd-bench"
	w := kubetest.NewWorld(b, ns)
	kubetest.RebuildAccess(b, w.Applier, ns, name)
	m := testenv.SharedMinIO(b)
	bucket := m.NewBucket(b)
	st := testfix.Store(b, m, bucket)
	layout := catalog.Layout{Prefix: "bench"}
	kubetest.CreateCOSSecret(b, w.Admin, ns, m)
	fc := kubetest.AddEtcdCluster(b, w.Admin, w.Dyn, ns, name, testenv.EtcdOptions{IP: "127.0.5.60", Members: 1, QuotaBackendBytes: 8 << 30})
	ctx := context.Background()
	t0 := time.Now()
	testfix.FillLarge(b, fc.Etcd.Client(b), int64(sizeMB)<<20)
	fmt.Printf("filled %d MiB in %v\n", sizeMB, time.Since(t0).Round(time.Second))

	key := testfix.NewAgeKey(b)
	admin := w.Kube(b, "")
	cs, err := admin.Clusters(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	escrows := func() map[string]time.Time {
		objs, err := st.List(ctx, layout.EscrowPrefix(name))
		if err != nil {
			b.Fatal(err)
		}
		out := map[string]time.Time{}
		for _, o := range objs {
			out[o.Key] = o.LastModified
		}
		return out
	}
	var man *catalog.Manifest
	var puts []int
	var prev map[string]time.Time
	for i := range 3 {
		t0 = time.Now()
		res, err := backup.Run(ctx, backup.Options{ClusterID: name, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(fc.Etcd), Store: st, Layout: layout,
			Recipients: testfix.RecipientsOf(b, key),
			Escrow: func(ctx context.Context) (*catalog.EscrowList, []string, error) {
				return admin.CaptureEscrow(ctx, cs[0])
			}})
		if err != nil {
			b.Fatal(err)
		}
		man = res.Manifest
		if !man.Escrow.Usable() {
			b.Fatalf("backup %d: escrow %+v", i, man.Escrow)
		}
		now := escrows()
		n := 0
		for k, t := range now {
			if pt, ok := prev[k]; !ok || !pt.Equal(t) {
				n++
			}
		}
		puts = append(puts, n)
		prev = now
		fmt.Printf("backup %d: %v, escrow %s (%d stored bytes, %d plaintext), new or rewritten escrow objects: %d\n",
			i+1, time.Since(t0).Round(time.Millisecond), man.Escrow.Address[:12], man.Escrow.StoredSize, man.Escrow.RawSize, n)
		time.Sleep(time.Second) // a distinct LastModified for a rewrite
	}

	// The namespace gone; the rebuild, in-process, as the toolkit.
	kubetest.WipeNamespace(b, ctx, w.Admin, w.Dyn, ns)
	for _, mb := range fc.Etcd.Members {
		mb.Kill()
		os.RemoveAll(mb.DataDir)
	}
	kubetest.CreateCOSSecret(b, w.Admin, ns, m)
	w.Applier.ApplyFile(b, kubetest.DeployPath(b, "10-rbac.yaml"), ns)
	kubetest.RebuildAccess(b, w.Applier, ns, name)
	op := kubetest.StartRestoreOperator(b, kubetest.RestoreOperatorOptions{Namespace: ns, Client: w.Admin, Dynamic: w.Dyn, RunningDelay: time.Millisecond})
	toolkit := w.Kube(b, w.Token(b, "etcd-recovery-toolkit"))
	dir := b.TempDir()
	b.ResetTimer()
	t0 = time.Now()
	rep, err := kube.RebuildRestore(ctx, kube.RebuildRestoreOptions{Restore: kube.OperatorRestoreOptions{Kube: toolkit, Cluster: name, Store: st, Layout: layout,
		Bucket: bucket, Endpoint: m.Endpoint, ForcePathStyle: true, Identities: key.IDs, TempDir: dir, PollInterval: 100 * time.Millisecond, Timeout: 30 * time.Minute}})
	total := time.Since(t0)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	recs := op.Records()
	steps := append([]kube.StepTime{}, rep.Steps[:len(rep.Steps)-1]...) // the restore, split below
	for _, s := range rep.Restore.Steps {
		steps = append(steps, kube.StepTime{Step: "restore: " + s.Step, Duration: s.Duration})
	}
	gib := float64(man.Snapshot.RawSize) / (1 << 30)
	fmt.Printf("rebuild from the store of a %.0f MiB database (stored %.0f MiB): %v (%.1f s/GiB)\n",
		float64(man.Snapshot.RawSize)/(1<<20), float64(man.Snapshot.StoredSize)/(1<<20), total.Round(time.Millisecond), total.Seconds()/gib)
	for _, s := range steps {
		fmt.Printf("  %-45s %8.2fs  %4.1f%%\n", s.Step, s.Duration.Seconds(), 100*s.Duration.Seconds()/total.Seconds())
	}
	if len(recs) != 1 || recs[0].Err != nil {
		b.Fatalf("the stand-in's restores: %+v", recs)
	}
	fmt.Printf("escrow: %d bytes stored (%d plaintext); escrow objects written by 3 backups of the unchanged cluster: %v (the first stores it, the others reuse it)\n",
		man.Escrow.StoredSize, man.Escrow.RawSize, puts)
	b.ReportMetric(total.Seconds(), "rebuild-s")
	b.ReportMetric(total.Seconds()/gib, "rebuild-s/GiB")
	b.ReportMetric(float64(man.Escrow.StoredSize), "escrow-bytes")
	sum := 0
	for _, p := range puts {
		sum += p
	}
	b.ReportMetric(float64(sum), "escrow-PUTs/day")
}
