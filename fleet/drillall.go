package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/kube"
)

// DrillAllOptions configure `drill --all`: the newest backup of every
// cluster drilled, Parallel at a time (each drill runs an etcd).
type DrillAllOptions struct {
	// Kube, when set, drills every EtcdCluster of its namespace (or Names):
	// the cluster id is the EtcdCluster's name, and its endpoints and
	// client TLS (the operator secret) come from the API, as backup --all
	// finds them, so each drill compares with its source. Without Kube,
	// every cluster id with a backup folder under the store's prefix is
	// drilled, compared with nothing (self-consistency). Either way, a
	// cluster with no committed backup is reported as DrillNoBackup (not
	// drilled, not a failure: inspect warns about missing backups).
	Kube  *kube.Client
	Names []string
	// NoEvents: in the Kubernetes form, do not record each drill's Event
	// (DrillPassed, DrillFailed, DrillNotRun) on its EtcdCluster.
	NoEvents bool
	// Template is each drill's options; ClusterID, Source and Backup are
	// set per cluster (Backup: the newest).
	Template    drill.Options
	Parallel    int
	DialTimeout time.Duration
	Log         *slog.Logger
}

// DrillAllReport is every cluster's drill, in cluster order (a
// drill.Report: one cluster's drill reads the same).
type DrillAllReport = drill.Report

// DrillAllError is a drill --all that failed: the clusters whose drill
// failed or could not run, or the listing.
type DrillAllError struct {
	Failed []string
	Err    error
}

func (e *DrillAllError) Error() string {
	if len(e.Failed) == 0 {
		return "drill --all: " + e.Err.Error()
	}
	return fmt.Sprintf("drill of %d cluster(s) failed: %v", len(e.Failed), e.Err)
}

func (e *DrillAllError) Unwrap() error { return e.Err }

// DrillAll drills the newest backup of every cluster (see DrillAllOptions).
// One failure does not stop the others. A cancel stops every drill (each
// cleans up after itself, records nothing) and returns the context's error.
func DrillAll(ctx context.Context, opts DrillAllOptions) (*DrillAllReport, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	r := newDrillAll(opts)
	if err := r.listTargets(ctx); err != nil {
		return r.rep, err
	}
	todo := r.skipNoBackup()
	r.drillEach(ctx, todo)
	return r.tally(ctx)
}

// drillAll is one DrillAll's state: its options (defaults set), the
// targets, their backup folders and the report being filled.
type drillAll struct {
	opts    DrillAllOptions
	log     *slog.Logger
	rep     *DrillAllReport
	targets []Target
	folders map[string]folderCount
}

// newDrillAll is the first step: the options' defaults and an empty
// report.
func newDrillAll(opts DrillAllOptions) *drillAll {
	if opts.Parallel <= 0 {
		opts.Parallel = 1
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rep := &DrillAllReport{Parallel: opts.Parallel, Failed: []string{}, NoBackup: []string{}, Clusters: []drill.Result{}}
	return &drillAll{opts: opts, log: log, rep: rep}
}

// listTargets finds the clusters to drill (the EtcdClusters, or the
// store's cluster ids) and their backup folders.
func (r *drillAll) listTargets(ctx context.Context) error {
	opts, tmpl, rep := r.opts, r.opts.Template, r.rep
	if k := opts.Kube; k != nil {
		rep.Namespace = k.Namespace
		var err error
		if r.targets, err = KubeTargets(ctx, k, opts.Names...); err != nil {
			return &DrillAllError{Err: err}
		}
	}
	rep.Prefix = tmpl.Layout.RootPrefix()
	folders, err := clusterFolders(ctx, tmpl.Store, tmpl.Layout)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &DrillAllError{Err: fmt.Errorf("list clusters under %q: %w", rep.Prefix, err)}
	}
	r.folders = folders
	if opts.Kube == nil {
		r.targets = storeTargets(folders)
	}
	return nil
}

// skipNoBackup reports the targets without a committed backup as
// DrillNoBackup and returns the indexes of the others, to drill.
func (r *drillAll) skipNoBackup() (todo []int) {
	r.log.Info("drilling the newest backup of every cluster", "clusters", len(r.targets), "parallel", r.opts.Parallel)
	r.rep.Clusters = make([]drill.Result, len(r.targets))
	for i, t := range r.targets {
		if f := r.folders[t.ID]; f.committed == 0 {
			reason := fmt.Sprintf("not drilled: no committed backup under %s", r.opts.Template.Layout.ClusterPrefix(t.ID))
			if f.incomplete > 0 {
				reason += fmt.Sprintf(" (%d incomplete backup folder(s) without a manifest)", f.incomplete)
			}
			r.log.Warn("no committed backup to drill", "cluster", t.ID, "incomplete", f.incomplete)
			r.rep.Clusters[i] = drill.Result{Cluster: t.ID, Result: DrillNoBackup, Reason: reason}
			continue
		}
		todo = append(todo, i)
	}
	return todo
}

// drillEach drills the targets todo, Parallel at a time; those a cancel
// kept from starting are DrillNotRun.
func (r *drillAll) drillEach(ctx context.Context, todo []int) {
	notStarted := fanout.ForEach(ctx, len(todo), r.opts.Parallel, func(ctx context.Context, j int) {
		i := todo[j]
		r.rep.Clusters[i] = r.drillTarget(ctx, r.targets[i])
	})
	for _, j := range notStarted {
		i := todo[j]
		r.rep.Clusters[i] = drill.Result{Cluster: r.targets[i].ID, Result: DrillNotRun, Error: ctx.Err().Error()}
	}
}

// drillTarget drills one target's newest committed backup, compared with
// its EtcdCluster when it has one, and records the drill's Event.
func (r *drillAll) drillTarget(ctx context.Context, t Target) drill.Result {
	opts, log := r.opts, r.log
	o := opts.Template
	// The newest committed backup by name (time), named: left
	// to restore's choice, a drill would take the candidate restore
	// prefers (an older backup already proven among equal
	// revisions; never one whose drill failed), so an idle
	// cluster's newest backup would never be drilled and a failed
	// one never re-drilled.
	o.ClusterID, o.Backup = t.ID, r.folders[t.ID].newest
	o.Log = log
	start := time.Now()
	if t.Cluster != nil {
		cfg, release, err := opts.Kube.Connect(ctx, *t.Cluster, opts.DialTimeout)
		defer release()
		if err != nil {
			// No source: the drill still runs, self-consistency only.
			log.Warn("no connection to the etcdcluster: drilling without comparing with it", "cluster", t.ID, "err", err)
		} else {
			o.Source = cfg
		}
	}
	rec, err := drill.Run(ctx, o)
	res := drill.NewResult(t.ID, rec, err, time.Since(start))
	if t.Cluster != nil && !opts.NoEvents && ctx.Err() == nil {
		// A cancelled drill proves nothing either way: no Event.
		r.recordEvent(ctx, t, &res)
	}
	return res
}

// recordEvent records a drill's Event on its EtcdCluster; a failure is
// noted in res.EventError.
func (r *drillAll) recordEvent(ctx context.Context, t Target, res *drill.Result) {
	out := &drill.Outcome{Result: res.Result, Comparison: res.Comparison, Error: res.Error, Duration: res.Duration, Record: res.Record}
	name := res.Backup
	if name == "" {
		name = "(newest)"
	}
	typ, reason, msg := drillEvent(out, name)
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if err := r.opts.Kube.RecordEvent(ectx, *t.Cluster, typ, reason, msg); err != nil {
		res.EventError = err.Error()
		r.log.Warn("could not record the drill's event", "cluster", t.ID, "err", err)
	}
	cancel()
}

// tally is the last step: the failed and undrilled clusters named in the
// report, and the error (the context's after a cancel).
func (r *drillAll) tally(ctx context.Context) (*DrillAllReport, error) {
	rep := r.rep
	var errs []error
	for _, c := range rep.Clusters {
		if c.Result == DrillNoBackup {
			rep.NoBackup = append(rep.NoBackup, c.Cluster)
			continue
		}
		if c.Result != DrillPassed {
			rep.Failed = append(rep.Failed, c.Cluster)
			errs = append(errs, errors.New(c.Error))
		}
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if len(errs) > 0 {
		return rep, &DrillAllError{Failed: rep.Failed, Err: errors.Join(errs...)}
	}
	return rep, nil
}

// folderCount is how many backup folders of a cluster are committed and
// how many are not (no manifest).
// newest is the newest committed backup's name.
type folderCount struct {
	committed, incomplete int
	newest                string
}

// clusterFolders counts the backup folders of every cluster id under the
// layout's prefix.
func clusterFolders(ctx context.Context, store store.Store, layout catalog.Layout) (map[string]folderCount, error) {
	objs, err := store.List(ctx, layout.RootPrefix())
	if err != nil {
		return nil, err
	}
	out := map[string]folderCount{}
	for id, entries := range catalog.GroupEntries(layout, objs) {
		var f folderCount
		for _, e := range entries {
			if e.Committed {
				if f.committed == 0 {
					f.newest = e.Name // entries are newest first
				}
				f.committed++
			} else {
				f.incomplete++
			}
		}
		out[id] = f
	}
	return out, nil
}
