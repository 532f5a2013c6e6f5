package catalog_test

import (
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/usage"
)

// The names the layout keeps beside the cluster folders are never cluster
// ids: refused by ValidateClusterID (and so by every command, exit 4), and
// never parsed as a cluster's key.
func TestReservedClusterIDs(t *testing.T) {
	t.Parallel()
	reserved := catalog.ReservedClusterIDs()
	l := catalog.Layout{Prefix: "p"}
	// Every name the layout uses directly under the prefix: reserved, or
	// (the tool's folders today) starting with '_', which no id can.
	for _, key := range []string{l.StagedPrefix(""), l.LegacyStagedPrefix(""), l.JournalPrefix(""), catalog.OwnerKey(l)} {
		first, _, _ := strings.Cut(strings.TrimPrefix(key, l.RootPrefix()), "/")
		found := strings.HasPrefix(first, "_") && catalog.ValidateClusterID(first) != nil
		for _, r := range reserved {
			found = found || r == first
		}
		if !found {
			t.Errorf("%s: %q is neither reserved nor refused as a cluster id (reserved: %v)", key, first, reserved)
		}
	}
	for _, id := range reserved {
		if err := catalog.ValidateClusterID(id); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("ValidateClusterID(%q) = %v, want a refusal naming the reserved name", id, err)
		}
		if _, ok := l.ParseKey("p/" + id + "/20261122T112102.831Z-scheduled-0a1b2c3d/manifest.json"); ok {
			t.Errorf("ParseKey reads a key under %q as a backup", id)
		}
		err := prune.PruneOptions{ClusterIDs: []string{id}, Policy: retention.DefaultPolicy()}.Validate()
		if !usage.Is(err) {
			t.Errorf("prune --cluster-id %s: %v, want a usage error", id, err)
		}
	}
	for _, id := range []string{"restores", "restore-1", "Restore", "etcd-recovery-owner"} {
		if err := catalog.ValidateClusterID(id); err != nil {
			t.Errorf("ValidateClusterID(%q) = %v, want it accepted", id, err)
		}
	}
}
