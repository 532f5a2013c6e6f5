package backup_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// BenchmarkBackupVsBaseline compares, in one run and at two DB sizes:
//   - raw:      reading the snapshot stream to /dev/null (the floor);
//   - baseline: `etcdctl snapshot save` to a file, then an S3 upload of the
//     file to the same endpoint (curl --aws-sigv4 -T), as a CronJob script would;
//
// The S3 endpoint is MinIO over HTTPS, as COS is.
//   - tool:     `etcd-recovery backup` (stream → zstd → multipart upload).
//
// Targets: tool <= 0.6x baseline, tool <= 1.3x raw, tool peak RSS <= 96 MiB
// and flat across sizes. Sizes: BENCH_SIZES_MB (default "160,640").
func BenchmarkBackupVsBaseline(b *testing.B) {
	sizes := testfix.BenchSizesMB("BENCH_SIZES_MB", 160, 640)
	// The machines are noisy (the same run's CPU seconds vary by a fifth
	// between rounds), so each round measures raw, baseline and tool back
	// to back, and the per-round ratios' median is printed next to the
	// ratio of the bests.
	rounds := testfix.BenchInt("BENCH_ROUNDS", 3)
	tool := testfix.Tool(b)
	etcdctl := testenv.EtcdctlBin(b, testenv.V35)
	c := testenv.StartEtcd(b, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true, QuotaBackendBytes: 4 << 30})
	// COS is HTTPS-only: both uploads pay for TLS, as in production.
	mi := testenv.StartMinIOTLS(b)
	bucket := mi.NewBucket(b)
	cli := c.Client(b)
	ep := c.Endpoints()[0]
	pki := c.PKI
	dir := b.TempDir()
	curlCfg := testfix.CurlConfig(b, dir, mi)
	env := append(testfix.COSEnv(mi, bucket),
		"ETCDCTL_ENDPOINTS="+ep, "ETCDCTL_CACERT="+pki.CAFile, "ETCDCTL_CERT="+pki.ClientCertFile, "ETCDCTL_KEY="+pki.ClientKeyFile,
		"ETCDCTL_API=3")
	if g := os.Getenv("BENCH_GODEBUG"); g != "" {
		env = append(env, "GODEBUG="+g)
	}

	type result struct {
		sizeMB                         int
		dbBytes, storedBytes           int64
		raw, save, upload, base, toolT time.Duration
		toolRSS, toolNoneRSS, ctlRSS   int64
		cpuTool, cpuEtcd, cpuMinIO     time.Duration // during the best tool run
		cpuRawEtcd                     time.Duration // during the best raw read
		roundBase, roundRaw            []float64     // tool/baseline and tool/raw of each round
		toolNone                       time.Duration
		zstd                           compressorRun // the tool's encoder, alone on one core
		libzstd                        compressorRun // the reference CLI, `zstd -1 -T1`
	}
	var results []result
	filled := 0
	for _, size := range sizes {
		fillRealistic(b, cli, filled, size)
		filled = size
		st, err := cli.Status(context.Background(), ep)
		if err != nil {
			b.Fatal(err)
		}
		r := result{sizeMB: size, dbBytes: st.DbSize}
		best := func(cur, d time.Duration) time.Duration {
			if cur == 0 || d < cur {
				return d
			}
			return cur
		}
		// Each step starts with the disk idle: without this, the writeback
		// of one step's gigabyte (etcdctl's file, MinIO's objects) lands
		// on the next, and later rounds measure the disk, not the step.
		quiesce := func() {
			syscall.Sync()
			time.Sleep(300 * time.Millisecond)
		}
		for round := 0; round < rounds; round++ {
			quiesce()
			// raw stream read: the floor.
			etcd0 := testfix.CPUTime(c.Members[0].PID())
			roundRawT := readRaw(b, cli)
			if d := roundRawT; r.raw == 0 || d < r.raw {
				r.raw, r.cpuRawEtcd = d, testfix.CPUTime(c.Members[0].PID())-etcd0
			}

			quiesce()
			// baseline: etcdctl snapshot save, then upload the file.
			file := filepath.Join(dir, "snapshot.db")
			os.Remove(file)
			d, rss := runTimed(b, env, etcdctl, "snapshot", "save", file)
			r.ctlRSS = max(r.ctlRSS, rss)
			quiesce()
			key := fmt.Sprintf("baseline/%d-%d/snapshot.db", size, round)
			d2, _ := runTimed(b, env, "curl", "-fsS", "-K", curlCfg, "--cacert", mi.CAFile, "--aws-sigv4", "aws:amz:"+mi.Region+":s3",
				"-T", file, mi.Endpoint+"/"+bucket+"/"+key)
			roundSave, roundUpload := d, d2
			if round == 0 {
				quiesce()
				r.zstd, r.libzstd = compareCompressors(b, file)
			}
			if r.base == 0 || d+d2 < r.base {
				r.save, r.upload, r.base = d, d2, d+d2
			}
			os.Remove(file)

			// the tool, default settings (zstd).
			quiesce()
			etcd0, minio0 := testfix.CPUTime(c.Members[0].PID()), testfix.CPUTime(mi.PID())
			d, rss = runTimed(b, env, tool, "--log-level", benchLogLevel(), "--cpu-profile", profilePath(b, size, round), "backup", "--cluster-id", fmt.Sprintf("bench-%d", size), "--kind", "manual", "-o", "json")
			if os.Getenv("BENCH_VERBOSE") != "" {
				m0, e0 := testfix.CPUTime(mi.PID()), testfix.CPUTime(c.Members[0].PID())
				time.Sleep(time.Second)
				fmt.Fprintf(os.Stderr, "round %d: raw %.2fs save %.2fs upload %.2fs tool %.2fs (tool CPU %.2fs); idle second: MinIO %.2f, etcd %.2f CPU-s\n",
					round, roundRawT.Seconds(), roundSave.Seconds(), roundUpload.Seconds(), d.Seconds(), lastCPU.Seconds(),
					(testfix.CPUTime(mi.PID()) - m0).Seconds(), (testfix.CPUTime(c.Members[0].PID()) - e0).Seconds())
			}
			r.roundBase = append(r.roundBase, d.Seconds()/(roundSave+roundUpload).Seconds())
			r.roundRaw = append(r.roundRaw, d.Seconds()/roundRawT.Seconds())
			if r.toolT == 0 || d < r.toolT {
				r.toolT, r.cpuTool = d, lastCPU
				r.cpuEtcd, r.cpuMinIO = testfix.CPUTime(c.Members[0].PID())-etcd0, testfix.CPUTime(mi.PID())-minio0
			}
			r.toolRSS = max(r.toolRSS, rss)
			quiesce()
			d, rss = runTimed(b, env, tool, "--log-level", benchLogLevel(), "backup", "--cluster-id", fmt.Sprintf("bench-none-%d", size), "--kind", "manual", "--compress", "none", "-o", "json")
			r.toolNone = best(r.toolNone, d)
			r.toolNoneRSS = max(r.toolNoneRSS, rss)
		}
		objs := testfix.Keys(b, testfix.Store(b, mi, bucket), fmt.Sprintf("bench-%d/", size))
		st2 := testfix.Store(b, mi, bucket)
		all, _ := st2.List(context.Background(), fmt.Sprintf("bench-%d/", size))
		for _, o := range all {
			if strings.HasSuffix(o.Key, "snapshot.db.zst") {
				r.storedBytes = o.Size
			}
		}
		_ = objs
		results = append(results, r)
	}
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	var out bytes.Buffer
	fmt.Fprintf(&out, "\nbackup benchmark (best of %d rounds; 2 cores shared by etcd, MinIO and the client; MinIO over HTTPS)\n", rounds)
	fmt.Fprintf(&out, "%-8s %9s %9s | %8s %8s %8s %8s | %8s %9s | %10s %9s | %8s %8s %8s\n",
		"size", "db MiB", "zst MiB", "raw s", "save s", "upload s", "base s", "tool s", "none s", "tool/base", "tool/raw", "RSS MiB", "none RSS", "ctl RSS")
	for _, r := range results {
		fmt.Fprintf(&out, "%-8s %9.0f %9.0f | %8.2f %8.2f %8.2f %8.2f | %8.2f %9.2f | %10.2f %9.2f | %8.1f %8.1f %8.1f\n",
			fmt.Sprintf("%dMB", r.sizeMB), mib(r.dbBytes), mib(r.storedBytes), r.raw.Seconds(), r.save.Seconds(), r.upload.Seconds(), r.base.Seconds(),
			r.toolT.Seconds(), r.toolNone.Seconds(), r.toolT.Seconds()/r.base.Seconds(), r.toolT.Seconds()/r.raw.Seconds(),
			mib(r.toolRSS), mib(r.toolNoneRSS), mib(r.ctlRSS))
	}
	fmt.Fprintf(&out, "targets: tool/base <= 0.60, tool/raw <= 1.30, tool RSS <= 96 MiB and flat across sizes\n")
	for _, r := range results {
		fmt.Fprintf(&out, "%dMB per round: tool/base %s (median %.2f), tool/raw %s (median %.2f)\n", r.sizeMB,
			testfix.Ratios(r.roundBase), testfix.Median(r.roundBase), testfix.Ratios(r.roundRaw), testfix.Median(r.roundRaw))
		total := (r.cpuTool + r.cpuEtcd + r.cpuMinIO).Seconds()
		fmt.Fprintf(&out, "%dMB CPU seconds: raw read: etcd %.2f in %.2fs | tool run: tool %.2f + etcd %.2f + MinIO %.2f = %.2f in %.2fs (%.0f%% of 2 cores)\n",
			r.sizeMB, r.cpuRawEtcd.Seconds(), r.raw.Seconds(), r.cpuTool.Seconds(), r.cpuEtcd.Seconds(), r.cpuMinIO.Seconds(),
			total, r.toolT.Seconds(), 100*total/(2*r.toolT.Seconds()))
		// The floor: the tool run's CPU seconds spread perfectly over both
		// cores. No scheduling can make the run shorter than that.
		fmt.Fprintf(&out, "%dMB CPU floor: %.2f CPU-s on 2 cores is at least %.2fs, %.2fx the best raw read\n",
			r.sizeMB, total, total/2, total/2/r.raw.Seconds())
		fmt.Fprintf(&out, "%dMB zstd alone on one core: the tool's encoder %.2fs -> %.0f MiB (%.0f MB/s); libzstd `zstd -1 -T1` %.2fs -> %.0f MiB (%.0f MB/s)\n",
			r.sizeMB, r.zstd.d.Seconds(), mib(r.zstd.out), r.zstd.mbps(r.dbBytes), r.libzstd.d.Seconds(), mib(r.libzstd.out), r.libzstd.mbps(r.dbBytes))
	}
	fmt.Print(out.String())
	last := results[len(results)-1]
	b.ReportMetric(last.toolT.Seconds()/last.base.Seconds(), "tool/baseline")
	b.ReportMetric(last.toolT.Seconds()/last.raw.Seconds(), "tool/raw")
	b.ReportMetric(mib(last.toolRSS), "peak-RSS-MiB")
}

// compressorRun is one compression of the snapshot file.
type compressorRun struct {
	d   time.Duration
	out int64
}

func (c compressorRun) mbps(in int64) float64 { return float64(in) / 1e6 / c.d.Seconds() }

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// compareCompressors compresses the saved snapshot with the tool's zstd
// encoder (in etcd's 32 KiB chunks, as the stream delivers them) and with
// the reference zstd CLI at level 1, each alone, from the page cache.
func compareCompressors(tb testing.TB, file string) (tool, lib compressorRun) {
	tb.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	var cw countWriter
	t0 := time.Now()
	enc, err := backup.NewEncoder(&cw, objectio.CompressZstd)
	if err != nil {
		tb.Fatal(err)
	}
	for off := 0; off < len(data); off += 32 << 10 {
		if _, err := enc.Write(data[off:min(off+32<<10, len(data))]); err != nil {
			tb.Fatal(err)
		}
	}
	if err := enc.Close(); err != nil {
		tb.Fatal(err)
	}
	tool = compressorRun{time.Since(t0), cw.n}
	var lw countWriter
	cmd := exec.Command("zstd", "-q", "-1", "-T1", "-c", file)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &lw, &stderr
	t0 = time.Now()
	if err := cmd.Run(); err != nil {
		tb.Fatalf("zstd -1: %v %s", err, stderr.String())
	}
	lib = compressorRun{time.Since(t0), lw.n}
	return tool, lib
}

// readRaw reads the snapshot stream to /dev/null (the floor of a backup)
// and returns how long it took.
func readRaw(b *testing.B, cli *clientv3.Client) time.Duration {
	b.Helper()
	t0 := time.Now()
	rc, err := cli.Snapshot(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, rc); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}

// lastCPU is the CPU time of runTimed's last command.
var lastCPU time.Duration

// runTimed runs a command and returns its wall time and peak RSS.
func runTimed(tb testing.TB, env []string, name string, args ...string) (time.Duration, int64) {
	tb.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	d, rss, err := testfix.RunMeasured(cmd)
	if cmd.ProcessState != nil {
		lastCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		tb.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args[:min(3, len(args))], " "), err, stderr.String())
	}
	if os.Getenv("BENCH_VERBOSE") != "" {
		fmt.Fprintf(os.Stderr, "--- %s %.2fs\n%s", filepath.Base(name), d.Seconds(), stderr.String())
	}
	return d, rss
}

// fillRealistic writes Kubernetes-like objects until about toMB of values
// have been written since fromMB: JSON with random names, uids, IPs and an
// opaque blob, so nothing repeats and it compresses like real data.
func fillRealistic(tb testing.TB, cli *clientv3.Client, fromMB, toMB int) {
	tb.Helper()
	const workers = 4
	target := int64(toMB-fromMB) << 20
	var (
		mu      sync.Mutex
		written int64
		wg      sync.WaitGroup
		errOnce sync.Once
		ferr    error
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(fromMB*workers+w), 0x5eed))
			blob := make([]byte, 1024)
			for batch := 0; ; batch++ {
				mu.Lock()
				if written >= target || ferr != nil {
					mu.Unlock()
					return
				}
				mu.Unlock()
				var ops []clientv3.Op
				var n int64
				for i := 0; i < 100; i++ {
					ns := fmt.Sprintf("kube-ns-%03d", r.IntN(200))
					name := fmt.Sprintf("app-%s-%x", []string{"api", "web", "worker", "cron", "db"}[r.IntN(5)], r.Uint64())
					for j := range blob[:r.IntN(900)+100] {
						blob[j] = byte(r.Uint32())
					}
					val := fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"namespace":%q,"uid":"%08x-%04x-%04x-%04x-%012x","resourceVersion":"%d","creationTimestamp":"%s","labels":{"app":%q,"pod-template-hash":"%x"},"annotations":{"kubectl.kubernetes.io/last-applied-configuration":%q}},"spec":{"nodeName":"10.%d.%d.%d","containers":[{"name":"main","image":"registry.ng.bluemix.net/armada/%s:%x","resources":{"requests":{"cpu":"%dm","memory":"%dMi"}}}]},"status":{"phase":"Running","podIP":"172.30.%d.%d","hostIP":"10.%d.%d.%d"}}`,
						name, ns, r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint64()&0xffffffffffff, r.IntN(1<<30),
						time.Unix(1.7e9+int64(r.IntN(1e7)), 0).UTC().Format(time.RFC3339), name, r.Uint32(),
						base64.StdEncoding.EncodeToString(blob[:r.IntN(900)+100]),
						r.IntN(256), r.IntN(256), r.IntN(256), name, r.Uint32(), r.IntN(4000), r.IntN(8000),
						r.IntN(256), r.IntN(256), r.IntN(256), r.IntN(256), r.IntN(256))
					ops = append(ops, clientv3.OpPut("/registry/pods/"+ns+"/"+name, val))
					n += int64(len(val))
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := cli.Txn(ctx).Then(ops...).Commit()
				cancel()
				mu.Lock()
				written += n
				mu.Unlock()
				if err != nil {
					errOnce.Do(func() { mu.Lock(); ferr = err; mu.Unlock() })
				}
			}
		}()
	}
	wg.Wait()
	if ferr != nil {
		tb.Fatalf("fill: %v", ferr)
	}
}

func benchLogLevel() string {
	if os.Getenv("BENCH_VERBOSE") != "" {
		return "debug"
	}
	return "warn"
}

// profilePath is where the tool's CPU profile goes (BENCH_PROFILE_DIR), or
// a throwaway file.
func profilePath(tb testing.TB, size, round int) string {
	dir := os.Getenv("BENCH_PROFILE_DIR")
	if dir == "" {
		dir = tb.TempDir()
	}
	return filepath.Join(dir, fmt.Sprintf("backup-%dMB-%d.pprof", size, round))
}
