package main

import (
	"context"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
)

// backup --all and --cluster: the namespace's EtcdClusters, through fleet.
// (The single-cluster backup, backup.go, does not import fleet.)

// runBackupAll backs up EtcdClusters found through the Kubernetes API.
func runBackupAll(ctx context.Context, e *env, o *backupOpts, tmpl backup.Options, plan *drillPlan) error {
	k, store, layout, err := e.kubeStore(&o.kube, &o.store)
	if err != nil {
		return err
	}
	tmpl.Store, tmpl.Layout = store, layout
	// backup --all --prune also handles the namespace's orphans (report
	// only unless the namespace owns the prefix: see prune --orphans).
	var orphans *fleet.OrphanOptions
	if tmpl.Prune != nil && o.all {
		orphans = &fleet.OrphanOptions{Grace: o.orphanGrace, ClockTolerance: tmpl.ClockTolerance}
	}
	rep, err := fleet.BackupAll(ctx, fleet.BackupAllOptions{
		Kube:        k,
		Names:       o.clusters.Value(),
		Parallel:    o.parallel,
		Template:    tmpl,
		DialTimeout: o.etcd.dialTimeout,
		NoEvents:    o.noEvents,
		Log:         tmpl.Log,
		Drill:       plan.fleetShare(),
		Orphans:     orphans,
	})
	pushBackupAll(e, o.pushgateway, o.kube.namespace, tmpl.Kind, rep) // --pushgateway (serve.go); a failed push is only logged
	if rep != nil && rep.Clusters != nil {
		if rerr := e.renderAll(rep.Tables(), rep); rerr != nil {
			return rerr
		}
	}
	return err
}

// fleetShare is the plan as fleet's drill share (nil without --drill).
func (p *drillPlan) fleetShare() *fleet.DrillShare {
	if p == nil {
		return nil
	}
	return &fleet.DrillShare{Share: p.share, Parallel: p.parallel, EtcdBinDir: p.etcdBinDir, ScratchDir: p.scratchDir}
}
