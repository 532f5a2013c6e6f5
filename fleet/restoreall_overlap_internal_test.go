package fleet

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

// Two restore-alls in one namespace never run at once, whatever their
// requests: an attempt in progress (a fresh beat, even past its deadline)
// refuses any other run; two started at the same moment (both found
// nothing before writing their start records) each list again after the
// write and yield to any other they find, so at most one goes on. A killed attempt (beats stopped) holds
// nothing, and an unreadable plan of some old run blocks nothing. The
// records are the store's (the in-memory store: this is the records'
// logic; the end-to-end tests run it on MinIO).
func TestRestoreAllOverlap(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	l := catalog.Layout{Prefix: "kubx-etcd-01/"}
	st := memstore.New()
	write := func(key string, v any) {
		t.Helper()
		if err := catalog.WriteFleetRestoreRecord(ctx, st, key, v); err != nil {
			t.Fatal(err)
		}
	}
	// Run A of another request (--cluster etcd-a): started at t0, beating,
	// its deadline an hour later.
	runA := catalog.NewFleetRestoreRunID(t0)
	reqA := catalog.FleetRestoreRequest{Names: []string{"etcd-a"}}
	write(l.FleetRestorePlanKey(runA), catalog.FleetRestorePlan{Version: 1, Run: runA, Namespace: "kubx-etcd-01", Created: t0,
		Request: reqA, Fingerprint: catalog.FleetRestoreFingerprint(reqA)})
	write(l.FleetRestoreAttemptKey(runA, t0, false), catalog.FleetRestoreAttempt{Run: runA, Started: t0, Deadline: t0.Add(time.Hour), Host: "toolkit-a"})
	beat := func(at time.Time) {
		write(l.FleetRestoreBeatKey(runA, t0, at), catalog.FleetRestoreBeat{Run: runA, Started: t0, Beat: at})
	}
	// An old run whose plan is garbage.
	junk := catalog.NewFleetRestoreRunID(t0.Add(-48 * time.Hour))
	if _, err := st.Put(ctx, l.FleetRestorePlanKey(junk), strings.NewReader("{not json")); err != nil {
		t.Fatal(err)
	}

	open := func(now time.Time, opts RestoreAllOptions) (*raNamespace, error) {
		opts.now = func() time.Time { return now }
		r := &restoreAll{opts: opts, log: slog.New(slog.DiscardHandler), rep: &RestoreAllReport{}}
		ns := &raNamespace{RestoreAllNamespace: RestoreAllNamespace{Store: st, Layout: l}, name: "kubx-etcd-01"}
		r.nss = []*raNamespace{ns}
		return ns, r.openRuns(ctx)
	}
	inProgress := func(err error) bool {
		var ip *InProgressError
		return errors.As(err, &ip) && ip.Run == runA && ip.Host == "toolkit-a"
	}

	// 1. Beating, well past its deadline: any other request is refused.
	for m := 1; m <= 120; m++ {
		beat(t0.Add(time.Duration(m) * time.Minute))
	}
	now := t0.Add(120*time.Minute + 30*time.Second)
	if _, err := open(now, RestoreAllOptions{}); !inProgress(err) {
		t.Fatalf("a run of another request while run A beats (past its deadline): %v, want run A in progress", err)
	}
	// A dry run is not refused; --take-over is not either.
	if _, err := open(now, RestoreAllOptions{DryRun: true}); err != nil {
		t.Errorf("dry run: %v", err)
	}
	if _, err := open(now, RestoreAllOptions{TakeOver: true}); err != nil {
		t.Errorf("--take-over: %v", err)
	}
	// 2. Its beats stopped 3 minutes ago: killed, nothing holds the
	// namespace, and the garbage plan blocks nothing.
	later := t0.Add(123 * time.Minute)
	ns, err := open(later, RestoreAllOptions{})
	if err != nil {
		t.Fatalf("after run A stopped beating: %v", err)
	}
	if ns.run == runA {
		t.Error("a run of another request resumed run A")
	}

	// 3. Two started at the same moment, both past openRuns: each writes
	// its start record, then lists again, and yields to any other attempt
	// in progress it finds. Two that find each other both stop, each
	// saying the other may have stopped too.
	tB, tC := later.Add(time.Second), later.Add(time.Second+time.Millisecond)
	runB, runC := catalog.NewFleetRestoreRunID(tB), catalog.NewFleetRestoreRunID(tC)
	startRec := func(l catalog.Layout, run string, at time.Time) *raNamespace {
		t.Helper()
		write(l.FleetRestoreAttemptKey(run, at, false), catalog.FleetRestoreAttempt{Run: run, Started: at, Deadline: at.Add(time.Hour), Host: "h-" + run})
		return &raNamespace{RestoreAllNamespace: RestoreAllNamespace{Store: st, Layout: l}, name: strings.TrimSuffix(l.Prefix, "/"), run: run,
			attempt: &catalog.FleetRestoreAttempt{Run: run, Started: at.Add(123456 * time.Nanosecond)}} // the key truncates to ms
	}
	nsB, nsC := startRec(l, runB, tB), startRec(l, runC, tC)
	r := &restoreAll{opts: RestoreAllOptions{now: func() time.Time { return tC.Add(time.Second) }}, log: slog.New(slog.DiscardHandler)}
	var ip *InProgressError
	var ye *YieldError
	if err := r.yieldToOthers(ctx, nsB); !errors.As(err, &ye) || ye.InProgress.Run != runC || !strings.Contains(err.Error(), "run again") {
		t.Errorf("run B, finding run C begun at once: %v, want it to stop", err)
	}
	if err := r.yieldToOthers(ctx, nsC); !errors.As(err, &ip) || ip.Run != runB {
		t.Errorf("run C, finding run B begun at once: %v, want it to stop", err)
	}

	// 4. No time decides it, neither the runs' own nor the store's: E
	// writes and lists alone and goes on; D, stamped earlier by its own
	// clock and by the store's, writes after E listed and yields to it.
	// (Ordered by either stamp, D went on too: a run over many
	// namespaces stamps one time for all and writes the last namespace's
	// record seconds later, hosts' clocks differ, and a store's stamps
	// need not follow the order its objects became visible in.)
	l2 := catalog.Layout{Prefix: "kubx-etcd-02/"}
	storeAt := tC.Add(time.Minute)
	st.Now = func() time.Time { return storeAt }
	tD, tE := tC.Add(time.Minute), tC.Add(time.Minute+5*time.Second)
	runD, runE := catalog.NewFleetRestoreRunID(tD), catalog.NewFleetRestoreRunID(tE)
	r.opts.now = func() time.Time { return tE.Add(time.Second) }
	nsE := startRec(l2, runE, tE)
	if err := r.yieldToOthers(ctx, nsE); err != nil {
		t.Errorf("run E, alone when it listed: %v", err)
	}
	storeAt = storeAt.Add(-2 * time.Second)
	nsD := startRec(l2, runD, tD)
	if err := r.yieldToOthers(ctx, nsD); !errors.As(err, &ip) || ip.Run != runE {
		t.Errorf("run D, begun after run E listed, went on: %v, want it to yield to run %s", err, runE)
	}
	st.Now = nil

	// 5. A run over two namespaces that finds another attempt in one of
	// them stops there only: it writes that namespace's end record at once
	// (a rerun of either run is not held by it) and goes on with the other.
	l3, l4 := catalog.Layout{Prefix: "kubx-etcd-03/"}, catalog.Layout{Prefix: "kubx-etcd-04/"}
	tF := tE.Add(time.Minute)
	runF := catalog.NewFleetRestoreRunID(tF)
	startRec(l4, runF, tF) // another restore-all, begun in kubx-etcd-04 only
	tG := tF.Add(time.Millisecond)
	rg := newRestoreAll(RestoreAllOptions{Host: "host-g"})
	rg.opts.now = func() time.Time { return tG }
	rg.log = slog.New(slog.DiscardHandler)
	for _, lay := range []catalog.Layout{l3, l4} {
		ns := &raNamespace{RestoreAllNamespace: RestoreAllNamespace{Store: st, Layout: lay}, name: strings.TrimSuffix(lay.Prefix, "/"),
			run: catalog.NewFleetRestoreRunID(tG)}
		rg.nss = append(rg.nss, ns)
		rg.todo = append(rg.todo, &raCluster{ns: ns, id: "etcd-x", action: ActionRestore})
	}
	if err := rg.writePlans(ctx); err != nil {
		t.Fatalf("a run over two namespaces, another attempt in one: %v, want it to go on with the other", err)
	}
	ns3, ns4 := rg.nss[0], rg.nss[1]
	if ns3.failed != nil || ns3.attempt == nil {
		t.Errorf("kubx-etcd-03, where nothing else ran: failed %v, attempt %+v", ns3.failed, ns3.attempt)
	}
	if !errors.As(ns4.failed, &ye) || ye.InProgress.Run != runF || ns4.attempt != nil || len(rg.rep.NamespaceErrors) != 1 {
		t.Errorf("kubx-etcd-04: failed %v, attempt %+v, namespace errors %+v: want it stopped, yielding to run %s", ns4.failed, ns4.attempt,
			rg.rep.NamespaceErrors, runF)
	}
	var ended catalog.FleetRestoreAttempt
	if err := catalog.ReadFleetRestoreRecord(ctx, st, l4.FleetRestoreAttemptKey(ns4.run, tG, true), &ended); err != nil || ended.Ended.IsZero() {
		t.Errorf("kubx-etcd-04's end record, written when it stopped: %+v %v", ended, err)
	}
	// The run it stopped stays unfinished: a rerun of the same request
	// resumes it (skipping what it did), not a new run that would restore
	// every cluster again.
	var plan4 catalog.FleetRestorePlan
	if err := catalog.ReadFleetRestoreRecord(ctx, st, l4.FleetRestorePlanKey(ns4.run), &plan4); err != nil {
		t.Fatal(err)
	}
	for _, s4 := range runStates(l4, restoreKeys(t, st, l4)) {
		if s4.run == ns4.run && (ended.NotStarted != 1 || complete(&plan4, s4, &ended)) {
			t.Errorf("the run that yielded in kubx-etcd-04: %d not started, complete %v; want its planned cluster not started, the run unfinished",
				ended.NotStarted, complete(&plan4, s4, &ended))
		}
	}
}

// A resumed restore-all --to-time takes the revision its plan mapped the
// time to, not the journal's reach again: that mapping may have rested on
// evidence read once (an idle cluster's own revision past its journal's
// end), and a cluster written since would be refused on resume. A new run
// reads the journal (here none: refused).
func TestRestoreAllToTimeResumeTakesThePlannedRevision(t *testing.T) {
	t.Parallel()
	l := catalog.Layout{Prefix: "kubx-etcd-01/"}
	plan := &catalog.FleetRestorePlan{Clusters: []catalog.FleetRestorePlanned{{Cluster: "etcd-a", Action: ActionRestore, Revision: 42}}}
	for _, resumed := range []bool{true, false} {
		ns := &raNamespace{RestoreAllNamespace: RestoreAllNamespace{Store: memstore.New(), Layout: l}, name: "kubx-etcd-01", resumed: resumed, plan: plan}
		c := &raCluster{ns: ns, id: "etcd-a", action: ActionRestore}
		r := newRestoreAll(RestoreAllOptions{ToTime: time.Now()})
		r.log = slog.New(slog.DiscardHandler)
		r.todo = []*raCluster{c}
		r.checkPointInTime(context.Background())
		switch {
		case resumed && (c.row.Revision != 42 || c.row.Outcome == OutcomeFailed):
			t.Errorf("resumed: %+v, want the planned revision 42", c.row)
		case !resumed && (c.row.Outcome != OutcomeFailed || c.row.FailedStep != StepJournalReach):
			t.Errorf("a new run: %+v, want the journal read (none: failed at %q)", c.row, StepJournalReach)
		}
	}
}

// A run's completeness is judged by its newest attempt that did not yield:
// a yielded attempt (begun at the same time as another, it did nothing)
// makes neither a run another attempt finished look unfinished (every
// rerun would resume it, refusing a cluster it restored that lost quorum
// again), nor a run with clusters left look finished (a rerun would start
// a new run, restoring its done clusters again).
func TestRestoreAllCompleteSkipsYieldedAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := catalog.Layout{Prefix: "kubx-etcd-01/"}
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	plan := &catalog.FleetRestorePlan{Clusters: []catalog.FleetRestorePlanned{{Cluster: "a"}, {Cluster: "b"}}}
	for _, tc := range []struct {
		name     string
		first    catalog.FleetRestoreAttempt // the attempt that went on
		complete bool
	}{
		{"the other attempt finished, b left alone (healthy again)", catalog.FleetRestoreAttempt{Verified: 1}, true},
		{"the other attempt failed on b", catalog.FleetRestoreAttempt{Verified: 1, Failed: []string{"b: restore: no quorum"}}, false},
	} {
		st := memstore.New()
		run := catalog.NewFleetRestoreRunID(t0)
		t1, t2 := t0.Add(time.Minute), t0.Add(time.Minute+time.Second) // the yielded one began later by its clock
		a := tc.first
		a.Run, a.Started, a.Ended = run, t1, t1.Add(time.Minute)
		y := catalog.FleetRestoreAttempt{Run: run, Started: t2, Ended: t2, Yielded: true, NotStarted: 1}
		for key, rec := range map[string]any{
			l.FleetRestoreAttemptKey(run, t1, false): &catalog.FleetRestoreAttempt{Run: run, Started: t1},
			l.FleetRestoreAttemptKey(run, t1, true):  &a,
			l.FleetRestoreAttemptKey(run, t2, false): &catalog.FleetRestoreAttempt{Run: run, Started: t2},
			l.FleetRestoreAttemptKey(run, t2, true):  &y,
			l.FleetRestoreDoneKey(run, "a"):          &catalog.FleetRestoreDone{Run: run, Cluster: "a"},
		} {
			if err := catalog.WriteFleetRestoreRecord(ctx, st, key, rec); err != nil {
				t.Fatal(err)
			}
		}
		s := runStates(l, restoreKeys(t, st, l))[0]
		end, yieldedOnly, err := lastEnd(ctx, st, l, s)
		if err != nil || end == nil || end.Yielded || yieldedOnly {
			t.Fatalf("%s: the end judged by: %+v %v, want the attempt that went on", tc.name, end, err)
		}
		if got := complete(plan, s, end); got != tc.complete {
			t.Errorf("%s: complete %v, want %v", tc.name, got, tc.complete)
		}
	}
}

// A run whose every attempt yielded did nothing: it is never resumed (a
// rerun resuming it would pass over the done records of the run that went
// on, and restore those clusters again).
func TestRestoreAllYieldedOnlyRunIsNotResumed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := catalog.Layout{Prefix: "kubx-etcd-01/"}
	st := memstore.New()
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	run := catalog.NewFleetRestoreRunID(t0)
	for key, rec := range map[string]any{
		l.FleetRestoreAttemptKey(run, t0, false): &catalog.FleetRestoreAttempt{Run: run, Started: t0},
		l.FleetRestoreAttemptKey(run, t0, true):  &catalog.FleetRestoreAttempt{Run: run, Started: t0, Ended: t0, Yielded: true, NotStarted: 2},
	} {
		if err := catalog.WriteFleetRestoreRecord(ctx, st, key, rec); err != nil {
			t.Fatal(err)
		}
	}
	end, yieldedOnly, err := lastEnd(ctx, st, l, runStates(l, restoreKeys(t, st, l))[0])
	if err != nil || end != nil || !yieldedOnly {
		t.Errorf("a run whose only attempt yielded: end %+v, yielded only %v, %v; want it known as one that did nothing", end, yieldedOnly, err)
	}
}

// restoreKeys lists the keys under l's restore runs.
func restoreKeys(tb testing.TB, st store.Store, l catalog.Layout) []string {
	tb.Helper()
	objs, err := st.List(context.Background(), l.RestoresPrefix())
	if err != nil {
		tb.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}
