package restore_test

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// BenchmarkRestoreFloor measures a large restore step by step against its
// physical floor, in one run:
//
//   - the data: BENCH_FLOOR_MB (default 1024; the etcd limit is 8192) of
//     Kubernetes-like objects: many pods of 1–3 KiB and, for a fifth of
//     the bytes, configmaps and secrets of 64 KiB to 1.5 MiB;
//   - the backup: the tool's, zstd, encrypted with age, in MinIO over
//     HTTPS behind a shaped link (testenv.LinkProxy: BENCH_FLOOR_MBIT,
//     default 1000 Mbit/s, BENCH_FLOOR_RTT, default 10ms);
//   - the disk: its write throughput measured in the same run, a file of
//     BENCH_FLOOR_DISK_MB (default 1024) written and fsynced in the data
//     dirs' file system (dd's conv=fsync);
//   - the floor: the larger of the stored bytes over the link and the
//     bytes the members' databases need (3 × the database) over the
//     disk's throughput;
//   - the tool: `restore` of 3 members to data dirs, started by this
//     benchmark as soon as the tool says the data dirs are written, until
//     the tool has verified them (time to three members serving and
//     verified). Its JSON log gives the steps: fetch (download, decrypt,
//     decompress, hash, the staged file), prepare and write (the revision
//     bump, each member's data dir), start and verify.
//
// It prints the steps, the tool's time against the floor (target ≤ 1.3×),
// its peak RSS (target ≤ 256 MiB) and the peak disk the run used against
// the members' databases (target ≤ 1.1× the database per member; the
// blocks allocated under the data dirs' root, which also holds the
// scratch, sampled every 50 ms).
func BenchmarkRestoreFloor(b *testing.B) {
	sizeMB := testfix.BenchInt("BENCH_FLOOR_MB", 1024)
	mbit := testfix.BenchInt("BENCH_FLOOR_MBIT", 1000)
	diskMB := testfix.BenchInt("BENCH_FLOOR_DISK_MB", 1024)
	rtt := testfix.BenchDuration(b, "BENCH_FLOOR_RTT", 10*time.Millisecond)
	tool := testfix.Tool(b)
	src := testenv.StartEtcd(b, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true, QuotaBackendBytes: 8 << 30})
	pki := src.PKI
	mi := testenv.StartMinIOTLS(b)
	bucket := mi.NewBucket(b)
	u, err := url.Parse(mi.Endpoint)
	if err != nil {
		b.Fatal(err)
	}
	link := testenv.StartLinkProxy(b, u.Host, rtt, int64(mbit)*1_000_000)
	dir := b.TempDir()
	idFile, recipient := testfix.AgeIdentityFile(b, dir)
	env := append(testfix.COSEnv(mi, bucket), "COS_PREFIX=floor", "COS_ENDPOINT="+link.URL(u.Scheme),
		seal.EnvEncryptTo+"="+recipient, seal.EnvIdentityFile+"="+idFile)

	t0 := time.Now()
	fillKube(b, src.Client(b), int64(sizeMB)<<20)
	st, err := src.Client(b).Status(context.Background(), src.Endpoints()[0])
	if err != nil {
		b.Fatal(err)
	}
	etcdFlags := []string{"--endpoints", src.Endpoints()[0], "--cacert", pki.CAFile, "--cert", pki.ClientCertFile, "--key", pki.ClientKeyFile}
	const cluster = "floor"
	out := runTool(b, tool, env, append([]string{"backup", "--cluster-id", cluster, "--kind", "manual", "-o", "json"}, etcdFlags...)...)
	var man catalog.Manifest // backup -o json is the manifest
	if err := json.Unmarshal([]byte(out), &man); err != nil || man.Snapshot.StoredSize == 0 {
		b.Fatalf("backup -o json: %v: %s", err, benchTail(out, 20))
	}
	dbBytes, stored := man.Snapshot.RawSize, man.Snapshot.StoredSize
	fmt.Fprintf(os.Stderr, "filled and backed up %d MiB (db %d MiB, revision %d, stored %d MiB encrypted) in %s\n",
		sizeMB, dbBytes>>20, st.Header.Revision, stored>>20, time.Since(t0).Round(time.Second))
	src.Members[0].Kill()
	os.RemoveAll(src.Members[0].DataDir)

	root := filepath.Join(dir, "restore")
	if err := os.MkdirAll(root, 0o700); err != nil {
		b.Fatal(err)
	}
	diskBps := measureDiskWrite(b, root, int64(diskMB)<<20)
	// One GET of the stored object through the link, to /dev/null (curl):
	// what one connection carries over it.
	objURL := link.URL(u.Scheme) + "/" + bucket + "/" + catalog.Layout{Prefix: "floor"}.Key(cluster, man.Name, man.Snapshot.Object)
	curlGet, _ := testfix.RunBench(b, env, "curl", "-fsS", "-K", testfix.CurlConfig(b, dir, mi), "--cacert", mi.CAFile,
		"--aws-sigv4", "aws:amz:"+mi.Region+":s3", "-o", "/dev/null", objURL)
	const members = 3
	wire := time.Duration(float64(stored*8) / (float64(mbit) * 1e6) * float64(time.Second))
	disk := time.Duration(float64(members*dbBytes) / diskBps * float64(time.Second))
	floor := max(wire, disk)

	syscall.Sync()
	time.Sleep(time.Second)
	ic, ms := newCluster(b, members, true)
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.clientURL)
	}
	args := []string{"--log-format", "json", "restore", "--cluster-id", cluster, "--no-live",
		"--initial-cluster", ic, "--data-dir-root", root, "--temp-dir", filepath.Join(root, "scratch"),
		"--cacert", pki.CAFile, "--cert", pki.ClientCertFile, "--key", pki.ClientKeyFile,
		"--verify-endpoints", strings.Join(eps, ","), "--verify-timeout", "10m", "-o", "json"}
	if d := os.Getenv("BENCH_PROFILE_DIR"); d != "" {
		args = append([]string{"--cpu-profile", filepath.Join(d, "restore-floor.pprof")}, args...)
	}
	if os.Getenv("BENCH_VERBOSE") != "" {
		args = append([]string{"--log-level", "debug"}, args...)
	}
	if err := os.MkdirAll(filepath.Join(root, "scratch"), 0o700); err != nil {
		b.Fatal(err)
	}
	var peakDisk atomic.Int64
	stopDisk := make(chan struct{})
	diskDone := make(chan struct{})
	go func() {
		defer close(diskDone)
		for {
			if n := allocatedBytes(root); n > peakDisk.Load() {
				peakDisk.Store(n)
			}
			select {
			case <-stopDisk:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	cmd := exec.Command(tool, args...)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	watch := testfix.WatchRSS(cmd.Process.Pid)
	type event struct {
		at  time.Duration
		msg string
		rec map[string]any
	}
	var (
		mu      sync.Mutex
		events  []event
		logBuf  bytes.Buffer
		written = make(chan string, 1)
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			at := time.Since(start)
			var rec map[string]any
			_ = json.Unmarshal([]byte(line), &rec)
			msg, _ := rec["msg"].(string)
			mu.Lock()
			logBuf.WriteString(line + "\n")
			events = append(events, event{at, msg, rec})
			mu.Unlock()
			if strings.HasPrefix(msg, "data dirs written: start the new members") {
				tok, _ := rec["initial_cluster_token"].(string)
				written <- tok
			}
		}
	}()
	var token string
	var wroteAt time.Duration
	select {
	case token = <-written:
		wroteAt = time.Since(start)
	case <-done:
		cmd.Wait()
		b.Fatalf("the tool did not write the data dirs:\n%s", benchTail(logBuf.String(), 30))
	}
	var started []*testenv.EtcdMember
	defer func() {
		for _, m := range started {
			m.Kill()
		}
	}()
	// All at once, as the cluster's pods start.
	var specs []testenv.MemberSpec
	for _, m := range ms {
		specs = append(specs, testenv.MemberSpec{Version: testenv.V35, Name: m.name, DataDir: filepath.Join(root, m.name+".etcd"),
			ClientURL: m.clientURL, PeerURL: m.peerURL, InitialCluster: ic, InitialClusterToken: token, PKI: pki})
	}
	started = testenv.StartEtcdMembers(b, specs...)
	listening := time.Since(start)
	<-done
	err = cmd.Wait()
	total := time.Since(start)
	if os.Getenv("BENCH_VERBOSE") != "" {
		fmt.Fprintf(os.Stderr, "%8.2fs every member listens\n", listening.Seconds())
		for _, m := range started {
			logMemberMilestones(b, m.Name, m.LogFile, start)
		}
	}
	rss, anon, _ := watch.Stop()
	close(stopDisk)
	<-diskDone
	if err != nil || !strings.Contains(stdout.String(), `"verified": true`) {
		b.Fatalf("restore: %v\n%s\n%s", err, stdout.String(), benchTail(logBuf.String(), 30))
	}
	peak := peakDisk.Load()

	// The steps, from the tool's log.
	at := func(prefix string) time.Duration {
		for _, e := range events {
			if strings.HasPrefix(e.msg, prefix) {
				return e.at
			}
		}
		return 0
	}
	var memberWrites []string
	for _, e := range events {
		if e.msg == "data dir written" {
			d, _ := e.rec["duration"].(float64) // slog's JSON: nanoseconds
			memberWrites = append(memberWrites, fmt.Sprintf("%s %.2fs", e.rec["member"], time.Duration(d).Seconds()))
		}
	}
	if os.Getenv("BENCH_VERBOSE") != "" {
		for _, e := range events {
			fmt.Fprintf(os.Stderr, "%8.2fs %s", e.at.Seconds(), e.msg)
			if checks, ok := e.rec["checks"]; ok {
				fmt.Fprintf(os.Stderr, " %v", checks)
			}
			fmt.Fprintln(os.Stderr)
		}
	}
	fetched := at("backup verified")
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	var o bytes.Buffer
	fmt.Fprintf(&o, "\nrestore at the floor: db %.0f MiB (revision %d), stored %.0f MiB (zstd, age), %d members; link %d Mbit/s RTT %s; disk %.0f MB/s (fsynced)\n",
		mib(dbBytes), st.Header.Revision, mib(stored), members, mbit, rtt, diskBps/1e6)
	fmt.Fprintf(&o, "floor %.2fs = max(stored over the link %.2fs, %d databases over the disk %.2fs); one GET of the object through the link (curl) %.2fs\n",
		floor.Seconds(), wire.Seconds(), members, disk.Seconds(), curlGet.Seconds())
	fmt.Fprintf(&o, "%-46s %8s %8s\n", "step (from the tool's log)", "ends s", "takes s")
	fmt.Fprintf(&o, "%-46s %8.2f %8.2f\n", "fetch: download, decrypt, decompress, hash", fetched.Seconds(), fetched.Seconds())
	fmt.Fprintf(&o, "%-46s %8.2f %8.2f   (%s)\n", "prepare and write the data dirs", wroteAt.Seconds(), (wroteAt - fetched).Seconds(), strings.Join(memberWrites, ", "))
	fmt.Fprintf(&o, "%-46s %8.2f %8.2f\n", "members start, serve, verified", total.Seconds(), (total - wroteAt).Seconds())
	fmt.Fprintf(&o, "tool/floor %.2f (target <= 1.30); peak RSS %.0f MiB (anonymous %.0f; target <= 256); peak disk %.0f MiB = %.2fx the database per member (target <= 1.10)\n",
		total.Seconds()/floor.Seconds(), mib(rss), mib(anon), mib(peak), float64(peak)/float64(members*dbBytes))
	fmt.Print(o.String())
	b.ReportMetric(total.Seconds()/floor.Seconds(), "tool/floor")
	b.ReportMetric(mib(rss), "peak-RSS-MiB")
	b.ReportMetric(float64(peak)/float64(members*dbBytes), "disk/db-per-member")
}

// runTool runs the tool and returns its stdout; a failure fails b.
func runTool(b *testing.B, tool string, env []string, args ...string) string {
	b.Helper()
	cmd := exec.Command(tool, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		b.Fatalf("etcd-recovery %s: %v\n%s", args[0], err, benchTail(errb.String(), 20))
	}
	return out.String()
}

// measureDiskWrite writes n bytes to a file in dir and fsyncs it, as
// `dd bs=1M count=… conv=fsync` does, and returns bytes per second.
func measureDiskWrite(b *testing.B, dir string, n int64) float64 {
	b.Helper()
	f, err := os.CreateTemp(dir, "disk-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1<<20)
	crand.Read(buf)
	t0 := time.Now()
	for w := int64(0); w < n; w += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return float64(n) / time.Since(t0).Seconds()
}

// allocatedBytes is the disk allocated to the files under dir (du): the
// scratch and the data dirs, and nothing another process writes beside
// them.
func allocatedBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file removed while walked
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// fillKube writes about total bytes as a Kubernetes cluster's etcd holds
// them: four fifths pods of 1–3 KiB (JSON, compressible as real ones),
// one fifth configmaps and secrets of 64 KiB to 1.5 MiB (base64 of random
// bytes: opaque blobs), in transactions under etcd's request limit, four
// at a time.
func fillKube(b *testing.B, cli *clientv3.Client, total int64) {
	b.Helper()
	const workers = 4
	var (
		written atomic.Int64
		wg      sync.WaitGroup
		ferr    atomic.Value
	)
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 0xf100))
			blob := make([]byte, 1536<<10)
			for i := 0; written.Load() < total && ferr.Load() == nil; i++ {
				var ops []clientv3.Op
				var n int64
				if i%5 == 0 {
					// One large object: a configmap or a secret, 64 KiB to 1.5 MiB
					// less 4 KiB: the key and the request's framing must fit
					// under etcd's 1.5 MiB request limit too.
					size := 64<<10 + r.IntN(1536<<10-4<<10-64<<10)
					raw := blob[:size*3/4]
					crand.Read(raw)
					kind := []string{"configmaps", "secrets"}[r.IntN(2)]
					v := base64.StdEncoding.EncodeToString(raw)
					ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/%s/ns-%03d/blob-%d-%d", kind, r.IntN(300), w, i), v))
					n = int64(len(v))
				} else {
					for j := 0; j < 100; j++ {
						ns := fmt.Sprintf("ns-%03d", r.IntN(300))
						name := fmt.Sprintf("app-%x", r.Uint64())
						pad := make([]byte, 512+r.IntN(1536))
						for k := range pad {
							pad[k] = "abcdefghijklmnopqrstuvwxyz0123456789"[r.IntN(36)]
						}
						v := fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"namespace":%q,"uid":"%x","labels":{"app":%q},"annotations":{"note":%q}},"spec":{"nodeName":"10.%d.%d.%d","containers":[{"name":"main","image":"registry/armada/%s:%x"}]},"status":{"phase":"Running","podIP":"172.30.%d.%d"}}`,
							name, ns, r.Uint64(), name, pad, r.IntN(256), r.IntN(256), r.IntN(256), name, r.Uint32(), r.IntN(256), r.IntN(256))
						ops = append(ops, clientv3.OpPut("/registry/pods/"+ns+"/"+name, v))
						n += int64(len(v))
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, err := cli.Txn(ctx).Then(ops...).Commit()
				cancel()
				if err != nil {
					ferr.Store(err)
					return
				}
				written.Add(n)
			}
		})
	}
	wg.Wait()
	if err, _ := ferr.Load().(error); err != nil {
		b.Fatalf("fill: %v", err)
	}
}

// logMemberMilestones prints when the member at logFile (etcd's JSON log)
// reached the milestones of a start, relative to t0.
func logMemberMilestones(b *testing.B, name, logFile string, t0 time.Time) {
	f, err := os.Open(logFile)
	if err != nil {
		b.Logf("%s: %v", name, err)
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec struct {
			TS  time.Time `json:"ts"`
			Msg string    `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		for _, m := range []string{"opened backend db", "restored mvcc store", "kvstore restored", "starting etcd server", "became leader", "became follower at term 2", "published local member", "ready to serve client requests", "serving client traffic"} {
			if strings.HasPrefix(rec.Msg, m) {
				fmt.Fprintf(os.Stderr, "%8.2fs %s: %s\n", rec.TS.Sub(t0).Seconds(), name, rec.Msg)
			}
		}
	}
}
