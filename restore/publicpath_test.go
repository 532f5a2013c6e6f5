package restore_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/restore/survivor"
)

// lockedLog keeps what a logger wrote, and passes it on to the test log.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
	tb  testing.TB
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf.Write(p)
	l.mu.Unlock()
	l.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// The fallback to etcdutl's public restore path (no hand-written freelist,
// no staged bump: etcdutl's own --bump-revision --mark-compacted in each
// member's copy) writes data dirs etcd starts on, with the same keys, the
// revision bumped and the old revisions compacted.
func TestRestorePublicPath(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	r := newStoreRig(t)
	const id = "public-path"
	ctx := testfix.Context(t, 3*time.Minute)
	want := testenv.PutKeys(t, cli, "/registry/pods/", 500, 64)
	for k, v := range testenv.PutKeys(t, cli, "/b/", 200, 300) {
		want[k] = v
	}
	if _, err := cli.Delete(ctx, "/b/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	for k := range want {
		if strings.HasPrefix(k, "/b/") {
			delete(want, k)
		}
	}
	_, oldRev := allKeys(t, cli)
	r.TakeBackup(t, c, id, catalog.KindScheduled)
	for _, m := range c.Members {
		m.Kill()
		os.RemoveAll(m.DataDir)
	}

	ic, ms := newCluster(t, 3, false)
	logs := &lockedLog{tb: t}
	res, err := restore.Run(ctx, restore.Options{Survivor: survivor.Backup{},
		ClusterID: id, Store: r.Store, Layout: r.Layout, Old: testfix.EtcdConfig(c), ProbeTimeout: time.Second,
		Targets:      restore.Targets{InitialCluster: ic, DataDir: filepath.Join(t.TempDir(), "etcd-{name}")},
		BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, PublicRestorePath: true,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if !strings.Contains(logs.String(), "public restore path") || strings.Contains(logs.String(), "freelist written") {
		t.Fatal("the restore did not take the public path (its log says otherwise)")
	}
	nc := startRestored(t, testenv.V35, &res.Plan, ms, nil, false)
	ncli := nc.Client(t)
	got, rev := allKeys(t, ncli)
	sameKeys(t, got, want)
	if rev < oldRev+restore.DefaultBumpRevision {
		t.Fatalf("revision %d, want >= %d (old %d + bump)", rev, oldRev+restore.DefaultBumpRevision, oldRev)
	}
	// --mark-compacted: revisions below the bump are gone, so a watcher
	// that was behind starts over.
	if _, err := ncli.Get(ctx, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithRev(oldRev)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("a read at the old revision %d: %v, want %v", oldRev, err, rpctypes.ErrCompacted)
	}
	if res.Snapshot == nil || res.Snapshot.LiveKeys != int64(len(want)) {
		t.Fatalf("snapshot facts %+v, want %d live keys", res.Snapshot, len(want))
	}
}
