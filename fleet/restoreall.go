package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/kube"
)

// Outcomes of a cluster in restore-all's report (RestoreAllRow.Outcome).
const (
	// OutcomeRestored: restored through etcd-operator and verified.
	OutcomeRestored = "restored"
	// OutcomeRebuilt: no EtcdCluster; rebuilt from the escrow, restored
	// and verified.
	OutcomeRebuilt = "rebuilt"
	// OutcomeHealthy: every member healthy; left alone.
	OutcomeHealthy = "healthy"
	// OutcomeDegraded: some members unhealthy, quorum holds; left alone
	// (etcd-operator heals those).
	OutcomeDegraded = "degraded"
	// OutcomeDoneEarlier: restored and verified by an earlier attempt of
	// the same run (its done record); not touched.
	OutcomeDoneEarlier = "done-earlier"
	OutcomeFailed      = "failed"
	// OutcomeNotStarted: the run was cancelled before the cluster's turn.
	OutcomeNotStarted = "not-started"
	// OutcomePlanned: a dry run's cluster to restore or rebuild.
	OutcomePlanned = "planned"
)

// Actions of a planned cluster (catalog.FleetRestorePlanned.Action).
const (
	ActionRestore = "restore"
	ActionRebuild = "rebuild"
)

// Orders of the clusters to restore (--order).
const (
	// OrderSmallest: the fewest bytes to fetch first (most customers back
	// soonest).
	OrderSmallest = "smallest"
	OrderLargest  = "largest"
	OrderName     = "name"
)

// Steps of restore-all before and after a cluster's restore (the restore's
// own are kube.OpStep* and kube.RRStep*/kube.StepRebuild).
const (
	StepProbe  = "probe members"
	StepPlan   = "read the backup"
	StepRecord = "write the done record"
	StepAdopt  = "finish the earlier attempt's restore"
	StepQueued = "queued"
	StepDone   = "done"
	// StepDoneCheck: a cluster a resumed run's done record names is
	// checked (the same EtcdCluster, quorum now) before it is skipped.
	StepDoneCheck = "check the earlier restore"
	// StepRecheck: a queued cluster's health is judged again just before
	// its restore.
	StepRecheck = "probe members again"
	// StepNamespace: a namespace as a whole (its listing, its store, its
	// run) failed.
	StepNamespace = "read the namespace"
)

// DefaultClusterTimeout bounds one cluster's restore (--cluster-timeout):
// etcd-operator's wait, the verification and the transfers.
const DefaultClusterTimeout = 30 * time.Minute

// DefaultHealthTimeout bounds the probe of each member when a cluster's
// health is judged.
const DefaultHealthTimeout = 3 * time.Second

// RestoreAllNamespace is one namespace of a restore-all: its client, and
// its store and prefix (each namespace has its own, and its own COS
// credentials).
type RestoreAllNamespace struct {
	Kube   *kube.Client
	Store  store.Store
	Layout catalog.Layout
}

// RestoreExpecter is the plan's model of the expected wall time: the
// bytes each cluster fetches, in order (fleet.RestoreModel).
type RestoreExpecter interface {
	Expect(bytes []int64) time.Duration
}

// RestoreAllOptions configure RestoreAll (restore-all).
type RestoreAllOptions struct {
	// Namespaces are restored together, under one parallelism limit.
	Namespaces []RestoreAllNamespace
	// Names narrows the selection to these clusters (EtcdClusters, or with
	// Rebuild cluster ids in the store); Selector to the EtcdClusters with
	// these labels (a label selector).
	Names    []string
	Selector string
	// Force restores healthy and degraded clusters too (from the store's
	// newest backup: a survivor snapshot of a healthy cluster is its
	// present state).
	Force bool
	// ToTime restores every selected cluster to its own revision at that
	// time (from its journal), healthy ones included.
	ToTime time.Time
	// Rebuild also rebuilds every cluster id with backups under the
	// namespace's prefix and no EtcdCluster, from its escrow
	// (kube.RebuildRestore; Template.Identities decrypts it); Replace is
	// kube.RebuildRestoreOptions.Replace.
	Rebuild, Replace bool
	// DryRun plans only: it changes nothing and writes no records.
	DryRun bool
	// NewRun starts a new run even when an unfinished one with the same
	// request exists. TakeOver goes on although an attempt in the
	// namespace counts as in progress (a start record, no end, a beat
	// within catalog.FleetRestoreHeartbeatGrace, even past its deadline):
	// the caller knows that process is gone.
	NewRun, TakeOver bool
	// Parallel clusters are restored at a time, across every namespace
	// (0: 1).
	Parallel int
	// ScratchCap: Parallel is a default (not asked for), lowered to what
	// the scratch limit (restore.EnvScratchLimit) holds of the largest
	// staged snapshot to restore (ScratchParallel).
	ScratchCap bool
	// Order is OrderSmallest (default), OrderLargest or OrderName; First
	// are clusters restored before the order ("name" or "namespace/name").
	Order string
	First []string
	// ClusterTimeout bounds each cluster's restore (default
	// DefaultClusterTimeout); HealthTimeout each member's probe (default
	// DefaultHealthTimeout).
	ClusterTimeout, HealthTimeout time.Duration
	// NoEvents: no Events on the EtcdClusters.
	NoEvents bool
	// Template is each cluster's restore: Bucket, Endpoint, AWSSecret,
	// ForcePathStyle, TempDir, the timeouts, Identities, Recipients, the
	// bump, Log. Kube, Cluster, Store, Layout, Backup, NoLive, the point
	// in time, Journal, DryRun, OnStep and Annotations are set per cluster.
	Template kube.OperatorRestoreOptions
	// Model gives the plan's expected time; ModelInputs are its inputs,
	// printed with the plan. Default: a RestoreModel of the store's
	// throughput, measured on the largest backup to restore, FixedCost
	// (default DefaultRestoreFixedCost) and Parallel.
	Model       RestoreExpecter
	ModelInputs map[string]string
	FixedCost   time.Duration
	// OnStep is called when a cluster's step changes, and about once a
	// second while it moves bytes (from the cluster's goroutine).
	OnStep func(RestoreAllStep)
	// Host names this attempt in its records (default: the hostname).
	Host string
	Log  *slog.Logger
	// now is the clock (tests).
	now func() time.Time
	// heartbeatEvery is how often the attempt writes a beat record
	// (default catalog.FleetRestoreHeartbeatEvery; tests).
	heartbeatEvery time.Duration
}

// RestoreAllStep is where one cluster's restore is.
type RestoreAllStep struct {
	Namespace string        `json:"namespace"`
	Cluster   string        `json:"cluster"`
	Step      string        `json:"step"`
	Bytes     int64         `json:"bytes"`
	Elapsed   time.Duration `json:"elapsed"`
	// Outcome is set when the cluster is finished (Step StepDone); Err
	// then says why it failed.
	Outcome string `json:"outcome,omitempty"`
	Err     string `json:"error,omitempty"`
}

// RestoreAllReport is what RestoreAll did (or, in a dry run, would do).
type RestoreAllReport struct {
	DryRun bool `json:"dryRun"`
	// Site is the store read when it is not the primary (the command's
	// site choice: "second site", with why).
	Site     string `json:"site,omitempty"`
	Parallel int    `json:"parallel"`
	Order    string `json:"order"`
	// Runs are each namespace's run (new or resumed).
	Runs []RestoreAllRun `json:"runs"`
	// Expected is the plan's expected wall time for what is left to do,
	// from Model; its inputs are in Model.
	Expected time.Duration     `json:"expected"`
	Model    map[string]string `json:"model,omitempty"`
	// ToTime is the point in time, absolute (a relative --to-time
	// resolved): a rerun must give it as is to resume the run
	// (ToTimeFlag).
	ToTime time.Time `json:"toTime,omitzero"`
	// Clusters are every selected cluster, in the order of the restores
	// (the ones left alone after them).
	Clusters []RestoreAllRow `json:"clusters"`
	// Failed are the failed clusters, "namespace/name".
	Failed []string `json:"failed"`
	// NamespaceErrors are the namespaces that failed as a whole (their
	// clusters could not be listed, their store read, their run opened):
	// the other namespaces went on.
	NamespaceErrors []RestoreAllNamespaceError `json:"namespaceErrors,omitempty"`
	// Warnings are what an SRE must read before anything else (a
	// namespace none of whose members the toolkit reaches while
	// Kubernetes says they are Ready: the toolkit's own network).
	Warnings []string      `json:"warnings,omitempty"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration"`
}

// RestoreAllNamespaceError is a namespace that failed as a whole: at
// which step (StepNamespace, StepPlan, StepRecord) and why.
type RestoreAllNamespaceError struct {
	Namespace string `json:"namespace"`
	Step      string `json:"step"`
	Error     string `json:"error"`
}

// RestoreAllRun is a namespace's run.
type RestoreAllRun struct {
	Namespace string `json:"namespace"`
	Prefix    string `json:"prefix"`
	Run       string `json:"run"`
	// Resumed: an unfinished run with the same request was resumed.
	Resumed bool `json:"resumed"`
	// Attempt is this attempt's start (its records' time); zero in a dry
	// run.
	Attempt time.Time `json:"attempt,omitzero"`
}

// RestoreAllRow is one cluster of the report.
type RestoreAllRow struct {
	Namespace string `json:"namespace"`
	Cluster   string `json:"cluster"`
	Outcome   string `json:"outcome"`
	// Action is what was (or would be) done: ActionRestore or
	// ActionRebuild; empty for a cluster left alone.
	Action string `json:"action,omitempty"`
	// Health is what the probe found ("1/3 members healthy: quorum lost").
	Health   string        `json:"health,omitempty"`
	Backup   string        `json:"backup,omitempty"`
	Revision int64         `json:"revision,omitempty"`
	Bytes    int64         `json:"bytes,omitempty"`
	Elapsed  time.Duration `json:"elapsed,omitempty"`
	// Warnings are what the cluster's restore warned of (its plan's and
	// the operator restore's: a journal segment written over, a lease
	// revoke the journal could not place, a staged copy kept, ...), as a
	// single restore prints them; the report's head repeats them.
	Warnings []string `json:"warnings,omitempty"`
	// FailedStep and Cause say where and why it failed; NextStep is the
	// runbook section to follow.
	FailedStep string `json:"failedStep,omitempty"`
	Cause      string `json:"cause,omitempty"`
	NextStep   string `json:"nextStep,omitempty"`
	// ClientURL is the cluster's client Service; NodePort that of its
	// <id>-client-service-np, which the customer's kube-apiserver uses
	// (restart it once its etcd is restored).
	ClientURL string `json:"clientURL,omitempty"`
	NodePort  int32  `json:"nodePort,omitempty"`
	// NodePortError says why there is no NodePort.
	NodePortError string `json:"nodePortError,omitempty"`
	// Run is the run that restored it (for done-earlier, the earlier
	// attempt's run).
	Run string `json:"run,omitempty"`
	// EventError says why an Event could not be recorded.
	EventError string `json:"eventError,omitempty"`
	// Verification is kube.VerifiedRevisionOnly when the restore (a killed
	// attempt's, adopted after its staged copy was gone) was verified by
	// its members and revision only, not its key count.
	Verification string `json:"verification,omitempty"`
}

// RestoreAllError is a restore-all in which clusters failed, or that
// could not start (refused, or a namespace could not be read).
type RestoreAllError struct {
	Failed []string
	Err    error
}

func (e *RestoreAllError) Error() string {
	if len(e.Failed) == 0 {
		return "restore-all: " + e.Err.Error()
	}
	return fmt.Sprintf("restore-all: %d cluster(s) failed (%s): %v", len(e.Failed), strings.Join(e.Failed, ", "), e.Err)
}

func (e *RestoreAllError) Unwrap() error { return e.Err }

// RestoreAll restores every EtcdCluster of the namespaces that lost quorum
// (fewer than a majority of its members healthy), Parallel at a time
// across all of them, through etcd-operator (kube.OperatorRestore);
// healthy and degraded clusters are left alone and reported, unless Force
// or ToTime. With Rebuild, cluster ids with backups and no EtcdCluster are
// rebuilt from their escrow (kube.RebuildRestore).
//
// Each namespace's run is recorded under its prefix
// (catalog.FleetRestorePlan and the attempt and done records): a rerun of
// the same request resumes the newest unfinished run, skips the clusters
// it verified and finishes the restores a killed attempt left in flight;
// a run whose attempt is still in progress is refused. A cluster's
// failure, or its timeout (ClusterTimeout), never stops the others.
// A cancel stops the restores (each cleans up its staged copy) and
// returns the context's error with the report.
func RestoreAll(ctx context.Context, opts RestoreAllOptions) (*RestoreAllReport, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if len(opts.Namespaces) == 0 {
		return nil, errors.New("restore-all: no namespace")
	}
	for _, n := range opts.Namespaces {
		if n.Kube == nil || n.Store == nil {
			return nil, errors.New("restore-all: a namespace without a kubernetes client or a store")
		}
	}
	r := newRestoreAll(opts)
	// A namespace that fails as a whole (dropNamespace) is reported, and
	// the others go on; when none is left, the run stops there.
	if err := r.discover(ctx); err != nil {
		return r.rep, err
	}
	if err := r.openRuns(ctx); err != nil {
		return r.rep, err
	}
	if err := r.plan(ctx); err != nil {
		return r.rep, err
	}
	if err := r.writePlans(ctx); err != nil {
		r.writeEnds(ctx) // the namespaces whose attempt began: none runs
		return r.rep, err
	}
	if !r.opts.DryRun {
		stop := r.heartbeat(ctx)
		r.restoreEach(ctx)
		stop()
		r.writeEnds(ctx)
	}
	return r.tally(ctx)
}

// restoreAll is one RestoreAll's state.
type restoreAll struct {
	opts  RestoreAllOptions
	log   *slog.Logger
	rep   *RestoreAllReport
	start time.Time
	nss   []*raNamespace
	// todo are the clusters to restore, in order; left the others.
	todo, left []*raCluster
	// restore is restoreOne (tests replace it).
	restore func(context.Context, *raCluster)
}

// raNamespace is one namespace: its run and its clusters.
type raNamespace struct {
	RestoreAllNamespace
	name     string
	clusters []*raCluster
	folders  map[string]folderCount
	// run is the run (new or resumed); plan its plan record (a new one
	// is written by writePlans); done the done records of a resumed run.
	run     string
	resumed bool
	plan    *catalog.FleetRestorePlan
	done    map[string]catalog.FleetRestoreDone
	attempt *catalog.FleetRestoreAttempt
	// failed: the namespace failed as a whole (in the report's
	// NamespaceErrors); its clusters are not in todo or left.
	failed error
}

// raCluster is one selected cluster.
type raCluster struct {
	ns      *raNamespace
	id      string
	cluster *kube.Cluster // nil: no EtcdCluster (rebuild)
	// healthy of size members; judged is the health's outcome
	// (OutcomeHealthy, OutcomeDegraded, "" when quorum is lost).
	healthy, size, answered int
	judged                  string
	// unreachable: no member answered while its pods are Ready.
	unreachable bool
	// revision is the newest revision a member's linearizable read saw
	// when probed (0: none answered one).
	revision int64
	action   string
	// adoptOnly: a resumed run planned it and it is healthy now: only an
	// EtcdRestore a killed attempt left is finished, nothing new begun.
	adoptOnly   bool
	newest      string // the newest committed backup
	snapshotKey string // its snapshot object
	rawBytes    int64  // its database's size, as staged
	row         RestoreAllRow

	mu    sync.Mutex
	step  string
	bytes int64
	begun time.Time
	sent  time.Time
}

func newRestoreAll(opts RestoreAllOptions) *restoreAll {
	if opts.Parallel <= 0 {
		opts.Parallel = 1
	}
	if opts.Order == "" {
		opts.Order = OrderSmallest
	}
	if opts.ClusterTimeout <= 0 {
		opts.ClusterTimeout = DefaultClusterTimeout
	}
	if opts.HealthTimeout <= 0 {
		opts.HealthTimeout = DefaultHealthTimeout
	}
	if opts.Template.DialTimeout <= 0 {
		opts.Template.DialTimeout = 5 * time.Second
	}
	if opts.now == nil {
		opts.now = time.Now
	}
	if opts.Host == "" {
		opts.Host, _ = os.Hostname()
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := opts.now()
	rep := &RestoreAllReport{DryRun: opts.DryRun, Parallel: opts.Parallel, Order: opts.Order, Runs: []RestoreAllRun{},
		Clusters: []RestoreAllRow{}, Failed: []string{}, Started: start.UTC(), Model: opts.ModelInputs}
	if !opts.ToTime.IsZero() {
		rep.ToTime = opts.ToTime.UTC()
	}
	r := &restoreAll{opts: opts, log: log, rep: rep, start: start}
	r.restore = r.restoreOne
	return r
}

// restoreEach restores the clusters to do, Parallel at a time across every
// namespace; those a cancel kept from starting are OutcomeNotStarted.
func (r *restoreAll) restoreEach(ctx context.Context) {
	lim := fanout.NewLimiter(r.opts.Parallel)
	var wg sync.WaitGroup
	for _, c := range r.todo {
		r.step(c, StepQueued)
	}
	for i, c := range r.todo {
		s, err := lim.Acquire(ctx)
		if err != nil {
			for _, c := range r.todo[i:] {
				if c.row.Outcome != "" {
					continue // failed before its turn: its failure stands
				}
				c.row.Outcome, c.row.Cause = OutcomeNotStarted, "cancelled before its turn: "+err.Error()
				r.finished(c)
			}
			break
		}
		wg.Go(func() {
			defer s.Release()
			defer r.recoverCluster(c)
			r.restore(ctx, c)
		})
	}
	wg.Wait()
}

// recoverCluster turns a panic in c's restore into c's failure (the
// value and the stack in the log): the other clusters and the run go on.
func (r *restoreAll) recoverCluster(c *raCluster) {
	p := recover()
	if p == nil {
		return
	}
	r.log.Error("restore-all: panic in a cluster's restore", "namespace", c.ns.name, "cluster", c.id, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	c.mu.Lock()
	step := c.step
	c.mu.Unlock()
	if step == "" || step == StepQueued || step == StepDone {
		step = "restore"
	}
	c.fail(step, fmt.Errorf("cluster %s/%s: the toolkit panicked at step %q: %v (a bug: the stack is in the log)", c.ns.name, c.id, step, p))
	if !c.begun.IsZero() {
		c.row.Elapsed = time.Since(c.begun)
	}
	r.finished(c)
}

// dropNamespace records that ns failed as a whole at step: it goes in the
// report's NamespaceErrors, its clusters leave the run, the others go on.
func (r *restoreAll) dropNamespace(ns *raNamespace, step string, err error) {
	if ns.failed != nil {
		return
	}
	ns.failed = err
	r.rep.NamespaceErrors = append(r.rep.NamespaceErrors, RestoreAllNamespaceError{Namespace: ns.name, Step: step, Error: oneLine(err)})
	r.log.Error("restore-all: namespace failed; the others go on", "namespace", ns.name, "step", step, "err", err)
	inNS := func(c *raCluster) bool { return c.ns == ns }
	r.todo = slices.DeleteFunc(r.todo, inNS)
	r.left = slices.DeleteFunc(r.left, inNS)
}

// live are the namespaces that have not failed.
func (r *restoreAll) live() []*raNamespace {
	var out []*raNamespace
	for _, ns := range r.nss {
		if ns.failed == nil {
			out = append(out, ns)
		}
	}
	return out
}

// allFailed is the run's error when every namespace failed as a whole
// (nil while one is left): the one namespace's error as it is, else all
// of them.
func (r *restoreAll) allFailed(ctx context.Context) error {
	if len(r.live()) > 0 {
		return ctx.Err()
	}
	var errs []error
	for _, ns := range r.nss {
		errs = append(errs, ns.failed)
	}
	if len(errs) == 1 {
		var rae *RestoreAllError
		if errors.As(errs[0], &rae) {
			return rae
		}
		return &RestoreAllError{Err: errs[0]}
	}
	return &RestoreAllError{Err: errors.Join(errs...)}
}

// tally builds the report's rows (the restores in order, then the clusters
// left alone) and the error.
func (r *restoreAll) tally(ctx context.Context) (*RestoreAllReport, error) {
	rep := r.rep
	for _, c := range append(append([]*raCluster{}, r.todo...), r.left...) {
		rep.Clusters = append(rep.Clusters, c.row)
		if c.row.Outcome == OutcomeFailed {
			rep.Failed = append(rep.Failed, c.ns.name+"/"+c.id)
		}
	}
	rep.Duration = r.opts.now().Sub(r.start)
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if len(rep.Failed) > 0 || len(r.rep.NamespaceErrors) > 0 {
		var errs []error
		for _, ns := range r.nss {
			if ns.failed != nil {
				errs = append(errs, ns.failed)
			}
		}
		for _, c := range rep.Clusters {
			if c.Outcome == OutcomeFailed {
				errs = append(errs, errors.New(c.Cause))
			}
		}
		return rep, &RestoreAllError{Failed: rep.Failed, Err: errors.Join(errs...)}
	}
	return rep, nil
}

// setStep records that c is at step (bytes moved so far) and tells
// OnStep: at once when the step changed, else at most once a second.
func (c *raCluster) setStep(step string, bytes int64) (RestoreAllStep, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	changed := step != c.step
	if !changed && now.Sub(c.sent) < time.Second {
		c.bytes = bytes
		return RestoreAllStep{}, false
	}
	c.step, c.bytes, c.sent = step, bytes, now
	ev := RestoreAllStep{Namespace: c.ns.name, Cluster: c.id, Step: step, Bytes: bytes}
	if !c.begun.IsZero() {
		ev.Elapsed = now.Sub(c.begun)
	}
	return ev, true
}
