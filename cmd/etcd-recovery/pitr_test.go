package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"sigs.k8s.io/yaml"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// pitrDump is every key with value, create and mod revision, version and
// lease, read at rev (0: the newest).
func pitrDump(t *testing.T, cli *clientv3.Client, rev int64) map[string]string {
	t.Helper()
	return testfix.Dump(t, context.Background(), cli, rev)
}

// Point-in-time restore through the CLI, on real etcd 3.5 and MinIO: a
// full backup, the journal (1 s segments) while a workload runs (puts,
// overwrites, a txn, leased keys on a lease granted after the backup),
// then a bad range delete of a prefix at revision D. `journal find
// --prefix` names D; `restore --to-revision D-1` (with the default bump
// and compaction mark) into a new data dir brings the prefix back: the
// restored member's full dump equals the source's at D-1, key by key
// (value, create and mod revision, version, lease), and the lease lives.
// A dry run says what it would replay, --to-time maps to a revision, and
// --to-revision past the journal exits non-zero naming D.
func TestPointInTimeRestoreCLI(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 2*time.Minute)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	cli := c.Client(t)
	testenv.PutKeys(t, cli, "/ns/bad/", 20, 16)
	testenv.PutKeys(t, cli, "/ns/good/", 20, 16)
	m := testenv.SharedMinIO(t)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	cos := cosArgs(t, m, bucket, prefix)
	const id = "pitr"
	backupCLI(t, ctx, c, cos, id)

	stopJournal := journalRun(t, ctx, concatArgs([]string{"--cluster-id", id, "--segment-interval", "1s"}, clusterArgs(c), cos)...)
	// The workload, spread over more than one segment.
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		testenv.PutKeys(t, cli, fmt.Sprintf("/ns/bad/w%d-", i), 10, 16)
		if _, err := cli.Put(ctx, "/ns/good/key000001", fmt.Sprintf("over-%d", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, fmt.Sprintf("/ns/bad/leased-%d", i), "l", clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Txn(ctx).Then(clientv3.OpPut("/ns/good/txn-a", fmt.Sprint(i)), clientv3.OpDelete("/ns/good/key000002"),
			clientv3.OpPut("/ns/bad/txn-b", fmt.Sprint(i))).Commit(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(700 * time.Millisecond)
	}
	beforeRev := func() int64 {
		r, err := cli.Get(ctx, "/")
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}()
	want := pitrDump(t, cli, beforeRev)
	del, err := cli.Delete(ctx, "/ns/bad/", clientv3.WithPrefix())
	if err != nil || del.Deleted == 0 {
		t.Fatalf("the bad delete: %v %v", del, err)
	}
	d := del.Header.Revision
	if d != beforeRev+1 {
		t.Fatalf("the delete is at %d, the dump at %d", d, beforeRev)
	}
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}
	testfix.WaitJournalReach(t, ctx, st, layout, id, d, 30*time.Second)
	if code, jerr := stopJournal(); code != 0 {
		t.Fatalf("journal: exit %d: %s", code, jerr)
	}
	afterAll := time.Now()

	// journal find names the delete.
	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"journal", "find", "--cluster-id", id, "--key-prefix", "/ns/bad/", "-o", "json"}, cos)...)
	if code != 0 {
		t.Fatalf("journal find: exit %d\n%s\n%s", code, out, errOut)
	}
	var found journalFindResult
	if err := json.Unmarshal([]byte(out), &found); err != nil {
		t.Fatalf("journal find -o json: %v\n%s", err, out)
	}
	deletes := 0
	for _, ch := range found.Changes {
		if ch.Type == journal.Delete && ch.Rev == d {
			deletes++
		}
		if !strings.HasPrefix(ch.Key, "/ns/bad/") {
			t.Fatalf("journal find --key-prefix /ns/bad/ lists %s", ch.Key)
		}
	}
	if n := len(found.Changes); n == 0 || found.Changes[n-1].Rev != d || int64(deletes) != del.Deleted {
		t.Fatalf("journal find: want the last changes the %d deletes at %d, got %+v", del.Deleted, d, found.Changes)
	}
	code, table, _ := runCtx(t, ctx, concatArgs([]string{"journal", "find", "--cluster-id", id, "--exact-key", "/ns/good/key000001"}, cos)...)
	if code != 0 || strings.Count(table, "put") != 3 || !strings.Contains(table, "REVISION") {
		t.Fatalf("journal find --exact-key: exit %d\n%s", code, table)
	}
	t.Logf("journal find --exact-key:\n%s", table)
	// The key as the argument, etcdctl's way, flags before or after it:
	// the same data as --key-prefix and --exact-key (-o yaml is -o json's
	// data); --since as a duration before now (everything was received in
	// the last hour, nothing in the future).
	sameFind := func(want journalFindResult, args ...string) {
		t.Helper()
		code, out, errOut := runCtx(t, ctx, concatArgs([]string{"journal", "find", "--cluster-id", id}, cos, args)...)
		var got journalFindResult
		if err := yaml.UnmarshalStrict([]byte(out), &got); code != 0 || err != nil {
			t.Fatalf("journal find %v: exit %d, %v\n%s\n%s", args, code, err, out, errOut)
		}
		got.Since, want.Since = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("journal find %v:\n%+v\nwant (--key-prefix/--exact-key)\n%+v", args, got, want)
		}
	}
	sameFind(found, "-o", "yaml", "/ns/bad/", "--match-prefix", "--since", "1h")
	sameFind(found, "--match-prefix", "-o", "yaml", "/ns/bad/")
	var exact journalFindResult
	if code, out, errOut := runCtx(t, ctx, concatArgs([]string{"journal", "find", "--cluster-id", id, "--exact-key", "/ns/good/key000001", "-o", "json"}, cos)...); code != 0 || json.Unmarshal([]byte(out), &exact) != nil {
		t.Fatalf("journal find --exact-key -o json: exit %d\n%s\n%s", code, out, errOut)
	}
	if len(exact.Changes) != 3 {
		t.Fatalf("journal find --exact-key: want 3 changes, got %+v", exact.Changes)
	}
	sameFind(exact, "/ns/good/key000001", "-o=yaml")
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	code, out, errOut = runCtx(t, ctx, concatArgs([]string{"journal", "find", "--cluster-id", id, "--since", later, "-o", "json", "/ns/bad/", "--match-prefix"}, cos)...)
	if code != 0 || !strings.Contains(out, `"changes": []`) {
		t.Errorf("journal find --since %s (an hour ahead): want no change, exit %d\n%s\n%s", later, code, out, errOut)
	}

	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	client := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	root := filepath.Join(t.TempDir(), "data")
	restoreArgs := concatArgs([]string{"restore", "--cluster-id", id, "--initial-cluster", "r0=" + peer, "--data-dir-root", root}, cos)

	// Past the journal: refused, naming the last revision it reaches.
	code, out, errOut = runCtx(t, ctx, concatArgs(restoreArgs, []string{"--to-revision", fmt.Sprint(d + 100)})...)
	if code == 0 || !strings.Contains(errOut+out, fmt.Sprintf("reaches revision %d only, not %d", d, d+100)) {
		t.Fatalf("restore --to-revision past the journal: exit %d\n%s\n%s", code, out, errOut)
	}
	// --to-time after the journal's end: whether the cluster changed since
	// is in no segment. Refused unless a quorum of the old cluster answers
	// at the journal's last revision (idle since): then it is that
	// revision, and a dry run says what it would replay. Once the cluster
	// has changed, refused again, naming the revisions in no segment.
	past := afterAll.Add(time.Second).UTC().Format(time.RFC3339Nano)
	code, out, errOut = runCtx(t, ctx, concatArgs(restoreArgs, []string{"--dry-run", "--to-time", past})...)
	if code == 0 || !strings.Contains(errOut, fmt.Sprintf("after the journal's last stored revision %d", d)) || !strings.Contains(errOut, "--to-latest") {
		t.Fatalf("restore --dry-run --to-time after the journal, no endpoints: exit %d, want a refusal\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runCtx(t, ctx, concatArgs(restoreArgs, clusterArgs(c), []string{"--dry-run", "-o", "json", "--to-time", past})...)
	var dry restore.Result
	if code != 0 || json.Unmarshal([]byte(out), &dry) != nil || dry.Replay == nil || dry.Replay.ToRevision != d || len(dry.Replay.Segments) == 0 {
		t.Fatalf("restore --dry-run --to-time after the journal, the cluster idle since: exit %d\n%s\n%s", code, out, errOut)
	}
	// Another cluster at the endpoints (recreated under the name, or
	// restored without a revision bump: a revision below the journal's,
	// another etcd cluster ID): not the journal's history, refused.
	other := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	code, out, errOut = runCtx(t, ctx, concatArgs(restoreArgs, clusterArgs(other), []string{"--dry-run", "--to-time", past})...)
	if code == 0 || !strings.Contains(errOut, "the endpoints answer etcd cluster ID") {
		t.Fatalf("restore --dry-run --to-time after the journal, another cluster at the endpoints: exit %d, want a refusal\n%s\n%s", code, out, errOut)
	}
	if _, err := cli.Put(ctx, "/ns/after-the-journal", "x"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCtx(t, ctx, concatArgs(restoreArgs, clusterArgs(c), []string{"--dry-run", "--to-time", past})...)
	if code == 0 || !strings.Contains(errOut, fmt.Sprintf("the cluster is at revision %d: revisions %d to %d are in no segment", d+1, d+1, d+1)) {
		t.Fatalf("restore --dry-run --to-time after the journal, the cluster changed since: exit %d, want a refusal\n%s\n%s", code, out, errOut)
	}

	code, out, errOut = runCtx(t, ctx, concatArgs(restoreArgs, []string{"--to-revision", fmt.Sprint(d - 1), "-o", "json"})...)
	if code != 0 {
		t.Fatalf("restore --to-revision %d: exit %d\n%s\n%s", d-1, code, out, errOut)
	}
	var res restore.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("restore -o json: %v\n%s", err, out)
	}
	if res.Replay == nil || res.Replay.ToRevision != d-1 || res.Replay.Events == 0 || len(res.Members) != 1 {
		t.Fatalf("restore result: %+v", res)
	}
	ncli := startRestored(t, res, client, peer)
	got := pitrDump(t, ncli, 0)
	checkDump(t, fmt.Sprintf("the restored dump at %d", d-1), want, got)
	ttl, err := ncli.TimeToLive(ctx, lease.ID)
	if err != nil || ttl.TTL <= 0 || ttl.GrantedTTL != 600 {
		t.Fatalf("the lease on the restored member: %+v %v", ttl, err)
	}
	if r, err := ncli.Get(ctx, "/"); err != nil || r.Header.Revision != d-1+int64(restore.DefaultBumpRevision) {
		t.Fatalf("the restored revision: %v %v, want %d", r, err, d-1+int64(restore.DefaultBumpRevision))
	}
}
