package restore_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/restore/survivor"
)

// totalProgress records what a download's progress is told.
type totalProgress struct {
	mu          sync.Mutex
	label       string
	total, last int64
	done        bool
}

func (p *totalProgress) SetTotal(n int64) { p.mu.Lock(); p.total = n; p.mu.Unlock() }
func (p *totalProgress) Update(n int64)   { p.mu.Lock(); p.last = n; p.mu.Unlock() }
func (p *totalProgress) Done()            { p.mu.Lock(); p.done = true; p.mu.Unlock() }

// A restore's download is given its size from the manifest (the
// snapshot object's stored size), so the progress line can show the
// total, the percentage and the time left; the count it reaches is that
// size.
func TestRestoreProgressKnowsTheTotal(t *testing.T) {
	t.Parallel()
	_, r, m, _ := backedUp(t, "progress", 200, 256)
	ic, _ := newCluster(t, 1, false)
	var mu sync.Mutex
	var progs []*totalProgress
	_, err := restore.Run(context.Background(), restore.Options{Survivor: survivor.Backup{},
		ClusterID: "progress", Store: r.Store, Layout: r.Layout, NoLive: true,
		Targets:      restore.Targets{InitialCluster: ic, DataDirRoot: filepath.Join(t.TempDir(), "data")},
		BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, Log: testfix.Logger(t),
		Progress: func(label string) restore.Progress {
			p := &totalProgress{label: label}
			mu.Lock()
			progs = append(progs, p)
			mu.Unlock()
			return p
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range progs {
		if !strings.HasPrefix(p.label, "download ") {
			continue
		}
		found = true
		if p.total != m.Snapshot.StoredSize || p.last != p.total || !p.done {
			t.Errorf("%s: total %d, reached %d, done %v; want the manifest's stored size %d, reached", p.label, p.total, p.last, p.done, m.Snapshot.StoredSize)
		}
	}
	if !found {
		t.Fatalf("no download progress among %d", len(progs))
	}
}
