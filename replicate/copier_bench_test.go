package replicate_test

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/objectio"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// copierProc is `etcd-recovery replicate` (the built binary) running as a
// child, its log read for its full passes, its CPU and peak RSS measured.
type copierProc struct {
	cmd    *exec.Cmd
	rss    *testfix.RSSWatch
	mu     sync.Mutex
	passes []copierPass
	tail   []string
	ended  chan struct{}
}

type copierPass struct {
	at     time.Time
	took   time.Duration
	copied int
	cpu    time.Duration // the process's CPU when the pass was logged
}

// startCopier runs the copier from the primary (bucket pb, prefix p on
// pm) to the second site (bucket sb, prefix s on sm) with args.
func startCopier(tb testing.TB, pm *testenv.MinIO, pb, p string, sm *testenv.MinIO, sb, s string, args ...string) *copierProc {
	tb.Helper()
	full := append([]string{"--log-format", "json", "replicate",
		"--cos-endpoint", pm.Endpoint, "--cos-region", pm.Region, "--bucket", pb, "--prefix", p,
		"--cos-credentials-dir", creds(tb, pm.AccessKey, pm.SecretKey),
		"--second-store", secondStoreURL(sb, s, sm.Endpoint, sm.Region), "--second-credentials-dir", creds(tb, sm.AccessKey, sm.SecretKey)}, args...)
	cmd := exec.Command(testfix.Tool(tb), full...)
	cmd.Env = testfix.ToolEnv()
	pipe, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	cp := &copierProc{cmd: cmd, rss: testfix.WatchRSS(cmd.Process.Pid), ended: make(chan struct{})}
	tb.Cleanup(func() { cmd.Process.Kill(); <-cp.ended })
	go func() {
		defer close(cp.ended)
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			var rec struct {
				Msg    string `json:"msg"`
				Took   int64  `json:"took"` // slog's JSON: nanoseconds
				Copied int    `json:"copied"`
			}
			line := sc.Text()
			cpu := testfix.CPUTime(cmd.Process.Pid)
			cp.mu.Lock()
			cp.tail = append(cp.tail, line)
			if len(cp.tail) > 20 {
				cp.tail = cp.tail[1:]
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "replicate: full pass" {
				cp.passes = append(cp.passes, copierPass{at: time.Now(), took: time.Duration(rec.Took), copied: rec.Copied, cpu: cpu})
			}
			cp.mu.Unlock()
		}
	}()
	return cp
}

// waitPasses waits for n full passes and returns them.
func (cp *copierProc) waitPasses(tb testing.TB, n int, timeout time.Duration) []copierPass {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cp.mu.Lock()
		ps := append([]copierPass(nil), cp.passes...)
		tail := append([]string(nil), cp.tail...)
		cp.mu.Unlock()
		if len(ps) >= n {
			return ps
		}
		select {
		case <-cp.ended:
			tb.Fatalf("the copier ended after %d passes:\n%s", len(ps), joinLines(tail))
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d full passes of %d in %s:\n%s", len(ps), n, timeout, joinLines(tail))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func joinLines(l []string) string {
	out := ""
	for _, s := range l {
		out += s + "\n"
	}
	return out
}

// stop ends the copier (SIGTERM) and returns its CPU and peak RSS.
func (cp *copierProc) stop() (cpu time.Duration, hwm int64) {
	cpu = testfix.CPUTime(cp.cmd.Process.Pid)
	hwm, _, _ = cp.rss.Stop()
	cp.cmd.Process.Signal(syscall.SIGTERM)
	<-cp.ended
	cp.cmd.Wait()
	return cpu, hwm
}

// BenchmarkReplicateCopier measures the copier's CPU and memory, the
// built binary (`etcd-recovery replicate`, a child: CPU from
// /proc/<pid>/stat, peak RSS its own VmHWM) against two real MinIO
// servers:
//
//   - following BENCH_REPLICATE_COPIER_CLUSTERS (default 100) clusters'
//     journals at the production cadence: each cluster has a backup and a
//     journal written as the capture writes it (the journal's segment
//     writer) with a segment every 30 s (journal.DefaultSegmentInterval)
//     of 600 Kubernetes-like objects (20 writes/s), the clusters
//     staggered over the interval; the copier at its defaults (polls
//     every 5 s, scans every 2 min) for BENCH_REPLICATE_COPIER_SECONDS
//     (default 120); CPU over the run after its first full pass, as a
//     share of one core;
//   - a full scan of a bucket holding BENCH_REPLICATE_SCAN_CLUSTERS
//     (default 1,800) clusters' backups, BENCH_REPLICATE_SCAN_BACKUPS
//     (default 8) each (a started marker, a snapshot, a manifest: 43,200
//     keys), already on the second site (a copier that restarts): the
//     first pass compares every folder's manifest there (a listing and a
//     read on the second site, the manifest's read on the primary), the
//     next ones list only; the time of each pass, the CPU and peak RSS.
func BenchmarkReplicateCopier(b *testing.B) {
	clusters := testfix.BenchInt("BENCH_REPLICATE_COPIER_CLUSTERS", 100)
	seconds := testfix.BenchInt("BENCH_REPLICATE_COPIER_SECONDS", 120)
	scanClusters := testfix.BenchInt("BENCH_REPLICATE_SCAN_CLUSTERS", 1800)
	scanBackups := testfix.BenchInt("BENCH_REPLICATE_SCAN_BACKUPS", 8)
	for range b.N {
		b.Run(fmt.Sprintf("follow=%d", clusters), func(b *testing.B) {
			copierFollow(b, clusters, time.Duration(seconds)*time.Second)
		})
		b.Run(fmt.Sprintf("scan=%dx%d", scanClusters, scanBackups), func(b *testing.B) {
			copierScan(b, scanClusters, scanBackups)
		})
	}
}

func copierFollow(b *testing.B, clusters int, length time.Duration) {
	ctx := testfix.Context(b, length+10*time.Minute)
	pm, sm := testenv.SharedMinIO(b), testenv.StartMinIO(b)
	pb, sb := pm.NewBucket(b), sm.NewBucket(b)
	pl, sl := catalog.Layout{Prefix: testenv.Prefix(b)}, catalog.Layout{Prefix: "dr/" + testenv.Prefix(b)}
	st := testfix.Store(b, pm, pb)
	now := time.Now().UTC()
	ws := make([]*segmentWriter, clusters)
	for i := range ws {
		id := fmt.Sprintf("c-%03d", i)
		m := fakeBackupSized(b, st, pl, id, now.Add(-time.Hour), 64<<10)
		ws[i] = &segmentWriter{st: st, l: pl, id: id, base: m.Name, next: 11, perSegment: 600, rng: rand.New(rand.NewPCG(uint64(i), 9))}
	}
	cp := startCopier(b, pm, pb, pl.Prefix, sm, sb, sl.Prefix)
	first := cp.waitPasses(b, 1, 5*time.Minute)[0]
	wctx, stop := context.WithTimeout(ctx, length)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, clusters)
	iv := journal.DefaultSegmentInterval
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-wctx.Done():
				return
			case <-time.After(iv * time.Duration(i) / time.Duration(clusters)):
			}
			for {
				if err := w.write(ctx); err != nil {
					errs <- err
					return
				}
				select {
				case <-wctx.Done():
					return
				case <-time.After(iv):
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	// The copier catches up (a poll interval and the copies), then stops.
	sst := testfix.Store(b, sm, sb)
	deadline := time.Now().Add(2 * time.Minute)
	for _, w := range ws {
		key := sl.JournalSegmentKey(w.id, w.next-600, w.next-1)
		for {
			if _, err := sst.Get(ctx, key); err == nil {
				break
			} else if !store.IsNotFound(err) || time.Now().After(deadline) {
				b.Fatalf("%s not on the second site: %v", key, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	caught := time.Now()
	cpu, hwm := cp.stop()
	segs, bytes := 0, int64(0)
	for _, w := range ws {
		segs += w.written
		bytes += w.bytes
	}
	run := caught.Sub(first.at)
	used := cpu - first.cpu
	fmt.Printf("BenchmarkReplicateCopier follow: %d clusters, a segment every %s each (%d segments, %s, %.0f KiB each) for %s, copier at its defaults: "+
		"CPU %.2f s over %s after its first pass (%.1f%% of one core; %.2f%% a cluster; per 100 clusters %.1f%% of a core), first pass %s (%.2f CPU-s), peak RSS %s\n",
		clusters, iv, segs, mib(bytes), float64(bytes)/float64(max(segs, 1))/1024, length, used.Seconds(), run.Round(time.Second),
		100*used.Seconds()/run.Seconds(), 100*used.Seconds()/run.Seconds()/float64(clusters), 100*used.Seconds()/run.Seconds()/float64(clusters)*100,
		first.took, first.cpu.Seconds(), mib(hwm))
	b.ReportMetric(100*used.Seconds()/run.Seconds(), "cpu-%")
	b.ReportMetric(float64(hwm)/(1<<20), "peak-MiB")
}

func copierScan(b *testing.B, clusters, backups int) {
	ctx := testfix.Context(b, 30*time.Minute)
	pm, sm := testenv.SharedMinIO(b), testenv.StartMinIO(b)
	pb, sb := pm.NewBucket(b), sm.NewBucket(b)
	pl, sl := catalog.Layout{Prefix: testenv.Prefix(b)}, catalog.Layout{Prefix: "dr/" + testenv.Prefix(b)}
	pst, sst := testfix.Store(b, pm, pb), testfix.Store(b, sm, sb)
	// Both sites hold the same folders (what a copier that ran before
	// left), written 32 at a time.
	start := time.Now()
	t0 := time.Now().UTC().Add(-time.Duration(backups) * 8 * time.Hour)
	errs := make([]error, clusters)
	fanout.ForEach(ctx, clusters, 32, func(ctx context.Context, i int) {
		id := fmt.Sprintf("s-%04d", i)
		for j := range backups {
			errs[i] = errors.Join(errs[i], putFolderBoth(ctx, pst, pl, sst, sl, id, t0.Add(time.Duration(j)*8*time.Hour)))
		}
	})
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	keys := clusters * backups * 3
	fmt.Printf("BenchmarkReplicateCopier scan: wrote %d keys on each site in %s\n", keys, time.Since(start).Round(time.Second))
	cp := startCopier(b, pm, pb, pl.Prefix, sm, sb, sl.Prefix, "--scan-interval", "5s", "--copy-parallel", "16")
	ps := cp.waitPasses(b, 3, 20*time.Minute)
	cpu, hwm := cp.stop()
	for i, p := range ps {
		if p.copied != 0 {
			b.Errorf("pass %d copied %d objects, want none (everything is there)", i, p.copied)
		}
	}
	cpuOf := func(i int) time.Duration {
		if i == 0 {
			return ps[0].cpu
		}
		return ps[i].cpu - ps[i-1].cpu
	}
	fmt.Printf("BenchmarkReplicateCopier scan: %d clusters x %d backups (%d keys, %d folders) on both sites, --copy-parallel 16: "+
		"first pass (a restart: every folder's manifest compared) %s, %.2f CPU-s; next passes (listing only) %s, %.2f CPU-s and %s, %.2f CPU-s; "+
		"%.0f keys/s listed; CPU in all %.2f s; peak RSS %s\n",
		clusters, backups, keys, clusters*backups, ps[0].took, cpuOf(0).Seconds(), ps[1].took, cpuOf(1).Seconds(), ps[2].took, cpuOf(2).Seconds(),
		float64(keys)/ps[2].took.Seconds(), cpu.Seconds(), mib(hwm))
	b.ReportMetric(ps[0].took.Seconds(), "restart-pass-s")
	b.ReportMetric(ps[2].took.Seconds(), "pass-s")
	b.ReportMetric(float64(hwm)/(1<<20), "peak-MiB")
}

// putFolderBoth writes the same committed backup folder of cluster id at
// t0 (a started marker, a 256-byte snapshot its manifest names, the
// manifest) on both sites, as a copier that ran before left it.
func putFolderBoth(ctx context.Context, pst store.Store, pl catalog.Layout, sst store.Store, sl catalog.Layout, id string, t0 time.Time) error {
	name := catalog.NewBackupName(t0, catalog.KindScheduled)
	data := make([]byte, 256)
	crand.Read(data)
	m := &catalog.Manifest{Format: catalog.ManifestFormat, ClusterID: id, Name: name, Kind: catalog.KindScheduled,
		StartedAt: t0, FinishedAt: t0.Add(time.Second), ServerVersion: "3.5.0", RevisionBefore: 10, RevisionAfter: 10,
		Snapshot: catalog.SnapshotInfo{Object: catalog.SnapshotObjectZstd, Compression: objectio.CompressZstd,
			RawSize: 256, RawSHA256: strings.Repeat("ab", 32), StoredSize: int64(len(data)), StoredSHA256: testfix.SHA256(data)}, ToolVersion: "bench"}
	mb, err := catalog.MarshalManifest(m)
	if err != nil {
		return err
	}
	for _, site := range []struct {
		st store.Store
		l  catalog.Layout
	}{{pst, pl}, {sst, sl}} {
		for _, o := range []struct {
			obj string
			b   []byte
		}{{catalog.StartedObject, []byte(t0.Format(time.RFC3339))}, {m.Snapshot.Object, data}, {catalog.ManifestObject, mb}} {
			if _, err := site.st.Put(ctx, site.l.Key(id, name, o.obj), bytes.NewReader(o.b)); err != nil {
				return err
			}
		}
	}
	return nil
}
