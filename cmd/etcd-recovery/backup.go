package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/backup/drilled"
	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/restore"
)

// backupOpts are backup's flags.
type backupOpts struct {
	etcd                                  etcdOpts
	store                                 storeOpts
	kube                                  kubeOpts
	encryption                            encryptionOpts
	policy                                policyOpts
	lock                                  lockOpts
	drill                                 drillOpts
	clusterID, kind, v2, compress, output string
	pushgateway                           string
	clusters                              cli.StringSlice
	all, noEvents, prune                  bool
	parallel                              int
	probeTimeout, timeout, orphanGrace    time.Duration
	journalRetention                      time.Duration
	escrowRecipients                      cli.StringSlice
}

// drillOpts are backup --drill's flags.
type drillOpts struct {
	drill               bool
	share, parallel     int
	etcdBinDir, tempDir string
}

// drillPlan is backup --drill's plan (drillOpts.plan): the share of the
// clusters drilled per run and the drills at once (--all/--cluster), where
// the etcd servers are and the scratch space.
type drillPlan struct {
	share, parallel        int
	etcdBinDir, scratchDir string
}

func backupCommand(g *globalOpts) *cli.Command {
	o := &backupOpts{}
	return &cli.Command{
		Name:  "backup",
		Usage: "stream a verified v3 snapshot and the v2 keys of one cluster (or of EtcdClusters: --all, --cluster) to COS",
		Description: "With --cluster-id and the etcd flags: one cluster.\n" +
			"With --all or --cluster NAME (repeatable): the EtcdClusters (etcd-operator) of a Kubernetes namespace,\n" +
			"--parallel at a time; endpoints, client TLS (the operator secret) and, unless mounted, the\n" +
			"cos-credentials secret come from the API. The cluster id in COS is the EtcdCluster's name.\n" +
			"One failure does not stop the others; each outcome is an Event on its EtcdCluster; the exit is 1\n" +
			"when any failed, naming them.\n" +
			"With --drill, the new backup is then restored into --temp-dir and started as a real etcd of its\n" +
			"version, checked and compared with the source (restore drill; the record is drill.json next to it),\n" +
			"before --prune. A failed drill leaves the backup committed; the exit is then 1, naming the cluster,\n" +
			"the backup and the failing check. With --all, --drill-share N drills 1/N of the clusters per run\n" +
			"(by the run's 8-hour UTC slot: with three runs a day and N=3, each cluster once a day).",
		Flags: concat(o.etcd.flags(true), o.store.flags(), o.kube.flags(), []cli.Flag{
			clusterIDFlag(&o.clusterID),
			allFlag(&o.all),
			&cli.StringSliceFlag{Name: "cluster", Usage: clusterFlagUsage, Destination: &o.clusters},
			parallelFlag(&o.parallel, defaultParallel),
			&cli.BoolFlag{Name: "no-events", Usage: "with --all/--cluster: do not record Kubernetes Events", Destination: &o.noEvents},
			&cli.StringFlag{Name: "kind", Value: "manual", Usage: "scheduled, update or manual", Destination: &o.kind},
			&cli.StringFlag{Name: "v2", Value: "auto", Usage: "export the v2 keyspace: auto (when served), on (required) or off", Destination: &o.v2},
			&cli.StringFlag{Name: "compress", Value: "zstd", Usage: "zstd or none", Destination: &o.compress},
			probeTimeoutFlag(&o.probeTimeout),
			backupTimeoutFlag(&o.timeout),
			&cli.BoolFlag{Name: "prune", Usage: "once the backup is committed, apply the retention policy to the cluster (see prune)", Destination: &o.prune},
			orphanGraceFlag(&o.orphanGrace),
			&cli.BoolFlag{Name: "drill", Usage: "once the backup is committed (before --prune), prove it restores: a restore drill of it, compared with the source", Destination: &o.drill.drill},
			&cli.IntFlag{Name: "drill-share", Value: 1, Usage: "with --all/--cluster --drill: drill 1/N of the clusters per run, chosen by cluster and the run's 8-hour UTC slot (1: all)", Destination: &o.drill.share},
			&cli.IntFlag{Name: "drill-parallel", Value: 1, Usage: "with --all/--cluster --drill: drills at once (each runs an etcd and needs twice the database's size in --temp-dir)", Destination: &o.drill.parallel},
			etcdBinDirFlag(&o.drill.etcdBinDir),
			tempDirFlag(&o.drill.tempDir),
			outputFlag(&o.output),
			pushgatewayFlag(&o.pushgateway),
			journalRetentionFlag(&o.journalRetention),
			escrowRecipientFlag(&o.escrowRecipients),
		}, o.encryption.flags(), o.policy.flags(), o.lock.flags()),
		Action: func(c *cli.Context) error { return runBackup(c, g, o) },
	}
}

// runBackup is backup's Action: checkBackupTargets, backupOptions, the
// overall deadline, then runBackupAll (--all, --cluster) or runBackupOne.
func runBackup(c *cli.Context, g *globalOpts, o *backupOpts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	many := o.all || len(o.clusters.Value()) > 0
	if err := checkBackupTargets(o, many); err != nil {
		return err
	}
	opts, plan, err := backupOptions(c, o, many, e.log)
	if err != nil {
		return err
	}
	// The overall deadline: every step (probe, stream, upload, v2 export,
	// manifest, drill, prune) runs under it. When it passes, the step in
	// flight fails, an uncommitted backup is aborted as on any failure
	// (no manifest; its upload aborted on a context of its own), and the
	// exit is 1 naming the step; 130 stays the signals'.
	t, err := e.withTimeout(o.timeout, nil)
	if err != nil {
		return err
	}
	defer t.cancel()
	if many {
		return t.overall(runBackupAll(t.ctx, e, o, opts, plan))
	}
	return runBackupOne(t, e, o, opts, plan)
}

// checkBackupTargets is backup's first step: one cluster (--cluster-id)
// or many (--all, --cluster), and --parallel and --timeout that make sense.
func checkBackupTargets(o *backupOpts, many bool) error {
	switch {
	case o.all && len(o.clusters.Value()) > 0:
		return usagef("backup: --all and --cluster are exclusive")
	case many && o.clusterID != "":
		return usagef("backup: --cluster-id is for one cluster given by --endpoints; with --all/--cluster the id is the EtcdCluster's name")
	case many && o.parallel < 1:
		return usagef("backup: --parallel %d: want at least 1", o.parallel)
	}
	if !many && o.clusterID == "" {
		return usagef("backup: --cluster-id is required")
	}
	if err := requirePositive("backup", positive{"timeout", o.timeout}); err != nil {
		return err
	}
	if !many {
		if err := catalog.ValidateClusterID(o.clusterID); err != nil {
			return asUsage(err)
		}
	}
	return nil
}

// backupOptions is backup's second step: the flags into backup.Options
// (kind, v2, compression, prune policy, encryption, the drill's scratch),
// checked by ValidateTemplate, and the drill's share of the run.
func backupOptions(c *cli.Context, o *backupOpts, many bool, log *slog.Logger) (backup.Options, *drillPlan, error) {
	opts := backup.Options{ClusterID: o.clusterID, ProbeTimeout: o.probeTimeout, Log: log}
	var err error
	if opts.Kind, err = catalog.ParseKind(o.kind); err != nil || opts.Kind == catalog.KindPreRestore {
		return opts, nil, usagef("backup: --kind %q: want scheduled, update or manual", o.kind)
	}
	if opts.V2, err = backup.ParseV2Mode(o.v2); err != nil {
		return opts, nil, asUsage(err)
	}
	if opts.Compression, err = objectio.ParseCompression(o.compress); err != nil {
		return opts, nil, asUsage(err)
	}
	if o.prune {
		policy, err := o.policy.policy()
		if err != nil {
			return opts, nil, err
		}
		opts.Prune = &policy
		opts.ClockTolerance = prune.DefaultClockTolerance // prune's clock check
		if err := checkJournalRetention(o.journalRetention); err != nil {
			return opts, nil, err
		}
		opts.JournalRetention = o.journalRetention
	}
	if opts.Lock, err = o.lock.policy("backup"); err != nil {
		return opts, nil, err
	}
	if opts.Lock.Enabled() && !o.prune {
		// The lock periods derive from the retention policy: the
		// policy flags' values, whether or not this run prunes.
		policy, err := o.policy.policy()
		if err != nil {
			return opts, nil, err
		}
		opts.LockRetention = &policy
	}
	if o.orphanGrace < prune.MinOrphanGrace {
		return opts, nil, usagef("backup: --orphan-grace %s: want at least %s", o.orphanGrace, prune.MinOrphanGrace)
	}
	plan, err := o.drill.plan(c, many)
	if err != nil {
		return opts, nil, err
	}
	if opts.Recipients, err = o.encryption.recipients(c); err != nil {
		return opts, nil, err
	}
	opts.RequireEncryption = o.encryption.requireEncryption
	if opts.EscrowRecipients, err = backup.ParseEscrowRecipients(o.escrowRecipients.Value()); err != nil {
		return opts, nil, usagef("backup: --escrow-recipient: %v", err)
	}
	if plan != nil {
		// An encrypted backup's drill runs on the plaintext the backup
		// streamed, kept under --temp-dir (else $TMPDIR) for the drill.
		opts.ScratchDir = plan.scratchDir
		// Checked before each snapshot streams (ETCD_RECOVERY_SCRATCH_LIMIT).
		scratchDir := plan.scratchDir
		opts.CheckScratch = func(dbSize int64) error { return restore.CheckDrillScratch(scratchDir, dbSize) }
	}
	if err := opts.ValidateTemplate(); err != nil {
		return opts, nil, fmt.Errorf("backup: %w", err)
	}
	return opts, plan, nil
}

// runBackupOne is backup's last step for one cluster given by
// --endpoints: the store, the backup under the overall deadline (and with
// --drill the drill after it: backup/drilled), the push and the report
// (printed for a committed backup even when the prune after it failed).
func runBackupOne(t *runTimeout, e *env, o *backupOpts, opts backup.Options, plan *drillPlan) error {
	log := e.log
	var err error
	if opts.Etcd, err = o.etcd.config(); err != nil {
		return err
	}
	store, layout, err := e.openStore(&o.store, nil)
	if err != nil {
		return err
	}
	opts.Store, opts.Layout = store, layout
	// A cluster given by --endpoints has no EtcdCluster to read: its
	// backups record the escrow missing (or none, without a recipient).
	opts.NoEscrow = backup.NoKubeClient
	prog := output.NewProgress(fmt.Sprintf("backup %s", opts.ClusterID))
	opts.Progress, opts.ProgressTotal = prog.Update, prog.SetTotal
	var (
		res    *backup.Result
		dr     *drilled.Result
		report interface{ Tables() []output.Table }
	)
	if plan != nil {
		// The drill's source is the cluster backed up: the same endpoints
		// and client TLS, so that it can ask the member for HashKV at the
		// snapshot's revision.
		src := opts.Etcd
		dr, err = drilled.Run(t.ctx, opts, func(ctx context.Context, m *catalog.Manifest, plaintext string) (*catalog.DrillRecord, error) {
			log.Info("restore drill of the new backup", "cluster", m.ClusterID, "backup", m.Name, "local_plaintext", plaintext != "")
			return drill.Run(ctx, drill.ForBackup(m, plaintext, store, layout, src, plan.etcdBinDir, plan.scratchDir, log))
		})
		if dr != nil {
			res, report = dr.Result, drilled.NewReport(dr)
		}
	} else {
		res, err = backup.Run(t.ctx, opts)
		if res != nil {
			report = backup.NewReport(res)
		}
	}
	err = t.overall(err)
	prog.Done()
	pushBackupRun(e, o.pushgateway, o.kube.namespace, opts, res, dr) // --pushgateway (serve.go); a failed push is only logged
	if res == nil {
		return err
	}
	// A committed backup is printed even when the prune after it failed.
	if rerr := e.renderAll(report.Tables(), report); rerr != nil {
		return rerr
	}
	return err
}

// plan reads --drill and its flags (nil without --drill). Bad values are
// usage errors (exit 4), found before anything is contacted.
func (o *drillOpts) plan(c *cli.Context, all bool) (*drillPlan, error) {
	if !o.drill {
		for _, f := range []string{"drill-share", "drill-parallel", "etcd-bin-dir"} {
			if c.IsSet(f) && (f != "etcd-bin-dir" || !envSet("ETCD_RECOVERY_ETCD_BIN_DIR")) {
				return nil, usagef("backup: --%s is for --drill", f)
			}
		}
		return nil, nil
	}
	p := &drillPlan{share: o.share, parallel: o.parallel, etcdBinDir: o.etcdBinDir, scratchDir: o.tempDir}
	switch {
	case p.share < 1:
		return nil, usagef("backup: --drill-share %d: want at least 1 (1 drills every cluster)", p.share)
	case p.parallel < 1:
		return nil, usagef("backup: --drill-parallel %d: want at least 1", p.parallel)
	case !all && (c.IsSet("drill-share") || c.IsSet("drill-parallel")):
		return nil, usagef("backup: --drill-share and --drill-parallel are for --all/--cluster; one cluster's backup is always drilled with --drill")
	}
	for _, d := range []struct{ flag, dir string }{{"etcd-bin-dir", p.etcdBinDir}, {"temp-dir", p.scratchDir}} {
		if d.dir == "" {
			continue
		}
		if st, err := os.Stat(d.dir); err != nil || !st.IsDir() {
			if err == nil {
				err = errors.New("not a directory")
			}
			return nil, usagef("backup: --%s %s: %v", d.flag, d.dir, err)
		}
	}
	return p, nil
}

func envSet(name string) bool { _, ok := os.LookupEnv(name); return ok }
