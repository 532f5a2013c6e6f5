package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/undelete"
)

// undeleteWorld is a cluster with a full backup and its journal, a prefix
// deleted after both: want is every key of the prefix at point (the
// revision before the delete), with its value.
type undeleteWorld struct {
	c     *testenv.EtcdCluster
	cli   *clientv3.Client
	rig   *cliRig
	id    string
	point int64
	want  map[string]string
}

// newUndeleteWorld: n keys under prefix (and 10 under /other/) backed up,
// the journal started (1 s segments), then more: extra puts its own
// changes (after the backup, before the point); then the prefix deleted
// and after(cli) run; the journal stopped once it holds everything.
func newUndeleteWorld(t *testing.T, ctx context.Context, id, prefix string, n int, extra, after func(cli *clientv3.Client, want map[string]string)) *undeleteWorld {
	t.Helper()
	w := &undeleteWorld{c: testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1}), rig: newCLIRig(t), id: id}
	w.cli = w.c.Client(t)
	w.want = testenv.PutKeys(t, w.cli, prefix, n, 64)
	testenv.PutKeys(t, w.cli, "/other/", 10, 16)
	backupCLI(t, ctx, w.c, w.rig.cos, id)
	stop := journalRun(t, ctx, concatArgs([]string{"--cluster-id", id, "--segment-interval", "1s"}, clusterArgs(w.c), w.rig.cos)...)
	if extra != nil {
		extra(w.cli, w.want)
	}
	w.point = w.revision(t, ctx)
	if del, err := w.cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil || del.Deleted == 0 {
		t.Fatalf("the bad delete of %s: %v (%v deleted)", prefix, err, del)
	}
	if after != nil {
		after(w.cli, w.want)
	}
	testfix.WaitJournalReach(t, ctx, w.rig.Store, w.rig.Layout, id, w.revision(t, ctx), 30*time.Second)
	if code, errOut := stop(); code != 0 {
		t.Fatalf("journal: exit %d: %s", code, errOut)
	}
	return w
}

func (w *undeleteWorld) revision(t *testing.T, ctx context.Context) int64 {
	t.Helper()
	r, err := w.cli.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

// args are undelete's arguments for the world: the cluster, its store,
// the point and the live cluster, then extra.
func (w *undeleteWorld) args(extra ...string) []string {
	return concatArgs([]string{"undelete", "--cluster-id", w.id, "--to-revision", fmt.Sprint(w.point)}, clusterArgs(w.c), w.rig.cos, extra)
}

// run runs undelete in-process with -o json and decodes its report.
func (w *undeleteWorld) run(t *testing.T, ctx context.Context, extra ...string) (int, *undelete.Result, string) {
	t.Helper()
	code, out, errOut := runCtx(t, ctx, w.args(append(extra, "-o", "json")...)...)
	var res undelete.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("undelete %v -o json: exit %d: %v\n%s\n%s", extra, code, err, out, lastLinesOf(errOut, 20))
	}
	return code, &res, errOut
}

// live is every key under prefix in the live cluster, with its value and
// version.
func (w *undeleteWorld) live(t *testing.T, ctx context.Context, prefix string) map[string]string {
	t.Helper()
	r, err := w.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range r.Kvs {
		out[string(kv.Key)] = fmt.Sprintf("%s (version %d)", kv.Value, kv.Version)
	}
	return out
}

func actionsOf(res *undelete.Result) map[string]undelete.Action {
	out := map[string]undelete.Action{}
	for _, k := range res.Keys {
		out[k.Key] = k.Action
	}
	return out
}

// Undelete through the CLI, on real etcd 3.5 and MinIO, plain keys: 60
// keys under /app/ backed up, 20 more, an overwrite and a leased key in
// the journal only, then /app/ deleted; after the delete an unrelated
// write and one key of /app/ re-created with other bytes.
//   - The dry run lists every key of the point (would-restore; the
//     re-created one differs, the leased one leased) and writes nothing,
//     not even a record.
//   - The run writes back every other key with its exact value from the
//     point, as a new key (version 1), leaves the re-created key, the
//     leased one and the unrelated write alone, and records the run (who,
//     the point, every key).
//   - A second run writes nothing: every key present (the revision does not
//     move); its table's rows are the JSON's.
//   - --replace puts the re-created key back to its value at the point.
func TestUndeleteCLI(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 3*time.Minute)
	const recreated, leased = "/app/00000002", "/app/leased"
	w := newUndeleteWorld(t, ctx, "undel", "/app/", 60, func(cli *clientv3.Client, want map[string]string) {
		maps.Copy(want, testenv.PutKeys(t, cli, "/app/j-", 20, 64))
		if _, err := cli.Put(ctx, "/app/00000001", "overwritten in the journal"); err != nil {
			t.Fatal(err)
		}
		want["/app/00000001"] = "overwritten in the journal"
		lease, err := cli.Grant(ctx, 600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, leased, "on a lease", clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		want[leased] = "on a lease"
	}, func(cli *clientv3.Client, _ map[string]string) {
		for k, v := range map[string]string{"/other/after": "written after the delete", recreated: "re-created after the delete"} {
			if _, err := cli.Put(ctx, k, v); err != nil {
				t.Fatal(err)
			}
		}
	})
	if len(w.want) != 81 {
		t.Fatalf("%d keys at the point, want 81", len(w.want))
	}
	before := w.revision(t, ctx)

	// The dry run.
	code, res, errOut := w.run(t, ctx, "--key-prefix", "/app/", "--dry-run")
	if code != 0 {
		t.Fatalf("undelete --dry-run: exit %d: %s", code, lastLinesOf(errOut, 20))
	}
	acts := actionsOf(res)
	if got := slices.Sorted(maps.Keys(acts)); !slices.Equal(got, slices.Sorted(maps.Keys(w.want))) {
		t.Fatalf("the dry run lists %d keys, want the %d of the point:\n%v", len(got), len(w.want), got)
	}
	for k, a := range acts {
		want := undelete.ActionWouldRestore
		switch k {
		case recreated:
			want = undelete.ActionDiffers
		case leased:
			want = undelete.ActionLeased
		}
		if a != want {
			t.Errorf("dry run: %s is %s, want %s", k, a, want)
		}
	}
	if res.Revision != w.point || !res.DryRun || res.Record != "" {
		t.Errorf("dry run: revision %d (want %d), dry run %v, record %q", res.Revision, w.point, res.DryRun, res.Record)
	}
	if after := w.revision(t, ctx); after != before {
		t.Fatalf("the dry run wrote: revision %d, was %d", after, before)
	}
	if recs, err := catalog.ListUndeleteRecords(ctx, w.rig.Store, w.rig.Layout, w.id); err != nil || len(recs) != 0 {
		t.Fatalf("the dry run recorded %d runs (%v)", len(recs), err)
	}

	// The run.
	code, res, errOut = w.run(t, ctx, "--key-prefix", "/app/", "--operator", "sre-tester")
	if code != 0 {
		t.Fatalf("undelete: exit %d: %s", code, lastLinesOf(errOut, 20))
	}
	live := w.live(t, ctx, "/app/")
	for k, v := range w.want {
		switch k {
		case recreated:
			if live[k] != "re-created after the delete (version 1)" {
				t.Errorf("%s, re-created after the delete, is now %q", k, live[k])
			}
		case leased:
			if _, ok := live[k]; ok {
				t.Errorf("the leased key %s was written: %q", k, live[k])
			}
		default:
			if live[k] != v+" (version 1)" {
				t.Errorf("%s: %q, want %q as a new key (version 1)", k, live[k], v)
			}
		}
	}
	if len(live) != len(w.want)-1 {
		t.Errorf("%d keys under /app/ after the undelete, want %d", len(live), len(w.want)-1)
	}
	if o := w.live(t, ctx, "/other/after"); o["/other/after"] != "written after the delete (version 1)" {
		t.Errorf("the unrelated write: %v", o)
	}
	if res.Counts[undelete.ActionRestored] != len(w.want)-2 || res.Counts[undelete.ActionDiffers] != 1 || res.Counts[undelete.ActionLeased] != 1 {
		t.Errorf("counts %v, want %d restored, 1 differs, 1 leased", res.Counts, len(w.want)-2)
	}
	recs, err := catalog.ListUndeleteRecords(ctx, w.rig.Store, w.rig.Layout, w.id)
	if err != nil || len(recs) != 1 {
		t.Fatalf("%d undelete records (%v), want 1", len(recs), err)
	}
	rec := recs[0]
	if rec.Key != res.Record || rec.Outcome != catalog.UndeleteComplete || rec.Operator != "sre-tester" || rec.Revision != w.point ||
		!slices.Equal(rec.Prefixes, []string{"/app/"}) || len(rec.Keys) != len(w.want) {
		t.Errorf("the record %s (report: %s): outcome %q, operator %q, revision %d, prefixes %v, %d keys; want complete, sre-tester, %d, [/app/], %d",
			rec.Key, res.Record, rec.Outcome, rec.Operator, rec.Revision, rec.Prefixes, len(rec.Keys), w.point, len(w.want))
	}

	// A second run writes nothing; its table holds the JSON's rows.
	before = w.revision(t, ctx)
	code, res, errOut = w.run(t, ctx, "--key-prefix", "/app/")
	if code != 0 {
		t.Fatalf("second undelete: exit %d: %s", code, lastLinesOf(errOut, 20))
	}
	if after := w.revision(t, ctx); after != before || res.Written() != 0 || res.Counts[undelete.ActionPresent] != len(w.want)-2 {
		t.Errorf("the second run: revision %d -> %d, counts %v; want nothing written, %d present", before, after, res.Counts, len(w.want)-2)
	}
	code, wide, errOut := runCtx(t, ctx, w.args("--key-prefix", "/app/", "-o", "wide")...)
	if code != 0 {
		t.Fatalf("undelete -o wide: exit %d: %s", code, lastLinesOf(errOut, 20))
	}
	var jsonKeys []string
	for _, k := range res.Keys {
		jsonKeys = append(jsonKeys, k.Key)
	}
	if rows := tableColumn(t, wide, "KEY"); !slices.Equal(rows, jsonKeys) {
		t.Errorf("the table's keys are not the JSON's:\n%v\n%v", rows, jsonKeys)
	}
	if !strings.Contains(wide, "present") || !strings.Contains(wide, "record") {
		t.Errorf("the table says no present key or no record:\n%s", wide)
	}

	// --replace: the re-created key goes back to its value at the point.
	code, res, errOut = w.run(t, ctx, "--key-prefix", "/app/", "--replace")
	if code != 0 {
		t.Fatalf("undelete --replace: exit %d: %s", code, lastLinesOf(errOut, 20))
	}
	if a := actionsOf(res)[recreated]; a != undelete.ActionReplaced || res.Written() != 1 {
		t.Errorf("--replace: %s is %s, %d written; want replaced, 1", recreated, a, res.Written())
	}
	if got := w.live(t, ctx, recreated)[recreated]; got != w.want[recreated]+" (version 2)" {
		t.Errorf("--replace: %s is %q, want %q (version 2)", recreated, got, w.want[recreated])
	}
}

// SIGTERM of the real binary in the middle of an undelete of 1,500 keys in
// transactions of 2: exit 130, some keys written and not all, the run
// recorded as interrupted. The same command again finishes: the rest
// restored, what the first wrote present, every key written once
// (version 1) with its value from the point.
func TestUndeleteCLISIGTERMResumes(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 4*time.Minute)
	const n = 1500
	w := newUndeleteWorld(t, ctx, "undel-term", "/bulk/", n, nil, nil)
	r := startTool(t, w.args("--key-prefix", "/bulk/", "--max-txn-ops", "2")[0:]...)
	// Wait for the first keys to be back, then stop it.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		got, err := w.cli.Get(ctx, "/bulk/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if got.Count > 0 {
			break
		}
		select {
		case <-r.done:
			t.Fatalf("undelete ended before writing anything:\n%s", r.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("undelete wrote nothing within 2 minutes:\n%s", r.output())
		}
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(time.Minute); code != exitCanceled {
		t.Fatalf("undelete after SIGTERM: exit %d, want %d:\n%s", code, exitCanceled, r.output())
	}
	first := w.live(t, ctx, "/bulk/")
	t.Logf("SIGTERM: %d of %d keys were back", len(first), n)
	if len(first) == 0 || len(first) >= n {
		t.Fatalf("after SIGTERM %d of %d keys are back: the signal did not stop it in the middle", len(first), n)
	}
	recs, err := catalog.ListUndeleteRecords(ctx, w.rig.Store, w.rig.Layout, w.id)
	if err != nil || len(recs) != 1 || recs[0].Outcome != catalog.UndeleteInterrupted {
		t.Fatalf("records after SIGTERM: %+v (%v); want one, interrupted", recs, err)
	}

	code, res, errOut := w.run(t, ctx, "--key-prefix", "/bulk/", "--max-txn-ops", "2")
	if code != 0 {
		t.Fatalf("the rerun: exit %d: %s", code, lastLinesOf(errOut, 20))
	}
	if res.Counts[undelete.ActionRestored] != n-len(first) || res.Counts[undelete.ActionPresent] != len(first) {
		t.Errorf("the rerun: counts %v; want %d restored, %d present (written by the first run)", res.Counts, n-len(first), len(first))
	}
	live := w.live(t, ctx, "/bulk/")
	if len(live) != n {
		t.Fatalf("%d keys after the rerun, want %d", len(live), n)
	}
	for k, v := range w.want {
		if live[k] != v+" (version 1)" {
			t.Errorf("%s: %q, want %q written once (version 1)", k, live[k], v)
		}
	}
	if recs, err = catalog.ListUndeleteRecords(ctx, w.rig.Store, w.rig.Layout, w.id); err != nil || len(recs) != 2 || recs[1].Outcome != catalog.UndeleteComplete {
		t.Errorf("records after the rerun: %d (%v); want 2, the second complete", len(recs), err)
	}
}

// Usage mistakes are exit 4 with a message that names the flag, before
// anything is contacted (the endpoints and the store are never dialled:
// port 9 on loopback).
func TestUndeleteCLIUsageErrors(t *testing.T) {
	t.Parallel()
	creds := credsDir(t, "test-access-key", "test-secret-key")
	cmd := []string{"undelete", "--endpoints", "http://127.0.0.1:9", "--cos-endpoint", "http://127.0.0.1:9", "--bucket", "b", "--prefix", "p",
		"--cos-credentials-dir", creds}
	withID := func(args ...string) []string { return append([]string{"--cluster-id", "c1"}, args...) }
	assertUsageErrors(t, cmd, []usageCase{
		{[]string{"--key-prefix", "/a/", "--to-revision", "5"}, "--cluster-id is required"},
		{withID("--to-revision", "5"), "--key-prefix P (an etcd key prefix) or --kube-namespace NS"},
		{withID("--to-revision", "5", "--prefix", "/registry/namespaces/shop"), `--prefix "/registry/namespaces/shop" is the store's key prefix`},
		{withID("--key-prefix", "/a/", "--to-revision", "5", "--to-time", "1h"), "--to-revision and --to-time: give one"},
		{withID("--key-prefix", "/a/"), "--to-revision R or --to-time T"},
		{withID("--key-prefix", "/a/", "--to-revision", "0"), "--to-revision must be a revision"},
		{withID("--key-prefix", "/a/", "--to-time", "yesterday"), `--to-time "yesterday"`},
		{withID("--key-prefix", "", "--to-revision", "5"), "--key-prefix is empty"},
		{withID("--kube-namespace", "a/b", "--to-revision", "5"), `--kube-namespace "a/b"`},
		{withID("--kube-namespace", "shop", "--kube-prefix", "registry", "--to-revision", "5"), `--kube-prefix "registry"`},
		{withID("--key-prefix", "/a/", "--kube-prefix", "/registry", "--to-revision", "5"), "--kube-prefix goes with --kube-namespace"},
		{withID("-n", "shop", "--to-revision", "5"), "--kube-namespace NS"},
		{withID("--namespace", "shop", "--to-revision", "5"), "--kube-namespace NS"},
		{withID("--key-prefix", "/a/", "--to-revision", "5", "--max-txn-ops", "0"), "--max-txn-ops must be positive"},
		{withID("--key-prefix", "/a/", "--to-revision", "5", "--max-txn-bytes", "0"), `--max-txn-bytes "0"`},
		{withID("--key-prefix", "/a/", "--to-revision", "5", "--max-txn-bytes", "lots"), `--max-txn-bytes "lots"`},
		{withID("--key-prefix", "/a/", "--to-revision", "5", "--operator", " "), "--operator is empty"},
		{withID("--key-prefix", "/a/", "--to-revision", "5", "--settle", "-1s"), "--settle must not be negative"},
		{withID("--key-prefix", "/a/", "--to-revision", "5", "extra"), `unexpected argument "extra"`},
		{withID("--key-prefix", "/a/", "--to-revision", "5", "--endpoints", "foo://127.0.0.1:9"), `unknown scheme "foo"`},
		{[]string{"--cluster-id", "_bad", "--key-prefix", "/a/", "--to-revision", "5"}, `invalid cluster id "_bad"`},
	})
}
