package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// journalGet is one GET of the journal's listener: status and body.
func journalGet(tb testing.TB, url string) (int, string) {
	tb.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// journalScrape is /metrics, parsed.
func journalScrape(tb testing.TB, base string) (map[string]*dto.MetricFamily, string) {
	tb.Helper()
	code, body := journalGet(tb, base+"/metrics")
	if code != http.StatusOK {
		tb.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		tb.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return mfs, body
}

// metricValue is the value of the series of name with exactly labels
// (gauge, counter, or a histogram's count); false when absent.
func metricValue(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.Metric {
		if len(m.Label) != len(labels)/2 {
			continue
		}
		for i, l := range m.Label {
			if l.GetName() != labels[2*i] || (labels[2*i+1] != "*" && l.GetValue() != labels[2*i+1]) {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// TestJournalListen: `journal --listen` serves /metrics, /livez and
// /healthz while it journals a real etcd into MinIO. After writes, the
// watch lag falls to 0 revisions and 0 s, a segment upload is counted
// (upload latency, segment bytes and events histograms), the last
// segment's time is recent, the process is the leader (no
// --leader-elect) with its identity, and the memory budget is exported;
// both probes answer 200. Then the store freezes (SIGSTOP) while writes
// go on: /healthz fails within --unready-after (3 s) plus a segment
// interval, naming the cluster, while /livez and /metrics (the
// Deployment's readiness probe) stay 200 and /metrics carries the
// unstored segment's time; once the store thaws, /healthz is 200 again
// and that series is gone.
func TestJournalListen(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 2*time.Minute)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/before/", 10, 16)
	m := testenv.StartMinIO(t) // its own: frozen below
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	cos := cosArgs(t, m, bucket, prefix)
	backupCLI(t, ctx, c, cos, "j1")
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	base := "http://" + addr
	started := time.Now()
	stop := journalRun(t, ctx, concatArgs([]string{"--cluster-id", "j1", "--segment-interval", "1s", "--listen", addr, "--unready-after", "3s"},
		clusterArgs(c), cos)...)

	// Up and journaling.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c := http.Client{Timeout: time.Second}
		if resp, err := c.Get(base + "/livez"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("journal --listen %s: nothing listens", addr)
		}
	}
	testenv.PutKeys(t, cli, "/during/", 30, 16)
	r, err := cli.Put(ctx, "/during/last", "x")
	if err != nil {
		t.Fatal(err)
	}
	testfix.WaitJournalReach(t, ctx, st, layout, "j1", r.Header.Revision, 30*time.Second)
	var mfs map[string]*dto.MetricFamily
	var body string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		mfs, body = journalScrape(t, base)
		lag, ok1 := metricValue(mfs, journal.NameJournalLagRevisions, "cluster", "j1")
		secs, ok2 := metricValue(mfs, journal.NameJournalLagSeconds, "cluster", "j1")
		n, ok3 := metricValue(mfs, journal.NameJournalUploadDuration)
		if ok1 && ok2 && ok3 && lag == 0 && secs == 0 && n >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the journal stored revision %d: lag %v s %v uploads %v, want 0, 0, >= 1:\n%s", r.Header.Revision, lag, secs, n, body)
		}
	}
	if v, ok := metricValue(mfs, journal.NameJournalLeader, "identity", "*"); !ok || v != 1 {
		t.Errorf("%s = %v (present %v), want 1 without --leader-elect:\n%s", journal.NameJournalLeader, v, ok, body)
	}
	for _, w := range []struct {
		name   string
		labels []string
		min    float64
	}{
		{journal.NameJournalCaptures, nil, 1},
		{journal.NameJournalSegmentBytes, nil, 1},
		{journal.NameJournalSegmentEvents, nil, 1},
		{journal.NameJournalLastSegment, []string{"cluster", "j1"}, float64(started.Unix())},
		{journal.NameJournalBudgetBytes, nil, float64(journal.DefaultMemoryBudget)},
	} {
		if v, ok := metricValue(mfs, w.name, w.labels...); !ok || v < w.min {
			t.Errorf("%s%v = %v (present %v), want at least %v", w.name, w.labels, v, ok, w.min)
		}
	}
	if v, ok := metricValue(mfs, journal.NameJournalCatchUpBacklog); !ok || v != 0 {
		t.Errorf("%s = %v (present %v), want 0 once caught up", journal.NameJournalCatchUpBacklog, v, ok)
	}
	if _, ok := metricValue(mfs, journal.NameJournalBudgetUsedBytes); !ok {
		t.Errorf("%s absent", journal.NameJournalBudgetUsedBytes)
	}
	if !bytes.Contains([]byte(body), []byte(journal.NameJournalSegmentEvents+"_bucket")) {
		t.Errorf("no %s histogram buckets:\n%s", journal.NameJournalSegmentEvents, body)
	}
	for _, p := range []string{"/livez", "/healthz"} {
		if code, b := journalGet(t, base+p); code != http.StatusOK {
			t.Errorf("GET %s: %d %s, want 200 while journaling", p, code, b)
		}
	}

	// The store freezes; writes go on, so a segment waits to be stored.
	m.Freeze()
	frozen := time.Now()
	testenv.PutKeys(t, cli, "/frozen/", 10, 16)
	for ; ; time.Sleep(200 * time.Millisecond) {
		if code, b := journalGet(t, base+"/livez"); code != http.StatusOK {
			t.Fatalf("GET /livez with the store frozen %v: %d %s, want 200 (the loops are alive)", time.Since(frozen), code, b)
		}
		code, b := journalGet(t, base+"/healthz")
		if code == http.StatusServiceUnavailable && strings.Contains(b, "j1") {
			t.Logf("/healthz %v after the store froze: %d %s", time.Since(frozen).Round(time.Millisecond), code, strings.TrimSpace(b))
			break
		}
		if time.Since(frozen) > 15*time.Second {
			m.Thaw()
			t.Fatalf("GET /healthz %v after the store froze: %d %s, want 503 naming j1 (--unready-after 3s)", time.Since(frozen), code, b)
		}
	}
	// /healthz is the store's health, not readiness: /metrics (the
	// Deployment's readiness probe) still answers, and says the same in
	// the unstored-since series, the capture running.
	mfs, body = journalScrape(t, base)
	if v, ok := metricValue(mfs, journal.NameJournalUnstoredSince, "cluster", "j1"); !ok || v < float64(frozen.Add(-5*time.Second).Unix()) || v > float64(time.Now().Unix()) {
		t.Errorf("store frozen, /healthz 503: %s{cluster=j1} = %v (present %v), want the time the unstored segment was first tried, after %v (5 s of slack):\n%s", journal.NameJournalUnstoredSince, v, ok, frozen, body)
	}
	if v, ok := metricValue(mfs, journal.NameJournalCaptureRunning, "cluster", "j1"); !ok || v != 1 {
		t.Errorf("store frozen: %s{cluster=j1} = %v (present %v), want 1", journal.NameJournalCaptureRunning, v, ok)
	}
	m.Thaw()
	thawed := time.Now()
	for ; ; time.Sleep(200 * time.Millisecond) {
		code, b := journalGet(t, base+"/healthz")
		if code == http.StatusOK {
			t.Logf("/healthz 200 again %v after the store thawed", time.Since(thawed).Round(time.Millisecond))
			mfs, body = journalScrape(t, base)
			if v, ok := metricValue(mfs, journal.NameJournalUnstoredSince, "cluster", "j1"); ok {
				t.Errorf("a segment stored, /healthz 200: %s{cluster=j1} = %v, want absent:\n%s", journal.NameJournalUnstoredSince, v, body)
			}
			break
		}
		if time.Since(thawed) > 45*time.Second {
			t.Fatalf("GET /healthz %v after the store thawed: %d %s, want 200", time.Since(thawed), code, b)
		}
	}
	if code, errOut := stop(); code != 0 {
		t.Fatalf("journal stopped: exit %d: %s", code, errOut)
	}
}
