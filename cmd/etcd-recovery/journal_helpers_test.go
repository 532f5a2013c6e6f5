package main

// The helpers the journal and point-in-time restore tests share: the
// journal command in the background, waiting for the stored journal to
// reach a revision, and a restore --to-revision compared with the source.

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// journalRun is `etcd-recovery journal ARGS` running in-process until
// stop: stop cancels it (SIGTERM's path) and returns its exit and stderr.
func journalRun(t *testing.T, ctx context.Context, args ...string) (stop func() (int, string)) {
	t.Helper()
	return journalRunCmd(t, ctx, "journal", args...)
}

// journalRunCmd is journalRun for any long-running command.
func journalRunCmd(t *testing.T, ctx context.Context, cmd string, args ...string) (stop func() (int, string)) {
	t.Helper()
	jctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var code int
	var errOut string
	go func() {
		defer close(done)
		code, _, errOut = runCtx(t, jctx, append([]string{cmd}, args...)...)
	}()
	// A test that fails before stop does not leave it running.
	t.Cleanup(func() { cancel(); <-done })
	return func() (int, string) { cancel(); <-done; return code, errOut }
}

// waitJournal waits until the cluster's journal from base holds rev,
// without a problem in its chain.
func waitJournal(t *testing.T, ctx context.Context, st store.Store, layout catalog.Layout, id string, base, rev int64) *journal.Chain {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ch, err := journal.ListSegments(ctx, st, layout, id, base)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Problem == nil && ch.Reach >= rev {
			return ch
		}
		if time.Now().After(deadline) {
			t.Fatalf("the journal of %s from %d reaches %d (problem %v), want %d", id, base, ch.Reach, ch.Problem, rev)
		}
	}
}

// inventory is the committed backups of id.
func inventory(t *testing.T, ctx context.Context, id string, st store.Store, layout catalog.Layout) []catalog.Entry {
	t.Helper()
	es, err := catalog.Inventory(ctx, st, layout, id)
	if err != nil {
		t.Fatal(err)
	}
	var out []catalog.Entry
	for _, e := range es {
		if e.Committed {
			out = append(out, e)
		}
	}
	return out
}

// restoreDump restores the cluster at rev into a new data dir
// (restore --to-revision), starts a member on it and dumps it.
func restoreDump(t *testing.T, ctx context.Context, cos []string, id string, rev int64) map[string]string {
	t.Helper()
	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	client := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	root := filepath.Join(t.TempDir(), "data")
	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"restore", "--cluster-id", id, "--initial-cluster", "r0=" + peer, "--data-dir-root", root,
		"--to-revision", fmt.Sprint(rev), "-o", "json"}, cos)...)
	if code != 0 {
		t.Fatalf("restore --to-revision %d: exit %d\n%s\n%s", rev, code, out, errOut)
	}
	var res restore.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Replay == nil || res.Replay.ToRevision != rev || len(res.Members) != 1 {
		t.Fatalf("restore --to-revision %d: %v\n%s", rev, err, out)
	}
	return pitrDump(t, startRestored(t, res, client, peer), 0)
}

// startRestored starts an etcd 3.5 member r0 on the one data dir of a
// restore's result at client and peer, waits until it is ready and
// returns a client of it (closed at the test's end).
func startRestored(t testing.TB, res restore.Result, client, peer string) *clientv3.Client {
	t.Helper()
	return testfix.StartRestoredMember(t, res.Members[0].DataDir, res.Token, client, peer)
}

// checkDump fails the test when the restored dump got is not the
// source's dump want key by key; what says which restore it is.
func checkDump(t testing.TB, what string, want, got map[string]string) {
	t.Helper()
	if diffs := testfix.KeyDiffs(want, got); len(diffs) > 0 {
		sort.Strings(diffs)
		t.Fatalf("%s differs from the source in %d keys: %s", what, len(diffs), strings.Join(diffs[:min(5, len(diffs))], "; "))
	}
}

// backupCLI takes a full backup of c as id through
// `etcd-recovery backup --v2 off` and fails the test if it exits non-zero.
func backupCLI(tb testing.TB, ctx context.Context, c *testenv.EtcdCluster, cos []string, id string) {
	tb.Helper()
	if code, _, errOut := runCtx(tb, ctx, concatArgs([]string{"backup", "--cluster-id", id, "--v2", "off"}, clusterArgs(c), cos)...); code != 0 {
		tb.Fatalf("backup of %s: exit %d: %s", id, code, errOut)
	}
}
