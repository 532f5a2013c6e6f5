package fleet

import (
	"context"
	"slices"
	"strings"

	"github.com/armada/etcd-recovery/kube"
)

// Target is one cluster a fleet run works on, listed from Kubernetes
// (KubeTargets) or from a store listing (every cluster id with a backup
// folder under the prefix: drill --all without Kubernetes).
type Target struct {
	// ID is the cluster id in the store (an EtcdCluster's name).
	ID string
	// Cluster is the EtcdCluster the target was listed from: its members'
	// endpoints and client TLS (the drill compares with its source), and
	// where its Events go. Nil for a target from a store listing.
	Cluster *kube.Cluster
}

// KubeTargets lists the EtcdClusters of k's namespace (all, or the named
// ones), sorted by name, each with its endpoints resolved (kube's
// Clusters).
func KubeTargets(ctx context.Context, k *kube.Client, names ...string) ([]Target, error) {
	clusters, err := k.Clusters(ctx, names...)
	if err != nil {
		return nil, err
	}
	out := make([]Target, 0, len(clusters))
	for i := range clusters {
		out = append(out, Target{ID: clusters[i].Name, Cluster: &clusters[i]})
	}
	return out, nil
}

// storeTargets are the cluster ids of a store listing (clusterFolders),
// sorted.
func storeTargets(folders map[string]folderCount) []Target {
	out := make([]Target, 0, len(folders))
	for id := range folders {
		out = append(out, Target{ID: id})
	}
	slices.SortFunc(out, func(a, b Target) int { return strings.Compare(a.ID, b.ID) })
	return out
}
