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
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/metrics"
)

// serveCommand is the exporter the toolkit Deployment runs.
func serveCommand() *cli.Command {
	var dial cli.Flag
	for _, f := range etcdFlags() {
		if f.Names()[0] == "dial-timeout" {
			dial = f
		}
	}
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
			"(read again each refresh; one ranged read of the snapshot object): etcd_recovery_backup_undecryptable.",
		Flags: concat(cosFlags(), kubeFlags(), []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: ":9090", EnvVars: []string{"ETCD_RECOVERY_LISTEN"}, Usage: "address of /metrics, /healthz and /livez"},
			&cli.DurationFlag{Name: "interval", Value: metrics.DefaultInterval, Usage: "time between refreshes (± 10% jitter)"},
			&cli.DurationFlag{Name: "refresh-timeout", Value: metrics.DefaultDeadline, Usage: "deadline of one refresh (store listing and inspections)"},
			parallelFlag(),
			probeTimeoutFlag(),
			dial,
			orphanGraceFlag(),
			identityFileFlag(),
		}),
		Action: runServe,
	}
}

func runServe(c *cli.Context) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	if err := requirePositive(c, "serve", "interval", "refresh-timeout", "probe-timeout"); err != nil {
		return err
	}
	if c.Int("parallel") < 1 {
		return usagef("serve: --parallel %d: want at least 1", c.Int("parallel"))
	}
	if _, _, err := net.SplitHostPort(c.String("listen")); err != nil {
		return usagef("serve: --listen %q: want host:port or :port", c.String("listen"))
	}
	if c.Duration("orphan-grace") < catalog.MinOrphanGrace {
		return usagef("serve: --orphan-grace %s: want at least %s", c.Duration("orphan-grace"), catalog.MinOrphanGrace)
	}
	// A bad identity file is a usage error at start (exit 4); then it is
	// read again on every refresh, so a rotated Secret needs no restart.
	ids, err := identityFromFlags(c)
	if err != nil {
		return err
	}
	if ids != nil && ids.Warning != "" {
		log.Warn("identity file accepted with a remark", "identity_file", c.String("identity-file"), "warning", ids.Warning)
	}
	k, err := kubeClient(c)
	if err != nil {
		return err
	}
	opts := metrics.Options{Kube: k, Interval: c.Duration("interval"), Jitter: metrics.DefaultJitter,
		Deadline: c.Duration("refresh-timeout"), Parallel: c.Int("parallel"), ProbeTimeout: c.Duration("probe-timeout"),
		DialTimeout: c.Duration("dial-timeout"), OrphanGrace: c.Duration("orphan-grace"), Log: log}
	if c.String("identity-file") != "" {
		opts.Identities = func() (*seal.Identities, error) { return identityFromFlags(c) }
	}
	if c.String("bucket") != "" {
		if opts.Store, opts.Layout, err = cosStoreKube(c, k); err != nil {
			return err
		}
	}
	exp, err := metrics.New(opts)
	if err != nil {
		return asUsage(err)
	}
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("serve: listen on %s: %w", c.String("listen"), err)
	}
	srv := &http.Server{Handler: exp.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Info("serving metrics", "listen", ln.Addr().String(), "namespace", k.Namespace, "bucket", c.String("bucket"),
		"interval", opts.Interval, "refresh_timeout", opts.Deadline)
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
func pushgatewayFlag() cli.Flag {
	return &cli.StringFlag{Name: "pushgateway", EnvVars: []string{"ETCD_RECOVERY_PUSHGATEWAY"},
		Usage: "Prometheus Pushgateway URL: after the run, push each cluster's outcome on the exporter's metric names (a failed push is logged, never fails the run)",
		Action: func(_ *cli.Context, v string) error {
			if v == "" {
				return nil
			}
			return asUsage(metrics.ValidatePushURL(v))
		}}
}

// pushBackupRun pushes a single-cluster backup's outcome (res nil: it
// failed) when --pushgateway is set.
func pushBackupRun(c *cli.Context, opts backup.Options, res *backup.Result) {
	if c.String("pushgateway") == "" {
		return
	}
	o := metrics.BackupOutcome{Cluster: opts.ClusterID, Kind: opts.Kind, Finished: time.Now()}
	if res != nil {
		o.Manifest = res.Manifest
		if res.Drill != nil || res.DrillErr != nil {
			o.Drill = &metrics.DrillOutcome{Cluster: opts.ClusterID, Finished: o.Finished, Record: res.Drill}
		}
	}
	pushOutcome(c, "backup", func(ctx context.Context, po metrics.PushOptions) error {
		return metrics.PushBackups(ctx, po, []metrics.BackupOutcome{o})
	})
}

// pushBackupAll pushes a backup --all/--cluster run's outcomes.
func pushBackupAll(c *cli.Context, kind catalog.Kind, rep *fleet.BackupAllReport) {
	if c.String("pushgateway") == "" || rep == nil {
		return
	}
	pushOutcome(c, "backup", func(ctx context.Context, po metrics.PushOptions) error {
		return metrics.PushBackups(ctx, po, metrics.BackupAllOutcomes(rep, kind, time.Now()))
	})
}

// pushDrills pushes a drill run's outcomes.
func pushDrills(c *cli.Context, rep *fleet.DrillAllReport) {
	if c.String("pushgateway") == "" || rep == nil {
		return
	}
	pushOutcome(c, "drill", func(ctx context.Context, po metrics.PushOptions) error {
		return metrics.PushDrills(ctx, po, metrics.DrillAllOutcomes(rep, time.Now()))
	})
}

// pushOutcome pushes with the run's namespace as grouping label, on a
// context of its own (a cancelled run still reports what it did), bounded
// by metrics.DefaultPushTimeout. A failure is logged: the run's exit code
// is the run's.
func pushOutcome(c *cli.Context, what string, push func(context.Context, metrics.PushOptions) error) {
	log, err := logger(c)
	if err != nil {
		return
	}
	ns := c.String("namespace")
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	po := metrics.PushOptions{URL: c.String("pushgateway"), Namespace: ns}
	start := time.Now()
	if err := push(context.WithoutCancel(c.Context), po); err != nil {
		log.Error("push to the Pushgateway failed (the run's result stands)", "run", what, "error", err.Error())
		return
	}
	log.Info("pushed the run's outcome to the Pushgateway", "run", what, "took", time.Since(start).Round(time.Millisecond))
}
