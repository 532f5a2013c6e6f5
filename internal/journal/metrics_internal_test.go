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

	// Series: the leader with its identity; a forgotten cluster has none.
	if n := testutil.CollectAndCount(m, NameJournalLagRevisions); n != 1 {
		t.Errorf("%d lag series, want 1", n)
	}
	m.Forget("c1")
	if n := testutil.CollectAndCount(m, NameJournalLagRevisions, NameJournalLastSegment); n != 0 {
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
