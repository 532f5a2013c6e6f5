package backup_test

import (
	"context"
	"sync"
	"testing"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// A backup's upload knows the size it will reach before it streams: the
// member's status dbSize (the snapshot is the database file, and its
// sha256), so
// the progress line can show a percentage and the time left.
func TestBackupProgressTotal(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/p/", 200, 1<<10)
	r := newRig(t, c, nil)
	opts := r.Options(t, "progress")
	var mu sync.Mutex
	var total, last int64
	opts.ProgressTotal = func(n int64) { mu.Lock(); total = n; mu.Unlock() }
	opts.Progress = func(n int64) { mu.Lock(); last = n; mu.Unlock() }
	res, err := backup.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	// The stream is the database file and etcd's 32-byte sha256 of it.
	if want := res.Manifest.Snapshot.RawSize + 32; total != want || last != want {
		t.Errorf("total %d, streamed %d; want both the snapshot's raw size + 32 = %d", total, last, want)
	}
}
