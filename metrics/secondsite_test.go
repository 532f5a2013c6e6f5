package metrics_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/dashtest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/metrics"
	"github.com/armada/etcd-recovery/replicate"
)

// The second site's alerts, by their rule names.
const (
	alertSecondSiteLagging = "EtcdRecoverySecondSiteLagging"
	alertSecondSiteFailed  = "EtcdRecoverySecondSiteCopyFailed"
)

// secondSiteWorld is a second site in a real MinIO bucket: two clusters'
// backups (as the copier leaves them there) and the copier's status
// record, written as the copier writes it.
type secondSiteWorld struct {
	m      *testenv.MinIO
	bucket string
	layout catalog.Layout
	st     store.Store
	now    time.Time
}

func newSecondSiteWorld(t *testing.T) *secondSiteWorld {
	t.Helper()
	m := testenv.SharedMinIO(t)
	w := &secondSiteWorld{m: m, bucket: m.NewBucket(t), layout: catalog.Layout{Prefix: testenv.Prefix(t)}, now: time.Now().UTC().Truncate(time.Millisecond)}
	w.st = testfix.Store(t, m, w.bucket)
	for _, id := range []string{"etcd-a", "etcd-b"} {
		testfix.PutEscrowBackup(t, w.st, w.layout, id, w.now.Add(-time.Hour), nil)
	}
	return w
}

// status is a copier's record written at updated: its last full pass 10 s
// before, etcd-a's journal 5 s and etcd-b's 20 s before, failures copies
// that failed verification.
func (w *secondSiteWorld) status(updated time.Time, failures int) catalog.ReplicaStatus {
	s := catalog.ReplicaStatus{Copier: "test", Source: "primary/" + w.layout.Prefix, Updated: updated, SyncedAt: updated.Add(-10 * time.Second),
		Pending: 3, PendingBytes: 300, Copied: 42, CopiedBytes: 4200,
		Clusters: map[string]catalog.ReplicaCluster{
			"etcd-a": {JournalSyncedAt: updated.Add(-5 * time.Second), JournalLastRevision: 17, NewestBackup: "x"},
			"etcd-b": {JournalSyncedAt: updated.Add(-20 * time.Second), JournalLastRevision: 9},
		}}
	for i := range failures {
		s.Failures = append(s.Failures, catalog.ReplicaFailure{Key: fmt.Sprintf("%s/etcd-a/obj-%d", w.layout.Prefix, i), Reason: "sha256 differs", At: updated})
	}
	return s
}

func (w *secondSiteWorld) write(t testing.TB, s catalog.ReplicaStatus) {
	t.Helper()
	if err := catalog.WriteReplicaStatus(context.Background(), w.st, w.layout, s); err != nil {
		t.Fatal(err)
	}
}

// options are a store-only exporter's (no Kubernetes client) of the world.
func (w *secondSiteWorld) options(secondSite bool) metrics.Options {
	return metrics.Options{Store: w.st, Layout: w.layout, SecondSite: secondSite, Interval: time.Hour, Deadline: 30 * time.Second}
}

// secondSiteAlerts runs deploy/40-alerts.yaml with promtool on a scrape
// (scrapeInputAt: its timestamps moved so that time() is now at
// scrapeEval) and checks that the second site's alerts firing at
// scrapeEval are exactly want: alert name → the cluster label of each
// alert ("" for the namespace's).
func secondSiteAlerts(t *testing.T, body []byte, now time.Time, want map[string][]string) {
	t.Helper()
	in := scrapeInputAt(t, body, nil, now, scrapeEval)
	exp := []dashtest.Sample{}
	for alert, clusters := range want {
		for _, c := range clusters {
			l := fmt.Sprintf(`{alertname=%q}`, alert)
			if c != "" {
				l = fmt.Sprintf(`{alertname=%q,cluster=%q}`, alert, c)
			}
			exp = append(exp, dashtest.Sample{Labels: l, Value: 1})
		}
	}
	sort.Slice(exp, func(i, j int) bool { return exp[i].Labels < exp[j].Labels })
	testYAML := dashtest.TestFile(t, []string{"alerts.rules.yaml"}, "1m", "the store-only exporter's scrape of a second site", in,
		[]dashtest.ExprTest{{Expr: `count by (alertname, cluster) (ALERTS{alertstate="firing",alertname=~"EtcdRecoverySecondSite.*"})`, EvalTime: scrapeEval.String(), ExpSamples: exp}})
	if out, err := runPromtoolTest(t, alertRules(t), testYAML); err != nil {
		t.Fatalf("promtool test rules on the second site's scrape: %v\n%s", err, out)
	}
}

// TestSecondSiteExporter: a store-only exporter (no Kubernetes client) of
// a second site in a real MinIO bucket, its real scrape, and the second
// site's alerts on it through promtool (the copier running and stopping:
// TestSecondSiteCopierStops). A record naming failed copies fires
// EtcdRecoverySecondSiteCopyFailed. A missing record (the exporter told
// the bucket is a second site) and a damaged one export 0 and page; a
// primary bucket (no record, not told) exports no second-site series; a
// store failure keeps the last record read, counts the step and never
// clears the lag.
func TestSecondSiteExporter(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 2*time.Minute)
	w := newSecondSiteWorld(t)

	t.Run("Missing", func(t *testing.T) {
		primary := refreshed(t, ctx, w.options(false))
		mfs, _ := scrape(t, primary)
		for name := range mfs {
			if strings.HasPrefix(name, "etcd_recovery_second_site_") {
				t.Errorf("a primary bucket (no record, not told it is a second site) exports %s", name)
			}
		}
		if _, ok := value(mfs, metrics.NameClusterInfo, "cluster", "etcd-a"); !ok {
			t.Fatalf("store-only: no %s for etcd-a, a cluster id of the listing", metrics.NameClusterInfo)
		}
		e := refreshed(t, ctx, w.options(true))
		mfs, body := scrape(t, e)
		for _, n := range []string{metrics.NameSecondSiteStatusValid, metrics.NameSecondSiteStatusUpdated, metrics.NameSecondSiteSynced} {
			if v, ok := value(mfs, n); !ok || v != 0 {
				t.Errorf("missing record: %s = %v (present %v), want 0", n, v, ok)
			}
		}
		if v, ok := value(mfs, metrics.NameSecondSiteStatusReadTotal, "result", "missing"); !ok || v != 1 {
			t.Errorf("missing record: %s{result=missing} = %v (present %v), want 1", metrics.NameSecondSiteStatusReadTotal, v, ok)
		}
		secondSiteAlerts(t, body, w.now, map[string][]string{alertSecondSiteLagging: {""}})
	})

	t.Run("Failures", func(t *testing.T) {
		w.write(t, w.status(w.now, 2))
		e := refreshed(t, ctx, w.options(true))
		mfs, body := scrape(t, e)
		for _, c := range []struct {
			name   string
			labels []string
			v      float64
		}{
			{metrics.NameSecondSiteStatusValid, nil, 1},
			{metrics.NameSecondSiteStatusUpdated, nil, msSeconds(w.now)},
			{metrics.NameSecondSiteSynced, nil, msSeconds(w.now.Add(-10 * time.Second))},
			{metrics.NameSecondSiteJournalSynced, []string{"cluster", "etcd-a"}, msSeconds(w.now.Add(-5 * time.Second))},
			{metrics.NameSecondSitePendingObjects, nil, 3},
			{metrics.NameSecondSitePendingBytes, nil, 300},
			{metrics.NameSecondSiteVerifyFailures, nil, 2},
			{metrics.NameSecondSiteCopiedObjects, nil, 42},
			{metrics.NameSecondSiteCopiedBytes, nil, 4200},
		} {
			if v, ok := value(mfs, c.name, c.labels...); !ok || !sameSeconds(v, c.v) {
				t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, v, ok, c.v)
			}
		}
		secondSiteAlerts(t, body, w.now, map[string][]string{alertSecondSiteFailed: {""}})
		// The dashboard's queries on the DR exporter's scrape: the second
		// site's row returns data.
		dashboardOnScrape(t, body, w.now, map[string]string{
			"Clusters without any backup/A": "etcd-a and etcd-b have backups on the second site",
		}, 20)
	})

	t.Run("Damaged", func(t *testing.T) {
		if _, err := w.st.Put(ctx, w.layout.ReplicaStatusKey(), strings.NewReader("{not json")); err != nil {
			t.Fatal(err)
		}
		// Damaged pages whether or not the exporter was told.
		for _, told := range []bool{true, false} {
			e := refreshed(t, ctx, w.options(told))
			mfs, body := scrape(t, e)
			if v, ok := value(mfs, metrics.NameSecondSiteStatusValid); !ok || v != 0 {
				t.Errorf("damaged record (--second-site %v): %s = %v (present %v), want 0", told, metrics.NameSecondSiteStatusValid, v, ok)
			}
			if r := e.Replica(); r == nil || r.Valid || !strings.Contains(r.Problem, "damaged") {
				t.Errorf("damaged record: state %+v", r)
			}
			secondSiteAlerts(t, body, w.now, map[string][]string{alertSecondSiteLagging: {""}})
		}
	})

	t.Run("StoreFailureKeepsTheLastRecord", func(t *testing.T) {
		w.write(t, w.status(w.now, 0))
		fs := &failingStatus{Store: w.st, key: w.layout.ReplicaStatusKey()}
		o := w.options(true)
		o.Store = fs
		e := refreshed(t, ctx, o)
		fs.fail.Store(true)
		err := e.Refresh(ctx)
		if err == nil || !strings.Contains(err.Error(), metrics.StepReadReplica) {
			t.Fatalf("refresh with the status record unreadable: %v, want step %s failed", err, metrics.StepReadReplica)
		}
		mfs, body := scrape(t, e)
		if v, ok := value(mfs, metrics.NameSecondSiteStatusUpdated); !ok || !sameSeconds(v, msSeconds(w.now)) {
			t.Errorf("after a failed read: %s = %v (present %v), want the last record's %v", metrics.NameSecondSiteStatusUpdated, v, ok, w.now)
		}
		if v, ok := value(mfs, metrics.NameRefreshErrors, "step", metrics.StepReadReplica); !ok || v != 1 {
			t.Errorf("%s{step=%s} = %v, want 1", metrics.NameRefreshErrors, metrics.StepReadReplica, v)
		}
		if v, ok := value(mfs, metrics.NameSecondSiteStatusReadTotal, "result", "error"); !ok || v != 1 {
			t.Errorf("%s{result=error} = %v, want 1", metrics.NameSecondSiteStatusReadTotal, v)
		}
		// The last record ages: 10 min later it pages.
		secondSiteAlerts(t, body, w.now.Add(10*time.Minute), map[string][]string{alertSecondSiteLagging: {""}})
	})
}

// failingStatus fails every read of key while fail is set (a store
// failure, not a missing object).
type failingStatus struct {
	store.Store
	key  string
	fail atomic.Bool
}

func (f *failingStatus) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if key == f.key && f.fail.Load() {
		return nil, fmt.Errorf("get %s: %w", key, store.ErrStalled)
	}
	return f.Store.Get(ctx, key)
}

// waitFor polls cond (every 20 ms) until it holds, failing the test with
// what after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond) // polling the exporter's state
	}
}

// TestServeStoreOnly runs `etcd-recovery serve --store-only --second-site`
// as the DR region's exporter runs it, with a kubeconfig and an in-cluster
// service address that both lead to a listener counting connections: it
// serves the cluster ids of the bucket's listing and the copier's status
// and never connects there; its real scrape, through promtool, pages nothing
// while the copier's record is fresh and the lag once it is 10 min old.
func TestServeStoreOnly(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 2*time.Minute)
	w := newSecondSiteWorld(t)
	w.write(t, w.status(time.Now().UTC(), 0))
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	// A Kubernetes API that counts connections: the kubeconfig's server
	// and the in-cluster service's address.
	api, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	var apiConns atomic.Int64
	go func() {
		for {
			c, err := api.Accept()
			if err != nil {
				return
			}
			apiConns.Add(1)
			c.Close()
		}
	}()
	_, apiPort, _ := net.SplitHostPort(api.Addr().String())
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	kc := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://" + api.Addr().String() + "\"}}]\n" +
		"users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u, namespace: kubx-etcd-23}}]\ncurrent-context: c\n"
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, testfix.Tool(t), "--log-format", "json", "serve", "--store-only", "--second-site", "--listen", addr,
		"--cos-endpoint", w.m.Endpoint, "--cos-region", w.m.Region, "--bucket", w.bucket, "--prefix", w.layout.Prefix,
		"--cos-credentials-dir", credsDir(t, w.m), "--refresh-timeout", "30s")
	cmd.Env = append(toolEnv(), "KUBECONFIG="+kubeconfig, "KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT="+apiPort)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var resp *http.Response
	waitFor(t, 30*time.Second, "/healthz 200 from serve --store-only", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	resp, err = http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	mfs, err := parseText(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"etcd-a", "etcd-b"} {
		if v, ok := value(mfs, metrics.NameClusterInfo, "cluster", id); !ok || v != 1 {
			t.Errorf("serve --store-only: no %s for %s (a cluster id of the listing)\n%s", metrics.NameClusterInfo, id, stderr.String())
		}
		if _, ok := value(mfs, metrics.NameBackupLastSuccess, "cluster", id, "kind", "scheduled"); !ok {
			t.Errorf("serve --store-only: no backup freshness for %s", id)
		}
		if _, ok := value(mfs, metrics.NameSecondSiteJournalSynced, "cluster", id); !ok {
			t.Errorf("serve --store-only: no %s for %s", metrics.NameSecondSiteJournalSynced, id)
		}
	}
	if v, ok := value(mfs, metrics.NameSecondSiteStatusValid); !ok || v != 1 {
		t.Errorf("serve --store-only: %s = %v (present %v), want 1", metrics.NameSecondSiteStatusValid, v, ok)
	}
	if mf := mfs[metrics.NameInspectVerdict]; mf != nil && len(mf.Metric) > 0 {
		t.Errorf("serve --store-only exports inspect verdicts: %v", metricLabels(mf))
	}
	secondSiteAlerts(t, body, at, map[string][]string{})
	secondSiteAlerts(t, body, at.Add(10*time.Minute), map[string][]string{alertSecondSiteLagging: {""}})
	// Usage errors (exit 4): a kubeconfig it would not read, no store.
	for _, args := range [][]string{
		{"serve", "--store-only", "--kubeconfig", kubeconfig, "--bucket", w.bucket, "--listen", "127.0.0.1:0"},
		{"serve", "--store-only", "--listen", "127.0.0.1:0"},
		{"serve", "--second-site", "--listen", "127.0.0.1:0", "--kubeconfig", kubeconfig},
	} {
		if _, errOut, code := testfix.RunTool(t, ctx, testfix.Tool(t), nil, args...); code != 4 {
			t.Errorf("etcd-recovery %v: exit %d, want 4 (usage)\n%s", args, code, errOut)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve --store-only after SIGTERM: %v\n%s", err, stderr.String())
	}
	if n := apiConns.Load(); n != 0 {
		t.Errorf("serve --store-only connected to the Kubernetes API %d times, want never", n)
	}
}

func metricLabels(mf *dto.MetricFamily) []string {
	var out []string
	for _, m := range mf.Metric {
		var ls []string
		for _, l := range m.Label {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		out = append(out, strings.Join(ls, ","))
	}
	return out
}

// putVerifiableBackup writes a committed backup of cluster at t whose
// manifest names its snapshot object's real size and sha256 (as backup
// writes it; the copier verifies each copy against it).
func putVerifiableBackup(t testing.TB, st store.Store, l catalog.Layout, cluster string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	data := []byte("snapshot of " + cluster)
	sum := sha256.Sum256(data)
	name := catalog.BackupName(at, catalog.KindScheduled)
	m := &catalog.Manifest{
		Format: catalog.ManifestFormat, ClusterID: cluster, Name: name, Kind: catalog.KindScheduled,
		StartedAt: at, FinishedAt: at.Add(20 * time.Second), ServerVersion: "3.5.35",
		Source: catalog.Member{Name: "m0", ID: "8e9e05c52164694d", Endpoint: "https://10.0.0.1:2379"},
		Snapshot: catalog.SnapshotInfo{Object: catalog.SnapshotObjectZstd, Compression: objectio.CompressZstd, RawSize: 4096,
			RawSHA256: strings.Repeat("ab", 32), StoredSize: int64(len(data)), StoredSHA256: hex.EncodeToString(sum[:])},
		RevisionBefore: 100, RevisionAfter: 100, ToolVersion: "test",
	}
	b, err := catalog.MarshalManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		key  string
		body []byte
	}{{l.Key(cluster, name, catalog.StartedObject), []byte("started")}, {l.Key(cluster, name, catalog.SnapshotObjectZstd), data}, {l.Key(cluster, name, catalog.ManifestObject), b}} {
		if _, err := st.Put(ctx, o.key, bytes.NewReader(o.body)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSecondSiteCopierStops: two MinIO servers play the two regions. The
// real copier (replicate.Run; journal polls every 100 ms, a full pass
// every 500 ms, its status every 200 ms) copies two clusters' backups and
// a journal segment from the primary to the second site, and a store-only
// exporter of the second site alone (no Kubernetes client; the record
// read every 50 ms) exports its progress. While it runs, the exported
// status time advances, each cluster's journal is synced, nothing failed
// verification, and promtool on the real scrape fires neither second-site
// alert. Once the copier stops, the exported time stops where its last
// record left it, and promtool on that scrape 10 min later fires
// EtcdRecoverySecondSiteLagging for the namespace, once (its clusters'
// journals are as old and do not page each).
func TestSecondSiteCopierStops(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 2*time.Minute)
	pm, sm := testenv.SharedMinIO(t), testenv.StartMinIO(t)
	primary, pl := testfix.Store(t, pm, pm.NewBucket(t)), catalog.Layout{Prefix: testenv.Prefix(t)}
	second, sl := testfix.Store(t, sm, sm.NewBucket(t)), catalog.Layout{Prefix: "dr/" + testenv.Prefix(t)}
	now := time.Now().UTC()
	for _, id := range []string{"etcd-a", "etcd-b"} {
		putVerifiableBackup(t, primary, pl, id, now.Add(-time.Hour))
	}
	h := journal.Header{Format: journal.FormatVersion, ClusterID: "etcd-a", BaseBackup: catalog.BackupName(now.Add(-time.Hour), catalog.KindScheduled), BaseRev: 100,
		FirstRev: 101, LastRev: 101, Received: map[int64]int64{101: now.Add(-time.Minute).UnixMilli()}}
	evs := []journal.Event{{Rev: 101, Type: journal.Put, Key: []byte("/registry/j1"), Value: []byte("v"), CreateRev: 101, Version: 1}}
	if _, err := journal.WriteSegment(ctx, primary, pl, objectio.Encoding{Compression: objectio.CompressZstd}, h, evs); err != nil {
		t.Fatal(err)
	}

	copierCtx, stopCopier := context.WithCancel(ctx)
	copied := make(chan error, 1)
	go func() {
		copied <- replicate.Run(copierCtx, replicate.Options{Primary: primary, PrimaryLayout: pl, Second: second, SecondLayout: sl,
			JournalInterval: 100 * time.Millisecond, ScanInterval: 500 * time.Millisecond, StatusEvery: 200 * time.Millisecond,
			Copier: t.Name(), Log: testfix.Logger(t)})
	}()
	stopped := false
	defer func() {
		if !stopped {
			stopCopier()
			<-copied
		}
	}()
	e := newExporter(t, metrics.Options{Store: second, Layout: sl, SecondSite: true, Interval: time.Hour, Deadline: 30 * time.Second,
		ReplicaInterval: 50 * time.Millisecond})
	runCtx, stopRun := context.WithCancel(ctx)
	var run sync.WaitGroup
	run.Go(func() { e.Run(runCtx) })
	defer func() { stopRun(); run.Wait() }()

	// (0 until a record was read: no series yet.)
	updated := func() (float64, map[string]*dto.MetricFamily, []byte) {
		t.Helper()
		mfs, body := scrape(t, e)
		v, _ := value(mfs, metrics.NameSecondSiteStatusUpdated)
		return v, mfs, body
	}
	// Both clusters' journals copied, and the first full pass of the
	// backups finished: until it has, the record's full-pass time is 0 and
	// the lag alert (more than 9 h since a full pass) rightly fires on a
	// scrape repeated for 2 h (on a loaded machine the first pass can
	// finish after the journals were synced).
	synced := func(mfs map[string]*dto.MetricFamily) bool {
		if v, ok := value(mfs, metrics.NameSecondSiteSynced); !ok || v <= 0 {
			return false
		}
		for _, id := range []string{"etcd-a", "etcd-b"} {
			if v, ok := value(mfs, metrics.NameSecondSiteJournalSynced, "cluster", id); !ok || v <= 0 {
				return false
			}
		}
		return true
	}
	start := time.Now()
	waitFor(t, 30*time.Second, "the copier's record with a full pass and both clusters' journals synced", func() bool { v, mfs, _ := updated(); return v > 0 && synced(mfs) })
	first, _, _ := updated()
	waitFor(t, 10*time.Second, "the exported status time to advance", func() bool { v, _, _ := updated(); return v > first })
	t.Logf("the copier's first record with both clusters synced, read by the exporter, %v after start", time.Since(start).Round(time.Millisecond))
	v, mfs, body := updated()
	at := time.Now()
	if lag := at.Sub(time.Unix(0, int64(v*1e9))); lag > 5*time.Second {
		t.Errorf("running: the exported status is %v old, want within the copier's and the exporter's periods", lag)
	}
	if f, ok := value(mfs, metrics.NameSecondSiteVerifyFailures); !ok || f != 0 {
		t.Errorf("running: %s = %v (present %v), want 0", metrics.NameSecondSiteVerifyFailures, f, ok)
	}
	secondSiteAlerts(t, body, at, map[string][]string{})

	stopCopier()
	if err := <-copied; !errors.Is(err, context.Canceled) {
		t.Fatalf("replicate.Run after its context ended: %v", err)
	}
	stopped = true
	time.Sleep(300 * time.Millisecond) // several reads of the last record (every 50 ms)
	last, _, _ := updated()
	time.Sleep(300 * time.Millisecond)
	again, _, body := updated()
	if again != last {
		t.Fatalf("stopped: the exported status time moved from %v to %v with no copier", last, again)
	}
	secondSiteAlerts(t, body, time.Now().Add(10*time.Minute), map[string][]string{alertSecondSiteLagging: {""}})
	if n := e.Errors()[metrics.StepReadReplica]; n != 0 {
		t.Errorf("%d failed reads of the status record", n)
	}
}
