package restore_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// BenchmarkEncryptionOverhead measures what age encryption
// costs, in one run, on the same database at two sizes (BENCH_ENC_SIZES_MB,
// default "256,1024"): `etcd-recovery backup` (stream → zstd → age →
// multipart upload to MinIO over HTTPS) and `etcd-recovery restore`
// (download → age → zstd → verify → one member's data dir), each plain and
// encrypted, back to back in every round (BENCH_ROUNDS, default 3; the order
// alternates), keeping the best wall time of each and the peak of each
// one's own memory (VmHWM, and the anonymous part: heap and stacks).
//
// The target: encrypted/plain wall time <= 1.15 for both commands,
// and no memory that grows with the database: the encrypted run's peak
// anonymous RSS minus the plain run's stays the same from the small size
// to the large one (printed as "enc-plain anon", target: within 8 MiB).
func BenchmarkEncryptionOverhead(b *testing.B) {
	sizes := testfix.BenchSizesMB("BENCH_ENC_SIZES_MB", 256, 1024)
	rounds := testfix.BenchInt("BENCH_ROUNDS", 3)
	tool := testfix.Tool(b)
	src := testenv.StartEtcd(b, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true, QuotaBackendBytes: 8 << 30})
	pki := src.PKI
	mi := testenv.StartMinIOTLS(b)
	bucket := mi.NewBucket(b)
	dir := b.TempDir()
	idFile, recipient := testfix.AgeIdentityFile(b, dir)
	env := append(testfix.COSEnv(mi, bucket), "COS_PREFIX=bench")
	// Nothing of the encryption environment leaks into the plain runs.
	clean := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "ETCD_RECOVERY_") {
			clean = append(clean, e)
		}
	}
	env = clean
	encEnv := append(append([]string{}, env...), seal.EnvEncryptTo+"="+recipient, seal.EnvIdentityFile+"="+idFile)
	etcdFlags := []string{"--endpoints", src.Endpoints()[0], "--cacert", pki.CAFile, "--cert", pki.ClientCertFile, "--key", pki.ClientKeyFile}

	type run struct {
		wall            time.Duration
		hwm, anon, file int64
	}
	keep := func(cur *run, r run) {
		if cur.wall == 0 || r.wall < cur.wall {
			cur.wall = r.wall
		}
		cur.hwm, cur.anon, cur.file = max(cur.hwm, r.hwm), max(cur.anon, r.anon), max(cur.file, r.file)
	}
	measure := func(env []string, args ...string) run {
		b.Helper()
		cmd := exec.Command(tool, args...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		w := testfix.WatchRSS(cmd.Process.Pid)
		err := cmd.Wait()
		r := run{wall: time.Since(t0)}
		r.hwm, r.anon, r.file = w.Stop()
		if err != nil {
			b.Fatalf("etcd-recovery %s: %v\n%s", strings.Join(args[:min(4, len(args))], " "), err, benchTail(out.String(), 20))
		}
		return r
	}
	quiesce := func() {
		syscall.Sync()
		time.Sleep(500 * time.Millisecond) // let the writeback of the last run settle; not a synchronization
	}
	type result struct {
		sizeMB                 int
		dbMiB, storedMiB       float64
		bPlain, bEnc           run
		rPlain, rEnc           run
		bRatios, rRatios       []float64
		encSnapshot, plainKeys int
	}
	var results []result
	var filled int64
	for _, size := range sizes {
		testfix.FillLarge(b, src.Client(b), int64(size)<<20-filled)
		filled = int64(size) << 20
		res := result{sizeMB: size}
		plainID, encID := fmt.Sprintf("plain-%d", size), fmt.Sprintf("enc-%d", size)
		restoreArgs := func(cluster, root string) []string {
			ic, _ := newCluster(b, 1, true)
			return []string{"--log-level", "warn", "restore", "--cluster-id", cluster, "--no-live", "--initial-cluster", ic, "--data-dir-root", root, "-o", "json"}
		}
		for round := range rounds {
			backupPair := []func(){
				func() {
					quiesce()
					r := measure(env, append([]string{"--log-level", "warn", "backup", "--cluster-id", plainID, "--kind", "manual", "-o", "json"}, etcdFlags...)...)
					keep(&res.bPlain, r)
					res.bRatios = append(res.bRatios, -r.wall.Seconds())
				},
				func() {
					quiesce()
					r := measure(encEnv, append([]string{"--log-level", "warn", "backup", "--cluster-id", encID, "--kind", "manual", "-o", "json"}, etcdFlags...)...)
					keep(&res.bEnc, r)
					res.bRatios = append(res.bRatios, r.wall.Seconds())
				},
			}
			restorePair := []func(){
				func() {
					quiesce()
					root := filepath.Join(dir, fmt.Sprintf("plain-%d-%d", size, round))
					r := measure(env, restoreArgs(plainID, root)...)
					os.RemoveAll(root)
					keep(&res.rPlain, r)
					res.rRatios = append(res.rRatios, -r.wall.Seconds())
				},
				func() {
					quiesce()
					root := filepath.Join(dir, fmt.Sprintf("enc-%d-%d", size, round))
					r := measure(encEnv, restoreArgs(encID, root)...)
					os.RemoveAll(root)
					keep(&res.rEnc, r)
					res.rRatios = append(res.rRatios, r.wall.Seconds())
				},
			}
			if round%2 == 1 {
				backupPair[0], backupPair[1] = backupPair[1], backupPair[0]
				restorePair[0], restorePair[1] = restorePair[1], restorePair[0]
			}
			for _, f := range append(backupPair, restorePair...) {
				f()
			}
		}
		// What was stored: the encrypted backups' objects end in .age, the
		// plain ones' do not; sizes from the newest manifest of each.
		st := testfix.Store(b, mi, bucket)
		for _, k := range testfix.Keys(b, st, "bench/"+encID+"/") {
			if strings.HasSuffix(k, "/snapshot.db.zst"+seal.Suffix) {
				res.encSnapshot++
			}
		}
		for _, k := range testfix.Keys(b, st, "bench/"+plainID+"/") {
			if seal.IsSealedKey(k) {
				b.Fatalf("a plain backup wrote %s", k)
			}
			res.plainKeys++
		}
		if res.encSnapshot != rounds {
			b.Fatalf("%d MB: %d encrypted snapshot objects, want %d (one per round)", size, res.encSnapshot, rounds)
		}
		status, err := src.Client(b).Status(b.Context(), src.Endpoints()[0])
		if err != nil {
			b.Fatal(err)
		}
		res.dbMiB = float64(status.DbSize) / (1 << 20)
		objs, err := st.List(b.Context(), "bench/"+encID+"/")
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range objs {
			if strings.HasSuffix(o.Key, "/snapshot.db.zst"+seal.Suffix) {
				res.storedMiB = float64(o.Size) / (1 << 20)
			}
		}
		// Per-round ratios: the pair of each round, encrypted over plain.
		res.bRatios, res.rRatios = pairRatios(res.bRatios), pairRatios(res.rRatios)
		results = append(results, res)
	}

	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	var out bytes.Buffer
	fmt.Fprintf(&out, "\nencryption overhead (age X25519, best of %d rounds each; 2 shared cores; MinIO over HTTPS)\n", rounds)
	fmt.Fprintf(&out, "%-6s %8s %8s | %-7s %8s %8s %7s | %9s %9s | %9s %9s | %9s\n",
		"size", "db MiB", "age MiB", "command", "plain s", "enc s", "enc/pl", "plain HWM", "enc HWM", "plain anon", "enc anon", "enc-plain anon")
	for _, r := range results {
		for _, c := range []struct {
			name       string
			plain, enc run
		}{{"backup", r.bPlain, r.bEnc}, {"restore", r.rPlain, r.rEnc}} {
			fmt.Fprintf(&out, "%-6s %8.0f %8.0f | %-7s %8.2f %8.2f %7.3f | %9.1f %9.1f | %9.1f %9.1f | %+9.1f\n",
				fmt.Sprintf("%dMB", r.sizeMB), r.dbMiB, r.storedMiB, c.name, c.plain.wall.Seconds(), c.enc.wall.Seconds(),
				c.enc.wall.Seconds()/c.plain.wall.Seconds(), mib(c.plain.hwm), mib(c.enc.hwm), mib(c.plain.anon), mib(c.enc.anon),
				mib(c.enc.anon-c.plain.anon))
		}
		fmt.Fprintf(&out, "%dMB per round enc/plain: backup %s (median %.3f), restore %s (median %.3f)\n", r.sizeMB,
			testfix.Ratios(r.bRatios), testfix.Median(r.bRatios), testfix.Ratios(r.rRatios), testfix.Median(r.rRatios))
	}
	fmt.Fprintf(&out, "targets: enc/plain <= 1.15 for backup and restore; the encrypted runs' memory does not grow with the database (enc-plain anon the same at every size, within 8 MiB)\n")
	fmt.Print(out.String())
	last := results[len(results)-1]
	b.ReportMetric(last.bEnc.wall.Seconds()/last.bPlain.wall.Seconds(), "backup-enc/plain")
	b.ReportMetric(last.rEnc.wall.Seconds()/last.rPlain.wall.Seconds(), "restore-enc/plain")
	b.ReportMetric(mib(last.bEnc.hwm), "backup-enc-peak-RSS-MiB")
	b.ReportMetric(mib(last.rEnc.hwm), "restore-enc-peak-RSS-MiB")
}

// pairRatios turns the alternating record of a round's two runs (plain as
// a negative duration, encrypted as a positive one) into encrypted/plain
// per round.
func pairRatios(v []float64) []float64 {
	var out []float64
	for i := 0; i+1 < len(v); i += 2 {
		p, e := v[i], v[i+1]
		if e < 0 {
			p, e = e, p
		}
		out = append(out, e/-p)
	}
	return out
}

// benchTail is the last n lines of s.
func benchTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
