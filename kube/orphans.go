package kube

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
