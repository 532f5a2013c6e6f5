package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/store"
)

// AnnotationRun is put on the EtcdRestore restore-all creates: its run, so
// that a rerun of that run finishes a restore a killed attempt left.
const AnnotationRun = "etcd-recovery.armada.ibm.com/restore-run"

// recordTimeout bounds each record's write, which runs with a context
// of its own after a cancel (the end record says it was cancelled).
const recordTimeout = 30 * time.Second

// request is what was asked, canonical: names sorted and unique, the
// selector in its canonical form, the time in UTC.
func (o RestoreAllOptions) request() catalog.FleetRestoreRequest {
	names := slices.Clone(o.Names)
	slices.Sort(names)
	req := catalog.FleetRestoreRequest{Names: slices.Compact(names), Rebuild: o.Rebuild, Force: o.Force}
	if sel, err := labels.Parse(o.Selector); err == nil && o.Selector != "" {
		req.Selector = sel.String()
	}
	if !o.ToTime.IsZero() {
		req.ToTime = o.ToTime.UTC()
	}
	return req
}

// runState is what the keys under a prefix's _restores/ say about one run.
type runState struct {
	run  string
	plan bool
	// starts are its attempts' starts, oldest first; ends the ones with
	// an end record.
	starts []time.Time
	ends   map[time.Time]bool
	// beats are the attempts' newest beat records' times, by start.
	beats map[time.Time]time.Time
	done  []string
}

// lastEnd is the end record of s's newest attempt that did not yield
// (nil: that attempt has none, or s has no attempt). A yielded attempt
// did nothing: judged by it, a run another attempt finished would look
// unfinished, or one with clusters left would look finished. yieldedOnly:
// s has attempts and every one of them yielded (the run did nothing).
func lastEnd(ctx context.Context, st store.Store, l catalog.Layout, s *runState) (end *catalog.FleetRestoreAttempt, yieldedOnly bool, err error) {
	for i := len(s.starts) - 1; i >= 0; i-- {
		started := s.starts[i]
		if !s.ends[started] {
			return nil, false, nil
		}
		var a catalog.FleetRestoreAttempt
		if err := catalog.ReadFleetRestoreRecord(ctx, st, l.FleetRestoreAttemptKey(s.run, started, true), &a); err != nil {
			return nil, false, err
		}
		if !a.Yielded {
			return &a, false, nil
		}
	}
	return nil, len(s.starts) > 0, nil
}

// latest is the newest attempt's start, and whether it has an end record.
func (s *runState) latest() (time.Time, bool, bool) {
	if len(s.starts) == 0 {
		return time.Time{}, false, false
	}
	t := s.starts[len(s.starts)-1]
	return t, s.ends[t], true
}

// runStates groups the keys under l.RestoresPrefix() by run, newest run
// first (run ids sort by time).
func runStates(l catalog.Layout, keys []string) []*runState {
	byRun := map[string]*runState{}
	for _, key := range keys {
		k, ok := l.ParseFleetRestoreKey(key)
		if !ok {
			continue
		}
		s := byRun[k.Run]
		if s == nil {
			s = &runState{run: k.Run, ends: map[time.Time]bool{}, beats: map[time.Time]time.Time{}}
			byRun[k.Run] = s
		}
		switch k.Record {
		case "plan":
			s.plan = true
		case "start":
			s.starts = append(s.starts, k.Started)
		case "end":
			s.ends[k.Started] = true
		case "beat":
			if k.Beat.After(s.beats[k.Started]) {
				s.beats[k.Started] = k.Beat
			}
		case "done":
			s.done = append(s.done, k.Cluster)
		}
	}
	out := make([]*runState, 0, len(byRun))
	for _, s := range byRun {
		slices.SortFunc(s.starts, func(a, b time.Time) int { return a.Compare(b) })
		slices.Sort(s.done)
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *runState) int { return strings.Compare(b.run, a.run) })
	return out
}

// complete says whether a run is finished: every planned cluster has a
// done record, or its newest attempt ended with nothing failed, cancelled
// or not started (a planned cluster found healthy again was left alone).
func complete(plan *catalog.FleetRestorePlan, s *runState, lastEnd *catalog.FleetRestoreAttempt) bool {
	all := true
	for _, c := range plan.Clusters {
		all = all && slices.Contains(s.done, c.Cluster)
	}
	if all {
		return true
	}
	return lastEnd != nil && len(lastEnd.Failed) == 0 && lastEnd.NotStarted == 0 && !lastEnd.Cancelled
}

// InProgressError refuses a run whose attempt is still in progress
// (another restore-all of the same request is running, or was killed
// less than catalog.FleetRestoreHeartbeatGrace ago: its newest beat, or
// its start, is younger than that, and its deadline has not passed).
type InProgressError struct {
	Namespace, Run, Host string
	// LastBeat is the newest beat record's time (zero: none yet).
	Started, LastBeat, Deadline time.Time
}

func (e *InProgressError) Error() string {
	last, what := e.Started, "its start (no beat yet)"
	if e.LastBeat.After(last) {
		last, what = e.LastBeat, "its last beat"
	}
	until := last.Add(catalog.FleetRestoreHeartbeatGrace)
	deadline := "unknown"
	if !e.Deadline.IsZero() {
		deadline = e.Deadline.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("namespace %s: a restore-all is in progress there (run %s, of this request or another: two at once would restore the same clusters): "+
		"its attempt started %s on host %q and beat at %s, %s, its deadline %s; "+
		"it counts as running until %s unless it beats again (no end record yet; a running attempt beats every %v, one with no beat for %v "+
		"counts as killed); wait for it, or, once that process is gone (its pod deleted, its node lost), "+
		"rerun with --take-over to go on now (--new-run starts another run, which does not skip the clusters this one finished)",
		e.Namespace, e.Run, e.Started.UTC().Format(time.RFC3339), e.Host, last.UTC().Format(time.RFC3339), what, deadline,
		until.UTC().Format(time.RFC3339), catalog.FleetRestoreHeartbeatEvery, catalog.FleetRestoreHeartbeatGrace)
}

// openRuns finds each namespace's run: the newest unfinished run of the
// same request (resumed, its done records read), unless NewRun; else a
// new run id. A run of the same request with an attempt in progress is
// refused.
func (r *restoreAll) openRuns(ctx context.Context) error {
	req := r.opts.request()
	fp := catalog.FleetRestoreFingerprint(req)
	for _, ns := range r.live() {
		if err := r.openRun(ctx, ns, fp); err != nil {
			if ctx.Err() != nil {
				return ctxErr(ctx, err)
			}
			r.dropNamespace(ns, StepNamespace, unwrapRA(err))
		}
	}
	return r.allFailed(ctx)
}

// unwrapRA is the error inside a RestoreAllError (a namespace's error
// joins the run's, which says restore-all once).
func unwrapRA(err error) error {
	var rae *RestoreAllError
	if errors.As(err, &rae) && len(rae.Failed) == 0 {
		return rae.Err
	}
	return err
}

func (r *restoreAll) openRun(ctx context.Context, ns *raNamespace, fp string) error {
	l, st := ns.Layout, ns.Store
	objs, err := st.List(ctx, l.RestoresPrefix())
	if err != nil {
		return &RestoreAllError{Err: fmt.Errorf("namespace %s: listing the restore runs under %s: %w", ns.name, l.RestoresPrefix(), ctxErr(ctx, err))}
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	now := r.opts.now()
	states := runStates(l, keys)
	// Any attempt in progress in the namespace, of any request, holds it:
	// a run of another request (another --cluster, --selector or
	// --to-time) beside it would restore the same clusters at once. Told
	// from the keys alone (start, end and beat times are in them).
	if !r.opts.TakeOver {
		if ip := r.inProgress(ctx, ns, states, nil); ip != nil {
			if !r.opts.DryRun {
				return &RestoreAllError{Err: ip}
			}
			// A dry run changes nothing: it plans, and says so.
			r.log.Warn("restore-all: dry run: "+ip.Error(), "namespace", ns.name, "run", ip.Run)
		}
	}
	for _, s := range states {
		if !s.plan {
			continue
		}
		var plan catalog.FleetRestorePlan
		if err := catalog.ReadFleetRestoreRecord(ctx, st, l.FleetRestorePlanKey(s.run), &plan); err != nil {
			if ctx.Err() != nil {
				return &RestoreAllError{Err: fmt.Errorf("namespace %s: %w", ns.name, ctxErr(ctx, err))}
			}
			// One unreadable (damaged, forged, oversized) plan of some
			// run must not block every restore of the namespace: that run
			// is not resumed, and the log names its key.
			r.log.Warn("restore-all: a restore run's plan cannot be read; that run is not resumed", "namespace", ns.name,
				"run", s.run, "key", l.FleetRestorePlanKey(s.run), "err", err)
			continue
		}
		if plan.Fingerprint != fp || plan.Run != s.run {
			continue
		}
		lastEnd, yieldedOnly, err := lastEnd(ctx, st, l, s)
		if err != nil {
			return &RestoreAllError{Err: fmt.Errorf("namespace %s: %w", ns.name, ctxErr(ctx, err))}
		}
		if yieldedOnly {
			// Begun at the same time as another run, it yielded and did
			// nothing: resuming it would pass over the other's done
			// records (and restore those clusters again).
			continue
		}
		if ns.run != "" || r.opts.NewRun || complete(&plan, s, lastEnd) {
			continue
		}
		ns.run, ns.resumed, ns.plan = s.run, true, &plan
		if ns.done, err = readDone(ctx, st, l, s); err != nil {
			return &RestoreAllError{Err: fmt.Errorf("namespace %s: %w", ns.name, ctxErr(ctx, err))}
		}
		r.log.Info("restore-all: resuming an unfinished run of the same request", "namespace", ns.name, "run", s.run,
			"done", len(ns.done), "planned", len(plan.Clusters))
	}
	if ns.run == "" {
		ns.run = catalog.NewFleetRestoreRunID(now)
	}
	return nil
}

// inProgress is the first attempt in progress among states (no end record,
// its newest beat or its start younger than
// catalog.FleetRestoreHeartbeatGrace) for which counts says yes (nil:
// every one): nil when there is none. Its start record is read for the
// host and deadline the refusal names; an unreadable one still refuses,
// naming the key.
func (r *restoreAll) inProgress(ctx context.Context, ns *raNamespace, states []*runState, counts func(run string, started time.Time) bool) *InProgressError {
	now := r.opts.now()
	for _, s := range states {
		for _, started := range s.starts {
			if s.ends[started] || !catalog.FleetRestoreAlive(started, s.beats[started], time.Time{}, now) {
				continue
			}
			if counts != nil && !counts(s.run, started) {
				continue
			}
			ip := &InProgressError{Namespace: ns.name, Run: s.run, Started: started, LastBeat: s.beats[started]}
			var a catalog.FleetRestoreAttempt
			if err := catalog.ReadFleetRestoreRecord(ctx, ns.Store, ns.Layout.FleetRestoreAttemptKey(s.run, started, false), &a); err == nil {
				ip.Host, ip.Deadline = a.Host, a.Deadline
			} else {
				ip.Host = "unknown (" + err.Error() + ")"
			}
			return ip
		}
	}
	return nil
}

// YieldError is a restore-all that stopped in a namespace right after it
// began there, having found another attempt in progress (InProgress)
// that began at the same time: it restored nothing there and wrote its
// end record. The other may have stopped too, having found this one.
type YieldError struct {
	InProgress *InProgressError
}

func (e *YieldError) Error() string {
	ip := e.InProgress
	return fmt.Sprintf("namespace %s: another restore-all began there at the same time (run %s, on host %q): this one stopped there before restoring anything "+
		"(two at once would restore the same clusters); that one goes on, or stopped too if it found this one: look at the namespace's runs (inspect --all), "+
		"then run again", ip.Namespace, ip.Run, ip.Host)
}

func (e *YieldError) Unwrap() error { return e.InProgress }

// yieldToOthers closes the race of two restore-alls started at once in a
// namespace (both found nothing in progress before writing): once its
// start record is written, each lists the runs again and yields to every
// other attempt in progress it finds. The store's listings are
// consistent after a write (COS, S3 and MinIO read after write), so at
// most one goes on: of two, one that listed before the other's record was
// there goes on, and the other, listing after its own write, finds it;
// two that find each other both yield, to be run again. No time decides
// it: the attempts' own start times are one stamp for every namespace of
// a run (the last namespace's record is written seconds later) and come
// from hosts whose clocks differ, and a store's stamps need not follow the
// order in which its objects became visible.
func (r *restoreAll) yieldToOthers(ctx context.Context, ns *raNamespace) error {
	if r.opts.TakeOver || r.opts.DryRun || ns.attempt == nil {
		return nil
	}
	objs, err := ns.Store.List(ctx, ns.Layout.RestoresPrefix())
	if err != nil {
		return &RestoreAllError{Err: fmt.Errorf("namespace %s: listing the restore runs again after starting run %s: %w", ns.name, ns.run, ctxErr(ctx, err))}
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	self := ns.Layout.FleetRestoreAttemptKey(ns.run, ns.attempt.Started, false)
	if !slices.Contains(keys, self) {
		return &RestoreAllError{Err: fmt.Errorf("namespace %s: run %s's start record %s is not in the listing after it was written: "+
			"whether another restore-all began there too is unknown; run again", ns.name, ns.run, self)}
	}
	other := func(run string, started time.Time) bool {
		return ns.Layout.FleetRestoreAttemptKey(run, started, false) != self
	}
	if ip := r.inProgress(ctx, ns, runStates(ns.Layout, keys), other); ip != nil {
		return &RestoreAllError{Err: &YieldError{InProgress: ip}}
	}
	return nil
}

// endAttempt writes ns's attempt end record now (it restores nothing
// more), so that neither a rerun nor another run is held by it. Its
// planned clusters not done count as not started: the run stays
// unfinished, and a rerun resumes it (skipping what it did) instead of
// starting another that would restore them all again.
func (r *restoreAll) endAttempt(ctx context.Context, ns *raNamespace) {
	a := *ns.attempt
	a.Ended = r.opts.now().UTC()
	a.Cancelled = ctx.Err() != nil
	a.Yielded = true
	for _, c := range r.todo {
		if c.ns == ns && c.action != "" {
			if _, done := ns.done[c.id]; !done {
				a.NotStarted++
			}
		}
	}
	r.writeEnd(ctx, ns, &a)
	ns.attempt = nil
}

// readDone reads a run's done records.
func readDone(ctx context.Context, st store.Store, l catalog.Layout, s *runState) (map[string]catalog.FleetRestoreDone, error) {
	recs := make([]catalog.FleetRestoreDone, len(s.done))
	errs := make([]error, len(s.done))
	fanout.ForEach(ctx, len(s.done), discoverParallel, func(ctx context.Context, i int) {
		errs[i] = catalog.ReadFleetRestoreRecord(ctx, st, l.FleetRestoreDoneKey(s.run, s.done[i]), &recs[i])
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := map[string]catalog.FleetRestoreDone{}
	for i, c := range s.done {
		out[c] = recs[i]
	}
	return out, nil
}

// plannedAction is the action the namespace's resumed run planned for
// cluster id ("" when none).
func (ns *raNamespace) plannedAction(id string) string {
	if ns.plan == nil || !ns.resumed {
		return ""
	}
	for _, p := range ns.plan.Clusters {
		if p.Cluster == id {
			return p.Action
		}
	}
	return ""
}

// writePlans writes each new run's plan (create-only) and each
// namespace's attempt start record; a dry run writes nothing.
func (r *restoreAll) writePlans(ctx context.Context) error {
	now := r.opts.now().UTC()
	n := 0
	for _, c := range r.todo {
		if c.action != "" {
			n++
		}
	}
	deadline := now.Add(attemptBound(n, r.opts.Parallel, r.opts.ClusterTimeout, r.rep.Expected))
	req := r.opts.request()
	for _, ns := range r.live() {
		run := RestoreAllRun{Namespace: ns.name, Prefix: ns.Layout.RootPrefix(), Run: ns.run, Resumed: ns.resumed}
		if r.opts.DryRun {
			r.rep.Runs = append(r.rep.Runs, run)
			continue
		}
		st, l := ns.Store, ns.Layout
		if !ns.resumed {
			plan := &catalog.FleetRestorePlan{Version: catalog.FleetRestorePlanVersion, Run: ns.run, Namespace: ns.name, Created: now,
				Request: req, Fingerprint: catalog.FleetRestoreFingerprint(req), Clusters: []catalog.FleetRestorePlanned{},
				Expected: r.rep.Expected, Model: r.rep.Model}
			for _, c := range r.todo {
				if c.ns == ns && c.action != "" {
					plan.Clusters = append(plan.Clusters, catalog.FleetRestorePlanned{Cluster: c.id, Action: c.action, Backup: c.row.Backup,
						Revision: c.row.Revision, Bytes: c.row.Bytes})
				}
			}
			if err := catalog.WriteFleetRestoreRecord(ctx, st, l.FleetRestorePlanKey(ns.run), plan); err != nil {
				if ctx.Err() != nil {
					return ctxErr(ctx, err)
				}
				r.dropNamespace(ns, StepRecord, fmt.Errorf("namespace %s: writing the plan of run %s: %w", ns.name, ns.run, err))
				continue
			}
			ns.plan = plan
		}
		a := &catalog.FleetRestoreAttempt{Run: ns.run, Started: now, Deadline: deadline, Host: r.opts.Host, Parallel: r.opts.Parallel}
		if err := catalog.WriteFleetRestoreRecord(ctx, st, l.FleetRestoreAttemptKey(ns.run, now, false), a); err != nil {
			if ctx.Err() != nil {
				return ctxErr(ctx, err)
			}
			r.dropNamespace(ns, StepRecord, fmt.Errorf("namespace %s: writing the attempt's start record of run %s: %w", ns.name, ns.run, err))
			continue
		}
		ns.attempt = a
		run.Attempt = now
		r.rep.Runs = append(r.rep.Runs, run)
		if err := r.yieldToOthers(ctx, ns); err != nil {
			if ctx.Err() != nil {
				return ctxErr(ctx, err)
			}
			// This namespace only: the run's others go on.
			r.endAttempt(ctx, ns)
			r.dropNamespace(ns, StepRecord, err)
			continue
		}
	}
	return r.allFailed(ctx)
}

// attemptBound is how long an attempt of n clusters counts as running
// without an end record (its deadline, after which a rerun resumes the
// run): twice the plan's expected time plus one cluster's deadline, at
// most every round of parallel clusters taking clusterTimeout; and 5
// minutes for the records. A process killed hard (no end record) stops
// beating, and holds the run only catalog.FleetRestoreHeartbeatGrace after
// its last beat; --take-over resumes it before.
func attemptBound(n, parallel int, clusterTimeout, expected time.Duration) time.Duration {
	rounds := max((n+max(parallel, 1)-1)/max(parallel, 1), 1)
	bound := time.Duration(rounds) * clusterTimeout
	if expected > 0 {
		bound = min(bound, 2*expected+clusterTimeout)
	}
	return bound + 5*time.Minute
}

// heartbeat writes a beat record (catalog.FleetRestoreBeatKey) of each
// namespace's attempt every heartbeatEvery until stop is called, so that
// a rerun (and the exporter) tells an attempt killed hard from one still
// running within catalog.FleetRestoreHeartbeatGrace, not at its deadline.
// It runs with a context of its own: a cancelled attempt still beats
// while it winds down, until its end record. A beat that cannot be
// written is logged; the next one may be.
func (r *restoreAll) heartbeat(ctx context.Context) (stop func()) {
	every := r.opts.heartbeatEvery
	if every <= 0 {
		every = catalog.FleetRestoreHeartbeatEvery
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-bctx.Done():
				return
			case <-t.C:
			}
			now := r.opts.now().UTC()
			for _, ns := range r.nss {
				if ns.attempt == nil {
					continue
				}
				b := &catalog.FleetRestoreBeat{Run: ns.run, Started: ns.attempt.Started, Beat: now, Host: ns.attempt.Host}
				wctx, wcancel := context.WithTimeout(bctx, recordTimeout)
				err := catalog.WriteFleetRestoreRecord(wctx, ns.Store, ns.Layout.FleetRestoreBeatKey(ns.run, ns.attempt.Started, now), b)
				wcancel()
				if err != nil && !errors.Is(err, store.ErrExists) && bctx.Err() == nil {
					r.log.Warn("restore-all: could not write the attempt's beat record (after "+catalog.FleetRestoreHeartbeatGrace.String()+
						" without one a rerun takes the run over)", "namespace", ns.name, "run", ns.run, "err", err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// writeEnds writes each namespace's attempt end record with its tallies,
// with a context of its own (a cancelled attempt says so).
func (r *restoreAll) writeEnds(ctx context.Context) {
	for _, ns := range r.nss {
		if ns.attempt == nil {
			continue
		}
		a := *ns.attempt
		a.Ended = r.opts.now().UTC()
		a.Cancelled = ctx.Err() != nil
		for _, c := range append(append([]*raCluster{}, r.todo...), r.left...) {
			if c.ns != ns {
				continue
			}
			switch c.row.Outcome {
			case OutcomeRestored, OutcomeRebuilt:
				a.Verified++
			case OutcomeDoneEarlier:
				a.Skipped++
			case OutcomeFailed:
				a.Failed = append(a.Failed, fmt.Sprintf("%s: %s: %s", c.id, c.row.FailedStep, c.row.Cause))
			case OutcomeNotStarted:
				a.NotStarted++
			case "":
				if c.action != "" {
					a.NotStarted++ // the attempt stopped before its turn
				}
			}
		}
		r.writeEnd(ctx, ns, &a)
	}
}

// writeEnd writes ns's attempt end record a, with a context of its own.
func (r *restoreAll) writeEnd(ctx context.Context, ns *raNamespace, a *catalog.FleetRestoreAttempt) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	err := catalog.WriteFleetRestoreRecord(wctx, ns.Store, ns.Layout.FleetRestoreAttemptKey(ns.run, a.Started, true), a)
	cancel()
	if err != nil {
		r.log.Error("restore-all: could not write the attempt's end record (a rerun waits for its deadline)", "namespace", ns.name,
			"run", ns.run, "deadline", a.Deadline, "err", err)
	}
}
