package metrics_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/dashtest"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/metrics"
)

// restoreAlerts are the alerts on a namespace-wide restore run.
var restoreAlerts = []string{"EtcdRecoveryRestoreRunSlow", "EtcdRecoveryRestoreRunKilled"}

// TestExporterRestoreRun takes the exporter's real scrape of a MinIO
// bucket holding namespace-wide restore runs' records (written as
// restore-all writes them, catalog.WriteFleetRestoreRecord), the clock
// moved between refreshes:
//
//   - a finished older run and a newer one whose second attempt runs, 30
//     min into a plan of 10: only the newest run is exported (in
//     progress, planned 5, done 2, its start, deadline and expected time)
//     and the older run's records are never read; promtool fires
//     EtcdRecoveryRestoreRunSlow and not Killed; the dashboard's restore
//     queries answer;
//   - its beats stop (the newest 3 min old, its deadline 27 min ahead):
//     not in progress, killed, at once rather than at the deadline; a
//     new beat: in progress again; beat records are never read (their
//     time is in the key);
//   - its end record written (one cluster failed, one more done): no
//     longer in progress, failed 1, ended; no alert; the plan and the
//     start record are not read again;
//   - a newer run whose attempt never beat since its start 6 min ago, its
//     deadline 2 h ahead, its plan not done: killed, and
//     EtcdRecoveryRestoreRunKilled fires;
//   - a yet newer run whose plan cannot be read: read_restores is
//     counted and the previous refresh's run stays exported.
func TestExporterRestoreRun(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 3*time.Minute)
	m := testenv.SharedMinIO(t)
	inner := testfix.Store(t, m, m.NewBucket(t))
	st := faults.Wrap(inner)
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	now := time.Now().UTC().Truncate(time.Second)
	clock := now
	write := func(key string, v any) {
		t.Helper()
		if err := catalog.WriteFleetRestoreRecord(ctx, inner, key, v); err != nil {
			t.Fatal(err)
		}
	}
	planned := func(names ...string) []catalog.FleetRestorePlanned {
		var out []catalog.FleetRestorePlanned
		for i, n := range names {
			out = append(out, catalog.FleetRestorePlanned{Cluster: n, Action: "restore", Backup: catalog.NewBackupName(now.Add(-time.Hour), catalog.KindScheduled),
				Revision: int64(100 + i), Bytes: int64(i+1) << 20})
		}
		return out
	}
	run := func(created time.Time, expected time.Duration, clusters ...string) string {
		t.Helper()
		id := catalog.NewFleetRestoreRunID(created)
		req := catalog.FleetRestoreRequest{}
		write(layout.FleetRestorePlanKey(id), catalog.FleetRestorePlan{Version: catalog.FleetRestorePlanVersion, Run: id, Namespace: alertsNS,
			Created: created, Request: req, Fingerprint: catalog.FleetRestoreFingerprint(req), Clusters: planned(clusters...),
			Expected: expected, Model: map[string]string{"parallel": "4"}})
		return id
	}
	attempt := func(id string, started, deadline time.Time) catalog.FleetRestoreAttempt {
		t.Helper()
		a := catalog.FleetRestoreAttempt{Run: id, Started: started, Deadline: deadline, Host: "toolkit-0", Parallel: 4}
		write(layout.FleetRestoreAttemptKey(id, started, false), a)
		return a
	}
	done := func(id string, clusters ...string) {
		t.Helper()
		for _, c := range clusters {
			write(layout.FleetRestoreDoneKey(id, c), catalog.FleetRestoreDone{Run: id, Cluster: c, Action: "restore", Verified: now,
				ClientURL: "https://" + c + "-client." + alertsNS + ".svc:2379"})
		}
	}

	// A finished run two days ago.
	old := run(now.Add(-48*time.Hour), 5*time.Minute, "etcd-a", "etcd-b")
	oa := attempt(old, now.Add(-48*time.Hour), now.Add(-47*time.Hour))
	oa.Ended, oa.Verified = now.Add(-47*time.Hour-30*time.Minute), 2
	write(layout.FleetRestoreAttemptKey(old, oa.Started, true), oa)
	done(old, "etcd-a", "etcd-b")
	// The newest run: its first attempt killed (no end record, past its
	// deadline), its second running, 30 min into a 10-min plan.
	cur := run(now.Add(-50*time.Minute), 10*time.Minute, "etcd-a", "etcd-b", "etcd-c", "etcd-d", "etcd-e")
	attempt(cur, now.Add(-50*time.Minute), now.Add(-35*time.Minute))
	second := attempt(cur, now.Add(-30*time.Minute), now.Add(30*time.Minute))
	done(cur, "etcd-a", "etcd-b")
	beat := func(a catalog.FleetRestoreAttempt, at time.Time) {
		t.Helper()
		write(layout.FleetRestoreBeatKey(a.Run, a.Started, at), catalog.FleetRestoreBeat{Run: a.Run, Started: a.Started, Beat: at, Host: a.Host})
	}
	for _, ago := range []time.Duration{3 * time.Minute, 2 * time.Minute, time.Minute, 40 * time.Second} {
		beat(second, now.Add(-ago))
	}

	exp := refreshed(t, ctx, metrics.Options{Store: st, Layout: layout, Interval: time.Hour, Deadline: 30 * time.Second,
		Now: func() time.Time { return clock }})
	mfs, body := scrape(t, exp)
	checkRun(t, mfs, "running", cur, map[string]float64{
		metrics.NameRestoreRunInProgress: 1, metrics.NameRestoreRunKilled: 0, metrics.NameRestoreRunExpected: 600,
		metrics.NameRestoreRunStarted:  float64(now.Add(-30 * time.Minute).Unix()),
		metrics.NameRestoreRunDeadline: float64(now.Add(30 * time.Minute).Unix()),
	}, map[string]float64{"planned": 5, "done": 2, "failed": 0}, metrics.NameRestoreRunEnded)
	for _, c := range st.Calls() {
		if strings.Contains(c.Key, old) {
			t.Errorf("the older run's record %s was read (%s): only the newest run's are", c.Key, c.Op)
		}
	}
	cmd := exec.CommandContext(ctx, testenv.Promtool(t), "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s\nscrape:\n%s", err, out, body)
	}
	promtoolRestoreAlerts(t, body, clock, "EtcdRecoveryRestoreRunSlow")
	dashboardOnScrape(t, body, clock, nil, 5)

	reads := func(key string) int { return st.CountCalls(faults.OpGet, key) + st.CountCalls(faults.OpGetRange, key) }
	planReads, startReads := reads(layout.FleetRestorePlanKey(cur)), reads(layout.FleetRestoreAttemptKey(cur, second.Started, false))
	if planReads != 1 || startReads != 1 {
		t.Errorf("first refresh: the plan read %d times, the running attempt's start %d times; want once each", planReads, startReads)
	}

	// Its beats stop: 3 min after the newest one (40 s before now) it is
	// not in progress any more but killed, 27 min before its deadline.
	clock = now.Add(-40*time.Second + 3*time.Minute - time.Second)
	if err := exp.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mfs, _ = scrape(t, exp)
	checkRun(t, mfs, "beat 2m59s ago", cur, map[string]float64{metrics.NameRestoreRunInProgress: 1, metrics.NameRestoreRunKilled: 0}, nil)
	clock = now.Add(-40*time.Second + 3*time.Minute)
	if err := exp.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mfs, _ = scrape(t, exp)
	checkRun(t, mfs, "beats stopped", cur, map[string]float64{metrics.NameRestoreRunInProgress: 0, metrics.NameRestoreRunKilled: 1}, nil)
	// It beats again (it was only slow to write): in progress.
	beat(second, now.Add(2*time.Minute))
	if err := exp.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mfs, _ = scrape(t, exp)
	checkRun(t, mfs, "beating again", cur, map[string]float64{metrics.NameRestoreRunInProgress: 1, metrics.NameRestoreRunKilled: 0}, nil)
	for _, c := range st.Calls() {
		if strings.Contains(c.Key, ".beat-") && (c.Op == faults.OpGet || c.Op == faults.OpGetRange) {
			t.Errorf("the beat record %s was read (%s): its time is in the key", c.Key, c.Op)
		}
	}

	// The attempt ends: etcd-c failed, etcd-d done.
	done(cur, "etcd-d")
	second.Ended, second.Verified, second.Skipped, second.Failed = now.Add(4*time.Minute), 1, 2, []string{"etcd-c: verify: hash mismatch"}
	write(layout.FleetRestoreAttemptKey(cur, second.Started, true), second)
	clock = now.Add(5 * time.Minute)
	if err := exp.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mfs, body = scrape(t, exp)
	checkRun(t, mfs, "ended", cur, map[string]float64{
		metrics.NameRestoreRunInProgress: 0, metrics.NameRestoreRunKilled: 0,
		metrics.NameRestoreRunEnded: float64(now.Add(4 * time.Minute).Unix()),
	}, map[string]float64{"planned": 5, "done": 3, "failed": 1})
	if p, s := reads(layout.FleetRestorePlanKey(cur)), reads(layout.FleetRestoreAttemptKey(cur, second.Started, false)); p != planReads || s != startReads {
		t.Errorf("second refresh read the plan %d and the start record %d more times: create-only records are read once", p-planReads, s-startReads)
	}
	promtoolRestoreAlerts(t, body, clock)

	// A newer run, killed: its attempt's deadline passed without an end.
	killed := run(now.Add(-3*time.Hour+time.Second), 20*time.Minute, "etcd-a", "etcd-b", "etcd-c")
	attempt(killed, now.Add(-3*time.Hour+time.Second), now.Add(-time.Hour))
	done(killed, "etcd-a")
	if err := exp.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mfs, body = scrape(t, exp)
	// The killed run's id sorts after cur's only if it was created later:
	// it was created 3 h ago, cur 50 min ago, so cur stays the newest.
	checkRun(t, mfs, "an older killed run", cur, map[string]float64{metrics.NameRestoreRunKilled: 0}, map[string]float64{"done": 3})
	newest := run(now.Add(time.Minute), 20*time.Minute, "etcd-a", "etcd-b", "etcd-c")
	// Started 6 min before the clock, never beat: killed, though its
	// deadline is 2 h ahead.
	attempt(newest, now.Add(time.Minute), now.Add(2*time.Hour))
	done(newest, "etcd-a")
	clock = now.Add(7 * time.Minute)
	if err := exp.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mfs, body = scrape(t, exp)
	checkRun(t, mfs, "killed", newest, map[string]float64{
		metrics.NameRestoreRunInProgress: 0, metrics.NameRestoreRunKilled: 1, metrics.NameRestoreRunExpected: 1200,
		metrics.NameRestoreRunDeadline: float64(now.Add(2 * time.Hour).Unix()),
	}, map[string]float64{"planned": 3, "done": 1, "failed": 0}, metrics.NameRestoreRunEnded)
	promtoolRestoreAlerts(t, body, clock, "EtcdRecoveryRestoreRunKilled")

	// A yet newer run whose plan cannot be read: the step is counted and
	// the killed run stays exported.
	broken := run(now.Add(2*time.Minute), time.Minute, "etcd-a")
	st.Inject(faults.Fault{Op: faults.OpGet, Key: layout.FleetRestorePlanKey(broken), Kind: faults.ServerError})
	st.Inject(faults.Fault{Op: faults.OpGetRange, Key: layout.FleetRestorePlanKey(broken), Kind: faults.ServerError})
	err := exp.Refresh(ctx)
	if err == nil || !strings.Contains(err.Error(), metrics.StepReadRestores) || !strings.Contains(err.Error(), broken) {
		t.Errorf("refresh with an unreadable plan: %v, want the step %s naming run %s", err, metrics.StepReadRestores, broken)
	}
	if n := exp.Errors()[metrics.StepReadRestores]; n != 1 {
		t.Errorf("%s counted %d times, want 1", metrics.StepReadRestores, n)
	}
	mfs, _ = scrape(t, exp)
	checkRun(t, mfs, "unreadable newer plan", newest, map[string]float64{metrics.NameRestoreRunKilled: 1}, map[string]float64{"planned": 3})
	st.Clear()
	if err := exp.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	mfs, _ = scrape(t, exp)
	checkRun(t, mfs, "the plan readable again", broken, map[string]float64{metrics.NameRestoreRunInProgress: 0, metrics.NameRestoreRunKilled: 0},
		map[string]float64{"planned": 1, "done": 0}, metrics.NameRestoreRunStarted)

	// Every metric is in docs/metrics.md.
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{metrics.NameRestoreRunInfo, metrics.NameRestoreRunInProgress, metrics.NameRestoreRunKilled, metrics.NameRestoreRunClusters,
		metrics.NameRestoreRunStarted, metrics.NameRestoreRunDeadline, metrics.NameRestoreRunEnded, metrics.NameRestoreRunExpected, "`" + metrics.StepReadRestores + "`"} {
		if !strings.Contains(string(doc), n) {
			t.Errorf("docs/metrics.md does not document %s", n)
		}
	}
}

// checkRun checks the restore run series of a scrape: exactly one info
// series, for run; the gauges of want; the clusters by state; the names of
// absent are not there.
func checkRun(t *testing.T, mfs map[string]*dto.MetricFamily, phase, run string, want map[string]float64, clusters map[string]float64, absent ...string) {
	t.Helper()
	if mf := mfs[metrics.NameRestoreRunInfo]; mf == nil || len(mf.Metric) != 1 {
		t.Errorf("%s: %s: want one series, got %v", phase, metrics.NameRestoreRunInfo, mf)
	} else if v, ok := value(mfs, metrics.NameRestoreRunInfo, "run", run); !ok || v != 1 {
		t.Errorf("%s: %s{run=%q} = %v (present %v), want 1", phase, metrics.NameRestoreRunInfo, run, v, ok)
	}
	for name, w := range want {
		if v, ok := value(mfs, name); !ok || !sameSeconds(v, w) {
			t.Errorf("%s: %s = %v (present %v), want %v", phase, name, v, ok, w)
		}
	}
	for state, w := range clusters {
		if v, ok := value(mfs, metrics.NameRestoreRunClusters, "state", state); !ok || v != w {
			t.Errorf("%s: %s{state=%q} = %v (present %v), want %v", phase, metrics.NameRestoreRunClusters, state, v, ok, w)
		}
	}
	for _, name := range absent {
		if mfs[name] != nil {
			t.Errorf("%s: %s present: %v", phase, name, mfs[name].Metric)
		}
	}
}

// promtoolRestoreAlerts runs `promtool test rules` on the scrape against
// deploy/40-alerts.yaml (as promtoolScrape moves it, time() the
// exporter's clock at the evaluation): of the restore run alerts, exactly
// those of firing fire, for the scrape's namespace.
func promtoolRestoreAlerts(t *testing.T, body []byte, now time.Time, firing ...string) {
	t.Helper()
	in := scrapeInputAt(t, body, nil, now, scrapeEval)
	var tests []dashtest.ExprTest
	for _, a := range restoreAlerts {
		et := dashtest.ExprTest{Expr: fmt.Sprintf(`count by (alertname, namespace) (ALERTS{alertstate="firing",alertname=%q})`, a), EvalTime: scrapeEval.String(), ExpSamples: []dashtest.Sample{}}
		for _, f := range firing {
			if f == a {
				et.ExpSamples = append(et.ExpSamples, dashtest.Sample{Labels: fmt.Sprintf(`{alertname=%q,namespace=%q}`, a, alertsNS), Value: 1})
			}
		}
		tests = append(tests, et)
	}
	testYAML := dashtest.TestFile(t, []string{"alerts.rules.yaml"}, "1m", "restore runs on the exporter's real scrape", in, tests)
	if out, err := runPromtoolTest(t, alertRules(t), testYAML); err != nil {
		t.Fatalf("promtool test rules on the exporter's scrape, want firing %v: %v\n%s\ninput:\n%s", firing, err, out, testYAML)
	}
}
