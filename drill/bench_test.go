package drill_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// BenchmarkDrill measures `etcd-recovery drill` of a backup of at least
// BENCH_DRILL_MB (default 512) MB against `etcd-recovery restore` alone of
// the same backup (one member, no verify), in the same run: seconds per
// GiB of database, the share of the drill spent starting etcd and hashing
// (source and restored), and the peak RSS of the tool and of the drill's
// etcd.
func BenchmarkDrill(b *testing.B) {
	sizeMB := testfix.BenchInt("BENCH_DRILL_MB", 512)
	tool := testfix.Tool(b)
	src := testenv.StartEtcd(b, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true, QuotaBackendBytes: 8 << 30})
	mi := testenv.StartMinIO(b)
	bucket := mi.NewBucket(b)
	store := testfix.Store(b, mi, bucket)
	layout := catalog.Layout{Prefix: "bench"}
	const id = "drill"
	man := testfix.LargeBackup(b, src, store, layout, id, sizeMB)
	gib := float64(man.Snapshot.RawSize) / (1 << 30)

	dir := b.TempDir()
	credDir := testfix.CredentialsDir(b, dir, mi)
	binDir := filepath.Join(dir, "bin")
	os.Mkdir(binDir, 0o700)
	if err := os.Symlink(testenv.EtcdBin(b, testenv.V35), filepath.Join(binDir, "etcd-3.5")); err != nil {
		b.Fatal(err)
	}
	cos := []string{"--cos-endpoint", mi.Endpoint, "--cos-region", mi.Region, "--bucket", bucket, "--prefix", layout.Prefix,
		"--cos-credentials-dir", credDir}
	env := append(os.Environ(), "TMPDIR="+dir)

	// restore alone: one member's data dir.
	restoreArgs := append([]string{"--log-level", "warn", "restore", "--cluster-id", id, "--no-live",
		"--initial-cluster", "r0=http://127.0.0.1:" + strconv.Itoa(testenv.FreePort(b)), "--data-dir", filepath.Join(dir, "r0.etcd"),
		"--bump-revision", "1000000000", "--mark-compacted"}, cos...)
	restoreT, restoreRSS := testfix.RunBench(b, env, tool, restoreArgs...)
	os.RemoveAll(filepath.Join(dir, "r0.etcd"))

	// the drill, compared with the source; the drill's etcd is found as
	// the tool's child and watched.
	pki := src.PKI
	drillArgs := append([]string{"--log-level", "warn", "drill", "--cluster-id", id, "--no-record", "-o", "json",
		"--etcd-bin-dir", binDir, "--endpoints", src.Endpoints()[0], "--cacert", pki.CAFile, "--cert", pki.ClientCertFile, "--key", pki.ClientKeyFile}, cos...)
	cmd := exec.Command(tool, drillArgs...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	toolW := testfix.WatchRSS(cmd.Process.Pid)
	var etcdW *testfix.RSSWatch
	found := make(chan struct{})
	go func() {
		defer close(found)
		for etcdW == nil {
			if pid := childPid(cmd.Process.Pid); pid > 0 {
				etcdW = testfix.WatchRSS(pid)
				return
			}
			if cmd.ProcessState != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	err := cmd.Wait()
	drillT := time.Since(t0)
	<-found
	toolRSS, _, _ := toolW.Stop()
	var etcdRSS int64
	if etcdW != nil {
		etcdRSS, _, _ = etcdW.Stop()
	}
	if err != nil {
		b.Fatalf("drill: %v\n%s", err, errOut.String())
	}
	var rep fleet.DrillAllReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Clusters) != 1 || rep.Clusters[0].Record == nil {
		b.Fatalf("drill output: %v\n%s", err, out.String())
	}
	rec := rep.Clusters[0].Record
	steps := map[string]time.Duration{}
	var parts []string
	for _, s := range rec.Steps {
		steps[s.Name] += s.Duration
		parts = append(parts, fmt.Sprintf("%s %.2fs", s.Name, s.Duration.Seconds()))
	}
	start, hash := steps[drill.StepStart], steps[drill.StepHashSource]+steps[drill.StepHashRestored]
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	fmt.Printf("drill of %.0f MiB database (stored %.0f MiB), comparison %s, passed %v\n", mib(man.Snapshot.RawSize), mib(man.Snapshot.StoredSize), rec.Comparison.Mode, rec.Passed)
	fmt.Printf("restore alone: %6.2fs (%.1f s/GiB), peak RSS %.0f MiB\n", restoreT.Seconds(), restoreT.Seconds()/gib, mib(restoreRSS))
	fmt.Printf("drill:         %6.2fs (%.1f s/GiB) = %s\n", drillT.Seconds(), drillT.Seconds()/gib, strings.Join(parts, " + "))
	fmt.Printf("drill/restore %.2f; starting etcd %.0f%%, hashing (both sides) %.0f%% of the drill; peak RSS tool %.0f MiB, drill's etcd %.0f MiB\n",
		drillT.Seconds()/restoreT.Seconds(), 100*start.Seconds()/drillT.Seconds(), 100*hash.Seconds()/drillT.Seconds(), mib(toolRSS), mib(etcdRSS))
	b.ReportMetric(drillT.Seconds()/gib, "drill-s/GiB")
	b.ReportMetric(restoreT.Seconds()/gib, "restore-s/GiB")
	b.ReportMetric(drillT.Seconds()/restoreT.Seconds(), "drill/restore")
	b.ReportMetric(start.Seconds()/drillT.Seconds(), "start-share")
	b.ReportMetric(hash.Seconds()/drillT.Seconds(), "hash-share")
	b.ReportMetric(mib(toolRSS), "tool-peak-RSS-MiB")
	b.ReportMetric(mib(etcdRSS), "etcd-peak-RSS-MiB")
}

// childPid is the drill's etcd among pid's children (the one serving a
// data dir, not its --version check), 0 when none.
func childPid(pid int) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			if cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n)); err == nil && bytes.Contains(cl, []byte("--data-dir")) {
				return n
			}
		}
	}
	return 0
}
