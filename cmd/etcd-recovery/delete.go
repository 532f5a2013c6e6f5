package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/kube"
)

// deleteOpts are delete's flags.
type deleteOpts struct {
	store                                              storeOpts
	kube                                               kubeOpts
	clusterID, output                                  string
	backups                                            cli.StringSlice
	allowNewest, allBackups, ignoreEtcdCluster, dryRun bool
	timeout                                            time.Duration
}

func deleteCommand(g *globalOpts) *cli.Command {
	o := &deleteOpts{}
	return &cli.Command{
		Name:  "delete",
		Usage: "delete named backups of one cluster, of any kind (manifest first), or every backup of a deleted cluster (--all-backups)",
		Description: "The only way manual and pre-restore backups are deleted. Names that do not exist, and the\n" +
			"newest committed backup that checks out or the newest whose restore drill passed (without --allow-newest), are refused before anything is deleted.\n" +
			"With --all-backups: every backup folder of the cluster (any kind, incomplete or damaged, manifests first), the multipart\n" +
			"uploads into them and its orphan marker: the end of a cluster whose EtcdCluster was deleted. It refuses while an\n" +
			"EtcdCluster of that name exists in the namespace (in a pod, or with --namespace/--kubeconfig/KUBECONFIG), and\n" +
			"without Kubernetes access, where it cannot check, unless --ignore-etcdcluster. It refuses while an EtcdRestore of the\n" +
			"namespace references the cluster (a restore through etcd-operator recreates its EtcdCluster), --ignore-etcdcluster or not.\n" +
			"--dry-run lists what it would delete.",
		Flags: concat(o.store.flags(), o.kube.flags(), []cli.Flag{
			clusterIDFlag(&o.clusterID),
			&cli.StringSliceFlag{Name: "backup", Usage: backupFlagUsage, Destination: &o.backups},
			&cli.BoolFlag{Name: "allow-newest", Usage: "allow deleting the newest committed backup that checks out, or the newest whose restore drill passed", Destination: &o.allowNewest},
			&cli.BoolFlag{Name: "all-backups", Usage: "delete: every backup of the cluster, of any kind (instead of --backup)", Destination: &o.allBackups},
			&cli.BoolFlag{Name: "ignore-etcdcluster", Usage: "delete --all-backups even though an EtcdCluster of that name exists, or when that cannot be checked (no Kubernetes access)", Destination: &o.ignoreEtcdCluster},
			dryRunFlag(&o.dryRun),
			outputFlag(&o.output),
			timeoutFlag(&o.timeout),
		}, deprecatedFlagsOf("delete")),
		Action: func(c *cli.Context) error { return runDelete(c, g, o) },
	}
}

// kubeAccess says whether the command was given Kubernetes access: it runs
// in a pod, or --kubeconfig, KUBECONFIG or --namespace is set.
func kubeAccess(c *cli.Context) bool {
	return os.Getenv("KUBERNETES_SERVICE_HOST") != "" || c.IsSet("kubeconfig") || os.Getenv("KUBECONFIG") != "" || c.IsSet("namespace")
}

func runDelete(c *cli.Context, g *globalOpts, o *deleteOpts) error {
	e, err := newEnv(c, g, o.output)
	if err != nil {
		return err
	}
	opts := prune.DeleteOptions{ClusterID: o.clusterID, Names: o.backups.Value(), Force: o.allowNewest, Log: e.log}
	if o.allBackups {
		all := prune.DeleteAllOptions{ClusterID: opts.ClusterID, DryRun: o.dryRun, Log: e.log}
		if err := all.Validate(); err != nil {
			return err
		}
		return runDeleteAll(e, o, all)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"ignore-etcdcluster", o.ignoreEtcdCluster}, {"dry-run", o.dryRun}} {
		if f.set {
			return usagef("delete: --%s is for --all-backups", f.name)
		}
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	store, layout, t, err := e.storeWithTimeout(&o.store, nil, o.timeout)
	if err != nil {
		return err
	}
	defer t.cancel()
	opts.Store, opts.Layout = store, layout
	rep, err := prune.Delete(t.ctx, opts)
	err = t.atStep("delete", err)
	if errors.Is(err, prune.ErrNewestBackup) || errors.Is(err, prune.ErrNewestProven) {
		err = fmt.Errorf("%w: pass --allow-newest", err)
	}
	if rep != nil {
		if rerr := e.render(rep.Table(), rep); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// deleteAllResult is delete --all-backups' JSON: the check of the
// EtcdCluster and the deletion.
type deleteAllResult struct {
	// EtcdCluster is what the check found: "absent", "exists",
	// "not checked: ..." (with --ignore-etcdcluster).
	EtcdCluster string `json:"etcdCluster"`
	// EtcdRestores is what the check of the restores in flight found:
	// "none", "not checked: ..." (with --ignore-etcdcluster); a restore
	// referencing the cluster refuses the deletion.
	EtcdRestores string                 `json:"etcdRestores,omitempty"`
	Namespace    string                 `json:"namespace,omitempty"`
	Delete       *prune.DeleteAllReport `json:"delete"`
}

func runDeleteAll(e *env, o *deleteOpts, opts prune.DeleteAllOptions) error {
	id := opts.ClusterID
	if len(o.backups.Value()) > 0 {
		return usagef("delete: --backup and --all-backups are exclusive")
	}
	// --force, the old spelling, has set --allow-newest (applyDeprecated).
	if o.allowNewest {
		return usagef("delete: --allow-newest (--force) is for --backup; --all-backups deletes every backup, and only --ignore-etcdcluster overrides its EtcdCluster check")
	}
	ignore := o.ignoreEtcdCluster
	log := opts.Log
	res := deleteAllResult{}
	var k *kube.Client
	var err error
	switch {
	case kubeAccess(e.c):
		if k, err = e.kube(&o.kube); err != nil {
			return err
		}
		res.Namespace = k.Namespace
	case !ignore:
		return usagef("delete --all-backups: no Kubernetes access (not in a pod, no --kubeconfig, KUBECONFIG or --namespace), so whether "+
			"EtcdCluster %s still exists cannot be checked: refusing; give Kubernetes access, or pass --ignore-etcdcluster if the cluster is known to be gone", id)
	default:
		res.EtcdCluster = "not checked: no Kubernetes access (--ignore-etcdcluster)"
	}
	store, layout, t, err := e.storeWithTimeout(&o.store, k, o.timeout)
	if err != nil {
		return err
	}
	defer t.cancel()
	ctx := t.ctx
	if k != nil {
		names, err := k.ClusterNames(ctx)
		switch {
		case err != nil && !ignore:
			return t.atStep("check etcdcluster", fmt.Errorf("delete --all-backups: cluster %s: could not check whether its EtcdCluster exists, nothing was deleted: %w", id, err))
		case err != nil:
			res.EtcdCluster = "not checked: " + err.Error() + " (--ignore-etcdcluster)"
			log.Warn("delete --all-backups: could not check the EtcdCluster; going on (--ignore-etcdcluster)", "cluster", id, "err", err)
		case slices.Contains(names, id) && !ignore:
			return fmt.Errorf("delete --all-backups: refusing to delete the backups of cluster %s, nothing was deleted: %w (%s/%s); delete it first, or pass --ignore-etcdcluster",
				id, prune.ErrClusterExists, k.Namespace, id)
		case slices.Contains(names, id):
			res.EtcdCluster = "exists (--ignore-etcdcluster)"
			log.Warn("delete --all-backups: the EtcdCluster exists; deleting its backups anyway (--ignore-etcdcluster)", "cluster", id, "namespace", k.Namespace)
		default:
			res.EtcdCluster = "absent"
		}
		// A restore through etcd-operator deletes and recreates the
		// EtcdCluster: its absence then says nothing. The orphan pass
		// keeps such a cluster's backups too (kube.RestoringClusters).
		restores, err := k.RestoresOf(ctx, id)
		switch {
		case err != nil && !ignore:
			return t.atStep("check etcdrestore", fmt.Errorf("delete --all-backups: cluster %s: could not check whether an EtcdRestore references it, nothing was deleted: %w", id, err))
		case err != nil:
			res.EtcdRestores = "not checked: " + err.Error() + " (--ignore-etcdcluster)"
			log.Warn("delete --all-backups: could not check the EtcdRestores; going on (--ignore-etcdcluster)", "cluster", id, "err", err)
		case len(restores) > 0:
			return fmt.Errorf("delete --all-backups: refusing to delete the backups of cluster %s, nothing was deleted: a restore is in flight: "+
				"EtcdRestore %s/%s references it (etcd-operator recreates its EtcdCluster); run again once the restore is over and the EtcdRestore is deleted",
				id, k.Namespace, strings.Join(restores, ", "+k.Namespace+"/"))
		default:
			res.EtcdRestores = "none"
		}
	}
	opts.Store, opts.Layout = store, layout
	rep, err := prune.DeleteAll(ctx, opts)
	err = t.atStep("delete", err)
	if rep != nil {
		res.Delete = rep
		tbl := rep.Table()
		// The EtcdCluster check is this command's: it leads the summary.
		tbl.Notes[len(tbl.Notes)-1] = fmt.Sprintf("EtcdCluster %s: %s; %s", id, res.EtcdCluster, tbl.Notes[len(tbl.Notes)-1])
		if rerr := e.render(tbl, res); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}
