package journal

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The journal process's lag, readiness and liveness rules on a clock of
// the test's (TestJournalListen runs them on a real etcd and MinIO): the
// lag in revisions and seconds since the capture fell behind, 0 once it
// caught up; a follower is ready, a leader is not once a segment stayed
// unstored past UnreadyAfter, and ready again once it is stored; a
// capture whose loop has not turned for LivenessBound fails /livez unless
// it waits for budget; a forgotten cluster's series are gone.
func TestMetricsRules(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { return now }
	m := NewMetrics(MetricsOptions{Identity: "pod-a_1", Elected: true, UnreadyAfter: time.Minute, Now: clock, Budget: NewBudget(1 << 20)})
	lag := func(id string) (int64, float64) {
		t.Helper()
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.clusters[id].lag(now)
	}

	m.captureRunning("c1", true, 100)
	m.clusterRevision("c1", 100)
	if r, s := lag("c1"); r != 0 || s != 0 {
		t.Errorf("caught up at start: lag %d revisions %v s, want 0 0", r, s)
	}
	m.clusterRevision("c1", 150)
	now = now.Add(10 * time.Second)
	m.reachedRev("c1", 120)
	now = now.Add(5 * time.Second)
	if r, s := lag("c1"); r != 30 || s != 15 {
		t.Errorf("behind since 15 s: lag %d revisions %v s, want 30 15", r, s)
	}
	if got := gathered(t, m, NameJournalCatchUpBacklog, ""); got != 30 {
		t.Errorf("backlog %v, want 30", got)
	}
	m.reachedRev("c1", 150)
	if r, s := lag("c1"); r != 0 || s != 0 {
		t.Errorf("caught up: lag %d revisions %v s, want 0 0", r, s)
	}

	// Readiness.
	if err := m.Ready(); err != nil {
		t.Errorf("a follower: %v, want ready", err)
	}
	m.SetLeading(true)
	m.uploadStarted("c1")
	now = now.Add(59 * time.Second)
	if err := m.Ready(); err != nil {
		t.Errorf("a leader uploading for 59 s (bound 1m): %v, want ready", err)
	}
	m.uploadFailed("c1")
	now = now.Add(2 * time.Second)
	if err := m.Ready(); err == nil || !strings.Contains(err.Error(), "c1") {
		t.Errorf("a leader whose segment is unstored for 61 s: %v, want an error naming c1", err)
	}
	m.uploadEnded("c1", &SegmentInfo{Size: 4096}, 12)
	if err := m.Ready(); err != nil {
		t.Errorf("the segment stored: %v, want ready", err)
	}
	if got := testutil.ToFloat64(m.uploadFailures.WithLabelValues("c1")); got != 1 {
		t.Errorf("upload failures %v, want 1", got)
	}

	// Liveness.
	if err := m.Live(); err != nil {
		t.Errorf("live: %v", err)
	}
	m.beat("c1", true)
	now = now.Add(LivenessBound + time.Second)
	if err := m.Live(); err != nil {
		t.Errorf("waiting for budget past the bound: %v, want live", err)
	}
	m.beat("c1", false)
	now = now.Add(LivenessBound + time.Second)
	if err := m.Live(); err == nil || !strings.Contains(err.Error(), "c1") {
		t.Errorf("a loop idle past the bound: %v, want an error naming c1", err)
	}
	m.captureRunning("c1", false, 0)
	if err := m.Live(); err != nil {
		t.Errorf("the capture ended: %v, want live", err)
	}

	// Series: a stopped capture has no lag series (a dead capture must
	// not show lag 0) and is marked not running; the leader with its
	// identity; a forgotten cluster has none.
	if n := testutil.CollectAndCount(m, NameJournalLagRevisions, NameJournalLagSeconds); n != 0 {
		t.Errorf("%d lag series of a stopped capture, want 0", n)
	}
	if got := gathered(t, m, NameJournalCaptureRunning, "c1"); got != 0 {
		t.Errorf("%s{cluster=c1} = %v once stopped, want 0", NameJournalCaptureRunning, got)
	}
	m.captureRunning("c1", true, 150)
	if n := testutil.CollectAndCount(m, NameJournalLagRevisions, NameJournalLagSeconds); n != 2 {
		t.Errorf("%d lag series of a running capture, want 2", n)
	}
	if got := gathered(t, m, NameJournalCaptureRunning, "c1"); got != 1 {
		t.Errorf("%s{cluster=c1} = %v while running, want 1", NameJournalCaptureRunning, got)
	}
	m.Forget("c1")
	if n := testutil.CollectAndCount(m, NameJournalLagRevisions, NameJournalLastSegment, NameJournalCaptureRunning, NameJournalUnstoredSince); n != 0 {
		t.Errorf("%d series of a forgotten cluster", n)
	}
	if got := gathered(t, m, NameJournalLeader, "pod-a_1"); got != 1 {
		t.Errorf("%s{identity=pod-a_1} = %v, want 1", NameJournalLeader, got)
	}
}

// gathered is the value of the gauge name whose first label is label
// ("" for none) in m's registry; -1 when absent.
func gathered(t *testing.T, m *Metrics, name, label string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mm := range mf.Metric {
			if (label == "" && len(mm.Label) == 0) || (len(mm.Label) > 0 && mm.Label[0].GetValue() == label) {
				return mm.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// TestMetricsReadyStoreDownPastFrozenAfter: the store stays down longer
// than FrozenAfter, three times over, on the test's clock, with the calls
// the capture makes (capture.go: upload, its give-up, the capture's end
// and restart): /healthz stays unready from UnreadyAfter after the first
// attempt on, through every give-up and restart, and the unstored-since
// gauge keeps the first attempt's time; the first segment stored makes it
// ready and withdraws the gauge.
func TestMetricsReadyStoreDownPastFrozenAfter(t *testing.T) {
	t.Parallel()
	now := time.Unix(2_000_000, 0)
	m := NewMetrics(MetricsOptions{Identity: "a", Elected: true, Now: func() time.Time { return now }})
	m.SetLeading(true)
	first := now
	m.captureRunning("c1", true, 100)
	for cycle := range 3 {
		m.uploadStarted("c1")
		now = now.Add(DefaultUnreadyAfter + time.Second)
		if err := m.Ready(); err == nil || !strings.Contains(err.Error(), "c1") {
			t.Errorf("cycle %d, %s into the upload: Ready %v, want an error naming c1", cycle, DefaultUnreadyAfter+time.Second, err)
		}
		now = now.Add(DefaultFrozenAfter - DefaultUnreadyAfter) // the upload gives up
		m.uploadFailed("c1")
		m.uploadEnded("c1", nil, 0)
		m.captureRunning("c1", false, 0)
		if err := m.Ready(); err == nil || !strings.Contains(err.Error(), "c1") {
			t.Errorf("cycle %d, the upload given up (store still down): Ready %v, want an error naming c1", cycle, err)
		}
		now = now.Add(time.Minute) // the restart's backoff
		m.captureRunning("c1", true, 100)
		if err := m.Ready(); err == nil || !strings.Contains(err.Error(), "c1") {
			t.Errorf("cycle %d, the capture restarted, nothing stored: Ready %v, want an error naming c1", cycle, err)
		}
		if got := gathered(t, m, NameJournalUnstoredSince, "c1"); got != float64(first.Unix()) {
			t.Errorf("cycle %d: %s = %v, want the first attempt's %d", cycle, NameJournalUnstoredSince, got, first.Unix())
		}
	}
	m.uploadStarted("c1")
	now = now.Add(time.Second)
	m.uploadEnded("c1", &SegmentInfo{Size: 1}, 1)
	if err := m.Ready(); err != nil {
		t.Errorf("a segment stored: Ready %v, want nil", err)
	}
	if got := gathered(t, m, NameJournalUnstoredSince, "c1"); got != -1 {
		t.Errorf("a segment stored: %s = %v, want absent", NameJournalUnstoredSince, got)
	}
}
