package prune_test

import (
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// The lifecycle records live beside the backups but are never backups:
// ParseKey rejects their keys and GroupEntries ignores them, so retention,
// list and restore never see them.
func TestLifecycleRecordsAreNotBackups(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "kubx-etcd-01", "a/b"} {
		l := catalog.Layout{Prefix: prefix}
		name := catalog.NewBackupName(time.Date(2026, 11, 22, 3, 3, 0, 0, time.UTC), catalog.KindScheduled)
		keys := []string{catalog.OwnerKey(l), catalog.OrphanMarkerKey(l, "etcd-a"), l.Key("etcd-a", name, catalog.ManifestObject)}
		for _, k := range keys[:2] {
			if pk, ok := l.ParseKey(k); ok {
				t.Errorf("prefix %q: ParseKey(%q) = %+v, a backup", prefix, k, pk)
			}
		}
		var objs []store.ObjectInfo
		for _, k := range keys {
			objs = append(objs, store.ObjectInfo{Key: k, Size: 1})
		}
		g := catalog.GroupEntries(l, objs)
		if len(g) != 1 || len(g["etcd-a"]) != 1 || len(g["etcd-a"][0].Objects) != 1 || g["etcd-a"][0].Name != name {
			t.Errorf("prefix %q: GroupEntries = %+v, want only the backup %s", prefix, g, name)
		}
	}
}
