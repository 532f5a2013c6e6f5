package fleet

import (
	"context"
	"log/slog"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/kube"
)

// OrphanOptions are how orphans are handled in a run: see prune.Orphans.
type OrphanOptions struct {
	// Grace: default prune.DefaultOrphanGrace.
	Grace  time.Duration
	DryRun bool
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// ClockTolerance: see prune.OrphanOptions.ClockTolerance (0: not
	// checked; the CLI sets prune.DefaultClockTolerance).
	ClockTolerance time.Duration
}

// Orphans runs prune.Orphans for the namespace: the cluster ids under the
// prefix without an EtcdCluster here, recorded, and deleted after the
// grace only when the namespace owns the prefix, every listing succeeded
// and no EtcdRestore references them.
func Orphans(ctx context.Context, k *kube.Client, store store.Store, layout catalog.Layout, opts OrphanOptions, log *slog.Logger) (*prune.OrphanReport, error) {
	o := prune.OrphanOptions{
		Store: store, Layout: layout, Namespace: k.Namespace,
		Clusters: k.ClusterNames, Restores: k.RestoringClusters,
		Grace: opts.Grace, DryRun: opts.DryRun, Log: log, ClockTolerance: opts.ClockTolerance,
	}
	if opts.Now != nil {
		o.Now = opts.Now()
	}
	return prune.Orphans(ctx, o)
}
