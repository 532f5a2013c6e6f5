package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/restore"
)

// restoreOne restores one cluster under its own deadline and records it:
// an Event at the start and the end, the done record once verified.
func (r *restoreAll) restoreOne(ctx context.Context, c *raCluster) {
	if c.row.Outcome == OutcomeFailed {
		// Failed before its turn (not found, not probed).
		r.finished(c)
		return
	}
	c.mu.Lock()
	c.begun = time.Now()
	c.mu.Unlock()
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, r.opts.ClusterTimeout)
	defer cancel()
	ns := c.ns
	o := r.clusterOptions(c)
	var (
		backup string
		verify *restore.VerifyReport
	)
	// First what a killed attempt of this run left: its EtcdRestore
	// (of a restore, or of a rebuild's restore) is waited for and
	// verified.
	rep, adopted, err := kube.AdoptOperatorRestore(ctx, o)
	if adopted && err != nil && ctx.Err() == nil && !c.adoptOnly {
		// The earlier attempt's restore did not verify: a restore of its
		// own (which deletes that EtcdRestore once etcd-operator is done
		// with it, and refuses while it is in flight).
		r.log.Warn("restore-all: the earlier attempt's restore did not verify: restoring again", "namespace", ns.name, "cluster", c.id, "err", err)
		adopted, err = false, nil
	}
	if rep != nil {
		backup, verify = rep.Backup, rep.Verify
		if adopted {
			c.row.Verification = rep.Verification
			c.row.Warnings = rep.Warnings
		}
	}
	if !adopted && err == nil && !c.adoptOnly && r.recheckWanted(c) && !r.recheck(ctx, c) {
		// Recovered while queued, or unreachable now: not restored.
		c.row.Elapsed = time.Since(c.begun)
		r.finished(c)
		return
	}
	if c.cluster != nil && !c.adoptOnly {
		r.event(ctx, c, *c.cluster, corev1.EventTypeNormal, kube.ReasonRestoreStarted,
			fmt.Sprintf("restore-all run %s: restoring through etcd-operator (%s)", ns.run, c.row.Health))
	}
	var newUID string
	switch {
	case adopted || err != nil:
	case c.adoptOnly:
		// Planned by the run, healthy now, and nothing of the killed
		// attempt to finish: left alone.
		c.row.Outcome, c.row.Action = c.judged, ""
		c.row.Cause = fmt.Sprintf("run %s planned it, but it is %s now (%s) and no restore of it was begun: left alone", ns.run, c.judged, c.row.Health)
		c.row.Elapsed = time.Since(c.begun)
		r.finished(c)
		return
	case c.action == ActionRebuild:
		var rrep *kube.RebuildRestoreReport
		rrep, err = kube.RebuildRestore(ctx, kube.RebuildRestoreOptions{Restore: o, Replace: r.opts.Replace})
		if rrep != nil {
			backup = rrep.Backup
			if rrep.Restore != nil {
				verify = rrep.Restore.Verify
				newUID = string(rrep.Restore.NewUID)
				c.row.Warnings = rrep.Restore.Warnings
			}
		}
	default:
		rep, err = kube.OperatorRestore(ctx, o)
		if rep != nil {
			backup, verify = rep.Backup, rep.Verify
			c.row.Warnings = rep.Warnings
		}
	}
	if rep != nil && newUID == "" {
		newUID = string(rep.NewUID)
	}
	if backup != "" {
		c.row.Backup = backup
	}
	if verify != nil && verify.Revision > 0 {
		c.row.Revision = verify.Revision
	}
	c.row.Elapsed = time.Since(c.begun)
	switch {
	case err != nil:
		c.fail(failedStep(err), clusterErr(parent, ctx, r.opts.ClusterTimeout, err))
	case verify == nil || !verify.Verified:
		c.fail(kube.OpStepVerify, errors.New("the restore returned without a verified cluster"))
	default:
		r.step(c, StepRecord)
		if werr := r.writeDone(ctx, c, r.restoredUID(ctx, c, newUID)); werr != nil {
			c.fail(StepRecord, fmt.Errorf("the cluster is restored and verified, but its done record could not be written (a rerun verifies it again): %w", werr))
		} else {
			c.row.Outcome = OutcomeRestored
			if c.action == ActionRebuild {
				c.row.Outcome = OutcomeRebuilt
			}
		}
	}
	// The end: the NodePort and the Event, on the cluster as it is now
	// (the restored one has a new uid).
	ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer ecancel()
	c.row.NodePort, c.row.NodePortError = nodePort(ectx, ns.Kube, c.id)
	if parent.Err() == nil {
		if cs, cerr := ns.Kube.Clusters(ectx, c.id); cerr == nil && len(cs) == 1 {
			typ, reason, msg := corev1.EventTypeNormal, kube.ReasonRestoreSucceeded,
				fmt.Sprintf("restore-all run %s: %s from backup %s and verified at revision %d in %v; restart the kube-apiserver that uses it",
					ns.run, c.row.Outcome, c.row.Backup, c.row.Revision, c.row.Elapsed.Round(time.Second))
			if c.row.Outcome == OutcomeFailed {
				typ, reason, msg = corev1.EventTypeWarning, kube.ReasonRestoreFailed,
					fmt.Sprintf("restore-all run %s failed at step %q: %s; next: %s", ns.run, c.row.FailedStep, c.row.Cause, c.row.NextStep)
			}
			r.event(ectx, c, cs[0], typ, reason, msg)
		}
	}
	r.finished(c)
}

// restoredUID is the uid of the EtcdCluster the restore left, as the API
// server has it now (etcd-operator recreated it), else as the restore
// reported it.
func (r *restoreAll) restoredUID(ctx context.Context, c *raCluster, reported string) string {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if cs, err := c.ns.Kube.Clusters(gctx, c.id); err == nil && len(cs) == 1 {
		return string(cs[0].UID)
	}
	return reported
}

// recheckWanted says whether c's health is judged again before its
// restore: a cluster restored because it lost quorum at discovery (not
// because --force or --to-time asked), with an EtcdCluster.
func (r *restoreAll) recheckWanted(c *raCluster) bool {
	return c.action == ActionRestore && c.cluster != nil && c.judged == "" && !r.opts.Force && r.opts.ToTime.IsZero()
}

// recheck judges c's health again just before its restore (its turn may
// come long after discovery): true to restore it. A cluster that has
// quorum again is left alone (healthy or degraded, recovered while
// queued); one no member of which answers while its pods are Ready fails
// as unreachable. When the EtcdCluster or its members cannot be read
// now, the discovery's judgement stands.
func (r *restoreAll) recheck(ctx context.Context, c *raCluster) bool {
	r.step(c, StepRecheck)
	k := c.ns.Kube
	kc := *c.cluster
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cs, err := k.Clusters(gctx, c.id)
	cancel()
	if err == nil && len(cs) == 1 {
		kc = cs[0]
	}
	h, err := r.probeHealth(ctx, k, kc)
	if err != nil {
		r.log.Warn("restore-all: the health could not be judged again before the restore: the discovery's judgement stands",
			"namespace", c.ns.name, "cluster", c.id, "err", err)
		return true
	}
	if restoreNow(h.judged) {
		c.row.Health = h.text
		return true
	}
	was := c.row.Health
	c.answered = h.answered
	if h.judged == judgedUnreachable {
		c.row.Health = h.text
		c.failUnreachable(h)
		c.row.Cause += fmt.Sprintf(" (at discovery: %s)", was)
		return false
	}
	c.judged, c.row.Health = h.judged, h.text
	c.row.Outcome, c.row.Action = h.judged, ""
	c.row.Cause = fmt.Sprintf("recovered while queued: %s at discovery, %s when its turn came: left alone (--force restores it)", was, h.text)
	return false
}

// restoreNow is the recheck's decision on a queued cluster judged lost at
// discovery and judged again now: restored only when it still lost
// quorum ("").
func restoreNow(judged string) bool { return judged == "" }

// clusterOptions are the template's restore options for c.
func (r *restoreAll) clusterOptions(c *raCluster) kube.OperatorRestoreOptions {
	ns := c.ns
	o := r.opts.Template
	o.Kube, o.Cluster, o.Store, o.Layout = ns.Kube, c.id, ns.Store, ns.Layout
	o.Backup, o.DryRun = "", false
	o.Annotations = map[string]string{AnnotationRun: ns.run}
	o.OnStep = func(step string) { r.step(c, step) }
	o.Progress = func(string) restore.Progress { return &raProgress{r: r, c: c} }
	if o.Log != nil {
		o.Log = o.Log.With("run", ns.run)
	}
	if c.judged != "" {
		// Healthy or degraded, restored because asked (Force): from the
		// store, not from its present state.
		o.NoLive = true
	}
	if !r.opts.ToTime.IsZero() {
		// The revision the plan mapped ToTime to (journalReach, with the
		// cluster's revision as evidence past the journal's end), once.
		o.ToTime = r.opts.ToTime
		if c.row.Revision > 0 {
			o.ToTime, o.ToRevision = time.Time{}, c.row.Revision
		}
		o.Journal = journal.NewSource(ns.Store, ns.Layout, c.id, o.Identities).ListOnce()
	}
	// etcd-operator's wait never outlasts the cluster's deadline.
	if o.Timeout <= 0 || o.Timeout > r.opts.ClusterTimeout {
		o.Timeout = r.opts.ClusterTimeout
	}
	return o
}

// writeDone writes c's done record (create-only; one already there, from
// an overlapping attempt, is as good).
func (r *restoreAll) writeDone(ctx context.Context, c *raCluster, uid string) error {
	d := catalog.FleetRestoreDone{Run: c.ns.run, Cluster: c.id, Action: c.action, Backup: c.row.Backup, Revision: c.row.Revision,
		Verified: r.opts.now().UTC(), Duration: c.row.Elapsed, ClientURL: c.row.ClientURL, Verification: c.row.Verification, UID: uid}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	err := catalog.WriteFleetRestoreRecord(wctx, c.ns.Store, c.ns.Layout.FleetRestoreDoneKey(c.ns.run, c.id), &d)
	if errors.Is(err, store.ErrExists) {
		return nil
	}
	return err
}

// failedStep is the step an error of the restore names.
func failedStep(err error) string {
	var oe *kube.OperatorRestoreError
	var rre *kube.RebuildRestoreError
	var rbe *kube.RebuildError
	switch {
	case errors.As(err, &oe):
		return oe.Step()
	case errors.As(err, &rre):
		return rre.At
	case errors.As(err, &rbe):
		return kube.StepRebuild
	}
	return "restore"
}

// clusterErr names the cluster's own deadline when it, not the run, ended
// the restore.
func clusterErr(parent, ctx context.Context, timeout time.Duration, err error) error {
	if parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("the cluster's deadline (--cluster-timeout %v) passed: %w", timeout, err)
	}
	return err
}

// event records an Event on the EtcdCluster (unless NoEvents); a failure
// is noted in the row.
func (r *restoreAll) event(ctx context.Context, c *raCluster, kc kube.Cluster, typ, reason, msg string) {
	if r.opts.NoEvents {
		return
	}
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.ns.Kube.RecordEvent(ectx, kc, typ, reason, msg); err != nil {
		c.row.EventError = err.Error()
		r.log.Warn("restore-all: could not record the event", "namespace", c.ns.name, "cluster", c.id, "reason", reason, "err", err)
	}
}

// step records c's step and tells OnStep (and the log).
func (r *restoreAll) step(c *raCluster, step string) {
	c.mu.Lock()
	bytes := c.bytes
	c.mu.Unlock()
	r.report(c, step, bytes)
}

func (r *restoreAll) report(c *raCluster, step string, bytes int64) {
	ev, send := c.setStep(step, bytes)
	if !send {
		return
	}
	if r.opts.OnStep != nil {
		r.opts.OnStep(ev)
	}
}

// finished tells OnStep that c is done, with its outcome.
func (r *restoreAll) finished(c *raCluster) {
	ev, _ := c.setStep(StepDone, c.bytes)
	ev.Step, ev.Outcome = StepDone, c.row.Outcome
	if c.row.Outcome == OutcomeFailed || c.row.Outcome == OutcomeNotStarted {
		ev.Err = c.row.Cause
	}
	if c.row.Outcome == OutcomeFailed {
		r.log.Error("restore-all: cluster failed", "namespace", c.ns.name, "cluster", c.id, "step", c.row.FailedStep, "err", c.row.Cause, "next", c.row.NextStep)
	} else {
		r.log.Info("restore-all: cluster finished", "namespace", c.ns.name, "cluster", c.id, "outcome", c.row.Outcome, "elapsed", c.row.Elapsed.Round(time.Millisecond))
	}
	if r.opts.OnStep != nil {
		r.opts.OnStep(ev)
	}
}

// raProgress counts the bytes a cluster's restore moves (its downloads
// and uploads), for OnStep.
type raProgress struct {
	r *restoreAll
	c *raCluster
}

func (p *raProgress) Update(n int64) {
	p.c.mu.Lock()
	step := p.c.step
	p.c.mu.Unlock()
	p.r.report(p.c, step, n)
}

func (p *raProgress) Done() {}
