package backup_test

import (
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
)

// The lifecycle records live beside the backups but are never backups:
// ParseKey rejects their keys and GroupEntries ignores them, so retention,
// list and restore never see them.
func TestLifecycleRecordsAreNotBackups(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "kubx-etcd-01", "a/b"} {
		l := backup.Layout{Prefix: prefix}
		name := backup.NewBackupName(time.Date(2026, 11, 22, 3, 3, 0, 0, time.UTC), backup.KindScheduled)
		keys := []string{backup.OwnerKey(l), backup.OrphanMarkerKey(l, "etcd-a"), l.Key("etcd-a", name, backup.ManifestObject)}
		for _, k := range keys[:2] {
			if pk, ok := l.ParseKey(k); ok {
				t.Errorf("prefix %q: ParseKey(%q) = %+v, a backup", prefix, k, pk)
			}
		}
		var objs []backup.ObjectInfo
		for _, k := range keys {
			objs = append(objs, backup.ObjectInfo{Key: k, Size: 1})
		}
		g := backup.GroupEntries(l, objs)
		if len(g) != 1 || len(g["etcd-a"]) != 1 || len(g["etcd-a"][0].Objects) != 1 || g["etcd-a"][0].Name != name {
			t.Errorf("prefix %q: GroupEntries = %+v, want only the backup %s", prefix, g, name)
		}
	}
}
