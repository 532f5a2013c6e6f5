package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/kube"
)

// inspectOpts are inspect's flags.
type inspectOpts struct {
	etcd                                                 etcdOpts
	store                                                storeOpts
	site                                                 siteOpts
	kube                                                 kubeOpts
	clusterID, cluster, identityFile, output             string
	all                                                  bool
	parallel                                             int
	quotaBytes                                           int64
	maxLag                                               uint64
	probeTimeout, orphanGrace, maxBackupAge, maxDrillAge time.Duration
	journalLagBound                                      time.Duration
}

func inspectCommand(g *globalOpts) *cli.Command {
	o := &inspectOpts{}
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
		Flags: concat(o.etcd.flags(true), o.store.flags(), o.site.flags(), o.kube.flags(), []cli.Flag{
			clusterIDFlag(&o.clusterID),
			allFlag(&o.all),
			clusterFlag(&o.cluster),
			parallelFlag(&o.parallel, defaultParallel),
			probeTimeoutFlag(&o.probeTimeout),
			orphanGraceFlag(&o.orphanGrace),
			identityFileFlag(&o.identityFile),
			&cli.Int64Flag{Name: "quota-backend-bytes", Value: inspect.DefaultQuotaBytes, Usage: "the cluster's --quota-backend-bytes: a DB at 80% of it is flagged", Destination: &o.quotaBytes},
			&cli.Uint64Flag{Name: "max-lag", Value: inspect.DefaultMaxLag, Usage: "flag a member this many raft entries behind", Destination: &o.maxLag},
			&cli.DurationFlag{Name: "max-backup-age", Value: inspect.DefaultMaxBackupAge, Usage: "flag the newest backup when older (one missed 8-hourly run)", Destination: &o.maxBackupAge},
			&cli.DurationFlag{Name: "max-drill-age", Value: inspect.DefaultMaxDrillAge, Usage: "flag the newest backup proven restorable by a drill when older (or none: never drilled)", Destination: &o.maxDrillAge},
			&cli.DurationFlag{Name: "journal-lag-bound", Value: inspect.DefaultJournalLagBound, Usage: "flag the journal (of a cluster that has one) when its newest stored revision was received longer ago: " +
				"10 × the journal's default 30 s segment interval", Destination: &o.journalLagBound},
			outputFlag(&o.output),
		}, deprecatedFlagsOf("inspect")),
		Action: func(c *cli.Context) error { return runInspect(c, g, o) },
	}
}

func runInspect(c *cli.Context, g *globalOpts, o *inspectOpts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	opts := inspect.Options{
		Timeout:         o.probeTimeout,
		Thresholds:      inspect.Thresholds{MaxLag: o.maxLag, QuotaBytes: o.quotaBytes},
		MaxBackupAge:    o.maxBackupAge,
		MaxDrillAge:     o.maxDrillAge,
		JournalLagBound: o.journalLagBound,
	}
	// inspect.Options takes 0 for its defaults; on the command line, where
	// every flag shows its default, 0 is a mistake.
	for _, f := range []struct {
		name string
		zero bool
	}{{"probe-timeout", o.probeTimeout == 0}, {"quota-backend-bytes", o.quotaBytes == 0}, {"max-lag", o.maxLag == 0},
		{"max-backup-age", o.maxBackupAge == 0}, {"max-drill-age", o.maxDrillAge == 0}, {"journal-lag-bound", o.journalLagBound == 0}} {
		if f.zero {
			return usagef("inspect: --%s 0: must be positive", f.name)
		}
	}
	if err := opts.ValidateTemplate(); err != nil {
		return err
	}
	cluster, all := o.cluster, o.all
	switch {
	case all && cluster != "":
		return usagef("inspect: --all and --cluster are exclusive")
	case (all || cluster != "") && o.clusterID != "":
		return usagef("inspect: --cluster-id is for one cluster given by --endpoints; with --all/--cluster the id is the EtcdCluster's name")
	case all && o.parallel < 1:
		return usagef("inspect: --parallel %d: want at least 1", o.parallel)
	case c.IsSet("orphan-grace") && !all:
		return usagef("inspect: --orphan-grace is for --all (the orphans of the namespace)")
	case o.orphanGrace < prune.MinOrphanGrace:
		return usagef("inspect: --orphan-grace %s: want at least %s", o.orphanGrace, prune.MinOrphanGrace)
	}
	if all || cluster != "" {
		return runInspectKube(e, o, opts)
	}
	if opts.Etcd, err = o.etcd.config(); err != nil {
		return err
	}
	// The object store is optional: backup freshness is checked with
	// --bucket (or --store).
	if o.site.storeGiven(&o.store) {
		opts.ClusterID = o.clusterID
		if opts.ClusterID == "" {
			return usagef("inspect: --bucket needs --cluster-id to check the cluster's backups")
		}
		// Before the store's credentials are read.
		if err := opts.Validate(); err != nil {
			return err
		}
		ch, err := e.openSite(&o.site, &o.store, nil)
		if err != nil {
			return err
		}
		opts.Store, opts.Layout, opts.Location = ch.Store, ch.Layout, o.site.where(e.c, ch, &o.store)
	}
	rep, err := inspect.Run(e.ctx(), opts)
	if err != nil {
		return err
	}
	return renderInspect(e, rep)
}

func renderInspect(e *env, rep *inspect.Report) error {
	if err := e.renderAll(rep.Tables(), rep); err != nil {
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
func runInspectKube(e *env, o *inspectOpts, tmpl inspect.Options) error {
	cluster := o.cluster
	k, err := e.kube(&o.kube)
	if err != nil {
		return err
	}
	// The object store is optional, as for one cluster: with --bucket (or
	// --store).
	if o.site.storeGiven(&o.store) {
		ch, err := e.openSite(&o.site, &o.store, k)
		if err != nil {
			return err
		}
		tmpl.Store, tmpl.Layout, tmpl.Location = ch.Store, ch.Layout, o.site.where(e.c, ch, &o.store)
	}
	opts := fleet.InspectAllOptions{Kube: k, Parallel: o.parallel, Template: tmpl, DialTimeout: o.etcd.dialTimeout,
		Orphans: cluster == "", OrphanGrace: o.orphanGrace}
	if cluster != "" {
		opts.Names = []string{cluster}
	}
	if o.identityFile != "" && tmpl.Store != nil && cluster == "" {
		// Does the toolkit's identity open each cluster's newest encrypted
		// backup? An empty mount is no identity: each says so.
		ids, err := loadIdentity(e.c, o.identityFile)
		if err != nil {
			return err
		}
		if ids == nil {
			ids = &seal.Identities{}
		}
		opts.Identities = ids
	}
	rep, err := fleet.InspectAll(e.ctx(), opts)
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
		return renderInspect(e, row.Report)
	}
	if err := e.render(rep.Table(), rep); err != nil {
		return err
	}
	return verdictExit(rep.ExitCode)
}
