package deploy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/podrun"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func TestMain(m *testing.M) { testfix.Main(m) }

// podsNS is the kubx-etcd namespace of the pod tests.
const podsNS = "kubx-etcd-12"

// The clusters: one with a database of at least bigDBBytes, two small.
const (
	bigCluster   = "etcd-big"
	smallCluster = "etcd-small"
	tinyCluster  = "etcd-tiny"
	bigDBBytes   = 1 << 30
	bigValueSize = 1 << 20 // bytes per value: 1 MiB of hex text (~2:1 for zstd, as real objects)
)

// headroom is the share of a memory limit a pod may use at its peak
// (rss + tmpfs) in these tests: the limits in deploy/ are the measured
// need plus at least this margin.
const headroom = 0.75

// TestShippedPods runs the three pod specs of deploy/ in the image `make
// image` built, as a kubelet would (internal/testing/podrun: args, env, the
// ConfigMap, the secret, the service-account token, the security context,
// the emptyDirs and the limits), against one real kube-apiserver with the
// CRDs and RBAC of deploy/, three real etcd clusters (one with a database
// of at least 1 GiB) and MinIO. It prints each pod's peak memory against
// its limit.
func TestShippedPods(t *testing.T) {
	start := time.Now()
	image := testenv.Image(t)
	w := kubetest.NewWorld(t, podsNS)
	k, admin, dyn, a := w.K, w.Admin, w.Dyn, w.Applier
	// The whole of it, bounded: the 1.2 GiB database's backups, drills and
	// restores in pods of 1 CPU. It took 8 to 10 minutes when measured
	// before; on 2026-11-29 two runs took 15 and 18 minutes, the big
	// drill's etcd start and member check alone 3 to 4 minutes of it.
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	// COS: MinIO, the carrier's cos-credentials secret (etcd-operator's
	// awsSecret format), and the ConfigMap of deploy/20-config.yaml with
	// this test's endpoint, bucket and prefix put into it.
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	secret := kubetest.CreateCOSSecret(t, admin, podsNS, m)
	cm := kubetest.ShippedConfigMapWith(t, "this test", kubetest.COSConfig(m, bucket, prefix))
	if _, err := admin.CoreV1().ConfigMaps(podsNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}

	// The clusters, each on its own loopback IP.
	big := kubetest.AddEtcdCluster(t, admin, dyn, podsNS, bigCluster, testenv.EtcdOptions{IP: "127.0.12.10", Members: 1, QuotaBackendBytes: 4 << 30})
	small := kubetest.AddEtcdCluster(t, admin, dyn, podsNS, smallCluster, testenv.EtcdOptions{IP: "127.0.12.11", Members: 3})
	tiny := kubetest.AddEtcdCluster(t, admin, dyn, podsNS, tinyCluster, testenv.EtcdOptions{IP: "127.0.12.12", Members: 1})
	for _, c := range []string{bigCluster, smallCluster, tinyCluster} {
		kubetest.PerClusterAccess(t, a, podsNS, c)
	}
	testenv.PutKeys(t, small.Etcd.Client(t), "/registry/pods/", 500, 256)
	testenv.PutKeys(t, tiny.Etcd.Client(t), "/registry/configmaps/", 50, 128)
	bigSums, bigSize := loadBig(t, big.Etcd, bigDBBytes)

	// Four scheduled backups of the small cluster before the CronJob's:
	// its --prune must delete the second oldest (3 recent are kept, and
	// the oldest may be today's anchor).
	var seeded []string
	for range 4 {
		r, err := backup.Run(ctx, backup.Options{ClusterID: smallCluster, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(small.Etcd), Store: st, Layout: layout})
		if err != nil {
			t.Fatal(err)
		}
		seeded = append(seeded, r.Manifest.Name)
	}

	workDir := t.TempDir()
	runner := &podrun.Runner{Podman: testenv.PodmanGlobalArgs, RunArgs: testenv.PodmanRunArgs, Image: image, WorkDir: workDir}
	cluster := kubetest.PodCluster(t, k, admin, podsNS, cm, secret)
	report := map[string]string{}
	t.Cleanup(func() {
		names := mapsKeys(report)
		slices.Sort(names)
		for _, name := range names {
			t.Logf("MEMORY %s: %s", name, report[name])
		}
		t.Logf("TestShippedPods: %v in all", time.Since(start).Round(time.Second))
	})

	t.Run("CronJob", func(t *testing.T) {
		w := kubetest.Workload(t, "30-cronjob.yaml")
		spec, err := podrun.Translate(w, "", "etcd-recovery-backup-29000000-abcde", cluster)
		if err != nil {
			t.Fatal(err)
		}
		// The shipped run drills a share of the clusters (--drill-share N,
		// by the run's slot); this run drills them all (share 1), the big
		// one included, within the same pod and limits.
		share := slices.Index(spec.Args, "--drill-share")
		if !slices.Contains(spec.Args, "--drill") || share < 0 || share+1 >= len(spec.Args) {
			t.Fatalf("the CronJob does not run backup --drill --drill-share N: %q", spec.Args)
		}
		shipped := spec.Args[share+1]
		spec.Args[share+1] = "1"
		// The drill's scratch: TMPDIR on a disk emptyDir with room for the
		// largest database etcd's quota allows (8 GiB) once, plus a tenth,
		// and etcd's WAL (docs/backup.md#scratch-space: the plaintext copy
		// is renamed into the drill's data dir, never copied).
		tmpdir, _ := spec.EnvValue("TMPDIR")
		scratch := spec.Mount(tmpdir)
		if need := int64(8<<30)*11/10 + (128 << 20); tmpdir == "" || scratch == nil || scratch.Kind != podrun.MountEmptyDirDisk || scratch.SizeLimit < need {
			t.Fatalf("the CronJob's drills need TMPDIR on a disk emptyDir of at least 1.1 x 8 GiB + 128 MiB: TMPDIR %q, mount %+v", tmpdir, scratch)
		}
		res, u, err := runner.Run(ctx, spec)
		logPod(t, "CronJob", spec, res, u)
		report["CronJob backup --all --drill (3 clusters drilled, share "+shipped+" shipped; "+gib(bigSize)+" database)"] = u.String()
		if err != nil {
			t.Fatal(err)
		}
		checkPod(t, "CronJob", spec, res, u)
		if u.EmptyDirPeak[tmpdir] < bigDBBytes {
			t.Errorf("the big cluster's drill did not run in the scratch volume (%s): peak %d bytes there", tmpdir, u.EmptyDirPeak[tmpdir])
		}
		// Each cluster's new backup is proven: drill.json next to it,
		// passed, and the restored keyspace equal to the source's.
		for _, c := range []string{bigCluster, smallCluster, tinyCluster} {
			man := newest(t, ctx, st, layout, c, catalog.KindScheduled, start)
			rec, err := catalog.LoadDrill(ctx, st, layout, c, man.Name)
			if err != nil || rec == nil {
				t.Errorf("%s: no drill record for %s: %v", c, man.Name, err)
				continue
			}
			cmp := rec.Comparison
			if !rec.Passed || cmp.Mode != catalog.CompareSource || cmp.Equal == nil || !*cmp.Equal {
				t.Errorf("%s: drill of %s: passed %v (%s), comparison %+v", c, man.Name, rec.Passed, rec.Failed, cmp)
			}
			took := rec.FinishedAt.Sub(rec.StartedAt)
			var steps []string
			for _, s := range rec.Steps {
				steps = append(steps, fmt.Sprintf("%s %v", s.Name, s.Duration.Round(time.Millisecond)))
			}
			t.Logf("DRILL %s: %s of %s database in %v (%.1f s/GiB), etcd %s, comparison %s: %s", c, man.Name, gib(rec.DBSize), took.Round(time.Millisecond),
				took.Seconds()/(float64(max(rec.DBSize, 1))/(1<<30)), rec.EtcdVersion, cmp.Mode, strings.Join(steps, ", "))
			if c == bigCluster {
				report["CronJob drill of the "+gib(bigSize)+" database"] = fmt.Sprintf("%v (%.1f s/GiB); scratch peak %s of %s",
					took.Round(time.Second), took.Seconds()/(float64(rec.DBSize)/(1<<30)), gib(u.EmptyDirPeak[tmpdir]), gib(scratch.SizeLimit))
			}
		}
		if rss := u.ProcPeakAnon["etcd-3.5"]; rss == 0 {
			t.Errorf("no etcd-3.5 seen in the CronJob pod: the drills ran no etcd there (%s)", u)
		}
		for _, c := range []string{bigCluster, smallCluster, tinyCluster} {
			man := newest(t, ctx, st, layout, c, catalog.KindScheduled, start)
			if c == bigCluster && man.Snapshot.RawSize < bigDBBytes {
				t.Errorf("%s: the backup's database is %d bytes, want >= %d", c, man.Snapshot.RawSize, bigDBBytes)
			}
			if c != bigCluster {
				testfix.CheckSnapshot(t, st, layout, man)
			}
			t.Logf("%s: %s %s, database %s, stored %s", c, man.Kind, man.Name, gib(man.Snapshot.RawSize), gib(man.Snapshot.StoredSize))
		}
		list, err := catalog.ListBackups(ctx, st, layout, smallCluster)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range list {
			names = append(names, l.Name)
		}
		if slices.Contains(names, seeded[1]) || !slices.Contains(names, seeded[3]) || len(names) > 4 {
			t.Errorf("--prune: %s still has %v; want %s deleted, %s kept", smallCluster, names, seeded[1], seeded[3])
		}
	})

	t.Run("UpdateJob", func(t *testing.T) {
		// As the chart renders it for the cluster (deploy/chart_test.go
		// TestChartPerCluster: the plain file with etcd-example replaced).
		b, err := os.ReadFile(kubetest.DeployPath(t, "per-cluster", "update-job.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		w, err := podrun.ParseWorkload(bytes.ReplaceAll(b, []byte("etcd-example"), []byte(bigCluster)))
		if err != nil {
			t.Fatal(err)
		}
		spec, err := podrun.Translate(w, "", "etcd-recovery-update-"+bigCluster+"-x1y2z", cluster)
		if err != nil {
			t.Fatal(err)
		}
		res, u, err := runner.Run(ctx, spec)
		logPod(t, "UpdateJob", spec, res, u)
		report["UpdateJob backup --cluster ("+gib(bigSize)+" database)"] = u.String()
		if err != nil {
			t.Fatal(err)
		}
		checkPod(t, "UpdateJob", spec, res, u)
		man := newest(t, ctx, st, layout, bigCluster, catalog.KindUpdate, start)
		if man.Snapshot.RawSize < bigDBBytes {
			t.Errorf("update backup of %d bytes", man.Snapshot.RawSize)
		}
	})

	t.Run("Toolkit", func(t *testing.T) {
		w := kubetest.Workload(t, "50-toolkit.yaml")
		spec, err := podrun.Translate(w, "", "etcd-recovery-toolkit-7d9f8-qwert", cluster)
		if err != nil {
			t.Fatal(err)
		}
		// Scratch on node disk, sized for etcd's largest quota (8 GiB);
		// TMPDIR there, not on the 16 MiB memory /tmp.
		tmpdir, _ := spec.EnvValue("TMPDIR")
		scratch := spec.Mount(tmpdir)
		if tmpdir == "" || scratch == nil || scratch.Kind != podrun.MountEmptyDirDisk || scratch.SizeLimit < 9<<30 {
			t.Fatalf("the toolkit needs TMPDIR on a disk emptyDir of at least 9 GiB (etcd's 8 GiB quota and headroom): TMPDIR %q, mount %+v", tmpdir, scratch)
		}
		restoreVol := spec.Mount("/restore")
		if restoreVol == nil || restoreVol.Kind != podrun.MountEmptyDirDisk {
			t.Fatalf("no disk emptyDir at /restore for a manual restore's data dirs: %+v", restoreVol)
		}
		pod, err := runner.Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		defer pod.Close()
		exec := func(t *testing.T, want int, argv ...string) podrun.Result {
			t.Helper()
			res, err := pod.Exec(ctx, argv...)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("kubectl exec %s -- %s: exit %d in %v\n%s%s", pod.Name, strings.Join(argv, " "), res.ExitCode, res.Duration.Round(time.Millisecond),
				res.Stdout, lastLines(string(res.Stderr), 15))
			if res.ExitCode != want {
				t.Fatalf("%s: exit %d, want %d\nstderr:\n%s", strings.Join(argv, " "), res.ExitCode, want, lastLines(string(res.Stderr), 30))
			}
			return res
		}
		t.Run("InspectAll", func(t *testing.T) {
			res := exec(t, 0, "etcd-recovery", "inspect", "--all")
			for _, c := range []string{bigCluster, smallCluster, tinyCluster} {
				if !strings.Contains(string(res.Stdout), c) {
					t.Errorf("inspect --all does not show %s", c)
				}
			}
		})
		t.Run("Exporter", func(t *testing.T) {
			// The exporter's own pod (52-exporter.yaml) runs `serve`
			// beside the toolkit. Its probes are asked as the kubelet
			// asks them, over HTTP from outside the container (the pod
			// shares the host's network here), and /metrics lists every
			// cluster; SIGTERM stops it at once.
			ew := kubetest.Workload(t, "52-exporter.yaml")
			espec, err := podrun.Translate(ew, "", "etcd-recovery-exporter-5c8b7-asdfg", cluster)
			if err != nil {
				t.Fatal(err)
			}
			if len(espec.Probes) == 0 {
				t.Fatal("the exporter has no probes")
			}
			epod, err := runner.Start(ctx, espec)
			if err != nil {
				t.Fatal(err)
			}
			defer epod.Close()
			hc := &http.Client{Timeout: 5 * time.Second}
			get := func(url string) (int, []byte, error) {
				resp, err := hc.Get(url)
				if err != nil {
					return 0, nil, err
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				return resp.StatusCode, body, err
			}
			for _, p := range espec.Probes {
				deadline := time.Now().Add(2 * time.Minute)
				for {
					code, body, err := get(p.URL())
					if err == nil && code == http.StatusOK {
						break
					}
					if time.Now().After(deadline) {
						logs, _ := epod.Logs(ctx)
						t.Fatalf("%s probe %s: not answering 200 after 2 min: %d %s %v\nthe pod's log:\n%s",
							p.Kind, p.URL(), code, body, err, lastLines(string(logs), 40))
					}
					time.Sleep(time.Second) // polling the probe, as the kubelet does
				}
			}
			code, body, err := get(fmt.Sprintf("http://127.0.0.1:%d/metrics", espec.Ports["metrics"]))
			if err != nil || code != http.StatusOK {
				t.Fatalf("/metrics: %d %v", code, err)
			}
			for _, c := range []string{bigCluster, smallCluster, tinyCluster} {
				if !strings.Contains(string(body), `etcd_recovery_cluster_info{cluster="`+c+`"} 1`) {
					t.Errorf("/metrics has no etcd_recovery_cluster_info for %s", c)
				}
			}
			ecode, etook, eu, err := epod.Stop(ctx)
			logPod(t, "Exporter", espec, podrun.Result{ExitCode: ecode, Duration: etook}, eu)
			if err != nil {
				t.Fatal(err)
			}
			if ecode != 0 || etook > 10*time.Second {
				t.Errorf("exporter stop: exit %d after %v; want 0 at once (serve's graceful stop)", ecode, etook)
			}
			checkPod(t, "Exporter", espec, podrun.Result{}, eu)
		})
		t.Run("List", func(t *testing.T) {
			res := exec(t, 0, "etcd-recovery", "list", "--cluster-id", bigCluster, "-o", "json")
			var rows []map[string]any
			if err := json.Unmarshal(res.Stdout, &rows); err != nil {
				t.Fatalf("list -o json: %v", err)
			}
			kinds := map[string]int{}
			for _, r := range rows {
				kinds[fmt.Sprint(r["kind"])]++
			}
			if kinds["scheduled"] != 1 || kinds["update"] != 1 {
				t.Errorf("list: %v, want one scheduled and one update backup", kinds)
			}
		})
		t.Run("SmallTmpFailsFast", func(t *testing.T) {
			// What the shipped toolkit did before it had a scratch volume:
			// temp files on the 16 MiB memory /tmp. It must fail at once,
			// saying so, not halfway with ENOSPC.
			res := exec(t, 1, "/bin/sh", "-c", "TMPDIR=/tmp exec etcd-recovery restore --via etcd-operator --cluster "+bigCluster+" --no-live --dry-run")
			if !strings.Contains(string(res.Stderr), "space") || res.Duration > 30*time.Second {
				t.Errorf("with TMPDIR on the 16 MiB /tmp: after %v:\n%s", res.Duration, lastLines(string(res.Stderr), 5))
			}
		})
		t.Run("RestoreViaEtcdOperator", func(t *testing.T) {
			op := kubetest.StartRestoreOperator(t, kubetest.RestoreOperatorOptions{Namespace: podsNS, Client: admin, Dynamic: dyn})
			op.Register(big)
			exec(t, 0, "etcd-recovery", "restore", "--via", "etcd-operator", "--cluster", bigCluster, "--no-live")
			rec := op.Wait(t, bigCluster, time.Minute)
			if rec.Err != nil {
				t.Fatal(rec.Err)
			}
			if len(rec.Members) != 1 || rec.NewUID == big.UID {
				t.Fatalf("restored: %+v", rec)
			}
			checkBig(t, rec.Members[0].Client(t), bigSums)
			if u := pod.Usage(); u.EmptyDirPeak[tmpdir] < bigDBBytes {
				t.Errorf("the staged snapshot did not go to the scratch volume (%s): peak %d bytes there", tmpdir, u.EmptyDirPeak[tmpdir])
			}
		})
		t.Run("ManualRestore", func(t *testing.T) {
			// The big cluster's newest backup, into the /restore volume (the
			// data dir an SRE then copies to the member's node), started
			// here as a real member and compared value by value.
			name := bigCluster + "-r0"
			client, peer := fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(t)), fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(t))
			token := bigCluster + "-manual"
			exec(t, 0, "etcd-recovery", "restore", "--cluster-id", bigCluster, "--no-live", "--initial-cluster", name+"="+peer,
				"--initial-cluster-token", token, "--data-dir-root", "/restore")
			sm := testenv.StartEtcdMember(t, testenv.MemberSpec{Version: testenv.V35, Name: name,
				DataDir: filepath.Join(pod.HostPath("/restore"), name+".etcd"), ClientURL: client, PeerURL: peer,
				InitialCluster: name + "=" + peer, InitialClusterToken: token, PKI: big.Etcd.PKI, QuotaBackendBytes: 4 << 30})
			sm.WaitReady(t)
			checkBig(t, sm.Client(t), bigSums)
			sm.Kill()
			if u := pod.Usage(); u.EmptyDirPeak["/restore"] < bigDBBytes {
				t.Errorf("the data dir did not go to the /restore volume: peak %d bytes there", u.EmptyDirPeak["/restore"])
			}
		})
		code, took, u, err := pod.Stop(ctx)
		logPod(t, "Toolkit", spec, podrun.Result{ExitCode: code, Duration: took}, u)
		report["Toolkit inspect/list/restore ("+gib(bigSize)+" database)"] = u.String()
		if err != nil {
			t.Fatal(err)
		}
		// Its command exits on SIGTERM at once (not killed after the grace period).
		if code != 0 || took > 10*time.Second {
			t.Errorf("toolkit stop: exit %d after %v; want 0 at once (trap on TERM)", code, took)
		}
		checkPod(t, "Toolkit", spec, podrun.Result{}, u)
	})
}

// loadBig fills a cluster with 1 MiB values until its database is at
// least size bytes, and returns each key's value sha256.
func loadBig(t *testing.T, c *testenv.EtcdCluster, size int64) (map[string][32]byte, int64) {
	t.Helper()
	cli := c.Client(t)
	ctx := context.Background()
	start := time.Now()
	sums := map[string][32]byte{}
	var mu sync.Mutex
	n := int(size/bigValueSize) + 16
	jobs := make(chan int)
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 12))
			raw := make([]byte, bigValueSize/2)
			val := make([]byte, bigValueSize)
			for i := range jobs {
				for j := 0; j < len(raw); j += 8 {
					v := rng.Uint64()
					for b := 0; b < 8 && j+b < len(raw); b++ {
						raw[j+b] = byte(v >> (8 * b))
					}
				}
				hex.Encode(val, raw)
				key := fmt.Sprintf("/registry/big/%06d", i)
				if _, err := cli.Put(ctx, key, string(val)); err != nil {
					errs <- fmt.Errorf("put %s: %w", key, err)
					return
				}
				mu.Lock()
				sums[key] = sha256.Sum256(val)
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("loading %s: %v", c.Members[0].Name, err)
	}
	st, err := cli.Status(ctx, c.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	if st.DbSize < size {
		t.Fatalf("database of %d bytes after %d values of %d bytes, want >= %d", st.DbSize, n, bigValueSize, size)
	}
	t.Logf("LOAD: %d values of %d KiB, database %s, in %v", n, bigValueSize>>10, gib(st.DbSize), time.Since(start).Round(time.Millisecond))
	return sums, st.DbSize
}

// checkBig compares the restored big cluster's values with what was written.
func checkBig(t *testing.T, cli *clientv3.Client, sums map[string][32]byte) {
	t.Helper()
	ctx := context.Background()
	n := 0
	// In pages: the whole keyspace is over 1 GiB.
	key, end := "/registry/big/", clientv3.GetPrefixRangeEnd("/registry/big/")
	for {
		resp, err := cli.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(64))
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if sha256.Sum256(kv.Value) != sums[string(kv.Key)] {
				t.Fatalf("restored %s differs from what was written", kv.Key)
			}
			n++
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	if n != len(sums) {
		t.Fatalf("restored cluster has %d of the %d values", n, len(sums))
	}
}

func allKV(t *testing.T, cli *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

// newest is the cluster's newest committed backup of kind, started after since.
func newest(t *testing.T, ctx context.Context, st store.Store, layout catalog.Layout, cluster string, kind catalog.Kind, since time.Time) *catalog.Manifest {
	t.Helper()
	return testfix.NewestSince(t, ctx, st, layout, cluster, kind, since)
}

func logPod(t *testing.T, what string, s *podrun.Spec, res podrun.Result, u podrun.Usage) {
	t.Helper()
	t.Logf("%s pod %s: exit %d in %v; limits %s; %s", what, s.PodName, res.ExitCode, res.Duration.Round(time.Millisecond), s.Limits(), u)
	if len(res.Stdout) > 0 {
		t.Logf("%s stdout:\n%s", what, res.Stdout)
	}
	if len(res.Stderr) > 0 {
		t.Logf("%s stderr (last lines):\n%s", what, lastLines(string(res.Stderr), 12))
	}
}

// checkPod: the run succeeded, within its limits, with headroom.
func checkPod(t *testing.T, what string, s *podrun.Spec, res podrun.Result, u podrun.Usage) {
	t.Helper()
	if err := u.Check(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%s: exit %d\n%s", what, res.ExitCode, lastLines(string(res.Stderr), 30))
	}
	if u.MemoryLimit != s.MemoryLimit {
		t.Fatalf("%s: the container's memory cgroup limit is %d, the spec says %d: the limit was not applied", what, u.MemoryLimit, s.MemoryLimit)
	}
	if u.Samples == 0 {
		t.Fatalf("%s: the container's memory was never sampled", what)
	}
	if float64(u.PeakRSSShmem) > headroom*float64(s.MemoryLimit) {
		t.Errorf("%s: peak rss+tmpfs %s is over %.0f%% of the limit %s: raise the limit in deploy/",
			what, gib(u.PeakRSSShmem), headroom*100, gib(s.MemoryLimit))
	}
}

func gib(b int64) string {
	if b >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

func mapsKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
