package journal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// BenchmarkPITRRestore measures a point-in-time restore against a plain
// restore of the same full backup: `etcd-recovery restore` (the built
// binary, a child: wall time and peak RSS, VmHWM) of one member into a
// new data dir, without and with --to-revision at the journal's last
// revision, for each count of BENCH_PITR_EVENTS (default 100000,1000000)
// journaled events after the backup.
//
// The base is a 1-member etcd 3.5 holding BENCH_PITR_BASE_KEYS (default
// 50,000) Kubernetes-like objects of about 1.3 KiB, backed up once per
// count (the same keyspace). A count up to BENCH_PITR_REAL_MAX (default
// 200,000) is journaled from a real etcd workload (puts of pods, created
// then overwritten, by 128 concurrent writers) by journal.Capture with
// segments cut at the default size (the tail after 2 s); a larger one is synthesized: the same
// objects, one put a revision (each key created then overwritten, a
// twentieth deletes), written with journal.WriteSegment in segments cut
// at the default size, as the capture cuts them. BENCH_PITR_ROUNDS
// (default 1) runs both that many times, order alternating; the best of
// each is kept; peak RSS is VmHWM and, apart, the peak of anonymous
// memory. BENCH_JOURNAL_QUICK=1: 100,000 events only.
func BenchmarkPITRRestore(b *testing.B) {
	def := []int{100_000, 1_000_000}
	if benchQuick() {
		def = []int{100_000}
	}
	counts := envInts(b, "BENCH_PITR_EVENTS", def)
	baseKeys := envInts(b, "BENCH_PITR_BASE_KEYS", []int{50_000})[0]
	realMax := envInts(b, "BENCH_PITR_REAL_MAX", []int{200_000})[0]
	rounds := envInts(b, "BENCH_PITR_ROUNDS", []int{1})[0]
	tool := testfix.Tool(b)
	ctx := testfix.Context(b, time.Hour)
	c := testenv.StartEtcd(b, testenv.EtcdOptions{Version: testenv.V35, Members: 1, QuotaBackendBytes: 8 << 30})
	cli := c.Client(b)
	t0 := time.Now()
	if err := fillBase(ctx, cli, baseKeys); err != nil {
		b.Fatal(err)
	}
	rig := testfix.NewStoreRig(b)
	mans := map[int]*catalog.Manifest{}
	for _, n := range counts {
		mans[n] = rig.TakeBackup(b, c, fmt.Sprintf("pitr-%d", n), catalog.KindScheduled)
	}
	fmt.Printf("BenchmarkPITRRestore: base %d objects, snapshot %s (stored %s), in %s\n", baseKeys,
		mib(mans[counts[0]].Snapshot.RawSize), mib(mans[counts[0]].Snapshot.StoredSize), time.Since(t0).Round(time.Millisecond))
	credDir := filepath.Join(b.TempDir(), "creds")
	if err := os.Mkdir(credDir, 0o700); err != nil {
		b.Fatal(err)
	}
	os.WriteFile(filepath.Join(credDir, "access_key_id"), []byte(rig.MinIO.AccessKey), 0o600)
	os.WriteFile(filepath.Join(credDir, "secret_access_key"), []byte(rig.MinIO.SecretKey), 0o600)
	cos := []string{"--cos-endpoint", rig.MinIO.Endpoint, "--cos-region", rig.MinIO.Region, "--bucket", rig.Bucket,
		"--prefix", rig.Layout.Prefix, "--cos-credentials-dir", credDir}

	var summary []string
	for _, n := range counts {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			man := mans[n]
			id := man.ClusterID
			t0 := time.Now()
			var last int64
			how := "real etcd workload, journal.Capture"
			if n <= realMax {
				last = journalReal(ctx, b, cli, rig, man, n)
			} else {
				how = "synthesized segments"
				last = journalSynthetic(ctx, b, rig, man, n)
			}
			chain, err := journal.ListSegments(ctx, rig.Store, rig.Layout, id, man.Revision())
			if err != nil || chain.Problem != nil || chain.Reach != last {
				b.Fatalf("journal of %s: reach %d, want %d: %v %v", id, chain.Reach, last, err, chain.Problem)
			}
			var segBytes int64
			for _, s := range chain.Segments {
				segBytes += s.Size
			}
			events := last - man.Revision()
			fmt.Printf("BenchmarkPITRRestore %d events (%s): revisions %d..%d in %d segments, %s stored (%.0f B/event), made in %s\n",
				n, how, man.Revision()+1, last, len(chain.Segments), mib(segBytes), float64(segBytes)/float64(events), time.Since(t0).Round(time.Millisecond))

			for range b.N {
				bestPlain, bestPITR := time.Duration(1<<62), time.Duration(1<<62)
				var rssPlain, rssPITR, anonPlain, anonPITR int64
				for round := range rounds {
					for i := range 2 {
						pitr := (i+round)%2 == 1
						var extra []string
						if pitr {
							extra = []string{"--to-revision", fmt.Sprint(last)}
						}
						d, rss, anon, res := runRestore(b, tool, id, cos, extra)
						switch {
						case pitr && (res.Replay == nil || res.Replay.ToRevision != last || res.Replay.Events < events):
							b.Fatalf("restore --to-revision %d: replay %+v, want %d events", last, res.Replay, events)
						case !pitr && res.Replay != nil:
							b.Fatalf("plain restore replayed: %+v", res.Replay)
						case pitr:
							bestPITR, rssPITR, anonPITR = min(bestPITR, d), max(rssPITR, rss), max(anonPITR, anon)
						default:
							bestPlain, rssPlain, anonPlain = min(bestPlain, d), max(rssPlain, rss), max(anonPlain, anon)
						}
					}
				}
				line := fmt.Sprintf("| %d (%s) | %d | %s | %s | %s (%s anon) | %s | %s (%s anon) | %.1f× | %.0f |", events, how, len(chain.Segments), mib(segBytes),
					secs(bestPlain), mib(rssPlain), mib(anonPlain), secs(bestPITR), mib(rssPITR), mib(anonPITR), bestPITR.Seconds()/bestPlain.Seconds(),
					float64(events)/(bestPITR-bestPlain).Seconds())
				fmt.Printf("BenchmarkPITRRestore %d events: plain restore %s, peak RSS %s (anonymous %s); --to-revision %d %s, peak RSS %s (anonymous %s): %.2fx the time, %.0f events/s over plain\n",
					events, secs(bestPlain), mib(rssPlain), mib(anonPlain), last, secs(bestPITR), mib(rssPITR), mib(anonPITR), bestPITR.Seconds()/bestPlain.Seconds(),
					float64(events)/(bestPITR-bestPlain).Seconds())
				summary = append(summary, line)
				b.ReportMetric(bestPlain.Seconds(), "plain-s")
				b.ReportMetric(bestPITR.Seconds(), "pitr-s")
				b.ReportMetric(float64(rssPlain)/(1<<20), "plain-peak-MiB")
				b.ReportMetric(float64(rssPITR)/(1<<20), "pitr-peak-MiB")
			}
		})
	}
	fmt.Println("BenchmarkPITRRestore summary (markdown):")
	fmt.Println("| events | segments | stored | plain restore | peak RSS | --to-revision | peak RSS | PITR/plain | events/s replayed |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, l := range summary {
		fmt.Println(l)
	}
}

// restoreResult is what the benchmark reads of restore -o json.
type restoreResult struct {
	Replay *struct {
		ToRevision int64 `json:"toRevision"`
		Events     int64 `json:"events"`
	} `json:"replay"`
}

// runRestore runs one restore of cluster id into a new data dir and
// returns its wall time, peak RSS (VmHWM), peak anonymous RSS (the heap;
// the rest is file-backed: bbolt's mmap of the file it writes) and result.
// BENCH_PROFILE_DIR: a CPU profile of each run there.
func runRestore(b *testing.B, tool, id string, cos, extra []string) (time.Duration, int64, int64, restoreResult) {
	b.Helper()
	root := filepath.Join(b.TempDir(), "data")
	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(b))
	args := append([]string{"restore", "--cluster-id", id, "--no-live", "--initial-cluster", "r0=" + peer, "--data-dir-root", root, "-o", "json"}, cos...)
	if d := os.Getenv("BENCH_PROFILE_DIR"); d != "" {
		args = append([]string{"--cpu-profile", filepath.Join(d, fmt.Sprintf("restore-%s-%d%s.pprof", id, time.Now().UnixMilli(), strings.Join(extra, "")))}, args...)
	}
	cmd := exec.Command(tool, append(args, extra...)...)
	cmd.Env = testfix.ToolEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	w := testfix.WatchRSS(cmd.Process.Pid)
	err := cmd.Wait()
	d := time.Since(t0)
	hwm, anon, _ := w.Stop()
	if err != nil {
		b.Fatalf("restore %v: %v\n%s", extra, err, testfix.LastLines(errb.String(), 20))
	}
	var res restoreResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		b.Fatalf("restore -o json: %v\n%s", err, out.String())
	}
	os.RemoveAll(root)
	return d, hwm, anon, res
}

// fillBase writes n Kubernetes-like objects (deployments) in
// transactions of 50, 8 at a time.
func fillBase(ctx context.Context, cli *clientv3.Client, n int) error {
	work := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for start := range work {
				var ops []clientv3.Op
				for i := start; i < min(start+50, n); i++ {
					ns, name := fmt.Sprintf("tenant-%03d", i%97), fmt.Sprintf("app-%05d", i)
					ops = append(ops, clientv3.OpPut("/registry/deployments/"+ns+"/"+name, string(k8sObject(rnd, ns, name, int64(i)))))
				}
				tctx, cancel := context.WithTimeout(ctx, time.Minute)
				_, err := cli.Txn(tctx).Then(ops...).Commit()
				cancel()
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
	for start := 0; start < n; start += 50 {
		select {
		case work <- start:
		case err := <-errs:
			close(work)
			wg.Wait()
			return fmt.Errorf("filling the base: %w", err)
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("filling the base: %w", err)
	default:
		return nil
	}
}

// journalReal journals n writes of a real workload after man with
// journal.Capture (segments cut at the default 4 MiB, the tail after
// 2 s), and returns the last revision.
func journalReal(ctx context.Context, b *testing.B, cli *clientv3.Client, rig *testfix.StoreRig, man *catalog.Manifest, n int) int64 {
	b.Helper()
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- journal.Capture(cctx, journal.CaptureOptions{Client: cli, ClusterID: man.ClusterID, BaseBackup: man.Name, BaseRev: man.Revision(),
			Store: rig.Store, Layout: rig.Layout, Encoding: zstdEnc,
			// Segments are cut by size (4 MiB) while the writers run; a
			// short interval only stores the tail without waiting 30 s.
			SegmentInterval: 2 * time.Second})
	}()
	// As fast as 128 writers go: the rate asked is far above the machine's.
	ws, achieved, err := pacedWriter(ctx, cli, 10_000_000, time.Duration(n)*100*time.Nanosecond, 20_000)
	if err != nil {
		stop()
		b.Fatal(err)
	}
	fmt.Printf("BenchmarkPITRRestore: %d writes at %.0f/s\n", len(ws), achieved)
	// Every revision after the base is one of these writes.
	last := ws[len(ws)-1].rev
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		chain, err := journal.ListSegments(ctx, rig.Store, rig.Layout, man.ClusterID, man.Revision())
		if err == nil && chain.Reach >= last {
			break
		}
		if time.Now().After(deadline) || len(done) > 0 {
			stop()
			b.Fatalf("the capture did not reach %d in 2 minutes: %v", last, err)
		}
	}
	stop()
	if err := <-done; err != nil {
		b.Fatalf("capture: %v", err)
	}
	return last
}

// journalSynthetic writes n events after man as segments, and returns the
// last revision.
func journalSynthetic(ctx context.Context, b *testing.B, rig *testfix.StoreRig, man *catalog.Manifest, n int) int64 {
	b.Helper()
	type seg struct {
		h   journal.Header
		evs []journal.Event
	}
	segs := make(chan seg, 2)
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for s := range segs {
				wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				_, err := journal.WriteSegment(wctx, rig.Store, rig.Layout, zstdEnc, s.h, s.evs)
				cancel()
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	type state struct{ create, version int64 }
	const keys = 20_000
	live := map[int]*state{}
	rnd := rand.New(rand.NewPCG(1, 2))
	t0 := time.Now().UnixMilli()
	rev := man.Revision()
	var (
		cur  []journal.Event
		size int
	)
	flush := func() {
		first, last := cur[0].Rev, cur[len(cur)-1].Rev
		h := journal.Header{ClusterID: man.ClusterID, BaseBackup: man.Name, BaseRev: man.Revision(), FirstRev: first, LastRev: last,
			// 10,000 revisions a second.
			Received: map[int64]int64{first: t0 + (first-man.Revision())/10, last: t0 + (last-man.Revision())/10}}
		segs <- seg{h: h, evs: cur}
		cur, size = nil, 0
	}
	for i := 0; i < n; i++ {
		rev++
		k := i % keys
		key, ns, name := k8sKey(k, keys)
		st := live[k]
		var ev journal.Event
		if st != nil && i%20 == 19 {
			delete(live, k)
			ev = journal.Event{Rev: rev, Type: journal.Delete, Key: []byte(key)}
		} else {
			if st == nil {
				st = &state{create: rev}
				live[k] = st
			}
			st.version++
			ev = journal.Event{Rev: rev, Type: journal.Put, Key: []byte(key), Value: k8sObject(rnd, ns, name, rev), CreateRev: st.create, Version: st.version}
		}
		cur = append(cur, ev)
		// The encoded size: JSON with the value in base64.
		size += len(ev.Key) + len(ev.Value)*4/3 + 80
		if size >= journal.DefaultSegmentSize {
			flush()
		}
	}
	if len(cur) > 0 {
		flush()
	}
	close(segs)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatalf("writing synthesized segments: %v", err)
	default:
	}
	return rev
}
