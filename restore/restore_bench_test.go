package restore_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// BenchmarkRestoreRTO measures the recovery time objective: from the
// command to a verified, healthy 3-member cluster, for a snapshot of at
// least BENCH_RESTORE_MB (default 512) MB in MinIO.
//
//   - manual: what the runbook does by hand: download the object (curl
//     --aws-sigv4, credentials in a -K config file, not argv), zstd -d,
//     `etcdutl snapshot restore` once per member, start the members, then
//     poll `etcdctl endpoint health` until all three are healthy.
//   - tool:   `etcd-recovery restore --verify-endpoints ...` as a
//     subprocess; the members are started as soon as it logs that the data
//     dirs are written, and the clock stops when it exits, verified.
//
// Targets: tool <= 0.6x manual, tool peak RSS <= 128 MiB. BENCH_ROUNDS
// (default 1) runs both that many times, alternating which goes first, and
// keeps the best; BENCH_RESTORE_PARALLEL passes --parallel to the tool.
func BenchmarkRestoreRTO(b *testing.B) {
	sizeMB := testfix.BenchInt("BENCH_RESTORE_MB", 512)
	tool := testfix.Tool(b)
	etcdutl := testenv.EtcdutlBin(b, testenv.V35)
	etcdctl := testenv.EtcdctlBin(b, testenv.V35)
	src := testenv.StartEtcd(b, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true, QuotaBackendBytes: 8 << 30})
	pki := src.PKI
	mi := testenv.StartMinIO(b)
	bucket := mi.NewBucket(b)
	store := testfix.Store(b, mi, bucket)
	layout := catalog.Layout{Prefix: "bench"}
	const id = "rto"

	t0 := time.Now()
	man := testfix.LargeBackup(b, src, store, layout, id, sizeMB)
	src.Members[0].Kill()
	os.RemoveAll(src.Members[0].DataDir)
	fmt.Fprintf(os.Stderr, "filled %d MiB (snapshot db %d MiB, stored %d MiB) in %s\n", sizeMB, man.Snapshot.RawSize>>20, man.Snapshot.StoredSize>>20, time.Since(t0).Round(time.Second))

	dir := b.TempDir()
	curlCfg := testfix.CurlConfig(b, dir, mi)
	credDir := testfix.CredentialsDir(b, dir, mi)
	objURL := mi.Endpoint + "/" + bucket + "/" + layout.Key(id, man.Name, man.Snapshot.Object)
	ctlEnv := append(os.Environ(), "ETCDCTL_API=3", "ETCDCTL_CACERT="+pki.CAFile, "ETCDCTL_CERT="+pki.ClientCertFile, "ETCDCTL_KEY="+pki.ClientKeyFile)
	// Warm the page cache for both runs alike.
	testfix.RunBench(b, ctlEnv, "curl", "-fsS", "-K", curlCfg, "--aws-sigv4", "aws:amz:"+mi.Region+":s3", "-o", "/dev/null", objURL)

	type timing struct {
		total, download, decompress, restore, start time.Duration
		rss, anon, file                             int64
	}
	var manual, toolT timing
	quiesce := func() {
		// Start each run with the disk idle: no writeback of the last one.
		syscall.Sync()
		time.Sleep(time.Second)
	}
	runManual := func(round int) timing {
		var manual timing
		var started []*testenv.EtcdMember
		defer func() {
			for _, m := range started {
				m.Kill()
			}
		}()
		ic, ms := newCluster(b, 3, true)
		token := "manual-" + time.Now().Format("150405")
		work := filepath.Join(dir, fmt.Sprintf("manual-%d", round))
		os.MkdirAll(work, 0o700)
		t0 := time.Now()
		d, _ := testfix.RunBench(b, ctlEnv, "curl", "-fsS", "-K", curlCfg, "--aws-sigv4", "aws:amz:"+mi.Region+":s3", "-o", filepath.Join(work, "snapshot.db.zst"), objURL)
		manual.download = d
		d, _ = testfix.RunBench(b, ctlEnv, "zstd", "-q", "-d", filepath.Join(work, "snapshot.db.zst"), "-o", filepath.Join(work, "snapshot.db"))
		manual.decompress = d
		t1 := time.Now()
		for _, m := range ms {
			_, rss := testfix.RunBench(b, ctlEnv, etcdutl, "snapshot", "restore", filepath.Join(work, "snapshot.db"), "--name", m.name,
				"--data-dir", filepath.Join(work, m.name+".etcd"), "--initial-cluster", ic, "--initial-cluster-token", token,
				"--initial-advertise-peer-urls", m.peerURL, "--bump-revision", "1000000000", "--mark-compacted")
			manual.rss = max(manual.rss, rss)
		}
		manual.restore = time.Since(t1)
		t2 := time.Now()
		var eps []string
		for _, m := range ms {
			started = append(started, testenv.StartEtcdMember(b, testenv.MemberSpec{Version: testenv.V35, Name: m.name, DataDir: filepath.Join(work, m.name+".etcd"),
				ClientURL: m.clientURL, PeerURL: m.peerURL, InitialCluster: ic, InitialClusterToken: token, PKI: pki}))
			eps = append(eps, m.clientURL)
		}
		waitHealthy(b, "manual", etcdctl, ctlEnv, eps)
		manual.start = time.Since(t2)
		manual.total = time.Since(t0)
		os.RemoveAll(work) // the members keep their open files; the disk is freed when they die
		return manual
	}
	runTool := func(round int) timing {
		ic, ms := newCluster(b, 3, true)
		args := []string{"--cos-endpoint", mi.Endpoint, "--cos-region", mi.Region, "--bucket", bucket, "--prefix", layout.Prefix,
			"--cos-credentials-dir", credDir}
		if p := os.Getenv("BENCH_RESTORE_PARALLEL"); p != "" {
			args = append(args, "--parallel", p)
		}
		r := toolRTO(b, tool, nil, id, ic, ms, filepath.Join(dir, fmt.Sprintf("tool-%d", round)), pki, fmt.Sprintf("restore-%d.pprof", round), args...)
		return timing{total: r.total, restore: r.written, start: r.start, rss: r.rss, anon: r.anon, file: r.file}
	}
	rounds := testfix.BenchInt("BENCH_ROUNDS", 3)
	var perRound []float64
	for round := range rounds {
		// Alternate the order, keep the best of each.
		first, second := runManual, runTool
		if round%2 == 1 {
			first, second = runTool, runManual
		}
		quiesce()
		a := first(round)
		quiesce()
		c := second(round)
		m, t := a, c
		if round%2 == 1 {
			m, t = c, a
		}
		perRound = append(perRound, t.total.Seconds()/m.total.Seconds())
		if manual.total == 0 || m.total < manual.total {
			manual = m
		}
		if toolT.total == 0 || t.total < toolT.total {
			toolT = t
		}
		toolT.rss, toolT.anon, toolT.file = max(toolT.rss, t.rss), max(toolT.anon, t.anon), max(toolT.file, t.file)
	}

	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	ratio := toolT.total.Seconds() / manual.total.Seconds()
	fmt.Printf("\nrestore RTO benchmark (best of %d rounds): db %.0f MiB, stored %.0f MiB (zstd), 3 members, 2 shared cores\n", rounds, mib(man.Snapshot.RawSize), mib(man.Snapshot.StoredSize))
	fmt.Printf("manual: %6.2fs = download %.2fs + zstd -d %.2fs + 3x etcdutl restore %.2fs + start & health %.2fs   (etcdutl peak RSS %.0f MiB)\n",
		manual.total.Seconds(), manual.download.Seconds(), manual.decompress.Seconds(), manual.restore.Seconds(), manual.start.Seconds(), mib(manual.rss))
	fmt.Printf("tool:   %6.2fs = download, verify & write data dirs %.2fs + start, wait & verify %.2fs   (peak RSS %.0f MiB)\n",
		toolT.total.Seconds(), toolT.restore.Seconds(), toolT.start.Seconds(), mib(toolT.rss))
	fmt.Printf("tool/manual %.2f (target <= 0.60); tool peak RSS %.0f MiB (target <= 128): sampled peaks %.0f MiB anonymous (heap, stacks), %.0f MiB file-backed (the binary and bbolt's maps)\n",
		ratio, mib(toolT.rss), mib(toolT.anon), mib(toolT.file))
	fmt.Printf("tool/manual per round (each pair back to back): %s (median %.2f)\n", testfix.Ratios(perRound), testfix.Median(perRound))
	b.ReportMetric(ratio, "tool/manual")
	b.ReportMetric(mib(toolT.rss), "peak-RSS-MiB")
	b.ReportMetric(mib(toolT.anon), "peak-anon-RSS-MiB")
	b.ReportMetric(toolT.total.Seconds(), "tool-s")
	b.ReportMetric(manual.total.Seconds(), "manual-s")
}

// logValue extracts key=value (or key="value") from a slog text line.
func logValue(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		v = v[1:]
		return v[:strings.IndexByte(v, '"')]
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}

func benchToolLogLevel() string {
	if os.Getenv("BENCH_VERBOSE") != "" {
		return "debug"
	}
	return "info"
}

// rto is one restore through the tool, timed (toolRTO).
type rto struct {
	// total: the command to its exit, verified; written: to the log
	// line that the data dirs are written; start: from starting the
	// members to the tool's exit.
	total, written, start time.Duration
	rss, anon, file       int64
}

// toolRTO restores cluster id through the tool (`restore --no-live`, its
// store from env or extra) into data dirs under root for the members ms
// of ic, starts the members as soon as the tool logs that their data dirs
// are written, and waits for the tool to verify them. The data dirs are
// removed at the end, the members killed. profile names the CPU profile
// written into BENCH_PROFILE_DIR, when set.
func toolRTO(b *testing.B, tool string, env []string, id, ic string, ms []newMember, root string, pki *testenv.PKI, profile string, extra ...string) rto {
	b.Helper()
	var r rto
	var started []*testenv.EtcdMember
	defer func() {
		for _, m := range started {
			m.Kill()
		}
	}()
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.clientURL)
	}
	args := append([]string{"--log-level", benchToolLogLevel(), "restore", "--cluster-id", id, "--no-live",
		"--initial-cluster", ic, "--data-dir-root", root, "--cacert", pki.CAFile, "--cert", pki.ClientCertFile, "--key", pki.ClientKeyFile,
		"--verify-endpoints", strings.Join(eps, ","), "--verify-timeout", "2m", "-o", "json"}, extra...)
	if d := os.Getenv("BENCH_PROFILE_DIR"); d != "" {
		args = append([]string{"--cpu-profile", filepath.Join(d, profile)}, args...)
	}
	cmd := exec.Command(tool, args...)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var (
		logMu  sync.Mutex
		logBuf bytes.Buffer
		found  = make(chan string, 1)
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			logBuf.WriteString(line + "\n")
			logMu.Unlock()
			if strings.Contains(line, "data dirs written: start the new members") {
				found <- logValue(line, "initial_cluster_token")
			}
		}
	}()
	watch := testfix.WatchRSS(cmd.Process.Pid)
	var token string
	select {
	case token = <-found:
		r.written = time.Since(t0)
	case <-done:
		cmd.Wait()
		b.Fatalf("the tool did not write the data dirs:\n%s", logBuf.String())
	}
	t2 := time.Now()
	for _, m := range ms {
		started = append(started, testenv.StartEtcdMember(b, testenv.MemberSpec{Version: testenv.V35, Name: m.name, DataDir: filepath.Join(root, m.name+".etcd"),
			ClientURL: m.clientURL, PeerURL: m.peerURL, InitialCluster: ic, InitialClusterToken: token, PKI: pki}))
	}
	<-done
	err = cmd.Wait()
	r.rss, r.anon, r.file = watch.Stop()
	if err != nil {
		b.Fatalf("tool: %v\n%s\n%s", err, stdout.String(), logBuf.String())
	}
	r.total = time.Since(t0)
	r.start = time.Since(t2)
	if !strings.Contains(stdout.String(), `"verified": true`) {
		b.Fatalf("the tool did not verify the cluster:\n%s", stdout.String())
	}
	if os.Getenv("BENCH_VERBOSE") != "" {
		fmt.Fprint(os.Stderr, logBuf.String())
	}
	os.RemoveAll(root)
	return r
}

// waitHealthy polls `etcdctl endpoint health` of eps every 100 ms, as the
// runbook's manual restore does, until all are healthy (two minutes at
// the most: then b fails, naming what).
func waitHealthy(b *testing.B, what, etcdctl string, env, eps []string) {
	b.Helper()
	t0 := time.Now()
	for {
		cmd := exec.Command(etcdctl, "endpoint", "health", "--endpoints", strings.Join(eps, ","))
		cmd.Env = env
		if cmd.Run() == nil {
			return
		}
		if time.Since(t0) > 2*time.Minute {
			b.Fatalf("%s: the cluster did not become healthy", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
