package main

import (
	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/site"
)

// drill --all: every cluster id under the prefix, or every EtcdCluster of
// the namespace, through fleet. (The single-cluster drill, drill.go, does
// not import fleet.)

// runDrillAll is drill --all with tmpl, each drill's options (the
// flags'), checked as given first: a --cluster-id or --backup with --all
// is a mistake the package names.
func runDrillAll(e *env, o *drillCmdOpts, tmpl drill.Options, parallel int, kubeForm bool) error {
	opts := fleet.DrillAllOptions{Template: tmpl, Parallel: parallel, DialTimeout: o.etcd.dialTimeout, Log: e.log}
	given := opts
	given.Template.ClusterID, given.Template.Backup = o.clusterID, o.backup
	if err := given.Validate(); err != nil {
		return err
	}
	var err error
	var ch site.Chosen
	if kubeForm {
		k, err := e.kube(&o.kube)
		if err != nil {
			return err
		}
		if ch, err = e.openSite(&o.site, &o.store, k); err != nil {
			return err
		}
		opts.Kube = k
	} else if ch, err = e.openSite(&o.site, &o.store, nil); err != nil {
		return err
	}
	opts.Template.Store, opts.Template.Layout = ch.Store, ch.Layout
	opts.Template.NoRecord = opts.Template.NoRecord || drillNoRecord(e, ch)
	rep, err := fleet.DrillAll(e.ctx(), opts)
	pushDrills(e, o.pushgateway, o.kube.namespace, rep) // --pushgateway (serve.go); a failed push is only logged
	if rep != nil && (len(rep.Clusters) > 0 || err == nil) {
		if rerr := e.render(rep.Table(), rep); rerr != nil {
			return rerr
		}
	}
	return err
}
