package main

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/restore"
)

// drillCmdOpts are drill's flags.
type drillCmdOpts struct {
	etcd                                         etcdOpts
	store                                        storeOpts
	site                                         siteOpts
	kube                                         kubeOpts
	clusterID, backup, output, pushgateway       string
	etcdBinDir, tempDir, identityFile            string
	all, allClusterIDs, noRecord, includeDeleted bool
	noJournalProof                               bool
	toRevision                                   int64
	parallel                                     int
	probeTimeout, startTimeout                   time.Duration
}

func drillCommand(g *globalOpts) *cli.Command {
	o := &drillCmdOpts{}
	return &cli.Command{
		Name:  "drill",
		Usage: "prove a backup restores: restore it into --temp-dir, start a real etcd of its version on it, check it and compare with the source",
		Description: "With --cluster-id: the newest committed backup of the cluster (or --backup NAME). It is downloaded and\n" +
			"verified as restore does, restored with restore's own code into a private dir under --temp-dir, started\n" +
			"as a single-member etcd of the backup's minor version (etcd-3.5 or etcd-3.6, from --etcd-bin-dir or $PATH)\n" +
			"on loopback ports, and checked: health, revision, key counts (per prefix), a read, a write, HashKV at the\n" +
			"snapshot's revision. With the source's --endpoints (and TLS flags), the source member's HashKV at that\n" +
			"revision must be equal; without them, or when the source compacted it away, the drill says it checked\n" +
			"self-consistency only. The result is recorded as drill.json next to the backup (unless --no-record).\n" +
			"With --all-cluster-ids: the newest committed backup of every cluster id under --prefix; with --all (--namespace,\n" +
			"or in a pod its own): of every EtcdCluster of the namespace, compared with its members (endpoints and TLS from the\n" +
			"API), each result also recorded as an Event (DrillPassed, DrillFailed, DrillNotRun) on the EtcdCluster.\n" +
			"A cluster with no committed backup is listed as not drilled (\"no backup\", with the reason), not failed.\n" +
			"--parallel defaults to 1 here: each drill runs an etcd and needs twice the database's size in --temp-dir.\n" +
			"An encrypted backup (age) needs --identity-file: drill it where the identity is (the toolkit pod, or a drill Job\n" +
			"of its own); the drill that follows a scheduled backup drills the plaintext the backup streamed instead.\n" +
			"The exit is 1 when any drill fails, naming the cluster, the backup and the failing check.",
		Flags: concat(o.etcd.flags(true), o.store.flags(), o.site.flags(), o.kube.flags(), []cli.Flag{
			clusterIDFlag(&o.clusterID),
			backupFlag(&o.backup),
			allFlag(&o.all),
			allClusterIDsFlag(&o.allClusterIDs),
			parallelFlag(&o.parallel, defaultDrillParallel),
			probeTimeoutFlag(&o.probeTimeout),
			&cli.DurationFlag{Name: "start-timeout", Usage: "how long a drill waits for its etcd to serve", DefaultText: "2m plus 1s per 4 MiB of database", Destination: &o.startTimeout},
			noRecordFlag(&o.noRecord),
			includeDeletedFlag(&o.includeDeleted),
			&cli.Int64Flag{Name: "to-revision", Usage: toRevisionUsage, Destination: &o.toRevision},
			&cli.BoolFlag{Name: "no-journal-proof", Usage: "do not prove the journal before the drilled backup (a drill of a stored backup does, when the cluster has a journal and no proof of it is recorded)", Destination: &o.noJournalProof},
			etcdBinDirFlag(&o.etcdBinDir),
			tempDirFlag(&o.tempDir),
			identityFileFlag(&o.identityFile),
			outputFlag(&o.output),
			pushgatewayFlag(&o.pushgateway),
		}),
		Action: func(c *cli.Context) error { return runDrill(c, g, o) },
	}
}

func runDrill(c *cli.Context, g *globalOpts, o *drillCmdOpts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	log := e.log
	if err := allWithoutNamespace(c, "drill", &o.all, &o.allClusterIDs); err != nil {
		return err
	}
	id, all := o.clusterID, o.all || o.allClusterIDs
	if !all && id == "" {
		return usagef("drill: --cluster-id (or --all, --all-cluster-ids) is required")
	}
	// The flag's 0 is a mistake; the package's 0 is its default.
	parallel := o.parallel
	if parallel <= 0 {
		return usagef("drill: --parallel %d: want at least 1", parallel)
	}
	ids, err := e.identityOf(o.identityFile)
	if err != nil {
		return err
	}
	tmpl := drill.Options{EtcdBinDir: o.etcdBinDir, ScratchDir: o.tempDir, Identities: ids,
		StartTimeout: o.startTimeout, ProbeTimeout: o.probeTimeout, NoRecord: o.noRecord, IncludeDeleted: o.includeDeleted, Log: log,
		ToRevision: o.toRevision, NoJournalProof: o.noJournalProof}
	if c.IsSet("to-revision") && (all || o.toRevision <= 0) {
		return usagef("drill: --to-revision R (a positive revision) goes with --cluster-id: a revision is one cluster's")
	}
	kubeForm := o.all
	// --endpoints has a default (etcdctl's 127.0.0.1:2379): only endpoints
	// given (flag or ETCDCTL_ENDPOINTS) are a source to compare with.
	if !kubeForm && c.IsSet("endpoints") {
		if all {
			return usagef("drill: --endpoints are one cluster's: use them with --cluster-id (with --all --namespace the sources come from the API)")
		}
		tmpl.Source = o.etcd.configFor(o.etcd.endpoints.Value())
	}
	if all {
		return runDrillAll(e, o, tmpl, parallel, kubeForm)
	}
	// The options as the drill of --cluster-id sees them: one drill, so
	// its download shows progress (on a terminal only).
	one := tmpl
	one.Progress = func(label string) restore.Progress { return output.NewProgress("drill " + id + ": " + label) }
	one.ClusterID, one.Backup = id, o.backup
	if err := one.Validate(); err != nil {
		return usagef("drill: %w", err)
	}
	ch, err := e.openSite(&o.site, &o.store, nil)
	if err != nil {
		return err
	}
	one.Store, one.Layout, one.NoRecord = ch.Store, ch.Layout, one.NoRecord || drillNoRecord(e, ch)
	rep, err := drill.RunNewest(e.ctx(), one)
	pushDrills(e, o.pushgateway, o.kube.namespace, rep) // --pushgateway (serve.go); a failed push is only logged
	if rep != nil && (len(rep.Clusters) > 0 || err == nil) {
		if rerr := e.render(rep.Table(), rep); rerr != nil {
			return rerr
		}
	}
	return err
}
