package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/backup"
	drillrun "github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/restore"
)

func backupCommand() *cli.Command {
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
		Flags: concat(etcdFlags(), cosFlags(), kubeFlags(), []cli.Flag{
			clusterIDFlag(),
			allFlag(),
			&cli.StringSliceFlag{Name: "cluster", Usage: clusterFlagUsage},
			parallelFlag(),
			&cli.BoolFlag{Name: "no-events", Usage: "with --all/--cluster: do not record Kubernetes Events"},
			&cli.StringFlag{Name: "kind", Value: "manual", Usage: "scheduled, update or manual"},
			&cli.StringFlag{Name: "v2", Value: "auto", Usage: "export the v2 keyspace: auto (when served), on (required) or off"},
			&cli.StringFlag{Name: "compress", Value: "zstd", Usage: "zstd or none"},
			probeTimeoutFlag(),
			backupTimeoutFlag(),
			&cli.BoolFlag{Name: "prune", Usage: "once the backup is committed, apply the retention policy to the cluster (see prune)"},
			orphanGraceFlag(),
			&cli.BoolFlag{Name: "drill", Usage: "once the backup is committed (before --prune), prove it restores: a restore drill of it, compared with the source"},
			&cli.IntFlag{Name: "drill-share", Value: 1, Usage: "with --all/--cluster --drill: drill 1/N of the clusters per run, chosen by cluster and the run's 8-hour UTC slot (1: all)"},
			&cli.IntFlag{Name: "drill-parallel", Value: 1, Usage: "with --all/--cluster --drill: drills at once (each runs an etcd and needs twice the database's size in --temp-dir)"},
			etcdBinDirFlag(),
			tempDirFlag(),
			outputFlag(),
			pushgatewayFlag(),
		}, encryptionFlags(), policyFlags()),
		Action: runBackup,
	}
}

func runBackup(c *cli.Context) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	opts := backup.Options{ClusterID: c.String("cluster-id"), ProbeTimeout: c.Duration("probe-timeout"), Log: log}
	fleet := c.Bool("all") || len(c.StringSlice("cluster")) > 0
	switch {
	case c.Bool("all") && len(c.StringSlice("cluster")) > 0:
		return usagef("backup: --all and --cluster are exclusive")
	case fleet && opts.ClusterID != "":
		return usagef("backup: --cluster-id is for one cluster given by --endpoints; with --all/--cluster the id is the EtcdCluster's name")
	case fleet && c.Int("parallel") < 1:
		return usagef("backup: --parallel %d: want at least 1", c.Int("parallel"))
	}
	if !fleet && opts.ClusterID == "" {
		return usagef("backup: --cluster-id is required")
	}
	if err := requirePositive(c, "backup", "timeout"); err != nil {
		return err
	}
	if !fleet {
		if err := catalog.ValidateClusterID(opts.ClusterID); err != nil {
			return asUsage(err)
		}
	}
	if opts.Kind, err = catalog.ParseKind(c.String("kind")); err != nil || opts.Kind == catalog.KindPreRestore {
		return usagef("backup: --kind %q: want scheduled, update or manual", c.String("kind"))
	}
	if opts.V2, err = backup.ParseV2Mode(c.String("v2")); err != nil {
		return asUsage(err)
	}
	if opts.Compression, err = catalog.ParseCompression(c.String("compress")); err != nil {
		return asUsage(err)
	}
	format, err := output.ParseFormat(c.String("output"))
	if err != nil {
		return asUsage(err)
	}
	if c.Bool("prune") {
		policy, err := policyFromFlags(c)
		if err != nil {
			return err
		}
		opts.Prune = &policy
	}
	if c.Duration("orphan-grace") < catalog.MinOrphanGrace {
		return usagef("backup: --orphan-grace %s: want at least %s", c.Duration("orphan-grace"), catalog.MinOrphanGrace)
	}
	drill, err := drillPlanFromFlags(c, fleet)
	if err != nil {
		return err
	}
	if opts.Recipients, err = recipientsFromFlags(c); err != nil {
		return err
	}
	opts.RequireEncryption = c.Bool("require-encryption")
	if drill != nil {
		// An encrypted backup's drill runs on the plaintext the backup
		// streamed, kept under --temp-dir (else $TMPDIR) for the drill.
		opts.ScratchDir = drill.ScratchDir
		// Checked before each snapshot streams (ETCD_RECOVERY_SCRATCH_LIMIT).
		scratchDir := drill.ScratchDir
		opts.CheckScratch = func(dbSize int64) error { return restore.CheckDrillScratch(scratchDir, dbSize) }
	}
	if err := opts.ValidateTemplate(); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	// The overall deadline: every step (probe, stream, upload, v2 export,
	// manifest, drill, prune) runs under it. When it passes, the step in
	// flight fails, an uncommitted backup is aborted as on any failure
	// (no manifest; its upload aborted on a context of its own), and the
	// exit is 1 naming the step; 130 stays the signals'.
	ctx, cancel, deadline := backupDeadline(c)
	defer cancel()
	if fleet {
		return deadline(runBackupAll(ctx, c, opts, format, drill))
	}
	if opts.Etcd, err = etcdConfig(c); err != nil {
		return err
	}
	store, layout, err := cosStore(c)
	if err != nil {
		return err
	}
	opts.Store, opts.Layout = store, layout
	if drill != nil {
		// The drill's source is the cluster backed up: the same endpoints
		// and client TLS, so that it can ask the member for HashKV at the
		// snapshot's revision.
		src := opts.Etcd
		opts.Drill = func(ctx context.Context, m *catalog.Manifest, plaintext string) (*catalog.DrillRecord, error) {
			log.Info("restore drill of the new backup", "cluster", m.ClusterID, "backup", m.Name, "local_plaintext", plaintext != "")
			return drillrun.Run(ctx, kube.NewBackupDrillOptions(m, plaintext, store, layout, src, *drill, log))
		}
	}
	prog := output.NewProgress(fmt.Sprintf("backup %s", opts.ClusterID))
	opts.Progress = prog.Update
	res, err := backup.Run(ctx, opts)
	err = deadline(err)
	prog.Done()
	pushBackupRun(c, opts, res) // --pushgateway (serve.go); a failed push is only logged
	if res == nil {
		return err
	}
	// A committed backup is printed even when the prune after it failed.
	rep := kube.NewBackupReport(res, drill != nil)
	if rerr := output.RenderAll(c.App.Writer, format, rep.Tables(), rep); rerr != nil {
		return rerr
	}
	return err
}

// drillPlanFromFlags reads --drill and its flags (nil without --drill).
// Bad values are usage errors (exit 4), found before anything is contacted.
func drillPlanFromFlags(c *cli.Context, fleet bool) (*kube.DrillPlan, error) {
	if !c.Bool("drill") {
		for _, f := range []string{"drill-share", "drill-parallel", "etcd-bin-dir"} {
			if c.IsSet(f) && (f != "etcd-bin-dir" || !envSet("ETCD_RECOVERY_ETCD_BIN_DIR")) {
				return nil, usagef("backup: --%s is for --drill", f)
			}
		}
		return nil, nil
	}
	p := &kube.DrillPlan{Share: c.Int("drill-share"), Parallel: c.Int("drill-parallel"),
		EtcdBinDir: c.String("etcd-bin-dir"), ScratchDir: c.String("temp-dir")}
	switch {
	case p.Share < 1:
		return nil, usagef("backup: --drill-share %d: want at least 1 (1 drills every cluster)", p.Share)
	case p.Parallel < 1:
		return nil, usagef("backup: --drill-parallel %d: want at least 1", p.Parallel)
	case !fleet && (c.IsSet("drill-share") || c.IsSet("drill-parallel")):
		return nil, usagef("backup: --drill-share and --drill-parallel are for --all/--cluster; one cluster's backup is always drilled with --drill")
	}
	for _, d := range []struct{ flag, dir string }{{"etcd-bin-dir", p.EtcdBinDir}, {"temp-dir", p.ScratchDir}} {
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

// backupDeadline bounds the run by --timeout. deadline(err) names it
// when err came from it (not from a signal, which cancels c.Context).
func backupDeadline(c *cli.Context) (context.Context, context.CancelFunc, func(error) error) {
	d := c.Duration("timeout")
	ctx, cancel := context.WithTimeout(c.Context, d)
	return ctx, cancel, func(err error) error {
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && c.Context.Err() == nil {
			return fmt.Errorf("backup: the overall deadline passed (--timeout %v): %w", d, err)
		}
		return err
	}
}

// runBackupAll backs up EtcdClusters found through the Kubernetes API.
func runBackupAll(ctx context.Context, c *cli.Context, tmpl backup.Options, format output.Format, drill *kube.DrillPlan) error {
	k, err := kubeClient(c)
	if err != nil {
		return err
	}
	store, layout, err := cosStoreKube(c, k)
	if err != nil {
		return err
	}
	tmpl.Store, tmpl.Layout = store, layout
	// backup --all --prune also handles the namespace's orphans (report
	// only unless the namespace owns the prefix: see prune --orphans).
	var orphans *kube.OrphanPlan
	if tmpl.Prune != nil && c.Bool("all") {
		orphans = &kube.OrphanPlan{Grace: c.Duration("orphan-grace")}
	}
	rep, err := kube.BackupAll(ctx, kube.BackupAllOptions{
		Kube:        k,
		Names:       c.StringSlice("cluster"),
		Parallel:    c.Int("parallel"),
		Template:    tmpl,
		DialTimeout: c.Duration("dial-timeout"),
		NoEvents:    c.Bool("no-events"),
		Log:         tmpl.Log,
		Drill:       drill,
		Orphans:     orphans,
	})
	pushBackupAll(c, tmpl.Kind, rep) // --pushgateway (serve.go); a failed push is only logged
	if rep != nil && rep.Clusters != nil {
		if rerr := output.RenderAll(c.App.Writer, format, rep.Tables(), rep); rerr != nil {
			return rerr
		}
	}
	return err
}
