package fleet

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

// Two restore-alls in one namespace never run at once, whatever their
// requests: an attempt in progress (a fresh beat, even past its deadline)
// refuses any other run; two started at the same moment (both found
// nothing before writing their start records) are told apart after the
// write, and the later one yields. A killed attempt (beats stopped) holds
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
	// its start record, then lists again; the later yields, the earlier
	// goes on.
	tB, tC := later.Add(time.Second), later.Add(time.Second+time.Millisecond)
	runB, runC := catalog.NewFleetRestoreRunID(tB), catalog.NewFleetRestoreRunID(tC)
	startRec := func(run string, at time.Time) *raNamespace {
		write(l.FleetRestoreAttemptKey(run, at, false), catalog.FleetRestoreAttempt{Run: run, Started: at, Deadline: at.Add(time.Hour), Host: "h-" + run})
		return &raNamespace{RestoreAllNamespace: RestoreAllNamespace{Store: st, Layout: l}, name: "kubx-etcd-01", run: run,
			attempt: &catalog.FleetRestoreAttempt{Run: run, Started: at.Add(123456 * time.Nanosecond)}} // the key truncates to ms
	}
	nsB, nsC := startRec(runB, tB), startRec(runC, tC)
	r := &restoreAll{opts: RestoreAllOptions{now: func() time.Time { return tC.Add(time.Second) }}, log: slog.New(slog.DiscardHandler)}
	if err := r.yieldToEarlier(ctx, nsB); err != nil {
		t.Errorf("the earlier of two runs started at once yielded: %v", err)
	}
	var ip *InProgressError
	if err := r.yieldToEarlier(ctx, nsC); !errors.As(err, &ip) || ip.Run != runB {
		t.Errorf("the later of two runs started at once went on: %v, want it to yield to run %s", err, runB)
	}

	// 4. The order is the store's, not the runs' own start times: a run
	// over many namespaces stamps one time for all and writes the last
	// namespace's record seconds later, and two hosts' clocks differ. E
	// (stamped later) writes and lists first and goes on; D (stamped
	// earlier, written later) must yield to it. By the stamps, D went on
	// too: two restore-alls of one namespace at once.
	l2 := catalog.Layout{Prefix: "kubx-etcd-02/"}
	storeAt := tC.Add(time.Minute)
	st.Now = func() time.Time { return storeAt }
	startRec2 := func(run string, at time.Time) *raNamespace {
		t.Helper()
		write(l2.FleetRestoreAttemptKey(run, at, false), catalog.FleetRestoreAttempt{Run: run, Started: at, Deadline: at.Add(time.Hour), Host: "h-" + run})
		return &raNamespace{RestoreAllNamespace: RestoreAllNamespace{Store: st, Layout: l2}, name: "kubx-etcd-02", run: run,
			attempt: &catalog.FleetRestoreAttempt{Run: run, Started: at}}
	}
	tD, tE := tC.Add(time.Minute), tC.Add(time.Minute+5*time.Second)
	runD, runE := catalog.NewFleetRestoreRunID(tD), catalog.NewFleetRestoreRunID(tE)
	r.opts.now = func() time.Time { return tE.Add(time.Second) }
	nsE := startRec2(runE, tE)
	if err := r.yieldToEarlier(ctx, nsE); err != nil {
		t.Errorf("run E, alone when it listed: %v", err)
	}
	storeAt = storeAt.Add(2 * time.Second)
	nsD := startRec2(runD, tD)
	if err := r.yieldToEarlier(ctx, nsD); !errors.As(err, &ip) || ip.Run != runE {
		t.Errorf("run D, stamped before E but written after it, went on: %v, want it to yield to run %s", err, runE)
	}
	// Two start records the store stamped alike (its stamps may be to
	// the second): both yield, to be run again; neither goes on.
	l2 = catalog.Layout{Prefix: "kubx-etcd-03/"}
	runF, runG := catalog.NewFleetRestoreRunID(tE), catalog.NewFleetRestoreRunID(tE.Add(time.Millisecond))
	nsF, nsG := startRec2(runF, tE), startRec2(runG, tE.Add(time.Millisecond))
	if err := r.yieldToEarlier(ctx, nsF); !errors.As(err, &ip) || ip.Run != runG {
		t.Errorf("run F, stamped alike with G by the store: %v, want it to yield", err)
	}
	if err := r.yieldToEarlier(ctx, nsG); !errors.As(err, &ip) || ip.Run != runF {
		t.Errorf("run G, stamped alike with F by the store: %v, want it to yield", err)
	}
}
