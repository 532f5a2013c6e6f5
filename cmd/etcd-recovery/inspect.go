package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/kube"
)

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:  "inspect",
		Usage: "member health, quorum verdict and backup freshness in one screen",
		Description: "Probes every member of the cluster (the member list comes from any member that answers) concurrently,\n" +
			"each bounded by --probe-timeout, and prints the members, the verdict, flags, the newest backup (with --bucket\n" +
			"and --cluster-id), the newest backup proven restorable by a restore drill and the newest drill's result, and\n" +
			"the next step with its runbook.\n\n" +
			"With --cluster NAME: the EtcdCluster NAME of a Kubernetes namespace (etcd-operator): endpoints, client TLS\n" +
			"(the operator secret) and, unless mounted, the cos-credentials secret come from the API; the cluster id in\n" +
			"COS is the EtcdCluster's name. With --all: every EtcdCluster of the namespace, --parallel at a time, one\n" +
			"row per cluster (verdict, members up, leader, DB size, newest backup's age, newest proven backup's age, next\n" +
			"step). Below the table, with --bucket: the orphans of the namespace's prefix (cluster ids with backups and no\n" +
			"EtcdCluster), each with its first sighting, newest backup and when the orphan pass (prune --orphans, backup\n" +
			"--all --prune, with --orphan-grace) deletes its backups, or why it won't; read-only (-o json: \"orphans\").\n\n" +
			"Exit codes: 0 HEALTHY, 1 DEGRADED, 2 QUORUM LOST, 3 UNREACHABLE (with --all: the worst cluster's),\n" +
			"4 usage or configuration error.",
		Flags: concat(etcdFlags(), cosFlags(), kubeFlags(), []cli.Flag{
			clusterIDFlag(),
			allFlag(),
			clusterFlag(),
			parallelFlag(),
			probeTimeoutFlag(),
			orphanGraceFlag(),
			identityFileFlag(),
			&cli.Int64Flag{Name: "quota-backend-bytes", Value: inspect.DefaultQuotaBytes, Usage: "the cluster's --quota-backend-bytes: a DB at 80% of it is flagged"},
			&cli.Uint64Flag{Name: "max-lag", Value: inspect.DefaultMaxLag, Usage: "flag a member this many raft entries behind"},
			&cli.DurationFlag{Name: "max-backup-age", Value: inspect.DefaultMaxBackupAge, Usage: "flag the newest backup when older (one missed 8-hourly run)"},
			&cli.DurationFlag{Name: "max-drill-age", Value: inspect.DefaultMaxDrillAge, Usage: "flag the newest backup proven restorable by a drill when older (or none: never drilled)"},
			outputFlag(),
		}, deprecatedFlagsOf("inspect")),
		Action: runInspect,
	}
}

func runInspect(c *cli.Context) error {
	format, err := output.ParseFormat(c.String("output"))
	if err != nil {
		return asUsage(err)
	}
	opts := inspect.Options{
		Timeout:      c.Duration("probe-timeout"),
		Thresholds:   inspect.Thresholds{MaxLag: c.Uint64("max-lag"), QuotaBytes: c.Int64("quota-backend-bytes")},
		MaxBackupAge: c.Duration("max-backup-age"),
		MaxDrillAge:  c.Duration("max-drill-age"),
	}
	// inspect.Options takes 0 for its defaults; on the command line, where
	// every flag shows its default, 0 is a mistake.
	for _, f := range []string{"probe-timeout", "quota-backend-bytes", "max-lag", "max-backup-age", "max-drill-age"} {
		if v := c.Value(f); v == time.Duration(0) || v == int64(0) || v == uint64(0) {
			return usagef("inspect: --%s 0: must be positive", f)
		}
	}
	if err := opts.ValidateTemplate(); err != nil {
		return err
	}
	cluster, all := c.String("cluster"), c.Bool("all")
	switch {
	case all && cluster != "":
		return usagef("inspect: --all and --cluster are exclusive")
	case (all || cluster != "") && c.String("cluster-id") != "":
		return usagef("inspect: --cluster-id is for one cluster given by --endpoints; with --all/--cluster the id is the EtcdCluster's name")
	case all && c.Int("parallel") < 1:
		return usagef("inspect: --parallel %d: want at least 1", c.Int("parallel"))
	case c.IsSet("orphan-grace") && !all:
		return usagef("inspect: --orphan-grace is for --all (the orphans of the namespace)")
	case c.Duration("orphan-grace") < catalog.MinOrphanGrace:
		return usagef("inspect: --orphan-grace %s: want at least %s", c.Duration("orphan-grace"), catalog.MinOrphanGrace)
	}
	if all || cluster != "" {
		return runInspectKube(c, opts, format, cluster)
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
		// Before the store's credentials are read.
		if err := opts.Validate(); err != nil {
			return err
		}
		if opts.Store, opts.Layout, err = cosStore(c); err != nil {
			return err
		}
		opts.Location = strings.TrimRight(bucket+"/"+strings.Trim(opts.Layout.Prefix, "/"), "/")
	}
	rep, err := inspect.Run(c.Context, opts)
	if err != nil {
		return err
	}
	return renderInspect(c, format, rep)
}

func renderInspect(c *cli.Context, format output.Format, rep *inspect.Report) error {
	if err := output.RenderAll(c.App.Writer, format, rep.Tables(), rep); err != nil {
		return err
	}
	return verdictExit(rep.ExitCode())
}

func verdictExit(code int) error {
	if code != exitOK {
		// The report says it all: no extra error line.
		return cli.Exit("", code)
	}
	return nil
}

// runInspectKube inspects EtcdClusters found through the Kubernetes API:
// one (--cluster, the single-cluster report) or all of the namespace (one
// row per cluster).
func runInspectKube(c *cli.Context, tmpl inspect.Options, format output.Format, cluster string) error {
	k, err := kubeClient(c)
	if err != nil {
		return err
	}
	// The object store is optional, as for one cluster: with --bucket.
	if bucket := c.String("bucket"); bucket != "" {
		if tmpl.Store, tmpl.Layout, err = cosStoreKube(c, k); err != nil {
			return err
		}
		tmpl.Location = strings.TrimRight(bucket+"/"+strings.Trim(tmpl.Layout.Prefix, "/"), "/")
	}
	opts := fleet.InspectAllOptions{Kube: k, Parallel: c.Int("parallel"), Template: tmpl, DialTimeout: c.Duration("dial-timeout"),
		Orphans: cluster == "", OrphanGrace: c.Duration("orphan-grace")}
	if cluster != "" {
		opts.Names = []string{cluster}
	}
	if c.String("identity-file") != "" && tmpl.Store != nil && cluster == "" {
		// Does the toolkit's identity open each cluster's newest encrypted
		// backup? An empty mount is no identity: each says so.
		ids, err := identityFromFlags(c)
		if err != nil {
			return err
		}
		if ids == nil {
			ids = &seal.Identities{}
		}
		opts.Identities = ids
	}
	rep, err := fleet.InspectAll(c.Context, opts)
	var nf *kube.NotFoundError
	if errors.As(err, &nf) {
		return asUsage(err)
	}
	if err != nil {
		return err
	}
	if cluster != "" {
		row := rep.Clusters[0]
		if row.Report == nil {
			// Not inspected at all (e.g. its client TLS secret is unreadable).
			return fmt.Errorf("inspect %s/%s: %s", k.Namespace, cluster, row.Error)
		}
		return renderInspect(c, format, row.Report)
	}
	if err := output.Render(c.App.Writer, format, rep.Table(), rep); err != nil {
		return err
	}
	return verdictExit(rep.ExitCode)
}
