package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/restore"
)

// DrillAllOptions configure `drill --all`: the newest backup of every
// cluster drilled, Parallel at a time (each drill runs an etcd).
type DrillAllOptions struct {
	// Kube, when set, drills every EtcdCluster of its namespace (or Names):
	// the cluster id is the EtcdCluster's name, and its endpoints and
	// client TLS (the operator secret) come from the API, as backup --all
	// finds them, so each drill compares with its source. Without Kube,
	// every cluster id with a committed backup under the store's prefix is
	// drilled, compared with nothing (self-consistency).
	Kube  *Client
	Names []string
	// Template is each drill's options; ClusterID, Source and Backup are
	// set per cluster (Backup: the newest).
	Template    restore.DrillOptions
	Parallel    int
	DialTimeout time.Duration
	Log         *slog.Logger
}

// DrillResult is one cluster's drill.
type DrillResult struct {
	Cluster    string        `json:"cluster"`
	Backup     string        `json:"backup,omitempty"`
	Result     string        `json:"result"` // DrillPassed, DrillFailed, DrillNotRun
	Comparison string        `json:"comparison,omitempty"`
	Failed     string        `json:"failed,omitempty"`
	Step       string        `json:"step,omitempty"`
	Error      string        `json:"error,omitempty"`
	Duration   time.Duration `json:"-"`
	Seconds    float64       `json:"durationSeconds"`
	// Record is drill.json's content (also with --no-record).
	Record *backup.DrillRecord `json:"record,omitempty"`
}

// DrillAllReport is every cluster's drill, in cluster order.
type DrillAllReport struct {
	Namespace string        `json:"namespace,omitempty"`
	Prefix    string        `json:"prefix,omitempty"`
	Parallel  int           `json:"parallel"`
	Clusters  []DrillResult `json:"clusters"`
	// Failed names the clusters whose drill failed or could not run.
	Failed []string `json:"failed"`
}

// Table is the drill results: cluster, backup, result, comparison,
// failing check, duration.
func (r *DrillAllReport) Table() output.Table {
	t := output.Table{
		Header: []string{"CLUSTER", "BACKUP", "RESULT", "COMPARISON", "FAILED CHECK", "DURATION"},
		Wide:   []string{"STEP", "ERROR"},
	}
	t.Header = append(t.Header, "STEP", "ERROR")
	for _, c := range r.Clusters {
		res := c.Result
		if res == DrillFailed {
			res = "FAILED"
		}
		t.Rows = append(t.Rows, []string{c.Cluster, dash(c.Backup), res, dash(c.Comparison), dash(c.Failed),
			c.Duration.Round(time.Millisecond).String(), dash(c.Step), dash(c.Error)})
	}
	return t
}

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
	tmpl := opts.Template
	rep := &DrillAllReport{Parallel: opts.Parallel, Failed: []string{}, Clusters: []DrillResult{}}
	type target struct {
		id      string
		cluster *Cluster
	}
	var targets []target
	if k := opts.Kube; k != nil {
		rep.Namespace = k.Namespace
		clusters, err := k.Clusters(ctx, opts.Names...)
		if err != nil {
			return rep, &DrillAllError{Err: err}
		}
		for i := range clusters {
			targets = append(targets, target{id: clusters[i].Name, cluster: &clusters[i]})
		}
	} else {
		rep.Prefix = tmpl.Layout.RootPrefix()
		ids, err := committedClusterIDs(ctx, tmpl.Store, tmpl.Layout)
		if err != nil {
			return rep, &DrillAllError{Err: fmt.Errorf("list clusters under %q: %w", rep.Prefix, err)}
		}
		for _, id := range ids {
			targets = append(targets, target{id: id})
		}
	}
	log.Info("drilling the newest backup of every cluster", "clusters", len(targets), "parallel", opts.Parallel)
	rep.Clusters = make([]DrillResult, len(targets))
	sem := make(chan struct{}, opts.Parallel)
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				rep.Clusters[i] = DrillResult{Cluster: t.id, Result: DrillNotRun, Error: ctx.Err().Error()}
				return
			}
			defer func() { <-sem }()
			o := tmpl
			o.ClusterID, o.Backup = t.id, ""
			o.Log = log
			start := time.Now()
			if t.cluster != nil {
				cfg, release, err := opts.Kube.Connect(ctx, *t.cluster, opts.DialTimeout)
				defer release()
				if err != nil {
					// No source: the drill still runs, self-consistency only.
					log.Warn("no connection to the etcdcluster: drilling without comparing with it", "cluster", t.id, "err", err)
				} else {
					o.Source = cfg
				}
			}
			rec, err := restore.Drill(ctx, o)
			rep.Clusters[i] = drillResult(t.id, rec, err, time.Since(start))
		}()
	}
	wg.Wait()
	var errs []error
	for _, c := range rep.Clusters {
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

func drillResult(id string, rec *backup.DrillRecord, err error, d time.Duration) DrillResult {
	r := DrillResult{Cluster: id, Result: DrillPassed, Duration: d, Seconds: d.Seconds()}
	var de *restore.DrillError
	if rec == nil && errors.As(err, &de) {
		rec = de.Record
	}
	if de != nil {
		r.Step, r.Backup = de.Step, de.Backup
		if r.Backup == "(newest)" {
			r.Backup = ""
		}
	}
	if rec != nil {
		r.Record, r.Backup, r.Comparison, r.Failed = rec, rec.Backup, rec.Comparison.Mode, rec.Failed
	}
	switch {
	case err == nil:
	case rec != nil:
		r.Result, r.Error = DrillFailed, err.Error()
	default:
		r.Result, r.Error = DrillNotRun, err.Error()
	}
	return r
}

// committedClusterIDs are the cluster ids with at least one committed
// backup under the layout's prefix, sorted.
func committedClusterIDs(ctx context.Context, store backup.Store, layout backup.Layout) ([]string, error) {
	objs, err := store.List(ctx, layout.RootPrefix())
	if err != nil {
		return nil, err
	}
	var ids []string
	for id, entries := range backup.GroupEntries(layout, objs) {
		for _, e := range entries {
			if e.Committed {
				ids = append(ids, id)
				break
			}
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// DrillErrorLines are the failed drills, one line each, for below the table:
// cluster, backup and failing check (or why it could not run).
func (r *DrillAllReport) DrillErrorLines() []string {
	var out []string
	for _, c := range r.Clusters {
		if c.Result == DrillPassed {
			continue
		}
		out = append(out, strings.TrimSpace(c.Error))
	}
	return out
}

// DrillOne drills one cluster's backup (name; empty: the newest), with
// opts.Template (its Source: the cluster's members, when given), and
// reports it as DrillAll does. The error is the drill's (*restore.DrillError).
func DrillOne(ctx context.Context, opts DrillAllOptions, clusterID, name string) (*DrillAllReport, error) {
	o := opts.Template
	o.ClusterID, o.Backup = clusterID, name
	if o.Log == nil {
		o.Log = opts.Log
	}
	start := time.Now()
	rec, err := restore.Drill(ctx, o)
	r := drillResult(clusterID, rec, err, time.Since(start))
	rep := &DrillAllReport{Prefix: o.Layout.RootPrefix(), Parallel: 1, Clusters: []DrillResult{r}, Failed: []string{}}
	if r.Result != DrillPassed {
		rep.Failed = append(rep.Failed, clusterID)
	}
	return rep, err
}
