package main

import (
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/output"
)

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:  "inspect",
		Usage: "member health, quorum verdict and backup freshness in one screen",
		Description: "Probes every member of the cluster (the member list comes from any member that answers) concurrently,\n" +
			"each bounded by --timeout, and prints the members, the verdict, flags, the newest backup (with --bucket\n" +
			"and --cluster-id) and the next step with its runbook.\n\n" +
			"Exit codes: 0 HEALTHY, 1 DEGRADED, 2 QUORUM LOST, 3 UNREACHABLE, 4 usage or configuration error.",
		Flags: concat(etcdFlags(), cosFlags(), []cli.Flag{
			clusterIDFlag(),
			&cli.DurationFlag{Name: "timeout", Value: inspect.DefaultTimeout, Usage: "bound on each probe; the whole run takes at most twice this"},
			&cli.Int64Flag{Name: "quota-backend-bytes", Value: inspect.DefaultQuotaBytes, Usage: "the cluster's --quota-backend-bytes: a DB at 80% of it is flagged"},
			&cli.Uint64Flag{Name: "max-lag", Value: inspect.DefaultMaxLag, Usage: "flag a member this many raft entries behind"},
			&cli.DurationFlag{Name: "max-backup-age", Value: inspect.DefaultMaxBackupAge, Usage: "flag the newest backup when older (one missed 8-hourly run)"},
			outputFlag(),
		}),
		Action: runInspect,
		// The app's OnUsageError does not cover a command's own flags.
		OnUsageError: func(_ *cli.Context, err error, _ bool) error { return usageError{err} },
	}
}

func runInspect(c *cli.Context) error {
	format, err := output.ParseFormat(c.String("output"))
	if err != nil {
		return usageError{err}
	}
	opts := inspect.Options{
		Timeout:      c.Duration("timeout"),
		Thresholds:   inspect.Thresholds{MaxLag: c.Uint64("max-lag"), QuotaBytes: c.Int64("quota-backend-bytes")},
		MaxBackupAge: c.Duration("max-backup-age"),
	}
	if opts.Timeout <= 0 {
		return usagef("inspect: --timeout %v: must be positive", opts.Timeout)
	}
	if opts.Thresholds.QuotaBytes <= 0 {
		return usagef("inspect: --quota-backend-bytes %d: must be positive", opts.Thresholds.QuotaBytes)
	}
	if opts.Thresholds.MaxLag == 0 {
		return usagef("inspect: --max-lag must be positive")
	}
	if opts.MaxBackupAge <= 0 {
		return usagef("inspect: --max-backup-age %v: must be positive", opts.MaxBackupAge)
	}
	if opts.Etcd, err = etcdConfig(c); err != nil {
		return err
	}
	// The object store is optional: backup freshness is checked with --bucket.
	if bucket := c.String("bucket"); bucket != "" {
		opts.ClusterID = c.String("cluster-id")
		if opts.ClusterID == "" {
			return usagef("inspect: --bucket needs --cluster-id to check the cluster's backups")
		}
		if err := backup.ValidateClusterID(opts.ClusterID); err != nil {
			return usageError{err}
		}
		if opts.Store, opts.Layout, err = cosStore(c); err != nil {
			return err
		}
		opts.Location = strings.TrimRight(bucket+"/"+strings.Trim(opts.Layout.Prefix, "/"), "/")
	}
	if err := opts.Validate(); err != nil {
		return usageError{err}
	}
	rep, err := inspect.Run(c.Context, opts)
	if err != nil {
		return err
	}
	if err := inspect.Render(c.App.Writer, format, rep); err != nil {
		return err
	}
	if code := rep.ExitCode(); code != exitOK {
		// The report says it all: no extra error line.
		return cli.Exit("", code)
	}
	return nil
}
