package journal_test

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// BenchmarkJournalCatchUp100 measures the journal's memory when every
// cluster of a namespace catches up at once (a journal restarted after a
// pause, or a leader change: the new leader watches every cluster from
// where its segments end): ONE journal process (internal/testing/cmd/
// journalbench, journal.Capture for every cluster, the command's code
// path) capturing BENCH_CATCHUP_CLUSTERS (default 100) clusters, each with
// BENCH_CATCHUP_MB (default 16) MiB of history written while no journal
// ran, as overwrites of 1 MiB values (Kubernetes' largest objects:
// secrets, configmaps; base64, so zstd takes a quarter), which the watch
// sends with their previous values (twice the bytes). The clusters are
// BENCH_CATCHUP_ETCDS (default 10) etcd 3.5 members, each journaled
// under clusters/etcds ids (the process's memory is the captures', not
// the servers').
//
// In the same run, the baselines: the same process with the same
// clusters and nothing to catch up (idle), and one cluster catching up
// alone. It prints the peak RSS (VmHWM) of each, the increment per
// cluster, the catch-up's bytes and time. JOURNALBENCH_BIN runs another
// build of journalbench (the same config) for a comparison across
// versions.
func BenchmarkJournalCatchUp100(b *testing.B) {
	clusters := envInts(b, "BENCH_CATCHUP_CLUSTERS", []int{100})[0]
	etcds := envInts(b, "BENCH_CATCHUP_ETCDS", []int{10})[0]
	mbs := envInts(b, "BENCH_CATCHUP_MB", []int{16})[0]
	if benchQuick() {
		clusters, etcds, mbs = 20, 4, 8
	}
	bin := os.Getenv("JOURNALBENCH_BIN")
	if bin == "" {
		bin = journalBenchBin(b)
	}
	ctx := testfix.Context(b, 30*time.Minute)
	rig := testfix.NewStoreRig(b)
	type srv struct {
		c         *testenv.EtcdCluster
		cli       *clientv3.Client
		base, end int64
	}
	srvs := make([]srv, etcds)
	val := make([]byte, 1<<20)
	rnd := rand.New(rand.NewPCG(1, 2))
	raw := make([]byte, base64.StdEncoding.DecodedLen(len(val)))
	for i := range srvs {
		c, cli, base := startBenchEtcd(b, ctx)
		srvs[i] = srv{c: c, cli: cli, base: base}
	}
	write := func() {
		b.Helper()
		for i := range srvs {
			for j := range mbs {
				for k := range raw {
					raw[k] = byte(rnd.Uint32())
				}
				base64.StdEncoding.Encode(val, raw)
				r, err := srvs[i].cli.Put(ctx, fmt.Sprintf("/registry/secrets/ns/big-%d", j%4), string(val[:len(val)-1024]))
				if err != nil {
					b.Fatal(err)
				}
				srvs[i].end = r.Header.Revision
			}
		}
	}
	run := func(label string, n int, budget int64, from func(s srv) int64, until func(s srv) int64, idle time.Duration) (int64, time.Duration, int64) {
		b.Helper()
		var cfgClusters []map[string]any
		for i := range n {
			s := srvs[i%etcds]
			cfgClusters = append(cfgClusters, map[string]any{"ID": fmt.Sprintf("%s-%03d", label, i), "Endpoints": s.c.Endpoints(), "BaseBackup": "bench-base", "BaseRev": from(s)})
		}
		start := time.Now()
		cmd, pipe, errOut := startJournalBench(b, bin, journalBenchConfig(rig, 2*time.Second, cfgClusters, budget))
		defer cmd.Process.Kill()
		watch := testfix.WatchRSS(cmd.Process.Pid)
		var (
			mu      sync.Mutex
			reached = map[string]int64{}
			stored  int64
		)
		go func() {
			sc := bufio.NewScanner(pipe)
			for sc.Scan() {
				var s struct {
					Cluster     string
					Last, Bytes int64
				}
				if json.Unmarshal(sc.Bytes(), &s) == nil && s.Cluster != "" {
					mu.Lock()
					reached[s.Cluster] = max(reached[s.Cluster], s.Last)
					stored += s.Bytes
					mu.Unlock()
				}
			}
		}()
		if idle > 0 {
			time.Sleep(idle)
		} else {
			for done := false; !done; {
				if time.Since(start) > 20*time.Minute {
					b.Fatalf("%s: not caught up in 20 min: %s", label, errOut.String())
				}
				time.Sleep(100 * time.Millisecond)
				done = true
				mu.Lock()
				for i := range n {
					if reached[fmt.Sprintf("%s-%03d", label, i)] < until(srvs[i%etcds]) {
						done = false
						break
					}
				}
				mu.Unlock()
			}
		}
		took := time.Since(start)
		if os.Getenv("JOURNALBENCH_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "%s:\n%s\n", label, errOut.String())
		}
		hwm, _, _ := watch.Stop()
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		mu.Lock()
		defer mu.Unlock()
		return hwm, took, stored
	}
	write()
	budget := int64(envInts(b, "BENCH_CATCHUP_BUDGET_MB", []int{journal.DefaultMemoryBudget >> 20})[0]) << 20
	// Idle: every cluster watched from its end, nothing to catch up.
	idleHWM, _, _ := run("idle", clusters, budget, func(s srv) int64 { return s.end }, nil, 10*time.Second)
	oneHWM, oneTook, _ := run("one", 1, budget, func(s srv) int64 { return s.base }, func(s srv) int64 { return s.end }, 0)
	freeHWM, freeTook, _ := run("free", clusters, 0, func(s srv) int64 { return s.base }, func(s srv) int64 { return s.end }, 0)
	allHWM, allTook, stored := run("all", clusters, budget, func(s srv) int64 { return s.base }, func(s srv) int64 { return s.end }, 0)
	per := float64(freeHWM-idleHWM) / float64(clusters) / (1 << 20)
	fmt.Printf("BenchmarkJournalCatchUp100: %d clusters (%d etcd 3.5 members) each catching up %d MiB of 1 MiB overwrites (%d MiB with previous values on the watch) at once, one process: "+
		"with the memory budget (%s) peak RSS %s in %s (%s stored); without a budget %s in %s (%.2f MiB a cluster over idle); "+
		"idle with the same clusters %s; one cluster catching up alone %s in %s; budgeted peak / unbudgeted %.2f, time %.2fx\n",
		clusters, etcds, mbs, 2*mbs, mib(budget), mib(allHWM), allTook.Round(time.Second), mib(stored), mib(freeHWM), freeTook.Round(time.Second), per,
		mib(idleHWM), mib(oneHWM), oneTook.Round(time.Millisecond), float64(allHWM)/float64(max(freeHWM, 1)), allTook.Seconds()/max(freeTook.Seconds(), 0.001))
	b.ReportMetric(float64(allHWM)/(1<<20), "peak-MiB")
	b.ReportMetric(float64(freeHWM)/(1<<20), "unbudgeted-peak-MiB")
	b.ReportMetric(float64(idleHWM)/(1<<20), "idle-MiB")
}
