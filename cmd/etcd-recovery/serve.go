package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/backup/drilled"
	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/metrics"
)

// serveOpts are serve's flags.
type serveOpts struct {
	etcd                                   etcdOpts // --dial-timeout only
	store                                  storeOpts
	kube                                   kubeOpts
	listen, identityFile                   string
	parallel                               int
	interval, refreshTimeout, probeTimeout time.Duration
	orphanGrace                            time.Duration
	storeOnly, secondSite                  bool
}

// serveCommand is the exporter the toolkit Deployment runs.
func serveCommand(g *globalOpts) *cli.Command {
	o := &serveOpts{}
	return &cli.Command{
		Name:  "serve",
		Usage: "Prometheus exporter: every EtcdCluster's backups, drills and inspect verdict on /metrics (and /healthz)",
		Description: "Refreshes a snapshot every --interval (± 10% jitter), one refresh at a time, each bounded by\n" +
			"--refresh-timeout: one listing of the namespace's prefix in the bucket (--bucket; manifests and drill records\n" +
			"only, no snapshot is downloaded) and the inspection of every EtcdCluster of the namespace (the code of\n" +
			"inspect --all, --parallel at a time). /metrics serves the last snapshot (client_golang); /healthz answers\n" +
			"200 while the last successful refresh finished within 3 intervals (plus one --refresh-timeout), else 503;\n" +
			"/livez answers 200 while refreshes keep starting. SIGTERM stops it gracefully.\n\n" +
			"Only the namespace's EtcdClusters are clusters (etcd_recovery_cluster_info); a cluster id with backups and no\n" +
			"EtcdCluster is an orphan (etcd_recovery_orphan_info, with the orphan pass's state for --orphan-grace).\n" +
			"On each refresh, the age header of each cluster's newest encrypted backup is opened with --identity-file\n" +
			"(read again each refresh; one ranged read of the snapshot object): etcd_recovery_backup_undecryptable.\n\n" +
			"--store-only: no Kubernetes API at all (no kubeconfig, no in-cluster config): the clusters are the cluster ids\n" +
			"of the bucket's listing, and the metrics are what the bucket alone tells (backups, drills, the journal window).\n" +
			"A second site's copier status (<prefix>/_replica/status.json) is read every 30 s and exported\n" +
			"(etcd_recovery_second_site_*); --second-site says the bucket is one, so a missing record is exported as such.",
		Flags: concat(o.store.flags(), o.kube.flags(), []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: ":9090", EnvVars: []string{"ETCD_RECOVERY_LISTEN"}, Usage: listenUsage, Destination: &o.listen},
			&cli.DurationFlag{Name: "interval", Value: metrics.DefaultInterval, Usage: "time between refreshes (± 10% jitter)", Destination: &o.interval},
			&cli.DurationFlag{Name: "refresh-timeout", Value: metrics.DefaultDeadline, Usage: "deadline of one refresh (store listing and inspections)", Destination: &o.refreshTimeout},
			parallelFlag(&o.parallel, defaultParallel),
			probeTimeoutFlag(&o.probeTimeout),
			o.etcd.dialTimeoutFlag(),
			orphanGraceFlag(&o.orphanGrace),
			identityFileFlag(&o.identityFile),
			&cli.BoolFlag{Name: "store-only", Destination: &o.storeOnly,
				Usage: "no Kubernetes API (no kubeconfig, no in-cluster config, no inspection): the clusters are the bucket's cluster ids; for the DR region, against the second site"},
			&cli.BoolFlag{Name: "second-site", Destination: &o.secondSite,
				Usage: "the store is a second site: the copier's status record _replica/status.json is expected there (missing or damaged: exported so, and the lag alert fires)"},
		}),
		Action: func(c *cli.Context) error { return runServe(c, g, o) },
	}
}

func runServe(c *cli.Context, g *globalOpts, o *serveOpts) error {
	e, err := newEnv(c, g, "")
	if err != nil {
		return err
	}
	log := e.log
	if err := requirePositive("serve", positive{"interval", o.interval}, positive{"refresh-timeout", o.refreshTimeout},
		positive{"probe-timeout", o.probeTimeout}); err != nil {
		return err
	}
	if o.parallel < 1 {
		return usagef("serve: --parallel %d: want at least 1", o.parallel)
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return usagef("serve: --listen %q: want host:port or :port", o.listen)
	}
	if o.orphanGrace < prune.MinOrphanGrace {
		return usagef("serve: --orphan-grace %s: want at least %s", o.orphanGrace, prune.MinOrphanGrace)
	}
	// A bad identity file is a usage error at start (exit 4); then it is
	// read again on every refresh, so a rotated Secret needs no restart.
	ids, err := loadIdentity(c, o.identityFile)
	if err != nil {
		return err
	}
	if ids != nil && ids.Warning != "" {
		log.Warn("identity file accepted with a remark", "identity_file", o.identityFile, "warning", ids.Warning)
	}
	var k *kube.Client
	namespace := o.kube.namespace
	if o.storeOnly {
		// No client is built: nothing reads a kubeconfig or the pod's
		// service account.
		if c.IsSet("kubeconfig") {
			return usagef("serve --store-only reads no Kubernetes API: --kubeconfig is not used")
		}
		if !o.store.configured() {
			return usagef("serve --store-only: the store (--store, or --bucket) is required: it is all there is to export")
		}
	} else {
		if k, err = e.kube(&o.kube); err != nil {
			return err
		}
		namespace = k.Namespace
	}
	if o.secondSite && !o.store.configured() {
		return usagef("serve --second-site: the store (--store, or --bucket) is required: it is the second site")
	}
	opts := metrics.Options{Kube: k, Interval: o.interval, Jitter: metrics.DefaultJitter,
		Deadline: o.refreshTimeout, Parallel: o.parallel, ProbeTimeout: o.probeTimeout,
		DialTimeout: o.etcd.dialTimeout, OrphanGrace: o.orphanGrace, SecondSite: o.secondSite, Log: log}
	if o.identityFile != "" {
		opts.Identities = func() (*seal.Identities, error) { return loadIdentity(c, o.identityFile) }
	}
	if o.store.configured() {
		if opts.Store, opts.Layout, err = e.openStore(&o.store, k); err != nil {
			return err
		}
	}
	exp, err := metrics.New(opts)
	if err != nil {
		return asUsage(err)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("serve: listen on %s: %w", o.listen, err)
	}
	srv := &http.Server{Handler: exp.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Info("serving metrics", "listen", ln.Addr().String(), "namespace", namespace, "store", o.store.where(c, opts.Layout),
		"store_only", o.storeOnly, "second_site", o.secondSite, "interval", opts.Interval, "refresh_timeout", opts.Deadline)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	refreshed := make(chan struct{})
	go func() { defer close(refreshed); exp.Run(c.Context) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-c.Context.Done():
	}
	// SIGTERM: stop accepting, finish the scrapes in flight, then the
	// refresh (cancelled by the same context).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(c.Context), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-refreshed
	log.Info("stopped serving metrics")
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	// A clean stop on SIGTERM: exit 0, not "cancelled".
	return nil
}

// pushgatewayFlag is --pushgateway of backup and drill.
func pushgatewayFlag(dest *string) cli.Flag {
	return &cli.StringFlag{Name: "pushgateway", EnvVars: []string{"ETCD_RECOVERY_PUSHGATEWAY"}, Destination: dest,
		Usage: "Prometheus Pushgateway URL: after the run, push each cluster's outcome on the exporter's metric names (a failed push is logged, never fails the run)",
		Action: func(_ *cli.Context, v string) error {
			if v == "" {
				return nil
			}
			return asUsage(metrics.ValidatePushURL(v))
		}}
}

// pushBackupRun pushes a single-cluster backup's outcome (res nil: it
// failed) and that of its drill (dr, with --drill) when --pushgateway
// (url) is set.
func pushBackupRun(e *env, url, namespace string, opts backup.Options, res *backup.Result, dr *drilled.Result) {
	if url == "" {
		return
	}
	o := metrics.BackupOutcome{Cluster: opts.ClusterID, Kind: opts.Kind, Finished: time.Now()}
	if res != nil {
		o.Manifest = res.Manifest
		if dr != nil && (dr.Drill != nil || dr.DrillErr != nil) {
			o.Drill = &metrics.DrillOutcome{Cluster: opts.ClusterID, Finished: o.Finished, Record: dr.Drill}
		}
	}
	pushOutcome(e, url, namespace, "backup", func(ctx context.Context, po metrics.PushOptions) error {
		return metrics.PushBackups(ctx, po, []metrics.BackupOutcome{o})
	})
}

// pushBackupAll pushes a backup --all/--cluster run's outcomes.
func pushBackupAll(e *env, url, namespace string, kind catalog.Kind, rep *fleet.BackupAllReport) {
	if url == "" || rep == nil {
		return
	}
	pushOutcome(e, url, namespace, "backup", func(ctx context.Context, po metrics.PushOptions) error {
		return metrics.PushBackups(ctx, po, metrics.BackupAllOutcomes(rep, kind, time.Now()))
	})
}

// pushDrills pushes a drill run's outcomes.
func pushDrills(e *env, url, namespace string, rep *drill.Report) {
	if url == "" || rep == nil {
		return
	}
	pushOutcome(e, url, namespace, "drill", func(ctx context.Context, po metrics.PushOptions) error {
		return metrics.PushDrills(ctx, po, metrics.DrillAllOutcomes(rep, time.Now()))
	})
}

// pushOutcome pushes to url with the run's namespace (--namespace, else
// $POD_NAMESPACE) as grouping label, on a context of its own (a cancelled
// run still reports what it did), bounded by metrics.DefaultPushTimeout.
// A failure is logged: the run's exit code is the run's.
func pushOutcome(e *env, url, namespace, what string, push func(context.Context, metrics.PushOptions) error) {
	ns := namespace
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	po := metrics.PushOptions{URL: url, Namespace: ns}
	start := time.Now()
	if err := push(context.WithoutCancel(e.ctx()), po); err != nil {
		e.log.Error("push to the Pushgateway failed (the run's result stands)", "run", what, "error", err.Error())
		return
	}
	e.log.Info("pushed the run's outcome to the Pushgateway", "run", what, "took", time.Since(start).Round(time.Millisecond))
}
