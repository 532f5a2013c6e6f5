package metrics_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/metrics"
)

// receiver is a loopback HTTP server that takes Pushgateway pushes
// (the Pushgateway itself is not on the Go module proxy) and parses each
// body with Prometheus' own parser (expfmt): what a Pushgateway would
// store, by push path (/metrics/job/<job>/<label>/<value>...).
type receiver struct {
	mu     sync.Mutex
	pushes map[string]map[string]*dto.MetricFamily
	method map[string]string
	status int
	hang   chan struct{}
}

func startReceiver(t testing.TB, status int) (*receiver, string) {
	t.Helper()
	r := &receiver{pushes: map[string]map[string]*dto.MetricFamily{}, method: map[string]string{}, status: status, hang: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.status == 0 {
			select { // a Pushgateway that never answers
			case <-r.hang:
			case <-req.Context().Done():
			}
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		format := expfmt.ResponseFormat(req.Header)
		dec := expfmt.NewDecoder(strings.NewReader(string(body)), format)
		mfs := map[string]*dto.MetricFamily{}
		for {
			var mf dto.MetricFamily
			if err := dec.Decode(&mf); err == io.EOF {
				break
			} else if err != nil {
				http.Error(w, "parse: "+err.Error(), http.StatusBadRequest)
				return
			}
			mfs[mf.GetName()] = &mf
		}
		r.mu.Lock()
		key := canonicalPath(req.URL.Path)
		r.pushes[key], r.method[key] = mfs, req.Method
		r.mu.Unlock()
		w.WriteHeader(r.status)
	}))
	t.Cleanup(func() { close(r.hang); srv.Close() })
	return r, srv.URL
}

// canonicalPath orders a push path's grouping labels by name (the
// Pushgateway treats /job/j/a/1/b/2 and /job/j/b/2/a/1 as one group).
func canonicalPath(p string) string {
	parts := strings.Split(strings.TrimPrefix(p, "/metrics/job/"), "/")
	if len(parts) < 1 || len(parts)%2 != 1 {
		return p
	}
	var pairs []string
	for i := 1; i+1 < len(parts); i += 2 {
		pairs = append(pairs, parts[i]+"/"+parts[i+1])
	}
	sort.Strings(pairs)
	return strings.Join(append([]string{"/metrics/job/" + parts[0]}, pairs...), "/")
}

func (r *receiver) paths() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for p := range r.pushes {
		out = append(out, p)
	}
	return out
}

func (r *receiver) group(path string) (map[string]*dto.MetricFamily, string) {
	path = canonicalPath(path)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pushes[path], r.method[path]
}

func TestPushBackupsAndDrills(t *testing.T) {
	t.Parallel()
	rcv, url := startReceiver(t, http.StatusOK)
	now := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	name := catalog.NewBackupName(now.Add(-time.Minute), catalog.KindScheduled)
	backupAt, _, _ := catalog.ParseBackupName(name)
	m := &catalog.Manifest{ClusterID: "c1", Name: name, Kind: catalog.KindScheduled, RevisionBefore: 4242,
		Snapshot: catalog.SnapshotInfo{StoredSize: 12345}}
	drill := &catalog.DrillRecord{ClusterID: "c1", Backup: name, Passed: false, Failed: "compare with source", FinishedAt: now}
	opts := metrics.PushOptions{URL: url, Namespace: "kubx-etcd-01", Timeout: 5 * time.Second}
	err := metrics.PushBackups(context.Background(), opts, []metrics.BackupOutcome{
		{Cluster: "c1", Kind: catalog.KindScheduled, Finished: now, Manifest: m, Drill: &metrics.DrillOutcome{Cluster: "c1", Finished: now, Record: drill}},
		{Cluster: "c2", Kind: catalog.KindScheduled, Finished: now}, // failed
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(path, name string, want float64) {
		t.Helper()
		mfs, method := rcv.group(path)
		if mfs == nil {
			t.Fatalf("nothing pushed to %s", path)
		}
		if method != http.MethodPost {
			t.Errorf("%s: %s, want POST (replace only the pushed metrics)", path, method)
		}
		got, ok := value(mfs, name)
		if !ok || got != want {
			t.Errorf("%s: %s = %v (present %v), want %v", path, name, got, ok, want)
		}
	}
	c1 := "/metrics/job/etcd-recovery-backup/namespace/kubx-etcd-01/cluster/c1/kind/scheduled"
	check(c1, metrics.NameBackupLastSuccess, float64(backupAt.UnixNano())/1e9)
	check(c1, metrics.NameBackupLastRevision, 4242)
	check(c1, metrics.NameBackupStoredBytes, 12345)
	check(c1, metrics.NameBackupLastRunResult, 1)
	check(c1, metrics.NameBackupLastRun, float64(now.Unix()))
	c2 := "/metrics/job/etcd-recovery-backup/namespace/kubx-etcd-01/cluster/c2/kind/scheduled"
	check(c2, metrics.NameBackupLastRunResult, 0)
	if mfs, _ := rcv.group(c2); mfs[metrics.NameBackupLastSuccess] != nil {
		t.Errorf("a failed backup pushed a last success time")
	}
	d1 := "/metrics/job/etcd-recovery-drill/namespace/kubx-etcd-01/cluster/c1"
	check(d1, metrics.NameDrillLastResult, 0)
	check(d1, metrics.NameDrillLastTimestamp, float64(now.Unix()))
	if mfs, _ := rcv.group(d1); mfs[metrics.NameDrillLastPass] != nil {
		t.Errorf("a failed drill pushed a pass time")
	}

	if err := metrics.PushDrills(context.Background(), opts, []metrics.DrillOutcome{{Cluster: "c3", Finished: now,
		Record: &catalog.DrillRecord{ClusterID: "c3", Passed: true, FinishedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	d3 := "/metrics/job/etcd-recovery-drill/namespace/kubx-etcd-01/cluster/c3"
	check(d3, metrics.NameDrillLastResult, 1)
	check(d3, metrics.NameDrillLastPass, float64(now.Unix()))
}

// TestPushFailures: a Pushgateway that refuses or never answers gives an
// error naming the cluster within the push's deadline.
func TestPushFailures(t *testing.T) {
	t.Parallel()
	out := []metrics.BackupOutcome{{Cluster: "c9", Kind: catalog.KindManual, Finished: time.Now()}}
	_, refusing := startReceiver(t, http.StatusInternalServerError)
	err := metrics.PushBackups(context.Background(), metrics.PushOptions{URL: refusing, Timeout: 5 * time.Second}, out)
	if err == nil || !strings.Contains(err.Error(), "cluster c9") || !strings.Contains(err.Error(), "500") {
		t.Fatalf("push to a refusing Pushgateway: %v", err)
	}
	_, hanging := startReceiver(t, 0)
	start := time.Now()
	err = metrics.PushBackups(context.Background(), metrics.PushOptions{URL: hanging, Timeout: time.Second}, out)
	if err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("push to a Pushgateway that never answers: %v after %v, want an error within ~1s", err, time.Since(start))
	}
	if err := metrics.PushBackups(context.Background(), metrics.PushOptions{URL: "ftp://x"}, out); err == nil {
		t.Fatal("ftp:// accepted")
	}
}
