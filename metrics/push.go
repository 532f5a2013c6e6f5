package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/fanout"
)

// Pushgateway job names.
const (
	JobBackup = "etcd-recovery-backup"
	JobDrill  = "etcd-recovery-drill"
)

// DefaultPushTimeout bounds a run's whole push.
const DefaultPushTimeout = 30 * time.Second

// pushParallel is how many groups are pushed at once.
const pushParallel = 8

// PushOptions configure a push to a Prometheus Pushgateway.
type PushOptions struct {
	// URL of the Pushgateway (http(s)://host:port).
	URL string
	// Namespace is the grouping label namespace (omitted when empty).
	Namespace string
	// Timeout bounds the whole push (DefaultPushTimeout).
	Timeout time.Duration
	// Client (default: an http.Client with the system roots; TLS
	// verification is never turned off).
	Client *http.Client
}

// ValidatePushURL checks a --pushgateway value: http(s)://host[:port],
// no user info.
func ValidatePushURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("--pushgateway %q: not a URL", etcdconn.RedactUserInfo(raw))
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("--pushgateway %q: want http(s)://host[:port]", etcdconn.RedactUserInfo(raw))
	case u.Host == "":
		return fmt.Errorf("--pushgateway %q: no host", etcdconn.RedactUserInfo(raw))
	case u.User != nil:
		return fmt.Errorf("--pushgateway %q: user info is not allowed", etcdconn.RedactUserInfo(raw))
	}
	return nil
}

// BackupOutcome is one cluster's backup run as pushed: Manifest is the
// committed backup (nil: the run failed); Drill the drill of it, when one
// ran (backup --drill).
type BackupOutcome struct {
	Cluster  string
	Kind     catalog.Kind
	Finished time.Time
	Manifest *catalog.Manifest
	Drill    *DrillOutcome
}

// DrillOutcome is one cluster's drill as pushed: Record is the drill's
// record (nil: the drill could not run).
type DrillOutcome struct {
	Cluster  string
	Finished time.Time
	Record   *catalog.DrillRecord
}

// BackupAllOutcomes are the outcomes of a backup --all run.
func BackupAllOutcomes(rep *fleet.BackupAllReport, kind catalog.Kind, finished time.Time) []BackupOutcome {
	if rep == nil {
		return nil
	}
	out := make([]BackupOutcome, 0, len(rep.Clusters))
	for _, c := range rep.Clusters {
		o := BackupOutcome{Cluster: c.Cluster, Kind: kind, Finished: finished}
		if c.Result == fleet.ResultOK {
			o.Manifest = c.Manifest
		}
		if d := c.Drill; d != nil && (d.Record != nil || d.Result == fleet.DrillNotRun || d.Result == fleet.DrillInconclusive) {
			o.Drill = &DrillOutcome{Cluster: c.Cluster, Finished: finished, Record: d.Record}
		}
		out = append(out, o)
	}
	return out
}

// DrillAllOutcomes are the outcomes of a drill run (a cluster without a
// backup is not one: nothing was drilled).
func DrillAllOutcomes(rep *drill.Report, finished time.Time) []DrillOutcome {
	if rep == nil {
		return nil
	}
	var out []DrillOutcome
	for _, c := range rep.Clusters {
		if c.Result == drill.NoBackup {
			continue
		}
		out = append(out, DrillOutcome{Cluster: c.Cluster, Finished: finished, Record: c.Record})
	}
	return out
}

// PushBackups pushes each backup outcome to the group {job
// etcd-recovery-backup, namespace, cluster, kind} (and its drill to
// {job etcd-recovery-drill, namespace, cluster}) with POST, which replaces
// only the metrics pushed: a failed run pushes its run result and leaves
// the group's last success as it was. The labels cluster and kind come
// from the grouping key, so the series carry the exporter's names and
// labels (alerts take the max of both).
func PushBackups(ctx context.Context, opts PushOptions, outcomes []BackupOutcome) error {
	var groups []pushGroup
	var drills []DrillOutcome
	for _, o := range outcomes {
		g := pushGroup{job: JobBackup, cluster: o.Cluster, kind: string(o.Kind)}
		g.add(descBackupLastRun, unixSeconds(o.Finished))
		g.add(descBackupLastRunResult, b2f(o.Manifest != nil))
		if m := o.Manifest; m != nil {
			if t, _, err := catalog.ParseBackupName(m.Name); err == nil {
				g.add(pushDesc(descBackupLastSuccess), unixSeconds(t))
			}
			g.add(pushDesc(descBackupLastRevision), float64(m.Revision()))
			g.add(pushDesc(descBackupStoredBytes), float64(m.Snapshot.StoredSize))
		}
		groups = append(groups, g)
		if o.Drill != nil {
			drills = append(drills, *o.Drill)
		}
	}
	for _, d := range drills {
		groups = append(groups, drillGroup(d))
	}
	return pushGroups(ctx, opts, groups)
}

// PushDrills pushes each drill outcome to the group {job
// etcd-recovery-drill, namespace, cluster} (POST, as PushBackups).
func PushDrills(ctx context.Context, opts PushOptions, outcomes []DrillOutcome) error {
	groups := make([]pushGroup, 0, len(outcomes))
	for _, d := range outcomes {
		groups = append(groups, drillGroup(d))
	}
	return pushGroups(ctx, opts, groups)
}

func drillGroup(d DrillOutcome) pushGroup {
	g := pushGroup{job: JobDrill, cluster: d.Cluster}
	g.add(descDrillLastRun, unixSeconds(d.Finished))
	r := d.Record
	g.add(descDrillLastRunResult, b2f(r != nil && r.Passed))
	if r != nil && !r.FinishedAt.IsZero() {
		g.add(pushDesc(descDrillLast), unixSeconds(r.FinishedAt))
		g.add(pushDesc(descDrillLastResult), b2f(r.Passed))
		if r.Passed {
			g.add(pushDesc(descDrillLastPass), unixSeconds(r.FinishedAt))
		}
	}
	return g
}

// pushDesc is the exporter's descriptor without variable labels: in the
// Pushgateway, cluster and kind come from the grouping key.
func pushDesc(d *prometheus.Desc) *prometheus.Desc {
	name, help := descNames[d][0], descNames[d][1]
	return prometheus.NewDesc(name, help, nil, nil)
}

var descNames = map[*prometheus.Desc][2]string{
	descBackupLastSuccess:  {NameBackupLastSuccess, "Time (unix seconds, from its name) of the newest committed backup of that kind that checks out (manifest read, objects present with their sizes); absent when there is none."},
	descBackupLastRevision: {NameBackupLastRevision, "etcd revision of the newest committed backup of that kind."},
	descBackupStoredBytes:  {NameBackupStoredBytes, "Stored (compressed) size in bytes of the snapshot object of the newest committed backup of that kind."},
	descDrillLast:          {NameDrillLastTimestamp, "Time (unix seconds) the newest restore drill of any of the cluster's backups finished; absent when never drilled."},
	descDrillLastResult:    {NameDrillLastResult, "1 when the newest restore drill passed, 0 when it failed; absent when never drilled."},
	descDrillLastPass:      {NameDrillLastPass, "Time (unix seconds) the newest passed restore drill finished; absent when no drill passed."},
}

type pushGroup struct {
	job, cluster, kind string
	metrics            []prometheus.Metric
}

func (g *pushGroup) add(d *prometheus.Desc, v float64) {
	g.metrics = append(g.metrics, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v))
}

// Describe and Collect make a group a prometheus.Collector.
func (g *pushGroup) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range g.metrics {
		ch <- m.Desc()
	}
}

func (g *pushGroup) Collect(ch chan<- prometheus.Metric) {
	for _, m := range g.metrics {
		ch <- m
	}
}

// ctxDoer sends the pusher's requests on ctx: the push's deadline.
type ctxDoer struct {
	ctx context.Context
	hc  *http.Client
}

func (d ctxDoer) Do(r *http.Request) (*http.Response, error) { return d.hc.Do(r.WithContext(d.ctx)) }

func pushGroups(ctx context.Context, opts PushOptions, groups []pushGroup) error {
	if len(groups) == 0 {
		return nil
	}
	if err := ValidatePushURL(opts.URL); err != nil {
		return err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultPushTimeout
	}
	hc := opts.Client
	if hc == nil {
		hc = &http.Client{Timeout: timeout}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs := make([]error, len(groups))
	notStarted := fanout.ForEach(ctx, len(groups), pushParallel, func(ctx context.Context, i int) {
		g := &groups[i]
		p := push.New(opts.URL, g.job).Client(ctxDoer{ctx, hc}).Collector(g)
		if opts.Namespace != "" {
			p = p.Grouping("namespace", opts.Namespace)
		}
		p = p.Grouping("cluster", g.cluster)
		if g.kind != "" {
			p = p.Grouping("kind", g.kind)
		}
		if err := p.Add(); err != nil {
			errs[i] = fmt.Errorf("push %s of cluster %s: %w", g.job, g.cluster, err)
		}
	})
	for _, i := range notStarted {
		errs[i] = fmt.Errorf("push %s of cluster %s: not sent within %v: %w", groups[i].job, groups[i].cluster, timeout, ctx.Err())
	}
	return errors.Join(errs...)
}
