package metrics_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/kubetest"
	"github.com/armada/etcd-recovery/internal/testenv"
	"github.com/armada/etcd-recovery/internal/testfix"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/metrics"
)

const (
	memNS       = "kubx-etcd-21"
	memClusters = 100
)

// rig100 is an exporter over 100 EtcdClusters (backed by 4 real etcd
// clusters, kube-apiserver) and 100 cluster ids in MinIO, each with a
// committed scheduled backup (started marker, snapshot object, manifest)
// and a drill record.
func rig100(tb testing.TB) *metrics.Exporter {
	tb.Helper()
	k := testenv.StartKubeAPIServer(tb)
	admin := k.Clientset(tb, "")
	kubetest.CreateNamespaces(tb, admin, memNS)
	kubetest.InstallCRDs(tb, k)
	var etcds []*testenv.EtcdCluster
	for i := range 4 {
		etcds = append(etcds, testenv.StartEtcd(tb, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true, IP: fmt.Sprintf("127.0.21.%d", 10+i)}))
	}
	names := make([]string, memClusters)
	for i := range names {
		names[i] = fmt.Sprintf("etcd-m%03d", i)
	}
	sharedEtcdClusters(tb, admin, k.Dynamic(tb, ""), memNS, etcds, names)
	kc, err := kube.New(kube.Config{Rest: k.RestConfig(""), Namespace: memNS})
	if err != nil {
		tb.Fatal(err)
	}
	m := testenv.SharedMinIO(tb)
	st := testfix.Store(tb, m, m.NewBucket(tb))
	layout := catalog.Layout{Prefix: testenv.Prefix(tb)}
	src := &catalog.Manifest{Format: catalog.ManifestFormat, RevisionBefore: 1000,
		Snapshot: catalog.SnapshotInfo{Object: catalog.SnapshotObjectZstd, Compression: catalog.CompressZstd, StoredSize: 4096, RawSHA256: strings.Repeat("ab", 32)}}
	fanout.ForEach(context.Background(), len(names), 8, func(ctx context.Context, i int) {
		bm := copyBackup(tb, st, layout, src, names[i], time.Now().Add(-time.Duration(i)*time.Minute), catalog.KindScheduled)
		r := &catalog.DrillRecord{ClusterID: names[i], Backup: bm.Name, Passed: i%7 != 0, StartedAt: time.Now().Add(-time.Minute).UTC(),
			FinishedAt: time.Now().UTC(), ToolVersion: "test", Comparison: catalog.DrillComparison{Mode: catalog.CompareSelf}}
		if err := catalog.PutDrill(ctx, st, layout, r); err != nil {
			tb.Error(err)
		}
	})
	e, err := metrics.New(metrics.Options{Kube: kc, Store: st, Layout: layout, Interval: time.Millisecond, Deadline: time.Minute,
		ProbeTimeout: 2 * time.Second, DialTimeout: 2 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// checkRefresh100 refreshes once and checks every cluster is there with
// its backup and verdict.
func checkRefresh100(tb testing.TB, e *metrics.Exporter) {
	tb.Helper()
	if err := e.Refresh(context.Background()); err != nil {
		tb.Fatalf("refresh: %v", err)
	}
	snap := e.Snapshot()
	if len(snap.Clusters) != memClusters {
		tb.Fatalf("%d clusters in the snapshot, want %d", len(snap.Clusters), memClusters)
	}
	for _, c := range snap.Clusters {
		if !c.Inspected || c.Verdict != "HEALTHY" || len(c.Backups) != 1 || c.DrillLast.IsZero() {
			tb.Fatalf("%s: %+v", c.Cluster, c)
		}
	}
}

// TestExporterMemory100: the exporter's heap (after GC) stays flat over
// refreshes of 100 clusters: at refresh 10 and at refresh 40 it differs
// by less than 1 MiB. (1,000 refreshes: BenchmarkExporterRefresh100
// -benchtime 1000x, make bench.) It also logs one refresh's time and
// allocations at 100 clusters.
func TestExporterMemory100(t *testing.T) {
	e := rig100(t)
	const warm, total = 10, 40
	var at20 uint64
	var ms0, ms1 runtime.MemStats
	var took time.Duration
	for i := 1; i <= total; i++ {
		runtime.ReadMemStats(&ms0)
		start := time.Now()
		checkRefresh100(t, e)
		took += time.Since(start)
		runtime.ReadMemStats(&ms1)
		if i == warm {
			at20 = heapAfterGC()
		}
	}
	at80 := heapAfterGC()
	t.Logf("100 clusters: mean refresh %v; last refresh allocated %.1f MiB; heap after GC %.2f MiB at refresh %d, %.2f MiB at refresh %d",
		took/total, float64(ms1.TotalAlloc-ms0.TotalAlloc)/(1<<20), float64(at20)/(1<<20), warm, float64(at80)/(1<<20), total)
	if at80 > at20+1<<20 {
		t.Fatalf("heap grew from %d to %d bytes between refresh %d and %d", at20, at80, warm, total)
	}
}

// BenchmarkExporterRefresh100: one refresh of 100 clusters per
// iteration; reports the heap after GC at the end and its growth since
// the first tenth (make bench runs it with -benchtime 1000x).
func BenchmarkExporterRefresh100(b *testing.B) {
	e := rig100(b)
	checkRefresh100(b, e)
	b.ReportAllocs()
	b.ResetTimer()
	var early uint64
	for i := 0; i < b.N; i++ {
		checkRefresh100(b, e)
		if i == b.N/10 {
			b.StopTimer()
			early = heapAfterGC()
			b.StartTimer()
		}
	}
	b.StopTimer()
	end := heapAfterGC()
	b.ReportMetric(float64(end)/(1<<20), "heap-MiB")
	b.ReportMetric((float64(end)-float64(early))/(1<<20), "heap-growth-MiB")
}
