package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/usage"
	"github.com/armada/etcd-recovery/kube"
)

func TestRestoreAllJudgeHealth(t *testing.T) {
	t.Parallel()
	down := func(pods, ready int) kube.MemberPods { return kube.MemberPods{Pods: pods, Ready: ready} }
	for _, tc := range []struct {
		size, healthy, answered int
		quorum                  bool
		pods                    kube.MemberPods
		podsErr                 error
		outcome, text           string
	}{
		{3, 3, 3, true, down(3, 3), nil, OutcomeHealthy, "3/3 members healthy"},
		{3, 2, 2, true, down(3, 3), nil, OutcomeDegraded, "2/3 members healthy: quorum holds"},
		{3, 1, 1, false, down(3, 3), nil, "", "1/3 members healthy: quorum lost"},
		{3, 0, 1, false, down(3, 3), nil, "", "0/3 members healthy (1 answer): quorum lost"},
		{1, 1, 1, true, down(1, 1), nil, OutcomeHealthy, "1/1 members healthy"},
		{5, 3, 3, true, down(5, 5), nil, OutcomeDegraded, "3/5 members healthy: quorum holds"},
		{5, 2, 5, false, down(5, 5), nil, "", "2/5 members healthy (5 answer): quorum lost"},
		// The toolkit reaches one member of three, and it serves a
		// linearizable read: the cluster has quorum (the others are out
		// of the toolkit's reach, not down). Never restored.
		{3, 1, 1, true, down(3, 3), nil, OutcomeDegraded, "1/3 members healthy: quorum holds"},
		// No member answers: Kubernetes is the evidence. Pods gone or
		// not Ready: down, restored.
		{1, 0, 0, false, down(1, 0), nil, "", "0/1 members healthy, 0/1 member pods Running and Ready: quorum lost"},
		{1, 0, 0, false, down(0, 0), nil, "", "0/1 members healthy, 0/0 member pods Running and Ready: quorum lost"},
		{3, 0, 0, false, down(3, 1), nil, "", "0/3 members healthy, 1/3 member pods Running and Ready: quorum lost"},
		{0, 0, 0, false, down(0, 0), nil, "", "0/0 members healthy, 0/0 member pods Running and Ready: quorum lost"},
		// A majority of the pods Running and Ready and no member
		// answering: the toolkit cannot reach it; never judged lost.
		{1, 0, 0, false, down(1, 1), nil, judgedUnreachable, "0/1 members healthy, 1/1 member pods Running and Ready: unreachable"},
		{3, 0, 0, false, down(3, 2), nil, judgedUnreachable, "0/3 members healthy, 2/3 member pods Running and Ready: unreachable"},
		{3, 0, 0, false, down(3, 3), nil, judgedUnreachable, "0/3 members healthy, 3/3 member pods Running and Ready: unreachable"},
		// The pods cannot be read: no evidence either way.
		{3, 0, 0, false, kube.MemberPods{}, errors.New("forbidden"), judgedUnreachable, "0/3 members healthy: unreachable (member pods unreadable)"},
	} {
		outcome, text := judgeHealth(tc.size, tc.healthy, tc.answered, tc.quorum, tc.pods, tc.podsErr)
		if outcome != tc.outcome || text != tc.text {
			t.Errorf("judgeHealth(%d, %d, %d, %t, %+v, %v) = %q, %q; want %q, %q", tc.size, tc.healthy, tc.answered, tc.quorum, tc.pods, tc.podsErr,
				outcome, text, tc.outcome, tc.text)
		}
	}
}

func TestRestoreAllDecideAction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		hasEC       bool
		judged      string
		force, pitr bool
		planned     string
		action      string
		adoptOnly   bool
	}{
		{"quorum lost", true, "", false, false, "", ActionRestore, false},
		{"healthy", true, OutcomeHealthy, false, false, "", "", false},
		{"degraded", true, OutcomeDegraded, false, false, "", "", false},
		{"healthy, forced", true, OutcomeHealthy, true, false, "", ActionRestore, false},
		{"degraded, point in time", true, OutcomeDegraded, false, true, "", ActionRestore, false},
		{"no EtcdCluster", false, "", false, false, "", ActionRebuild, false},
		{"planned, quorum lost", true, "", false, false, ActionRestore, ActionRestore, false},
		{"planned, healthy now: only what was begun", true, OutcomeHealthy, false, false, ActionRestore, ActionRestore, true},
		{"planned, healthy now, forced", true, OutcomeHealthy, true, false, ActionRestore, ActionRestore, false},
		{"planned restore, EtcdCluster gone (in flight)", false, "", false, false, ActionRestore, ActionRestore, false},
		{"planned rebuild, EtcdCluster rebuilt, no members", true, "", false, false, ActionRebuild, ActionRebuild, false},
	} {
		action, adoptOnly := decideAction(tc.hasEC, tc.judged, tc.force, tc.pitr, tc.planned)
		if action != tc.action || adoptOnly != tc.adoptOnly {
			t.Errorf("%s: %q, adopt only %t; want %q, %t", tc.name, action, adoptOnly, tc.action, tc.adoptOnly)
		}
	}
}

func TestRestoreAllOrder(t *testing.T) {
	t.Parallel()
	a, b := &raNamespace{name: "kubx-etcd-01"}, &raNamespace{name: "kubx-etcd-02"}
	mk := func() []*raCluster {
		cs := []*raCluster{
			{ns: a, id: "etcd-big", action: ActionRestore},
			{ns: a, id: "etcd-small", action: ActionRestore},
			{ns: b, id: "etcd-small", action: ActionRestore},
			{ns: a, id: "etcd-mid", action: ActionRebuild},
			{ns: a, id: "etcd-failed"}, // failed before its turn: last
			{ns: b, id: "etcd-zero", action: ActionRestore},
		}
		for _, c := range cs {
			c.row.Bytes = map[string]int64{"etcd-big": 300, "etcd-small": 10, "etcd-mid": 100, "etcd-zero": 0}[c.id]
		}
		return cs
	}
	names := func(cs []*raCluster) string {
		var out []string
		for _, c := range cs {
			out = append(out, c.ns.name[len(c.ns.name)-2:]+"/"+c.id)
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		order string
		first []string
		want  string
	}{
		{OrderSmallest, nil, "02/etcd-zero 01/etcd-small 02/etcd-small 01/etcd-mid 01/etcd-big 01/etcd-failed"},
		{"", nil, "02/etcd-zero 01/etcd-small 02/etcd-small 01/etcd-mid 01/etcd-big 01/etcd-failed"},
		{OrderLargest, nil, "01/etcd-big 01/etcd-mid 01/etcd-small 02/etcd-small 02/etcd-zero 01/etcd-failed"},
		{OrderName, nil, "01/etcd-big 01/etcd-mid 01/etcd-small 02/etcd-small 02/etcd-zero 01/etcd-failed"},
		// --first goes before the order, in its own order; a bare name is
		// every namespace's, a qualified one only its namespace's.
		{OrderSmallest, []string{"etcd-big", "kubx-etcd-02/etcd-small"}, "01/etcd-big 02/etcd-small 02/etcd-zero 01/etcd-small 01/etcd-mid 01/etcd-failed"},
		{OrderLargest, []string{"etcd-small"}, "01/etcd-small 02/etcd-small 01/etcd-big 01/etcd-mid 02/etcd-zero 01/etcd-failed"},
		{OrderName, []string{"etcd-nope"}, "01/etcd-big 01/etcd-mid 01/etcd-small 02/etcd-small 02/etcd-zero 01/etcd-failed"},
	} {
		cs := mk()
		order(cs, tc.order, tc.first)
		if got := names(cs); got != tc.want {
			t.Errorf("order %q first %v:\n got  %s\n want %s", tc.order, tc.first, got, tc.want)
		}
	}
}

func TestRestoreAllRunStates(t *testing.T) {
	t.Parallel()
	l := catalog.Layout{Prefix: "kubx-etcd-01/"}
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	r1, r2 := catalog.NewFleetRestoreRunID(t0), catalog.NewFleetRestoreRunID(t0.Add(time.Hour))
	keys := []string{
		l.FleetRestorePlanKey(r1),
		l.FleetRestoreAttemptKey(r1, t0, false),
		l.FleetRestoreAttemptKey(r1, t0, true),
		l.FleetRestoreDoneKey(r1, "etcd-a"),
		l.FleetRestorePlanKey(r2),
		l.FleetRestoreAttemptKey(r2, t0.Add(time.Hour), false),
		l.FleetRestoreAttemptKey(r2, t0.Add(time.Hour), true),
		l.FleetRestoreAttemptKey(r2, t0.Add(2*time.Hour), false), // killed: no end
		l.FleetRestoreDoneKey(r2, "etcd-b"),
		l.FleetRestoreDoneKey(r2, "etcd-a"),
		l.RestoresPrefix() + "not-a-run/plan.json",
		l.FleetRestorePrefix(r2) + "attempts/garbage.json",
	}
	states := runStates(l, keys)
	if len(states) != 2 || states[0].run != r2 || states[1].run != r1 {
		t.Fatalf("runs %+v, want %s then %s (newest first)", states, r2, r1)
	}
	s := states[0]
	if started, ended, ok := s.latest(); !ok || ended || !started.Equal(t0.Add(2*time.Hour)) {
		t.Errorf("latest attempt of %s: %v ended %t ok %t", r2, started, ended, ok)
	}
	if strings.Join(s.done, ",") != "etcd-a,etcd-b" || !s.plan {
		t.Errorf("run %s: done %v plan %t", r2, s.done, s.plan)
	}
	if started, ended, ok := states[1].latest(); !ok || !ended || !started.Equal(t0) {
		t.Errorf("latest attempt of %s: %v ended %t", r1, started, ended)
	}

	plan := &catalog.FleetRestorePlan{Clusters: []catalog.FleetRestorePlanned{{Cluster: "etcd-a"}, {Cluster: "etcd-b"}, {Cluster: "etcd-c"}}}
	for _, tc := range []struct {
		name string
		done []string
		end  *catalog.FleetRestoreAttempt
		want bool
	}{
		{"every planned cluster done", []string{"etcd-a", "etcd-b", "etcd-c"}, nil, true},
		{"some done, killed", []string{"etcd-a"}, nil, false},
		{"some done, last attempt failed one", []string{"etcd-a", "etcd-b"}, &catalog.FleetRestoreAttempt{Failed: []string{"etcd-c: x: y"}}, false},
		{"some done, last attempt cancelled", []string{"etcd-a"}, &catalog.FleetRestoreAttempt{Cancelled: true}, false},
		{"some done, last attempt left some not started", []string{"etcd-a"}, &catalog.FleetRestoreAttempt{NotStarted: 1}, false},
		{"last attempt clean (one found healthy again)", []string{"etcd-a", "etcd-b"}, &catalog.FleetRestoreAttempt{Verified: 2}, true},
	} {
		if got := complete(plan, &runState{done: tc.done}, tc.end); got != tc.want {
			t.Errorf("%s: complete %t, want %t", tc.name, got, tc.want)
		}
	}
}

func TestRestoreAllRequestCanonical(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 11, 0, 0, 0, time.FixedZone("CET", 3600))
	a := RestoreAllOptions{Names: []string{"etcd-b", "etcd-a", "etcd-b"}, Selector: "tier=gold,env in (prod)", ToTime: at}
	b := RestoreAllOptions{Names: []string{"etcd-a", "etcd-b"}, Selector: "env in (prod),tier=gold", ToTime: at.UTC()}
	ra, rb := a.request(), b.request()
	if catalog.FleetRestoreFingerprint(ra) != catalog.FleetRestoreFingerprint(rb) {
		t.Fatalf("the same request, spelled differently, has two fingerprints:\n%+v\n%+v", ra, rb)
	}
	if strings.Join(ra.Names, ",") != "etcd-a,etcd-b" || ra.ToTime.Location() != time.UTC {
		t.Errorf("request %+v", ra)
	}
	for _, other := range []RestoreAllOptions{
		{Names: []string{"etcd-a"}, Selector: a.Selector, ToTime: at},
		{Names: a.Names, Selector: a.Selector, ToTime: at, Force: true},
		{Names: a.Names, Selector: a.Selector, ToTime: at.Add(time.Second)},
		{Names: a.Names, Selector: a.Selector, ToTime: at, Rebuild: true},
	} {
		if catalog.FleetRestoreFingerprint(other.request()) == catalog.FleetRestoreFingerprint(ra) {
			t.Errorf("another request %+v has the same fingerprint", other.request())
		}
	}
}

func TestRestoreAllValidate(t *testing.T) {
	t.Parallel()
	tmpl := kube.OperatorRestoreOptions{Bucket: "b", Endpoint: "https://s3.example"}
	for _, tc := range []struct {
		o    RestoreAllOptions
		want string
	}{
		{RestoreAllOptions{}, "--bucket is required"},
		{RestoreAllOptions{Template: kube.OperatorRestoreOptions{Bucket: "b"}}, "--cos-endpoint is required"},
		{RestoreAllOptions{Template: kube.OperatorRestoreOptions{Bucket: "b", Endpoint: "e", Cluster: "etcd-a"}}, "no cluster and no backup"},
		{RestoreAllOptions{Parallel: -1}, "--parallel -1"},
		{RestoreAllOptions{Order: "random"}, `--order "random"`},
		{RestoreAllOptions{Selector: "a=(b"}, "--selector"},
		{RestoreAllOptions{Names: []string{"Bad/Name"}}, "--cluster"},
		{RestoreAllOptions{First: []string{"ns/Bad Name"}}, "--first"},
		{RestoreAllOptions{Replace: true}, "--replace goes with --rebuild"},
		{RestoreAllOptions{ClusterTimeout: -time.Second}, "--cluster-timeout"},
	} {
		if tc.o.Template.Bucket == "" && !strings.Contains(tc.want, "required") {
			tc.o.Template = tmpl
		}
		err := tc.o.Validate()
		if err == nil || !usage.Is(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want a usage error with %q", tc.o, err, tc.want)
		}
	}
	if err := (RestoreAllOptions{Names: []string{"etcd-a"}, First: []string{"kubx-etcd-01/etcd-a"}, Selector: "a=b", Order: OrderName, Template: tmpl}).Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

func TestRestoreAllReportRows(t *testing.T) {
	t.Parallel()
	rep := &RestoreAllReport{Parallel: 2, Order: OrderSmallest, Failed: []string{"kubx-etcd-01/etcd-c"}, Clusters: []RestoreAllRow{
		{Namespace: "kubx-etcd-01", Cluster: "etcd-a", Outcome: OutcomeRestored, Action: ActionRestore, Backup: "b1", Revision: 1000000042,
			Bytes: 2 << 20, Elapsed: 61 * time.Second, ClientURL: "https://etcd-a-client.kubx-etcd-01.svc:2379", NodePort: 30123},
		{Namespace: "kubx-etcd-01", Cluster: "etcd-b", Outcome: OutcomeDoneEarlier, Run: "20261129T100000.000Z-0a0b0c0d", Backup: "b0"},
		{Namespace: "kubx-etcd-01", Cluster: "etcd-c", Outcome: OutcomeFailed, FailedStep: kube.OpStepWait, Cause: "etcd-operator did not ...",
			NextStep: NextStep(kube.OpStepWait)},
		{Namespace: "kubx-etcd-01", Cluster: "etcd-d", Outcome: OutcomeHealthy, Health: "3/3 members healthy"},
	}}
	tab := rep.Table()
	if len(tab.Rows) != len(rep.Clusters) || len(tab.Header) != len(tab.Rows[0]) {
		t.Fatalf("table %v: %d rows for %d clusters", tab.Header, len(tab.Rows), len(rep.Clusters))
	}
	col := func(row int, name string) string {
		for i, h := range tab.Header {
			if h == name {
				return tab.Rows[row][i]
			}
		}
		t.Fatalf("no column %s in %v", name, tab.Header)
		return ""
	}
	for _, tc := range []struct {
		row       int
		col, want string
	}{
		{0, "OUTCOME", OutcomeRestored}, {0, "NODEPORT", "30123"}, {0, "ELAPSED", "1m1s"}, {0, "BYTES", "2.0 MiB"}, {0, "REVISION", "1000000042"},
		{0, "CLIENT URL", "https://etcd-a-client.kubx-etcd-01.svc:2379"}, {0, "ERROR", "-"},
		{1, "OUTCOME", OutcomeDoneEarlier}, {1, "RUN", "20261129T100000.000Z-0a0b0c0d"}, {1, "NODEPORT", "-"},
		{2, "ERROR", fmt.Sprintf("at step %q: etcd-operator did not ...; next: runbooks/quorum-loss.md#restore-through-etcd-operator", kube.OpStepWait)},
		{3, "HEALTH", "3/3 members healthy"}, {3, "BACKUP", "-"},
	} {
		if got := col(tc.row, tc.col); got != tc.want {
			t.Errorf("row %d %s = %q, want %q", tc.row, tc.col, got, tc.want)
		}
	}
	notes := strings.Join(tab.Notes, "\n")
	// The kube-apiservers to restart: the restored and the done-earlier
	// ones, as the runbook's jq lists them.
	if !strings.Contains(notes, "kubx-etcd-01/etcd-a (NodePort 30123), kubx-etcd-01/etcd-b") || !strings.Contains(notes, "1 cluster(s) failed: kubx-etcd-01/etcd-c") {
		t.Errorf("notes: %s", notes)
	}
	// Warnings and namespaces that failed as a whole head the report.
	rep.Warnings = []string{"namespace kubx-etcd-02: no member of any of its 3 cluster(s) answered"}
	rep.NamespaceErrors = []RestoreAllNamespaceError{{Namespace: "kubx-etcd-03", Step: StepNamespace, Error: "listing etcdclusters: forbidden"}}
	var head []string
	for _, tb := range rep.Tables() {
		head = append(head, tb.Lines...)
	}
	if h := strings.Join(head, "\n"); !strings.Contains(h, "WARNING: namespace kubx-etcd-02") || !strings.Contains(h, "NAMESPACE FAILED: kubx-etcd-03") {
		t.Errorf("head: %s", h)
	}
	// A cluster's restore warnings head it too, named by the cluster.
	rep.Clusters[0].Warnings = []string{"lease(s) abc: not placed"}
	head = nil
	for _, tb := range rep.Tables() {
		head = append(head, tb.Lines...)
	}
	if h := strings.Join(head, "\n"); !strings.Contains(h, "WARNING: kubx-etcd-01/etcd-a: lease(s) abc: not placed") {
		t.Errorf("head with a cluster's warning: %s", h)
	}
	// Each step's next step is a runbook section.
	for _, step := range []string{StepProbe, kube.OpStepSelect, kube.OpStepWait, kube.RRStepEscrow, kube.StepRebuild, StepRecord, StepJournalReach} {
		if n := NextStep(step); !strings.HasPrefix(n, "runbooks/") || !strings.Contains(n, ".md#") {
			t.Errorf("next step of %q: %q", step, n)
		}
	}
}

func TestRestoreAllFailedStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&kube.OperatorRestoreError{At: kube.OpStepVerify, Err: errors.New("x")}, kube.OpStepVerify},
		{fmt.Errorf("wrapped: %w", &kube.RebuildRestoreError{At: kube.RRStepEscrow, Err: errors.New("x")}), kube.RRStepEscrow},
		{&kube.RebuildError{Err: errors.New("x")}, kube.StepRebuild},
		{errors.New("other"), "restore"},
	} {
		if got := failedStep(tc.err); got != tc.want {
			t.Errorf("failedStep(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestRestoreAllAttemptBound(t *testing.T) {
	t.Parallel()
	const ct = 30 * time.Minute
	for _, tc := range []struct {
		n, parallel int
		expected    time.Duration
		want        time.Duration
	}{
		{0, 8, 0, ct + 5*time.Minute},                              // nothing to do: one round
		{100, 8, 0, 13*ct + 5*time.Minute},                         // no model: every round at its deadline
		{100, 8, 20 * time.Minute, 70*time.Minute + 5*time.Minute}, // twice the expected time plus one deadline
		{3, 8, 10 * time.Hour, ct + 5*time.Minute},                 // never past every round's deadline
		{5, 0, 0, 5*ct + 5*time.Minute},                            // parallel 0 is 1
	} {
		if got := attemptBound(tc.n, tc.parallel, ct, tc.expected); got != tc.want {
			t.Errorf("attemptBound(%d, %d, %v, %v) = %v, want %v", tc.n, tc.parallel, ct, tc.expected, got, tc.want)
		}
	}
}

// Each cluster's restore options: the template's, with the cluster, its
// namespace's store, the run's annotation, its own journal for a point in
// time, the store (not its present state) for a healthy cluster restored
// on request, and etcd-operator's wait within the cluster's deadline.
func TestRestoreAllClusterOptions(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 9, 30, 0, 0, time.UTC)
	r := newRestoreAll(RestoreAllOptions{ToTime: at, ClusterTimeout: 5 * time.Minute,
		Template: kube.OperatorRestoreOptions{Bucket: "b", Endpoint: "e", Timeout: 10 * time.Minute, Backup: "ignored"}})
	ns := &raNamespace{RestoreAllNamespace: RestoreAllNamespace{Kube: &kube.Client{Namespace: "kubx-etcd-07"}, Layout: catalog.Layout{Prefix: "kubx-etcd-07/"}},
		name: "kubx-etcd-07", run: "20261129T100000.000Z-0a0b0c0d"}
	lost := &raCluster{ns: ns, id: "etcd-lost"}
	healthy := &raCluster{ns: ns, id: "etcd-fine", judged: OutcomeHealthy}
	o := r.clusterOptions(lost)
	if o.Cluster != "etcd-lost" || o.Kube != ns.Kube || o.Layout != ns.Layout || o.Backup != "" || o.DryRun ||
		o.Annotations[AnnotationRun] != ns.run || o.Bucket != "b" || o.OnStep == nil || o.Progress == nil {
		t.Errorf("options %+v", o)
	}
	if !o.ToTime.Equal(at) || o.Journal == nil || o.NoLive {
		t.Errorf("point in time: to %v, journal %v, no-live %t", o.ToTime, o.Journal, o.NoLive)
	}
	if o.Timeout != 5*time.Minute {
		t.Errorf("etcd-operator's wait %v, want the cluster's deadline 5m", o.Timeout)
	}
	if o := r.clusterOptions(healthy); !o.NoLive {
		t.Error("a healthy cluster restored on request takes a survivor snapshot of its present state")
	}
}

// TestRestoreAllEachIsolates: a panic in one cluster's restore is that
// cluster's failed row (the others are restored, the run goes on); on a
// cancel, a cluster that had failed before its turn keeps its failure and
// only the clusters truly not started are not-started.
func TestRestoreAllEachIsolates(t *testing.T) {
	t.Parallel()
	ns := &raNamespace{name: "kubx-etcd-01"}
	mk := func(ids ...string) []*raCluster {
		var out []*raCluster
		for _, id := range ids {
			c := &raCluster{ns: ns, id: id, action: ActionRestore}
			c.row.Namespace, c.row.Cluster = ns.name, id
			out = append(out, c)
		}
		return out
	}

	t.Run("Panic", func(t *testing.T) {
		t.Parallel()
		r := newRestoreAll(RestoreAllOptions{Parallel: 2})
		r.todo = mk("etcd-a", "etcd-boom", "etcd-c")
		r.restore = func(_ context.Context, c *raCluster) {
			r.step(c, kube.OpStepStage)
			if c.id == "etcd-boom" {
				var m map[string]int
				m["x"]++ // a nil map: the kind of bug a panic is
			}
			c.row.Outcome = OutcomeRestored
			r.finished(c)
		}
		r.restoreEach(context.Background())
		rep, err := r.tally(context.Background())
		var rae *RestoreAllError
		if !errors.As(err, &rae) || strings.Join(rae.Failed, ",") != "kubx-etcd-01/etcd-boom" {
			t.Fatalf("tally: %v, want etcd-boom failed", err)
		}
		for _, row := range rep.Clusters {
			switch {
			case row.Cluster == "etcd-boom":
				if row.Outcome != OutcomeFailed || row.FailedStep != kube.OpStepStage || !strings.Contains(row.Cause, "panicked") ||
					!strings.Contains(row.Cause, "nil map") || !strings.Contains(row.Cause, "etcd-boom") {
					t.Errorf("the panicking cluster: %+v", row)
				}
			case row.Outcome != OutcomeRestored:
				t.Errorf("%s: %+v, want restored all the same", row.Cluster, row)
			}
		}
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		r := newRestoreAll(RestoreAllOptions{Parallel: 1})
		r.todo = mk("etcd-a", "etcd-b", "etcd-c")
		// etcd-c failed at discovery (it sorts last: nothing to do).
		r.todo[2].action = ""
		r.todo[2].fail(StepProbe, errors.New("no member answered"))
		ctx, cancel := context.WithCancel(context.Background())
		r.restore = func(ctx context.Context, c *raCluster) {
			cancel() // SIGTERM during the first restore
			<-ctx.Done()
			c.fail(kube.OpStepWait, ctx.Err())
			r.finished(c)
		}
		r.restoreEach(ctx)
		rep, _ := r.tally(ctx)
		want := map[string]string{"etcd-a": OutcomeFailed, "etcd-b": OutcomeNotStarted, "etcd-c": OutcomeFailed}
		for _, row := range rep.Clusters {
			if row.Outcome != want[row.Cluster] {
				t.Errorf("%s: %s (%s), want %s", row.Cluster, row.Outcome, row.Cause, want[row.Cluster])
			}
		}
		if c := r.todo[2].row; c.FailedStep != StepProbe || c.Cause != "no member answered" {
			t.Errorf("the cluster that failed before its turn lost its failure: %+v", c)
		}
	})
}

// TestRestoreAllDoneStill: a done record skips its cluster only while the
// EtcdCluster is the one it restored (its uid) and has quorum now.
func TestRestoreAllDoneStill(t *testing.T) {
	t.Parallel()
	ns := &raNamespace{name: "kubx-etcd-01"}
	d := catalog.FleetRestoreDone{Run: "20261129T100000.000Z-0a0b0c0d", Cluster: "etcd-a", UID: "uid-1", Verified: time.Date(2026, 11, 29, 10, 5, 0, 0, time.UTC)}
	cl := func(uid, judged string) *raCluster {
		c := &raCluster{ns: ns, id: "etcd-a", cluster: &kube.Cluster{Name: "etcd-a", UID: types.UID(uid)}, judged: judged}
		c.row.Health = "0/1 members healthy, 0/1 member pods Running and Ready: quorum lost"
		return c
	}
	for _, tc := range []struct {
		name string
		d    catalog.FleetRestoreDone
		c    *raCluster
		want string // "" skipped as done-earlier
	}{
		{"same, healthy", d, cl("uid-1", OutcomeHealthy), ""},
		{"same, degraded", d, cl("uid-1", OutcomeDegraded), ""},
		{"same, quorum lost again", d, cl("uid-1", ""), "restored by run 20261129T100000.000Z-0a0b0c0d at 2026-11-29T10:05:00Z, quorum lost again since"},
		{"another EtcdCluster", d, cl("uid-2", OutcomeHealthy), "not the EtcdCluster run 20261129T100000.000Z-0a0b0c0d restored"},
		{"a record without uid (forged or older)", catalog.FleetRestoreDone{Run: d.Run}, cl("uid-1", OutcomeHealthy), "not the EtcdCluster"},
		{"no EtcdCluster", d, &raCluster{ns: ns, id: "etcd-a"}, "has no EtcdCluster now"},
	} {
		err := doneStill(tc.d, tc.c)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want skipped", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "kubx-etcd-01/etcd-a")):
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	// The recheck's decision: restored only when quorum is still lost.
	for judged, want := range map[string]bool{"": true, OutcomeHealthy: false, OutcomeDegraded: false, judgedUnreachable: false} {
		if got := restoreNow(judged); got != want {
			t.Errorf("restoreNow(%q) = %t, want %t", judged, got, want)
		}
	}
}
