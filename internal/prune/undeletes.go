package prune

import (
	"context"
	"fmt"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// A cluster's undelete records (<prefix>/_undeletes/<cluster>/, written by
// undelete) name its customer's keys (namespaces, objects), never their
// values. They go with the cluster's last backup: delete --all-backups
// and the orphan pass delete them once every backup and escrow of the
// cluster is gone (kept while one is retained), so a deleted customer's
// key names do not outlive its data. Retention (prune) never touches them.

// undeleteRecordsOf groups the undelete records among objs by cluster.
func undeleteRecordsOf(l catalog.Layout, objs []store.ObjectInfo) map[string][]string {
	out := map[string][]string{}
	for _, o := range objs {
		if ki := l.Classify(o.Key); ki.Kind == catalog.KeyUndelete {
			out[ki.ClusterID] = append(out[ki.ClusterID], o.Key)
		}
	}
	return out
}

// listUndeleteRecords lists one cluster's undelete records.
func listUndeleteRecords(ctx context.Context, st store.Store, l catalog.Layout, id string) ([]string, error) {
	objs, err := st.List(ctx, l.UndeletesPrefix(id))
	if err != nil {
		return nil, fmt.Errorf("cluster %s: list the undelete records under %s: %w", id, l.UndeletesPrefix(id), err)
	}
	return undeleteRecordsOf(l, objs)[id], nil
}
