package etcdinternals_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// snapshotFile saves the member's snapshot to a file in dir, without
// etcd's sha256 trailer (the bbolt file alone).
func snapshotFile(tb testing.TB, ctx context.Context, cli *clientv3.Client, dir, name string) string {
	tb.Helper()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		tb.Fatalf("snapshot: %v", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		tb.Fatalf("read snapshot: %v", err)
	}
	if len(b)%512 == 32 {
		b = b[:len(b)-32]
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// hashWorkload runs puts, overwrites, deletes, a range delete, multi-op
// txns and leased keys, and returns the last revision.
func hashWorkload(tb testing.TB, ctx context.Context, cli *clientv3.Client, round int) int64 {
	tb.Helper()
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		tb.Fatal(err)
	}
	txns := testfix.NewTxns(tb)
	do := txns.Do
	for i := range 20 {
		do(cli.Txn(ctx).Then(clientv3.OpPut(fmt.Sprintf("/w/k%02d", i), fmt.Sprintf("v%d-%d", round, i))).Commit())
	}
	for i := range 10 {
		do(cli.Txn(ctx).Then(clientv3.OpPut(fmt.Sprintf("/w/k%02d", i), fmt.Sprintf("over%d-%d", round, i))).Commit())
	}
	do(cli.Txn(ctx).Then(clientv3.OpPut(fmt.Sprintf("/l/%d-a", round), "a", clientv3.WithLease(lease.ID)),
		clientv3.OpPut(fmt.Sprintf("/l/%d-b", round), "b", clientv3.WithLease(lease.ID))).Commit())
	do(cli.Txn(ctx).Then(clientv3.OpDelete("/w/k03"), clientv3.OpPut("/w/t", fmt.Sprint(round)), clientv3.OpDelete("/w/k04")).Commit())
	do(cli.Txn(ctx).Then(clientv3.OpDelete("/w/k1", clientv3.WithPrefix())).Commit())
	do(cli.Txn(ctx).Then(clientv3.OpPut("/w/k03", "back")).Commit())
	do(cli.Txn(ctx).Then(clientv3.OpDelete("/w/k05")).Commit())
	return txns.Rev
}

// The offline HashKV of a member's database equals the member's own
// HashKV, on etcd 3.5 and 3.6: before any compaction (compact revision 0)
// at several revisions; after a compaction at a deletion (the tombstone
// at the compact revision) at several revisions above it, both on a
// snapshot taken after the compaction; after a second compaction at a
// put, on a snapshot taken before it, hashed as if compacted there (what a
// proof does with a backup the journal was replayed into), and on one
// taken after it; with every key deleted (etcd's keep set empty). A
// compact revision below the database's is refused.
func TestHashKVMatchesEtcd(t *testing.T) {
	t.Parallel()
	for _, v := range []testenv.Version{testenv.V35, testenv.V36} {
		t.Run(string(v), func(t *testing.T) {
			t.Parallel()
			ctx := testfix.Context(t, 2*time.Minute)
			c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, Members: 1})
			cli := c.Client(t)
			ep := c.Endpoints()[0]
			dir := t.TempDir()
			etcdHash := func(rev int64) etcdinternals.KVHash {
				t.Helper()
				r, err := cli.HashKV(ctx, ep, rev)
				if err != nil {
					t.Fatalf("etcd HashKV at %d: %v", rev, err)
				}
				return etcdinternals.KVHash{Hash: r.Hash, Revision: rev, CompactRevision: r.CompactRevision}
			}
			check := func(path string, want etcdinternals.KVHash) {
				t.Helper()
				got, err := etcdinternals.HashKV(path, want.Revision, want.CompactRevision)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("%s: offline %+v, etcd %+v", filepath.Base(path), got, want)
				}
			}

			r1 := hashWorkload(t, ctx, cli, 1)
			r2 := hashWorkload(t, ctx, cli, 2)
			var before []etcdinternals.KVHash
			for _, r := range []int64{r1 - 3, r1, r2 - 1, r2} {
				before = append(before, etcdHash(r))
			}
			pre := snapshotFile(t, ctx, cli, dir, "before.db")
			for _, h := range before {
				if h.CompactRevision > 0 {
					t.Fatalf("etcd reports compact revision %d before any compaction", h.CompactRevision)
				}
				check(pre, h)
			}

			// Compact at r2: the deletion of /w/k05.
			if _, err := cli.Compact(ctx, r2, clientv3.WithCompactPhysical()); err != nil {
				t.Fatal(err)
			}
			r3 := hashWorkload(t, ctx, cli, 3)
			var after []etcdinternals.KVHash
			// (Not at r2 itself: etcd answers there the hash its
			// compaction stored, for the compact revision before it.)
			for _, r := range []int64{r2 + 1, r2 + 7, r3} {
				after = append(after, etcdHash(r))
			}
			post := snapshotFile(t, ctx, cli, dir, "after.db")
			for _, h := range after {
				if h.CompactRevision != r2 {
					t.Fatalf("etcd reports compact revision %d, compacted at %d", h.CompactRevision, r2)
				}
				check(post, h)
			}

			// A second compaction, at a put in the middle of round 3.
			c2 := r2 + 5
			if _, err := cli.Compact(ctx, c2, clientv3.WithCompactPhysical()); err != nil {
				t.Fatal(err)
			}
			h := etcdHash(r3)
			check(snapshotFile(t, ctx, cli, dir, "again.db"), h)
			check(post, h)
			if _, err := etcdinternals.HashKV(snapshotFile(t, ctx, cli, dir, "last.db"), r3, r2); err == nil {
				t.Errorf("a database compacted at %d hashed for compact revision %d", c2, r2)
			}
			// Every key deleted: no key is alive at the revision (etcd's
			// keep set is empty), so etcd hashes what its compaction left
			// at or below the compact revision.
			del, err := cli.Delete(ctx, "\x00", clientv3.WithFromKey())
			if err != nil || del.Deleted == 0 {
				t.Fatalf("delete everything: %v %v", del, err)
			}
			h = etcdHash(del.Header.Revision)
			if h.CompactRevision != c2 {
				t.Fatalf("etcd reports compact revision %d, compacted at %d", h.CompactRevision, c2)
			}
			check(snapshotFile(t, ctx, cli, dir, "empty.db"), h)

			revs, err := etcdinternals.DatabaseRevisions(post)
			if err != nil || revs.Revision != r3 || revs.Compact != r2 {
				t.Errorf("DatabaseRevisions: %+v %v, want revision %d compact %d", revs, err, r3, r2)
			}
		})
	}
}
