package fleet_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// countingStore counts the store's list calls.
type countingStore struct {
	store.Store
	lists atomic.Int64
}

func (c *countingStore) List(ctx context.Context, prefix string) ([]store.ObjectInfo, error) {
	c.lists.Add(1)
	return c.Store.List(ctx, prefix)
}

// BenchmarkProveListing1800 measures what the hourly proof CronJob lists
// before it proves anything, in a bucket holding the journals of a whole
// carrier: BENCH_PROVE_CLUSTERS (default 1,800) clusters with
// BENCH_PROVE_SEGMENTS (default 24) segments each under one prefix, in
// MinIO. The CronJob of one namespace (BENCH_PROVE_NAMESPACE clusters,
// default 100) lists each of its clusters' own journal folder
// (fleet.NamespaceJournals, 8 at once); the baseline, in the same run, is
// one listing of the shared journal prefix (fleet.JournalClusters, what
// `journal prove --all` without a namespace does). It prints both times,
// the list requests and keys per second, and extrapolates each to a week
// of 30 s segments (20,160 a cluster) at the measured key rate.
func BenchmarkProveListing1800(b *testing.B) {
	envInt := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	clusters, segs, nsClusters := envInt("BENCH_PROVE_CLUSTERS", 1800), envInt("BENCH_PROVE_SEGMENTS", 24), envInt("BENCH_PROVE_NAMESPACE", 100)
	ctx := testfix.Context(b, 60*time.Minute)
	rig := testfix.NewStoreRig(b)
	// The segments: empty objects under their real keys (listing does
	// not read them).
	t0 := time.Now()
	total := clusters * segs
	var failed atomic.Int64
	fanout.ForEach(ctx, total, 32, func(ctx context.Context, i int) {
		c, s := i/segs, int64(i%segs)
		key := rig.Layout.JournalSegmentKey(fmt.Sprintf("cl-%04d", c), 1000+s*100, 1000+s*100+99)
		if _, err := rig.Store.Put(ctx, key, strings.NewReader("")); err != nil {
			failed.Add(1)
		}
	})
	if failed.Load() > 0 {
		b.Fatalf("%d of %d segment objects not written", failed.Load(), total)
	}
	fmt.Fprintf(os.Stderr, "wrote %d objects in %s\n", total, time.Since(t0).Round(time.Second))
	cs := &countingStore{Store: rig.Store}
	opts := drill.ProveOptions{Store: cs, Layout: rig.Layout}
	names := make([]string, nsClusters)
	for i := range names {
		names[i] = fmt.Sprintf("cl-%04d", i*(clusters/nsClusters))
	}
	b.ResetTimer()
	start := time.Now()
	in, none, err := fleet.NamespaceJournals(ctx, opts, names)
	nsTook, nsLists := time.Since(start), cs.lists.Load()
	if err != nil || len(in) != nsClusters || none != 0 {
		b.Fatalf("NamespaceJournals: %d in, %d without, %v", len(in), none, err)
	}
	// Then what the CronJob does per cluster before a proof: its backups,
	// its proofs and the journal's reach between them
	// (drill.UnprovenTargets, as fleet.ProveAll calls it), one cluster at
	// a time (--prove-parallel 1, the CronJob's).
	cs.lists.Store(0)
	start = time.Now()
	for _, id := range in {
		if _, err := drill.UnprovenTargets(ctx, cs, rig.Layout, id, nil); err != nil {
			b.Fatalf("UnprovenTargets %s: %v", id, err)
		}
	}
	selTook, selLists := time.Since(start), cs.lists.Load()
	cs.lists.Store(0)
	start = time.Now()
	all, err := fleet.JournalClusters(ctx, opts)
	allTook, allLists := time.Since(start), cs.lists.Load()
	if err != nil || len(all) != clusters {
		b.Fatalf("JournalClusters: %d, %v", len(all), err)
	}
	b.StopTimer()
	nsKeys, allKeys := nsClusters*segs, total
	nsRate, allRate := float64(nsKeys)/nsTook.Seconds(), float64(allKeys)/allTook.Seconds()
	const week = 20160
	fmt.Printf("BenchmarkProveListing1800: each cluster's selection before its proofs (its backups, its proofs; no backups here): %s for the %d clusters (%d list calls)\n",
		selTook.Round(time.Millisecond), len(in), selLists)
	fmt.Printf("BenchmarkProveListing1800: a bucket of %d clusters x %d segments (%d keys), MinIO on loopback: "+
		"the namespace's %d clusters listed one folder each (8 at once) in %s (%d list calls, %.0f keys/s); "+
		"the shared prefix listed whole in %s (%.0f keys/s), %.1fx the namespace's. At a week of 30 s segments (%d a cluster): "+
		"the namespace's listing about %s, the whole prefix's about %s (the CronJob's deadline is 55 min)\n",
		clusters, segs, total, nsClusters, nsTook.Round(time.Millisecond), nsLists, nsRate, allTook.Round(time.Millisecond), allRate,
		allTook.Seconds()/nsTook.Seconds(), week,
		(time.Duration(float64(nsClusters*week) / nsRate * float64(time.Second))).Round(time.Second),
		(time.Duration(float64(clusters*week) / allRate * float64(time.Second))).Round(time.Second))
	b.ReportMetric(nsTook.Seconds(), "namespace-s")
	b.ReportMetric(allTook.Seconds(), "prefix-s")
	_ = allLists
}
