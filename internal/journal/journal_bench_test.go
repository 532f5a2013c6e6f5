package journal_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// rpoRun is one measured journal run.
type rpoRun struct {
	label            string
	clusters         int
	rate             int // writes/s per cluster, asked
	achieved         float64
	interval, length time.Duration
	events           int
	p50, p99, pmax   time.Duration
	segments         int
	storedBytes      int64
	cpu              time.Duration
	hwm              int64
}

func (r rpoRun) print(b *testing.B) {
	perDay := float64(r.segments) / float64(r.clusters) / r.length.Seconds() * 86400
	fmt.Printf("BenchmarkJournalRPO %s: %d cluster(s) x %d writes/s (achieved %.0f/s a cluster), --segment-interval %s, %s: "+
		"%d events, event->segment stored p50 %s p99 %s max %s; %d segments (PUTs; %.0f/cluster/day at this rate), %s stored (%.0f B/event); "+
		"journal process CPU %.2f s (%.1f%% of one core), peak RSS %s\n",
		r.label, r.clusters, r.rate, r.achieved, r.interval, r.length.Round(time.Second), r.events, secs(r.p50), secs(r.p99), secs(r.pmax),
		r.segments, perDay, mib(r.storedBytes), float64(r.storedBytes)/float64(max(r.events, 1)),
		r.cpu.Seconds(), 100*r.cpu.Seconds()/r.length.Seconds(), mib(r.hwm))
	b.ReportMetric(r.p50.Seconds(), "p50-s")
	b.ReportMetric(r.p99.Seconds(), "p99-s")
	b.ReportMetric(r.cpu.Seconds(), "cpu-s")
	b.ReportMetric(float64(r.hwm)/(1<<20), "peak-MiB")
	b.ReportMetric(perDay, "PUTs/cluster/day")
}

// BenchmarkJournalRPO measures the journal's RPO: the time from a write
// (its Put returned) to the store of the segment holding its revision,
// p50, p99 and max over every write, with the journal process's CPU
// seconds (/proc/<pid>/stat, start to stop) and peak RSS (VmHWM), the
// segments (one PUT each) and the bytes stored.
//
//   - one cluster: `etcd-recovery journal` (the built binary, a child,
//     --log-level debug --log-format json: each "segment written" log line
//     is a commit, at the line's time) on a 1-member TLS etcd 3.5 after a
//     full backup, MinIO on loopback, a paced writer (token bucket) of
//     ~1 KiB Kubernetes-like pod objects at each rate of
//     BENCH_JOURNAL_RATES (default 100,1000,5000 writes/s) for
//     BENCH_JOURNAL_SECONDS (default 25; at least 2.5 intervals);
//   - BENCH_JOURNAL_CLUSTERS (default 50) clusters x BENCH_JOURNAL_CLUSTER_RATE
//     (default 50) writes/s in ONE journal process: internal/testing/cmd/journalbench,
//     journal.Capture (the command's code path) for every cluster at once,
//     one 1-member etcd 3.5 (plain HTTP) a cluster;
//
// each at every interval of BENCH_JOURNAL_INTERVALS (default 1s,30s: 30 s
// is the default, where the interval is the RPO). BENCH_JOURNAL_QUICK=1:
// 10 s runs, 30 s only at 1,000 writes/s and not for the many clusters
// (which get 10 clusters).
func BenchmarkJournalRPO(b *testing.B) {
	quick := benchQuick()
	defSeconds, defClusters := 25, 50
	if quick {
		defSeconds, defClusters = 10, 10
	}
	rates := envInts(b, "BENCH_JOURNAL_RATES", []int{100, 1000, 5000})
	intervals := envDurations(b, "BENCH_JOURNAL_INTERVALS", []time.Duration{time.Second, 30 * time.Second})
	seconds := envInts(b, "BENCH_JOURNAL_SECONDS", []int{defSeconds})[0]
	clusters := envInts(b, "BENCH_JOURNAL_CLUSTERS", []int{defClusters})[0]
	clusterRate := envInts(b, "BENCH_JOURNAL_CLUSTER_RATE", []int{50})[0]
	length := func(iv time.Duration) time.Duration {
		return max(time.Duration(seconds)*time.Second, iv*5/2)
	}
	tool := testfix.Tool(b)
	var runs []rpoRun
	for _, iv := range intervals {
		for _, rate := range rates {
			if quick && iv > 5*time.Second && rate != 1000 {
				continue
			}
			b.Run(fmt.Sprintf("interval=%s/rate=%d", iv, rate), func(b *testing.B) {
				for range b.N {
					r := rpoOneCluster(b, tool, iv, rate, length(iv))
					r.print(b)
					runs = append(runs, r)
				}
			})
		}
		if clusters > 0 && !(quick && iv > 5*time.Second) {
			b.Run(fmt.Sprintf("interval=%s/clusters=%dx%d", iv, clusters, clusterRate), func(b *testing.B) {
				for range b.N {
					r := rpoManyClusters(b, iv, clusters, clusterRate, length(iv))
					r.print(b)
					runs = append(runs, r)
				}
			})
		}
	}
	fmt.Println("BenchmarkJournalRPO summary (markdown):")
	fmt.Println("| clusters × writes/s (achieved) | --segment-interval | run | events | p50 | p99 | max | segments (PUTs) | PUTs/cluster/day | stored | B/event | journal CPU | peak RSS |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range runs {
		fmt.Printf("| %d × %d (%.0f) | %s | %s | %d | %s | %s | %s | %d | %.0f | %s | %.0f | %.1f s | %s |\n",
			r.clusters, r.rate, r.achieved, r.interval, r.length.Round(time.Second), r.events, secs(r.p50), secs(r.p99), secs(r.pmax),
			r.segments, float64(r.segments)/float64(r.clusters)/r.length.Seconds()*86400, mib(r.storedBytes),
			float64(r.storedBytes)/float64(max(r.events, 1)), r.cpu.Seconds(), mib(r.hwm))
	}
}

var segKeyRE = regexp.MustCompile(`(\d+)-(\d+)\.seg$`)

// rpoOneCluster runs `etcd-recovery journal` on one cluster written at
// rate for d.
func rpoOneCluster(b *testing.B, tool string, interval time.Duration, rate int, d time.Duration) rpoRun {
	b.Helper()
	ctx := testfix.Context(b, d+interval+5*time.Minute)
	c := testenv.StartEtcd(b, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	cli := c.Client(b)
	testenv.PutKeys(b, cli, "/registry/configmaps/kube-system/cm-", 100, 512)
	rig := testfix.NewStoreRig(b)
	const id = "rpo"
	rig.TakeBackup(b, c, id, catalog.KindScheduled)
	credDir := filepath.Join(b.TempDir(), "creds")
	if err := os.Mkdir(credDir, 0o700); err != nil {
		b.Fatal(err)
	}
	os.WriteFile(filepath.Join(credDir, "access_key_id"), []byte(rig.MinIO.AccessKey), 0o600)
	os.WriteFile(filepath.Join(credDir, "secret_access_key"), []byte(rig.MinIO.SecretKey), 0o600)
	args := []string{"--log-level", "debug", "--log-format", "json", "journal", "--cluster-id", id,
		"--segment-interval", interval.String(),
		"--cos-endpoint", rig.MinIO.Endpoint, "--cos-region", rig.MinIO.Region, "--bucket", rig.Bucket, "--prefix", rig.Layout.Prefix,
		"--cos-credentials-dir", credDir}
	for _, ep := range c.Endpoints() {
		args = append(args, "--endpoints", ep)
	}
	args = append(args, "--cacert", c.PKI.CAFile, "--cert", c.PKI.ClientCertFile, "--key", c.PKI.ClientKeyFile)
	cmd := exec.Command(tool, args...)
	cmd.Env = testfix.ToolEnv()
	pipe, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Process.Kill()
	watch := testfix.WatchRSS(cmd.Process.Pid)
	defer watch.Stop()

	var (
		mu      sync.Mutex
		segs    []stored
		reached int64
		logTail []string
		ready   = make(chan struct{})
		ended   = make(chan struct{})
	)
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		readyOnce := sync.OnceFunc(func() { close(ready) })
		for sc.Scan() {
			line := sc.Bytes()
			var rec struct {
				Time  time.Time `json:"time"`
				Msg   string    `json:"msg"`
				Key   string    `json:"key"`
				Bytes int64     `json:"bytes"`
			}
			if json.Unmarshal(line, &rec) != nil {
				continue
			}
			mu.Lock()
			switch rec.Msg {
			case "journal: capturing":
				readyOnce()
			case "journal: segment written":
				m := segKeyRE.FindStringSubmatch(rec.Key)
				if m != nil {
					first, _ := strconv.ParseInt(m[1], 10, 64)
					last, _ := strconv.ParseInt(m[2], 10, 64)
					segs = append(segs, stored{first: first, last: last, bytes: rec.Bytes, at: rec.Time})
					reached = max(reached, last)
				}
			default:
				logTail = append(logTail, string(line))
				if len(logTail) > 20 {
					logTail = logTail[1:]
				}
			}
			mu.Unlock()
		}
	}()
	select {
	case <-ready:
	case <-ended:
		b.Fatalf("the journal ended before capturing: %v", logTail)
	case <-time.After(30 * time.Second):
		b.Fatalf("the journal did not start capturing in 30 s: %v", logTail)
	}
	t0 := time.Now()
	ws, achieved, err := pacedWriter(ctx, cli, rate, d, 5000)
	if err != nil {
		b.Fatal(err)
	}
	last := ws[len(ws)-1].rev
	waitReached(b, &mu, &reached, last, interval+time.Minute, ended)
	length := time.Since(t0)
	cpu := testfix.CPUTime(cmd.Process.Pid)
	cmd.Process.Signal(syscall.SIGTERM)
	<-ended
	if err := cmd.Wait(); err != nil {
		b.Fatalf("journal: %v: %v", err, logTail)
	}
	hwm, _, _ := watch.Stop()
	mu.Lock()
	defer mu.Unlock()
	return summarize(b, fmt.Sprintf("interval=%s/rate=%d", interval, rate), 1, rate, achieved, interval, length,
		[][]written{ws}, [][]stored{segs}, cpu, hwm)
}

// waitReached waits until *reached (under mu) is at least rev.
func waitReached(b *testing.B, mu *sync.Mutex, reached *int64, rev int64, within time.Duration, ended <-chan struct{}) {
	b.Helper()
	deadline := time.Now().Add(within)
	for {
		mu.Lock()
		r := *reached
		mu.Unlock()
		if r >= rev {
			return
		}
		select {
		case <-ended:
			b.Fatalf("the journal ended at revision %d, before %d", r, rev)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("the journal reached revision %d, not %d, within %s", r, rev, within)
		}
	}
}

func summarize(b *testing.B, label string, clusters, rate int, achieved float64, interval, length time.Duration,
	ws [][]written, segs [][]stored, cpu time.Duration, hwm int64) rpoRun {
	b.Helper()
	r := rpoRun{label: label, clusters: clusters, rate: rate, achieved: achieved, interval: interval, length: length, cpu: cpu, hwm: hwm}
	var lat []time.Duration
	for i := range ws {
		lat = append(lat, commitLatencies(b, ws[i], segs[i])...)
		r.events += len(ws[i])
		r.segments += len(segs[i])
		for _, s := range segs[i] {
			r.storedBytes += s.bytes
		}
	}
	r.p50, r.p99, r.pmax = percentile(lat, 50), percentile(lat, 99), percentile(lat, 100)
	return r
}

var (
	journalBenchOnce sync.Once
	journalBenchPath string
	journalBenchErr  error
)

// journalBenchBin builds internal/testing/cmd/journalbench once.
func journalBenchBin(tb testing.TB) string {
	tb.Helper()
	root := testenv.RepoRoot(tb)
	journalBenchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "journalbench-")
		if err != nil {
			journalBenchErr = err
			return
		}
		journalBenchPath = filepath.Join(dir, "journalbench")
		cmd := exec.Command("go", "build", "-trimpath", "-o", journalBenchPath, "./internal/testing/cmd/journalbench")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			journalBenchErr = fmt.Errorf("build journalbench: %v\n%s", err, out)
		}
	})
	if journalBenchErr != nil {
		tb.Fatal(journalBenchErr)
	}
	return journalBenchPath
}

// rpoManyClusters runs one journalbench process capturing n clusters,
// each written at rate for d.
func rpoManyClusters(b *testing.B, interval time.Duration, n, rate int, d time.Duration) rpoRun {
	b.Helper()
	bin := journalBenchBin(b)
	ctx := testfix.Context(b, d+interval+10*time.Minute)
	rig := testfix.NewStoreRig(b)
	type cl struct {
		id  string
		c   *testenv.EtcdCluster
		cli *clientv3.Client
	}
	var cls []cl
	var cfgClusters []map[string]any
	t0 := time.Now()
	for i := range n {
		c, cli, base := startBenchEtcd(b, ctx)
		id := fmt.Sprintf("many-%03d", i)
		cls = append(cls, cl{id: id, c: c, cli: cli})
		cfgClusters = append(cfgClusters, map[string]any{"ID": id, "Endpoints": c.Endpoints(), "BaseBackup": "bench-base", "BaseRev": base})
	}
	fmt.Fprintf(os.Stderr, "started %d etcd 3.5 members in %s\n", n, time.Since(t0).Round(time.Millisecond))
	cmd, pipe, errOut := startJournalBench(b, bin, journalBenchConfig(rig, interval, cfgClusters, 0))
	defer cmd.Process.Kill()
	watch := testfix.WatchRSS(cmd.Process.Pid)
	defer watch.Stop()
	var (
		mu      sync.Mutex
		segs    = map[string][]stored{}
		reached = map[string]int64{}
		ready   = make(chan struct{})
		ended   = make(chan struct{})
	)
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
				continue
			}
			var s struct {
				Cluster            string
				First, Last, Bytes int64
				UnixNano           int64
			}
			if json.Unmarshal(sc.Bytes(), &s) != nil {
				continue
			}
			mu.Lock()
			segs[s.Cluster] = append(segs[s.Cluster], stored{first: s.First, last: s.Last, bytes: s.Bytes, at: time.Unix(0, s.UnixNano)})
			reached[s.Cluster] = max(reached[s.Cluster], s.Last)
			mu.Unlock()
		}
	}()
	select {
	case <-ready:
	case <-ended:
		b.Fatalf("journalbench ended: %s", errOut.String())
	case <-time.After(time.Minute):
		b.Fatalf("journalbench not ready in a minute: %s", errOut.String())
	}
	start := time.Now()
	ws := make([][]written, n)
	achieved := make([]float64, n)
	werrs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range cls {
		wg.Go(func() { ws[i], achieved[i], werrs[i] = pacedWriter(ctx, c.cli, rate, d, 500) })
	}
	wg.Wait()
	for i, err := range werrs {
		if err != nil {
			b.Fatalf("cluster %s: %v", cls[i].id, err)
		}
	}
	for i, c := range cls {
		last := ws[i][len(ws[i])-1].rev
		var r int64
		mu.Lock()
		r = reached[c.id]
		mu.Unlock()
		for r < last {
			if time.Since(start) > d+interval+2*time.Minute {
				b.Fatalf("cluster %s: the journal reached %d, not %d", c.id, r, last)
			}
			time.Sleep(50 * time.Millisecond)
			mu.Lock()
			r = reached[c.id]
			mu.Unlock()
		}
	}
	length := time.Since(start)
	cpu := testfix.CPUTime(cmd.Process.Pid)
	cmd.Process.Signal(syscall.SIGTERM)
	<-ended
	if err := cmd.Wait(); err != nil {
		b.Fatalf("journalbench: %v: %s", err, errOut.String())
	}
	hwm, _, _ := watch.Stop()
	var sumRate float64
	segsOf := make([][]stored, n)
	for i, c := range cls {
		sumRate += achieved[i]
		segsOf[i] = segs[c.id]
	}
	return summarize(b, fmt.Sprintf("interval=%s/clusters=%dx%d", interval, n, rate), n, rate, sumRate/float64(n), interval, length, ws, segsOf, cpu, hwm)
}
