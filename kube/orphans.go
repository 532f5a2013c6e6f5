package kube

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// ClusterNames lists the names of every EtcdCluster of the namespace: the
// complete list or an error (a paginated or truncated answer is an error),
// so that a cluster is never taken for deleted because a listing was cut.
func (k *Client) ClusterNames(ctx context.Context) ([]string, error) {
	list, err := k.Dynamic.Resource(EtcdClusterGVR).Namespace(k.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing etcdclusters in %s: %w", k.Namespace, ctxErr(ctx, err))
	}
	if err := complete(list); err != nil {
		return nil, fmt.Errorf("listing etcdclusters in %s: %w", k.Namespace, err)
	}
	names := make([]string, 0, len(list.Items))
	for _, o := range list.Items {
		names = append(names, o.GetName())
	}
	slices.Sort(names)
	return names, nil
}

// RestoringClusters maps each cluster id that an EtcdRestore of the
// namespace references (spec.etcdCluster.name, else the EtcdRestore's own
// name, which is how restore --via etcd-operator names it) to those
// EtcdRestores: complete or an error. etcd-operator's restore deletes the
// EtcdCluster and recreates it, so meanwhile it does not exist.
func (k *Client) RestoringClusters(ctx context.Context) (map[string][]string, error) {
	list, err := k.Dynamic.Resource(EtcdRestoreGVR).Namespace(k.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing etcdrestores in %s: %w", k.Namespace, ctxErr(ctx, err))
	}
	if err := complete(list); err != nil {
		return nil, fmt.Errorf("listing etcdrestores in %s: %w", k.Namespace, err)
	}
	out := map[string][]string{}
	for _, o := range list.Items {
		ref, _, _ := unstructured.NestedString(o.Object, "spec", "etcdCluster", "name")
		if ref == "" {
			ref = o.GetName()
		}
		out[ref] = append(out[ref], o.GetName())
	}
	return out, nil
}

// RestoresOf lists the EtcdRestores of the namespace that reference the
// cluster id (RestoringClusters), sorted: while one exists, its EtcdCluster
// may be absent only because etcd-operator is recreating it.
func (k *Client) RestoresOf(ctx context.Context, clusterID string) ([]string, error) {
	all, err := k.RestoringClusters(ctx)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(all[clusterID])
	slices.Sort(out)
	return out, nil
}

func complete(list *unstructured.UnstructuredList) error {
	if list.GetContinue() != "" {
		return fmt.Errorf("the answer is partial (continue token): refusing to decide from it")
	}
	if n := list.GetRemainingItemCount(); n != nil && *n > 0 {
		return fmt.Errorf("the answer is partial (%d items remaining): refusing to decide from it", *n)
	}
	return nil
}

// OrphanPlan is how orphans are handled in a run: see catalog.Orphans.
type OrphanPlan struct {
	// Grace: default catalog.DefaultOrphanGrace.
	Grace  time.Duration
	DryRun bool
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Orphans runs catalog.Orphans for the namespace: the cluster ids under the
// prefix without an EtcdCluster here, recorded, and deleted after the
// grace only when the namespace owns the prefix, every listing succeeded
// and no EtcdRestore references them.
func Orphans(ctx context.Context, k *Client, store store.Store, layout catalog.Layout, plan OrphanPlan, log *slog.Logger) (*catalog.OrphanReport, error) {
	opts := catalog.OrphanOptions{
		Store: store, Layout: layout, Namespace: k.Namespace,
		Clusters: k.ClusterNames, Restores: k.RestoringClusters,
		Grace: plan.Grace, DryRun: plan.DryRun, Log: log,
	}
	if plan.Now != nil {
		opts.Now = plan.Now()
	}
	return catalog.Orphans(ctx, opts)
}
