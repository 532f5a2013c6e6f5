package restore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/restore/survivor"
)

// A restore's download is given its size from the manifest (the
// snapshot object's stored size), so the progress line can show the
// total, the percentage and the time left; the count it reaches is that
// size.
func TestRestoreProgressKnowsTheTotal(t *testing.T) {
	t.Parallel()
	_, r, m, _ := backedUp(t, "progress", 200, 256)
	ic, _ := newCluster(t, 1, false)
	var progs testfix.Progresses
	_, err := restore.Run(context.Background(), restore.Options{Survivor: survivor.Backup{},
		ClusterID: "progress", Store: r.Store, Layout: r.Layout, NoLive: true,
		Targets:      restore.Targets{InitialCluster: ic, DataDirRoot: filepath.Join(t.TempDir(), "data")},
		BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, Log: testfix.Logger(t),
		Progress: func(label string) restore.Progress { return progs.New(label) },
	})
	if err != nil {
		t.Fatal(err)
	}
	progs.CheckDownloads(t, m.Snapshot.StoredSize)
}
