package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// BenchmarkRestoreAll measures restore-all, the real CLI as the
// toolkit's service account, restoring a namespace of
// BENCH_RESTOREALL_CLUSTERS (default 8) quorum-lost EtcdClusters (each a
// real single-member etcd 3.5 with TLS, BENCH_RESTOREALL_MB (default 32)
// MiB of random values, one encrypted backup; kubetest.StartFleetWorld)
// through kubetest's etcd-operator stand-in (acting on the EtcdRestores
// concurrently, Running 1 ms after its members are up: etcd-operator's own
// pods are not measured here) against MinIO, at --parallel 1, 2, 4 and 8.
// It reports each run's wall time, the tool's peak RSS (VmHWM) and CPU
// (user + system), and the ratio to the floor:
//
//	floor(p) = stored bytes / the store's measured throughput + ceil(N / p) × fixed
//
// where the throughput is every backup's object read at once from MinIO
// (each also read alone: the one-stream rate), and fixed is one cluster's
// restore alone (restore-all --cluster, its wall time less its bytes over
// the one-stream rate). It prints, too, what fleet.RestoreModel expects of
// each run with those inputs.
//
//	go test -run '^$' -bench RestoreAll -benchtime 1x -timeout 30m ./fleet/
func BenchmarkRestoreAll(b *testing.B) {
	n := testfix.BenchInt("BENCH_RESTOREALL_CLUSTERS", 8)
	mb := testfix.BenchInt("BENCH_RESTOREALL_MB", 32)
	const ns = "kubx-etcd-45"
	ctx := context.Background()
	w := kubetest.StartFleetWorld(b, kubetest.FleetWorldOptions{Namespaces: []string{ns}, Clusters: n, ThreeMember: -1, Customers: -1,
		Subnet: 45, FillBytes: int64(mb) << 20, RunningDelay: time.Millisecond})
	fn := w.Namespaces[0]
	fmt.Printf("restore-all bench: %d clusters of %d MiB: world started in %v\n", n, mb, w.Started.Round(time.Second))

	// The store: every backup's object read alone, then all at once.
	var stored int64
	var bytes []int64
	var keys []string
	for _, c := range fn.Clusters {
		m := c.Backup
		stored += m.Snapshot.StoredSize
		bytes = append(bytes, m.Snapshot.StoredSize)
		keys = append(keys, fn.Layout.Key(m.ClusterID, m.Name, m.Snapshot.Object))
	}
	read := func(key string) {
		rc, err := w.Store.Get(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		defer rc.Close()
		if _, err := io.Copy(io.Discard, rc); err != nil {
			b.Fatal(err)
		}
	}
	t0 := time.Now()
	for _, k := range keys {
		read(k)
	}
	stream := float64(stored) / time.Since(t0).Seconds()
	t0 = time.Now()
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() { read(k) })
	}
	wg.Wait()
	total := float64(stored) / time.Since(t0).Seconds()
	fmt.Printf("store: %.1f MiB stored; one stream %.0f MiB/s, %d at once %.0f MiB/s\n", float64(stored)/(1<<20), stream/(1<<20), n, total/(1<<20))

	tool := testfix.Tool(b)
	kc := w.ToolkitKubeconfig(b, ns)
	type result struct {
		wall, cpu time.Duration
		rss       int64
		// busy is the share of the machine's cores busy during the run
		// (every process: MinIO, etcd, the stand-in, other tests).
		busy float64
		// each is every cluster's own elapsed time, as the report has it.
		each []time.Duration
	}
	run := func(p int, names ...string) result {
		b.Helper()
		args := append([]string{"--log-level", "warn", "restore-all", "--namespace", ns, "--kubeconfig", kc, "--identity-file", w.IdentityFile,
			"--parallel", fmt.Sprint(p), "--new-run", "--dial-timeout", "2s", "--probe-timeout", "2s", "-o", "json", "--prefix", fn.Layout.RootPrefix()}, w.StoreArgs()...)
		for _, name := range names {
			args = append(args, "--cluster", name)
		}
		cmd := exec.CommandContext(ctx, tool, args...)
		cmd.Env = append(testfix.ToolEnv(), w.StoreEnv()...)
		var stdout, stderr testfix.SyncBuffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		busy0, all0 := machineCPU(b)
		d, rss, err := testfix.RunMeasured(cmd)
		busy1, all1 := machineCPU(b)
		if err != nil {
			b.Fatalf("restore-all --parallel %d: %v\n%s", p, err, testfix.LastLines(stderr.String(), 30))
		}
		var rep fleet.RestoreAllReport
		if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
			b.Fatalf("report: %v\n%s", err, stdout.String())
		}
		want := n
		if len(names) > 0 {
			want = len(names)
		}
		restored := 0
		var each []time.Duration
		for _, r := range rep.Clusters {
			if r.Outcome == fleet.OutcomeRestored {
				restored++
				each = append(each, r.Elapsed)
			}
		}
		slices.Sort(each)
		if restored != want || len(rep.Failed) != 0 {
			b.Fatalf("restore-all --parallel %d: %d restored, want %d; failed %v", p, restored, want, rep.Failed)
		}
		fn.Adopt(b)
		return result{wall: d, rss: rss, cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), each: each,
			busy: float64(busy1-busy0) / float64(max(all1-all0, 1))}
	}

	// One cluster alone: the fixed cost.
	one := fn.Clusters[0]
	one.LoseQuorum(b)
	alone := run(1, one.Name)
	// A cluster's fixed cost is its own elapsed time in the report (from
	// its first step to its verification) less its transfer; the rest of
	// the run's wall time (process start, discovery, the throughput
	// measurement, the records) is paid once per run, not once per wave.
	fixed := alone.each[0] - time.Duration(float64(one.Backup.Snapshot.StoredSize)/stream*float64(time.Second))
	overhead := max(alone.wall-alone.each[0], 0)
	fmt.Printf("one cluster alone (%.1f MiB stored): %v (the cluster %v), so a cluster's fixed cost is %v and the run's own overhead %v; peak RSS %.0f MiB, CPU %v\n",
		float64(one.Backup.Snapshot.StoredSize)/(1<<20), alone.wall.Round(time.Millisecond), alone.each[0].Round(time.Millisecond), fixed.Round(time.Millisecond),
		overhead.Round(time.Millisecond), float64(alone.rss)/(1<<20), alone.cpu.Round(time.Millisecond))

	for _, p := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("parallel-%d", p), func(b *testing.B) {
			var last result
			for range b.N {
				fn.LoseQuorum(b)
				last = run(p)
			}
			waves := (n + p - 1) / p
			floor := time.Duration(float64(stored)/total*float64(time.Second)) + time.Duration(waves)*fixed + overhead
			model := fleet.RestoreModel{Stream: stream, Total: total, Fixed: fixed, Parallel: p}.Expect(bytes)
			fmt.Printf("--parallel %d: %v (floor %v: %.2fx; the model expects %v), peak RSS %.0f MiB, CPU %v (%.0f%% of one core)\n",
				p, last.wall.Round(time.Millisecond), floor.Round(time.Millisecond), last.wall.Seconds()/floor.Seconds(),
				model.Round(time.Millisecond), float64(last.rss)/(1<<20), last.cpu.Round(time.Millisecond), 100*last.cpu.Seconds()/last.wall.Seconds())
			fmt.Printf("  each cluster's own time: %v (fastest) %v (median) %v (slowest); the machine's %d cores %.0f%% busy\n", last.each[0].Round(time.Millisecond),
				last.each[len(last.each)/2].Round(time.Millisecond), last.each[len(last.each)-1].Round(time.Millisecond), runtime.NumCPU(), 100*last.busy)
			b.ReportMetric(last.wall.Seconds(), "s/run")
			b.ReportMetric(last.wall.Seconds()/floor.Seconds(), "x-floor")
			b.ReportMetric(float64(last.rss)/(1<<20), "peak-RSS-MiB")
			b.ReportMetric(last.cpu.Seconds(), "cpu-s")
		})
	}
}

// machineCPU is the machine's busy and total CPU time so far, in clock
// ticks, from /proc/stat's first line (busy: all but idle and iowait).
func machineCPU(tb testing.TB) (busy, total int64) {
	tb.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		tb.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		tb.Fatalf("/proc/stat: %q", line)
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			tb.Fatalf("/proc/stat: %q", line)
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}
