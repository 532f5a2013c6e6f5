// Package metrics is the Prometheus side of etcd-recovery: the exporter
// that `etcd-recovery serve` runs (a refresh on an interval from the
// store's listing of the namespace's clusters and an inspection of every
// EtcdCluster, served on /metrics with client_golang from the last
// refresh's snapshot) and the Pushgateway push of a backup or drill run's
// outcome on the same metric names.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/kube"
)

// Defaults of the exporter's options.
const (
	DefaultInterval = 5 * time.Minute
	// DefaultJitter: each wait is the interval ± this fraction of it, so
	// the exporters of 18 namespaces do not list the bucket in step.
	DefaultJitter = 0.1
	// DefaultDeadline bounds one refresh.
	DefaultDeadline = 2 * time.Minute
	// HealthyIntervals: /healthz answers 200 while the last successful
	// refresh finished within this many intervals.
	HealthyIntervals = 3
)

// Options configure an Exporter.
type Options struct {
	// Kube lists and inspects the namespace's EtcdClusters (nil: no
	// inspection, the store only).
	Kube *kube.Client
	// Store and Layout: the namespace's backups (nil Store: no backup or
	// drill metrics).
	Store  store.Store
	Layout catalog.Layout
	// Interval between refreshes (default 5m), with Jitter (fraction, 0.1).
	Interval time.Duration
	Jitter   float64
	// Deadline bounds one refresh (default 2m). Each cluster's inspection
	// has its own bound (3 × ProbeTimeout); with more clusters than
	// Parallel they queue, so keep Deadline above
	// ceil(clusters/Parallel) × 3 × ProbeTimeout or the inspect step fails.
	Deadline time.Duration
	// Parallel inspections (default fleet.DefaultInspectParallel);
	// ProbeTimeout bounds one probe (inspect's default); DialTimeout the
	// etcd dials (default: the probe timeout).
	Parallel     int
	ProbeTimeout time.Duration
	DialTimeout  time.Duration
	// ReadParallel bounds the manifest and drill record reads at once
	// (catalog.DefaultCheckParallel), and the decryption checks.
	ReadParallel int
	// OrphanGrace is the orphan pass's grace (prune.DefaultOrphanGrace):
	// when an orphan's backups go (with Kube and Store only).
	OrphanGrace time.Duration
	// Identities loads the mounted age identities, once per refresh (so a
	// rotated Secret is seen without a restart); nil, or a nil result, is
	// no identity: then every encrypted backup is undecryptable.
	Identities func() (*seal.Identities, error)
	// SecondSite: the store is a second site (serve --second-site): the
	// copier's status record is expected there, and a missing one is
	// exported as such (replica.go). Without it the record is read when
	// present.
	SecondSite bool
	// ReplicaInterval is the time between reads of a second site's status
	// record besides each refresh (default DefaultReplicaInterval).
	ReplicaInterval time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	Log *slog.Logger
}

// Validate checks the options.
func (o Options) Validate() error {
	switch {
	case o.Kube == nil && o.Store == nil:
		return errors.New("metrics: neither a Kubernetes client nor a store: nothing to export")
	case o.Interval < 0:
		return fmt.Errorf("metrics: interval %v: must be positive", o.Interval)
	case o.Deadline < 0:
		return fmt.Errorf("metrics: deadline %v: must be positive", o.Deadline)
	case o.Jitter < 0 || o.Jitter >= 1:
		return fmt.Errorf("metrics: jitter %v: want 0 <= jitter < 1", o.Jitter)
	case o.ReplicaInterval < 0:
		return fmt.Errorf("metrics: replica interval %v: must be positive", o.ReplicaInterval)
	case o.SecondSite && o.Store == nil:
		return errors.New("metrics: a second site without a store")
	case o.Parallel < 0:
		return fmt.Errorf("metrics: parallel %d: want at least 1", o.Parallel)
	case o.OrphanGrace != 0 && o.OrphanGrace < prune.MinOrphanGrace:
		return fmt.Errorf("metrics: orphan grace %v: want at least %v", o.OrphanGrace, prune.MinOrphanGrace)
	}
	return nil
}

// Exporter refreshes a snapshot of the namespace's clusters and serves it.
// It is a prometheus.Collector: every scrape sends the last snapshot as
// const metrics, so a cluster gone from the store and the API disappears
// at the next refresh and the series are bounded by the clusters.
type Exporter struct {
	opts Options

	refreshMu sync.Mutex // one refresh at a time

	mu          sync.RWMutex
	snap        *Snapshot
	errs        map[string]uint64 // by step
	lastSuccess time.Time
	lastStart   time.Time

	// restoreRuns caches the restore run records read (restorerun.go);
	// only the refresh, one at a time, uses it.
	restoreRuns restoreRunCache

	// replica is a second site's copier status (replica.go; under mu),
	// replicaReads its reads by result; replicaMu orders the reads.
	replicaMu    sync.Mutex
	replica      *ReplicaState
	replicaReads map[string]uint64
}

// New builds an exporter; it refreshes only when asked (Refresh, Run).
func New(opts Options) (*Exporter, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Deadline == 0 {
		opts.Deadline = DefaultDeadline
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = inspect.DefaultTimeout
	}
	if opts.Parallel == 0 {
		opts.Parallel = fleet.DefaultInspectParallel
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ReplicaInterval == 0 {
		opts.ReplicaInterval = DefaultReplicaInterval
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	errs := map[string]uint64{}
	for _, s := range Steps {
		errs[s] = 0
	}
	return &Exporter{opts: opts, snap: &Snapshot{}, errs: errs, replicaReads: map[string]uint64{}}, nil
}

// Snapshot is the last refresh's snapshot (empty before the first).
func (e *Exporter) Snapshot() *Snapshot {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.snap
}

// Errors are the failed refresh steps counted so far, by step.
func (e *Exporter) Errors() map[string]uint64 {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make(map[string]uint64, len(e.errs))
	for k, v := range e.errs {
		out[k] = v
	}
	return out
}

// Refresh takes a new snapshot, bounded by the deadline: the store side
// (one listing of the layout's root, then the manifests and drill records
// of the committed backups: small JSON objects, no snapshot is read), the
// inspection (fleet.InspectAll, the code of inspect --all) and the orphans
// (fleet.ListOrphans, the orphan pass in dry-run mode) run concurrently;
// the newest namespace-wide restore run's records (restorerun.go) come
// from the same listing; then the age header of each cluster's newest encrypted backup is opened
// with the mounted identities (catalog.CheckDecrypts, one ranged read),
// and, when the bucket has object lock, the retention of each cluster's
// newest backup's manifest is read (catalog.BackupLock).
// Concurrent calls wait for each other. A step that fails is counted and
// named in the error; its part of the snapshot keeps the previous
// refresh's values (a store outage does not make every cluster look
// unbacked-up, a failed EtcdCluster listing keeps the clusters known),
// while the parts that succeeded are replaced. The error is nil when every
// step succeeded.
//
// With a Kubernetes client, the clusters are exactly the namespace's
// EtcdClusters: a cluster id with backups and no EtcdCluster is an orphan,
// never a cluster, so no backup or drill alert (they join on
// etcd_recovery_cluster_info) fires for it.
func (e *Exporter) Refresh(ctx context.Context) error {
	e.refreshMu.Lock()
	defer e.refreshMu.Unlock()
	r := e.startRefresh()
	ctx, cancel := context.WithTimeout(ctx, e.opts.Deadline)
	defer cancel()

	r.gather(ctx)
	next, exists := r.clusterStates(ctx)
	snap := r.snapshot(next, exists)
	return r.publish(snap)
}

// refresh is one Refresh's state: the previous snapshot, the clock, what
// the concurrent steps found and the steps that failed.
type refresh struct {
	e         *Exporter
	prev      *Snapshot
	start     time.Time
	futureCut time.Time

	errMu   sync.Mutex
	stepErr map[string]error

	sr                  *storeRead
	rows                []fleet.InspectRow
	inspectOK, listedOK bool
	orphans             []fleet.InspectOrphan
	orphansOK           bool
}

// startRefresh is the first step: note the start and take the previous
// snapshot.
func (e *Exporter) startRefresh() *refresh {
	start := e.opts.Now()
	r := &refresh{e: e, start: start, futureCut: start.Add(futureTolerance), stepErr: map[string]error{}}
	e.mu.Lock()
	e.lastStart = time.Now()
	r.prev = e.snap
	e.mu.Unlock()
	return r
}

// fail counts step as failed with err (safe from the concurrent steps).
func (r *refresh) fail(step string, err error) {
	r.errMu.Lock()
	r.stepErr[step] = err
	r.errMu.Unlock()
}

// gather runs the store read, the inspection and the orphan listing
// concurrently and waits for them.
func (r *refresh) gather(ctx context.Context) {
	e := r.e
	var wg sync.WaitGroup
	if e.opts.Store != nil {
		wg.Go(func() {
			r.sr = e.readStore(ctx, r.fail)
		})
		wg.Go(func() {
			if err := e.readReplica(ctx); err != nil {
				r.fail(StepReadReplica, err)
			}
		})
	}
	if e.opts.Kube != nil {
		wg.Go(func() { r.inspect(ctx) })
	}
	switch {
	case e.opts.Kube == nil || e.opts.Store == nil:
	case e.opts.Layout.RootPrefix() == "":
		// The shared bucket root: every namespace's cluster ids are under
		// it, and this namespace's deleted clusters cannot be told from
		// the others' live ones. No orphans are reported.
		r.orphansOK = true
	default:
		wg.Go(func() { r.listOrphans(ctx) })
	}
	wg.Wait()
}

// inspect is the inspection step: fleet.InspectAll over the namespace's
// EtcdClusters.
func (r *refresh) inspect(ctx context.Context) {
	e := r.e
	rep, err := fleet.InspectAll(ctx, fleet.InspectAllOptions{Kube: e.opts.Kube, Parallel: e.opts.Parallel,
		Template: inspect.Options{Timeout: e.opts.ProbeTimeout}, DialTimeout: e.opts.DialTimeout, NoReports: true})
	switch {
	case err == nil:
		r.rows, r.inspectOK, r.listedOK = rep.Clusters, true, true
	case ctx.Err() != nil:
		r.fail(StepInspect, fmt.Errorf("inspect: not finished within %v: %w", e.opts.Deadline, err))
	default:
		r.fail(StepListClusters, err)
	}
}

// listOrphans is the orphan step: fleet.ListOrphans, the orphan pass in
// dry-run mode.
func (r *refresh) listOrphans(ctx context.Context) {
	e := r.e
	var chk fleet.OrphanCheck
	r.orphans, chk = fleet.ListOrphans(ctx, fleet.ListOrphansOptions{Kube: e.opts.Kube, Store: e.opts.Store, Layout: e.opts.Layout,
		Grace: e.opts.OrphanGrace, Timeout: e.opts.Deadline, Now: e.opts.Now})
	if chk.Error != "" {
		r.fail(StepOrphans, errors.New(chk.Error))
		return
	}
	r.orphansOK = true
}

// clusterStates builds the new clusters' states from the previous ones
// and what the steps found, then checks the decryption of the newest
// encrypted backups. exists is nil without a Kubernetes client.
func (r *refresh) clusterStates(ctx context.Context) (next map[string]*ClusterState, exists map[string]bool) {
	e, prev, sr := r.e, r.prev, r.sr
	storeOK := sr != nil
	old := map[string]ClusterState{}
	for _, c := range prev.Clusters {
		old[c.Cluster] = c
	}
	next = map[string]*ClusterState{}
	get := func(name string) *ClusterState {
		if st := next[name]; st != nil {
			return st
		}
		st := &ClusterState{Cluster: name}
		if o, ok := old[name]; ok {
			*st = o
		}
		next[name] = st
		return st
	}
	exists = r.existing(get)
	if r.inspectOK {
		for _, row := range r.rows {
			inspectState(get(row.Cluster), row)
		}
	}
	if storeOK {
		for id, es := range sr.entries {
			if exists == nil || exists[id] {
				storeState(get(id), es, sr.manifests[id], r.futureCut)
			}
		}
	}
	for _, st := range next {
		if r.listedOK && !e.listedIn(r.rows, st.Cluster) {
			st.Inspected, st.Verdict, st.Up, st.Voting, st.DBSize, st.Leader, st.LeaderChanges = false, "", 0, 0, 0, "", 0
		}
		if storeOK && sr.entries[st.Cluster] == nil {
			// No backup at all: the store side is known and empty.
			storeState(st, nil, nil, r.futureCut)
		}
	}
	if storeOK {
		proofStates(next, sr)
		e.checkDecrypts(ctx, next, sr, r.futureCut, r.fail)
		e.checkLocks(ctx, next, sr, r.futureCut, r.fail)
		e.checkJournals(ctx, next, sr)
		e.checkJournalGaps(ctx, next, sr)
	}
	return next, exists
}

// existing decides which clusters exist, creating their states with get.
// With Kubernetes: the EtcdClusters listed now, or, when the listing
// failed, the clusters of the previous snapshot (nil exists: no
// Kubernetes client, every id in the store is a cluster). Without: the
// store's ids, or the previous ones when the store failed.
func (r *refresh) existing(get func(string) *ClusterState) map[string]bool {
	var exists map[string]bool
	if r.e.opts.Kube != nil {
		exists = map[string]bool{}
		if r.listedOK {
			for _, row := range r.rows {
				exists[row.Cluster] = true
			}
		} else {
			for _, c := range r.prev.Clusters {
				exists[c.Cluster] = true
			}
		}
		for name := range exists {
			get(name)
		}
	} else if r.sr == nil {
		for _, c := range r.prev.Clusters {
			if c.Stored {
				get(c.Cluster)
			}
		}
	}
	return exists
}

// snapshot assembles the new snapshot: the clusters, the orphans, the
// staged copies and the failed steps.
func (r *refresh) snapshot(next map[string]*ClusterState, exists map[string]bool) *Snapshot {
	prev := r.prev
	snap := &Snapshot{At: r.e.opts.Now(), Errors: map[string]string{}}
	for _, st := range next {
		snap.Clusters = append(snap.Clusters, *st)
	}
	sort.Slice(snap.Clusters, func(i, j int) bool { return snap.Clusters[i].Cluster < snap.Clusters[j].Cluster })
	// Orphans: the orphan pass's view, never a cluster that exists; the
	// previous ones when they could not be computed.
	if r.orphansOK {
		for _, o := range r.orphans {
			ost := OrphanState{Cluster: o.ClusterID, State: orphanLabel(o.State)}
			if o.State == prune.OrphanWaiting || o.State == prune.OrphanDelete {
				ost.DeleteAfter = o.DeleteAfter
			}
			snap.Orphans = append(snap.Orphans, ost)
		}
	} else {
		snap.Orphans = append(snap.Orphans, prev.Orphans...)
	}
	snap.Orphans = slices.DeleteFunc(snap.Orphans, func(o OrphanState) bool { return exists[o.Cluster] })
	sort.Slice(snap.Orphans, func(i, j int) bool { return snap.Orphans[i].Cluster < snap.Orphans[j].Cluster })
	if r.sr != nil {
		snap.Staged = r.sr.staged
	} else {
		snap.Staged = prev.Staged
	}
	snap.RestoreRun = prev.RestoreRun
	if r.sr != nil && r.sr.restoreRunOK {
		snap.RestoreRun = r.sr.restoreRun
	}
	snap.ObjectLock = prev.ObjectLock
	if r.sr != nil && r.sr.lockOK {
		enabled := r.sr.lock.Enabled
		snap.ObjectLock = &enabled
	}
	snap.Duration = snap.At.Sub(r.start)
	for step, err := range r.stepErr {
		snap.Errors[step] = err.Error()
	}
	return snap
}

// publish is the last step: the snapshot replaces the served one, the
// failed steps are counted and logged, and joined into the error.
func (r *refresh) publish(snap *Snapshot) error {
	e, stepErr := r.e, r.stepErr
	e.mu.Lock()
	e.snap = snap
	for step := range stepErr {
		e.errs[step]++
	}
	if len(stepErr) == 0 {
		e.lastSuccess = snap.At
	}
	e.mu.Unlock()

	if len(stepErr) == 0 {
		e.opts.Log.Debug("refresh", "clusters", len(snap.Clusters), "orphans", len(snap.Orphans), "duration", snap.Duration)
		return nil
	}
	var errs []error
	for _, s := range Steps {
		if err := stepErr[s]; err != nil {
			e.opts.Log.Warn("refresh step failed", "step", s, "error", err.Error())
			errs = append(errs, fmt.Errorf("refresh step %q: %w", s, err))
		}
	}
	return errors.Join(errs...)
}

// checkDecrypts opens the age header of each cluster's newest encrypted
// backup (committed, checked out, not future-dated) with the identities
// loaded now: Undecryptable when none opens it (seal.ErrNoIdentity). A
// check that could not read the store says nothing: the cluster keeps the
// previous refresh's result for the same backup (none for another one)
// and the step is counted; a damaged header (seal.ErrTampered) is logged
// and leaves the result absent. When the identity file cannot be read,
// every cluster keeps its previous result.
func (e *Exporter) checkDecrypts(ctx context.Context, next map[string]*ClusterState, sr *storeRead, futureCut time.Time, fail func(string, error)) {
	type check struct {
		st     *ClusterState
		m      *catalog.Manifest
		err    error
		prevOK bool // the previous result is for this backup
	}
	var checks []*check
	for id, st := range next {
		i := newestEncrypted(sr.entries[id], sr.manifests[id], futureCut)
		if i < 0 {
			st.DecryptBackup, st.Undecryptable = "", false
			continue
		}
		m := sr.manifests[id][i]
		checks = append(checks, &check{st: st, m: m, prevOK: st.DecryptBackup == m.Name})
	}
	if len(checks) == 0 {
		return
	}
	var ids *seal.Identities
	if e.opts.Identities != nil {
		var err error
		if ids, err = e.opts.Identities(); err != nil {
			fail(StepCheckDecrypt, fmt.Errorf("read the age identities: %w", err))
			return
		}
	}
	parallel := e.opts.ReadParallel
	if parallel <= 0 {
		parallel = catalog.DefaultCheckParallel
	}
	notStarted := fanout.ForEach(ctx, len(checks), parallel, func(ctx context.Context, i int) {
		c := checks[i]
		c.err = catalog.CheckDecrypts(ctx, e.opts.Store, e.opts.Layout, c.m, ids)
	})
	for _, i := range notStarted {
		checks[i].err = fmt.Errorf("cluster %s backup %s: %s: not started: %w", checks[i].m.ClusterID, checks[i].m.Name, catalog.StepCheckDecrypts, ctx.Err())
	}
	var unknown []error
	for _, c := range checks {
		switch {
		case c.err == nil:
			c.st.DecryptBackup, c.st.Undecryptable = c.m.Name, false
		case errors.Is(c.err, seal.ErrNoIdentity):
			// The error names the recipients and the identities' public
			// keys, never a secret key.
			e.opts.Log.Warn("no mounted identity decrypts the newest encrypted backup", "cluster", c.m.ClusterID, "backup", c.m.Name, "error", c.err.Error())
			c.st.DecryptBackup, c.st.Undecryptable = c.m.Name, true
		case errors.Is(c.err, seal.ErrTampered):
			e.opts.Log.Warn("the newest encrypted backup's age header is damaged", "cluster", c.m.ClusterID, "backup", c.m.Name, "error", c.err.Error())
			c.st.DecryptBackup, c.st.Undecryptable = "", false
		default:
			unknown = append(unknown, c.err)
			if !c.prevOK {
				c.st.DecryptBackup, c.st.Undecryptable = "", false
			}
		}
	}
	if len(unknown) > 0 {
		fail(StepCheckDecrypt, errors.Join(unknown...))
	}
}

// checkLocks reads, on a bucket with object lock, the retention of each
// cluster's newest backup (committed, checked out, not future-dated;
// catalog.BackupLock: its manifest's current version), judged at the
// refresh's clock. A retention that could not be read keeps the previous
// refresh's value for the same backup (none for another one) and counts
// read_locks; so does a failed read of the bucket's configuration, for
// every cluster. Without object lock on the bucket nothing is read.
func (e *Exporter) checkLocks(ctx context.Context, next map[string]*ClusterState, sr *storeRead, futureCut time.Time, fail func(string, error)) {
	if !sr.lockOK {
		return // sr.lockErr was counted by readStore
	}
	type check struct {
		st     *ClusterState
		name   string
		ls     catalog.LockState
		err    error
		prevOK bool
	}
	var checks []*check
	for id, st := range next {
		i := -1
		if sr.lock.Enabled {
			i = newestGood(sr.entries[id], sr.manifests[id], futureCut)
		}
		if i < 0 {
			st.LockBackup, st.LockedUntil, st.LockMode = "", time.Time{}, ""
			continue
		}
		name := sr.entries[id][i].Name
		checks = append(checks, &check{st: st, name: name, prevOK: st.LockBackup == name})
	}
	if len(checks) == 0 {
		return
	}
	parallel := e.opts.ReadParallel
	if parallel <= 0 {
		parallel = catalog.DefaultCheckParallel
	}
	now := e.opts.Now()
	notStarted := fanout.ForEach(ctx, len(checks), parallel, func(ctx context.Context, i int) {
		c := checks[i]
		c.ls, c.err = catalog.BackupLock(ctx, e.opts.Store, e.opts.Layout, sr.lock, c.st.Cluster, c.name, now)
	})
	for _, i := range notStarted {
		checks[i].err = fmt.Errorf("cluster %s backup %s: read the manifest's retention: not started: %w", checks[i].st.Cluster, checks[i].name, ctx.Err())
	}
	var unknown []error
	for _, c := range checks {
		switch {
		case c.err == nil:
			c.st.LockBackup, c.st.LockedUntil, c.st.LockMode = c.name, c.ls.Until, c.ls.Mode
		default:
			unknown = append(unknown, c.err)
			if !c.prevOK {
				c.st.LockBackup, c.st.LockedUntil, c.st.LockMode = "", time.Time{}, ""
			}
		}
	}
	if len(unknown) > 0 {
		fail(StepReadLocks, errors.Join(unknown...))
	}
}

func (e *Exporter) listedIn(rows []fleet.InspectRow, name string) bool {
	for i := range rows {
		if rows[i].Cluster == name {
			return true
		}
	}
	return false
}

// storeRead is what one store read found: each cluster id's backup
// folders (newest first) with their manifests, and the staged copies.
type storeRead struct {
	entries   map[string][]catalog.Entry
	manifests map[string][]*catalog.Manifest
	staged    []StagedState
	// lock is the bucket's object-lock configuration, when it could be
	// read (lockOK).
	lock   store.LockInfo
	lockOK bool
	// proofs are the clusters' newest journal proofs; proofsUnread the
	// clusters whose newest could not be read.
	proofs       map[string]*JournalProofState
	proofsUnread map[string]bool
	// journal is each cluster's newest journal segment (journal.go).
	journal map[string]journal.SegmentInfo
	// gaps are each cluster's journal gap records (journalgap.go).
	gaps map[string]gapListing
	// restoreRun is the newest namespace-wide restore run (nil: none),
	// when its records could be read (restoreRunOK; restorerun.go).
	restoreRun   *RestoreRunState
	restoreRunOK bool
}

// readStore lists the layout's root once and reads the committed backups'
// manifests and drill records; the staged copies come from the same
// listing. It returns nil when the listing or a read failed (the failing
// step is reported through fail).
func (e *Exporter) readStore(ctx context.Context, fail func(string, error)) *storeRead {
	st, layout := e.opts.Store, e.opts.Layout
	objs, err := st.List(ctx, layout.RootPrefix())
	if err != nil {
		fail(StepListStore, fmt.Errorf("list %q: %w", layout.RootPrefix(), err))
		return nil
	}
	groups := catalog.GroupEntries(layout, objs)
	// One flat slice (so the reads share one bound), then back per cluster.
	ids := make([]string, 0, len(groups))
	n := 0
	for id, es := range groups {
		ids = append(ids, id)
		n += len(es)
	}
	sort.Strings(ids)
	all := make([]catalog.Entry, 0, n)
	for _, id := range ids {
		all = append(all, groups[id]...)
	}
	ms, _, err := catalog.CheckEntries(ctx, st, layout, all, e.opts.ReadParallel)
	ok := true
	if err != nil {
		fail(StepReadManifests, err)
		ok = false
	}
	if err := catalog.LoadDrills(ctx, st, layout, all, e.opts.ReadParallel); err != nil {
		fail(StepReadDrills, err)
		ok = false
	}
	if !ok {
		return nil
	}
	sr := &storeRead{entries: make(map[string][]catalog.Entry, len(ids)), manifests: make(map[string][]*catalog.Manifest, len(ids)),
		staged: stagedStates(layout, objs), journal: newestSegments(layout, objs),
		gaps: journalGapKeys(layout, objs)}
	sr.proofs, sr.proofsUnread = e.readProofs(ctx, objs, fail)
	if sr.restoreRun, err = e.readRestoreRun(ctx, objs); err != nil {
		fail(StepReadRestores, err)
	} else {
		sr.restoreRunOK = true
	}
	if sr.lock, err = catalog.BucketLock(ctx, st); err != nil {
		fail(StepReadLocks, err)
	} else {
		sr.lockOK = true
	}
	i := 0
	for _, id := range ids {
		k := len(groups[id])
		sr.entries[id], sr.manifests[id] = all[i:i+k:i+k], ms[i:i+k:i+k]
		i += k
	}
	return sr
}

// stagedStates counts the staged copies (catalog's Layout.Classify: any
// object under <prefix>/_staged/<cluster>/ or the legacy
// <prefix>/restore/<cluster>/, plaintext the tool put there) of each
// cluster id in a listing of the root, with the oldest one's last
// modification.
func stagedStates(layout catalog.Layout, objs []store.ObjectInfo) []StagedState {
	by := map[string]*StagedState{}
	for _, o := range objs {
		ki := layout.Classify(o.Key)
		if ki.Kind != catalog.KeyStaged {
			continue
		}
		id := ki.ClusterID
		s := by[id]
		if s == nil {
			s = &StagedState{Cluster: id, Oldest: o.LastModified}
			by[id] = s
		}
		s.Copies++
		if o.LastModified.Before(s.Oldest) {
			s.Oldest = o.LastModified
		}
	}
	out := make([]StagedState, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cluster < out[j].Cluster })
	return out
}

// Run refreshes at once and then every interval (± jitter) until ctx
// ends. A failed refresh is logged and counted; the next one runs on
// schedule.
func (e *Exporter) Run(ctx context.Context) {
	if e.opts.Store != nil {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() { defer close(done); e.runReplica(ctx) }()
	}
	for {
		if err := e.Refresh(ctx); err != nil && ctx.Err() == nil {
			e.opts.Log.Warn("refresh failed", "error", err.Error())
		}
		t := time.NewTimer(e.wait())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// wait is the interval with its jitter.
func (e *Exporter) wait() time.Duration {
	d := e.opts.Interval
	if j := e.opts.Jitter; j > 0 {
		d += time.Duration((rand.Float64()*2 - 1) * j * float64(d))
	}
	return d
}

// Healthy reports whether the last successful refresh finished within
// HealthyIntervals intervals (plus one deadline: the refresh's own time).
func (e *Exporter) Healthy() (bool, string) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.lastSuccess.IsZero() {
		return false, "no successful refresh yet"
	}
	age := e.opts.Now().Sub(e.lastSuccess)
	limit := HealthyIntervals*e.opts.Interval + e.opts.Deadline
	if age > limit {
		return false, fmt.Sprintf("last successful refresh %v ago (more than %v)", age.Round(time.Second), limit)
	}
	return true, fmt.Sprintf("last successful refresh %v ago", age.Round(time.Second))
}

// Alive reports whether the refresh loop is not wedged: a refresh
// started within one interval (with its jitter) plus one deadline.
func (e *Exporter) Alive() (bool, string) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.lastStart.IsZero() {
		return true, "starting"
	}
	age := time.Since(e.lastStart)
	limit := time.Duration(float64(e.opts.Interval)*(1+e.opts.Jitter)) + 2*e.opts.Deadline
	if age > limit {
		return false, fmt.Sprintf("no refresh started for %v (more than %v)", age.Round(time.Second), limit)
	}
	return true, "refreshing"
}

// Describe sends every descriptor the exporter uses.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClusterInfo, descBackupLastSuccess, descBackupLastRevision, descBackupStoredBytes,
		descBackupsIncomplete, descBackupsDamaged, descDrillLast, descDrillLastResult, descDrillLastPass, descVerdict,
		descMembers, descMembersUp, descDBSize, descLeaderChanges, descRefreshDuration, descRefreshErrors, descRefreshLastSuccess,
		descOrphanInfo, descOrphanDeleteAfter, descBackupsFutureDated, descBackupFutureDatedLatest, descStagedCopies, descStagedOldest,
		descBackupUndecryptable, descBucketObjectLock, descBackupLockedUntil,
		descBackupDuration, descBackupThroughput, descRestorableFrom,
		descJournalProofFailed, descJournalProofTimestamp, descJournalLastRevision, descJournalLastReceived,
		descJournalGaps, descJournalGapTimestamp, descEscrowState, descEscrowUsable, descCertificateNotAfter,
		descRestoreRunInfo, descRestoreRunInProgress, descRestoreRunKilled, descRestoreRunClusters, descRestoreRunStarted,
		descRestoreRunDeadline, descRestoreRunEnded, descRestoreRunExpected,
		descSecondSiteStatusValid, descSecondSiteStatusUpdated, descSecondSiteSynced, descSecondSiteJournalSynced,
		descSecondSitePendingObjects, descSecondSitePendingBytes, descSecondSiteVerifyFailures,
		descSecondSiteCopiedObjects, descSecondSiteCopiedBytes, descSecondSiteStatusReads} {
		ch <- d
	}
}

// Collect sends the last snapshot as const metrics.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	e.mu.RLock()
	snap, lastSuccess, replica := e.snap, e.lastSuccess, e.replica
	errs := make(map[string]uint64, len(e.errs))
	for k, v := range e.errs {
		errs[k] = v
	}
	reads := make(map[string]uint64, len(e.replicaReads))
	for k, v := range e.replicaReads {
		reads[k] = v
	}
	e.mu.RUnlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	locked := snap.ObjectLock != nil && *snap.ObjectLock
	if snap.ObjectLock != nil {
		gauge(descBucketObjectLock, b2f(locked))
	}
	for _, c := range snap.Clusters {
		collectCluster(gauge, ch, c)
		collectJournalProof(gauge, c)
		if locked && c.Stored && c.LockBackup != "" {
			gauge(descBackupLockedUntil, lockedUntil(c.LockedUntil), c.Cluster)
		}
	}
	for _, o := range snap.Orphans {
		gauge(descOrphanInfo, 1, o.Cluster, o.State)
		if !o.DeleteAfter.IsZero() {
			gauge(descOrphanDeleteAfter, unixSeconds(o.DeleteAfter), o.Cluster)
		}
	}
	for _, s := range snap.Staged {
		gauge(descStagedCopies, float64(s.Copies), s.Cluster)
		gauge(descStagedOldest, unixSeconds(s.Oldest), s.Cluster)
	}
	collectRestoreRun(gauge, snap.RestoreRun, e.opts.Now())
	collectReplica(gauge, replica)
	collectReplicaCounters(ch, replica, reads)
	if !snap.At.IsZero() {
		gauge(descRefreshDuration, snap.Duration.Seconds())
	}
	for _, s := range Steps {
		ch <- prometheus.MustNewConstMetric(descRefreshErrors, prometheus.CounterValue, float64(errs[s]), s)
	}
	if !lastSuccess.IsZero() {
		gauge(descRefreshLastSuccess, unixSeconds(lastSuccess))
	}
}

func collectCluster(gauge func(*prometheus.Desc, float64, ...string), ch chan<- prometheus.Metric, c ClusterState) {
	gauge(descClusterInfo, 1, c.Cluster)
	if c.Stored {
		for _, k := range catalog.Kinds {
			b, ok := c.Backups[k]
			if !ok {
				continue
			}
			gauge(descBackupLastSuccess, unixSeconds(b.Time), c.Cluster, string(k))
			gauge(descBackupLastRevision, float64(b.Revision), c.Cluster, string(k))
			gauge(descBackupStoredBytes, float64(b.Stored), c.Cluster, string(k))
			if b.Duration > 0 {
				gauge(descBackupDuration, b.Duration.Seconds(), c.Cluster, string(k))
				gauge(descBackupThroughput, b.throughput(), c.Cluster, string(k))
			}
		}
		if !c.Oldest.IsZero() {
			gauge(descRestorableFrom, unixSeconds(c.Oldest), c.Cluster)
		}
		gauge(descBackupsIncomplete, float64(c.Incomplete), c.Cluster)
		gauge(descBackupsDamaged, float64(c.Damaged), c.Cluster)
		gauge(descBackupsFutureDated, float64(c.FutureDated), c.Cluster)
		if !c.FutureLatest.IsZero() {
			gauge(descBackupFutureDatedLatest, unixSeconds(c.FutureLatest), c.Cluster)
		}
		if c.DecryptBackup != "" {
			gauge(descBackupUndecryptable, b2f(c.Undecryptable), c.Cluster)
		}
		if !c.DrillLast.IsZero() {
			gauge(descDrillLast, unixSeconds(c.DrillLast), c.Cluster)
			gauge(descDrillLastResult, b2f(c.DrillLastPassed), c.Cluster)
		}
		if !c.DrillLastPass.IsZero() {
			gauge(descDrillLastPass, unixSeconds(c.DrillLastPass), c.Cluster)
		}
		collectJournal(gauge, c)
		collectJournalGaps(gauge, c)
		collectEscrow(gauge, c)
	}
	if c.Inspected {
		cur := verdictLabel(c.Verdict)
		for _, v := range Verdicts {
			gauge(descVerdict, b2f(v == cur), c.Cluster, v)
		}
		gauge(descMembers, float64(c.Voting), c.Cluster)
		gauge(descMembersUp, float64(c.Up), c.Cluster)
		if c.DBSize > 0 {
			gauge(descDBSize, float64(c.DBSize), c.Cluster)
		}
		ch <- prometheus.MustNewConstMetric(descLeaderChanges, prometheus.CounterValue, float64(c.LeaderChanges), c.Cluster)
	}
}

// lockedUntil is the gauge value of a lock's end: 0 when not locked.
func lockedUntil(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return unixSeconds(t)
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Handler serves /metrics (the exporter's snapshot; the Go runtime's and
// the process' own metrics too), /healthz (200 while Healthy, else 503)
// and /livez (200 while Alive, else 503).
func (e *Exporter) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(e, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Timeout: 30 * time.Second}))
	probe := func(check func() (bool, string)) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			ok, msg := check()
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if !ok {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			fmt.Fprintln(w, msg)
		}
	}
	mux.Handle("/healthz", probe(e.Healthy))
	mux.Handle("/livez", probe(e.Alive))
	return mux
}
