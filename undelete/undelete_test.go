package undelete_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/undelete"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// world is a real etcd with a backup, its journal running into a MinIO
// prefix of the test's own, and an undelete's options for it.
type world struct {
	c     *testenv.EtcdCluster
	cli   *clientv3.Client
	rig   *testfix.StoreRig
	id    string
	ctx   context.Context
	stopJ func()
	base  *catalog.Manifest
}

func newWorld(t *testing.T, opts testenv.EtcdOptions) *world {
	t.Helper()
	if opts.Version == "" {
		opts.Version = testenv.V35
	}
	if opts.Members == 0 {
		opts.Members = 1
	}
	w := &world{c: testenv.StartEtcd(t, opts), rig: testfix.NewStoreRig(t), id: "ud-1", ctx: testfix.Context(t, 3*time.Minute)}
	w.cli = w.c.Client(t)
	if _, err := w.cli.Put(w.ctx, "/other/before", "x"); err != nil {
		t.Fatal(err)
	}
	w.base = w.rig.TakeBackup(t, w.c, w.id, catalog.KindScheduled)
	w.stopJ = testfix.StartJournal(t, w.cli, w.rig.Store, w.rig.Layout, w.id, w.base, 200*time.Millisecond, testfix.Logger(t))
	return w
}

func (w *world) rev(t *testing.T) int64 {
	t.Helper()
	r, err := w.cli.Get(w.ctx, "\x00probe", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

// synced waits until the journal holds everything written so far.
func (w *world) synced(t *testing.T) {
	t.Helper()
	testfix.WaitJournalReach(t, w.ctx, w.rig.Store, w.rig.Layout, w.id, w.rev(t), 30*time.Second)
}

func (w *world) opts(t *testing.T, rev int64, prefixes ...string) undelete.Options {
	return undelete.Options{ClusterID: w.id, Store: w.rig.Store, Layout: w.rig.Layout, Etcd: testfix.EtcdConfig(w.c),
		Prefixes: prefixes, ToRevision: rev, ScratchDir: t.TempDir(), Operator: "test@" + t.Name(), Log: testfix.Logger(t)}
}

// dump is every key under prefix with its value.
func (w *world) dump(t *testing.T, prefix string) map[string]string {
	t.Helper()
	r, err := w.cli.Get(w.ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range r.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func actions(res *undelete.Result) map[string]undelete.Action {
	out := map[string]undelete.Action{}
	for _, k := range res.Keys {
		out[k.Key] = k.Action
	}
	return out
}

// TestUndeletePrefix: keys under a prefix, one of them leased, are
// deleted; one is created again with other bytes, and keys outside the
// prefix change. A dry run writes nothing and says what it would do; the
// run brings back exactly the absent keys (not the leased one, not the
// one that exists again), leaves the rest, and records itself; a second
// run writes nothing (etcd's revision does not move); --replace then
// writes the point's bytes over the one that differs.
func TestUndeletePrefix(t *testing.T) {
	t.Parallel()
	w := newWorld(t, testenv.EtcdOptions{})
	const n = 60
	for i := range n {
		if _, err := w.cli.Put(w.ctx, fmt.Sprintf("/app/a/k%03d", i), fmt.Sprintf("value %d %s", i, strings.Repeat("x", i))); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := w.cli.Grant(w.ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.cli.Put(w.ctx, "/app/a/leased", "event", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	before := w.dump(t, "/app/a/")
	point := w.rev(t)
	// The mistake, and life going on.
	if _, err := w.cli.Delete(w.ctx, "/app/a/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.cli.Put(w.ctx, "/app/a/k001", "created again"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.cli.Put(w.ctx, "/app/a/new", "new since"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.cli.Put(w.ctx, "/other/since", "y"); err != nil {
		t.Fatal(err)
	}
	w.synced(t)
	other := w.dump(t, "/other/")

	t.Run("DryRun", func(t *testing.T) {
		rev := w.rev(t)
		o := w.opts(t, point, "/app/a/")
		o.DryRun = true
		res, err := undelete.Run(w.ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if got := w.rev(t); got != rev {
			t.Errorf("a dry run moved the revision from %d to %d", rev, got)
		}
		a := actions(res)
		if len(a) != n+1 || a["/app/a/k000"] != undelete.ActionWouldRestore || a["/app/a/k001"] != undelete.ActionDiffers ||
			a["/app/a/leased"] != undelete.ActionLeased || res.Counts[undelete.ActionWouldRestore] != n-1 {
			t.Errorf("dry run: %d keys, counts %v, k001 %s, leased %s", len(a), res.Counts, a["/app/a/k001"], a["/app/a/leased"])
		}
		if _, ok := a["/app/a/new"]; ok {
			t.Error("a key that did not exist at the point is in the report")
		}
		if res.Record != "" || res.Revision != point {
			t.Errorf("dry run: record %q (want none), revision %d (want %d)", res.Record, res.Revision, point)
		}
	})

	o := w.opts(t, point, "/app/a/")
	o.MaxTxnOps = 7
	res, err := undelete.Run(w.ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Counts[undelete.ActionRestored] != n-1 || res.Counts[undelete.ActionDiffers] != 1 || res.Counts[undelete.ActionLeased] != 1 {
		t.Fatalf("counts %v", res.Counts)
	}
	now := w.dump(t, "/app/a/")
	for k, v := range before {
		switch k {
		case "/app/a/k001":
			if now[k] != "created again" {
				t.Errorf("%s = %q: the key created since was overwritten", k, now[k])
			}
		case "/app/a/leased":
			if _, ok := now[k]; ok {
				t.Errorf("the leased key came back")
			}
		default:
			if now[k] != v {
				t.Errorf("%s = %q, want %q", k, now[k], v)
			}
		}
	}
	if now["/app/a/new"] != "new since" {
		t.Errorf("the key created since the point = %q", now["/app/a/new"])
	}
	if got := w.dump(t, "/other/"); fmt.Sprint(got) != fmt.Sprint(other) {
		t.Errorf("keys outside the prefix moved: %v, want %v", got, other)
	}
	// Each key restored at most MaxTxnOps to a transaction.
	perRev := map[int64]int{}
	for _, k := range res.Keys {
		if k.Written > 0 {
			perRev[k.Written]++
		}
	}
	for rev, c := range perRev {
		if c > 7 {
			t.Errorf("%d keys written at revision %d, in one transaction of at most 7", c, rev)
		}
	}

	recs, err := catalog.ListUndeleteRecords(w.ctx, w.rig.Store, w.rig.Layout, w.id)
	if err != nil || len(recs) != 1 {
		t.Fatalf("records: %d, %v", len(recs), err)
	}
	r := recs[0]
	if r.Outcome != catalog.UndeleteComplete || r.Operator != "test@"+t.Name() || r.Revision != point || len(r.Keys) != n+1 ||
		r.Counts[string(undelete.ActionRestored)] != n-1 || r.Key != res.Record || r.Prefixes[0] != "/app/a/" {
		t.Errorf("record %+v", r)
	}
	for _, k := range r.Keys {
		if strings.Contains(fmt.Sprint(k), "value ") {
			t.Errorf("the record holds a value: %+v", k)
		}
	}

	t.Run("Again", func(t *testing.T) {
		rev := w.rev(t)
		res, err := undelete.Run(w.ctx, w.opts(t, point, "/app/a/"))
		if err != nil {
			t.Fatal(err)
		}
		if res.Written() != 0 || res.Counts[undelete.ActionPresent] != n-1 {
			t.Errorf("second run: counts %v", res.Counts)
		}
		if got := w.rev(t); got != rev {
			t.Errorf("a second run moved the revision from %d to %d", rev, got)
		}
	})

	t.Run("Replace", func(t *testing.T) {
		o := w.opts(t, point, "/app/a/k001")
		o.Replace = true
		res, err := undelete.Run(w.ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if a := actions(res); a["/app/a/k001"] != undelete.ActionReplaced {
			t.Errorf("--replace: %v", a)
		}
		if got := w.dump(t, "/app/a/k001")["/app/a/k001"]; got != before["/app/a/k001"] {
			t.Errorf("--replace: k001 = %q, want %q", got, before["/app/a/k001"])
		}
	})
}

// TestUndeleteServerLimits: a member that accepts at most 4 operations a
// transaction and requests of 8 KiB: a run with the defaults (128 keys,
// 1 MiB) is refused, halves its transactions and still writes every key
// exactly once.
func TestUndeleteServerLimits(t *testing.T) {
	t.Parallel()
	w := newWorld(t, testenv.EtcdOptions{ExtraArgs: []string{"--max-txn-ops=4", "--max-request-bytes=8192"}})
	const n = 40
	val := strings.Repeat("v", 3000)
	for i := range n {
		if _, err := w.cli.Put(w.ctx, fmt.Sprintf("/big/k%02d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	point := w.rev(t)
	if _, err := w.cli.Delete(w.ctx, "/big/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	w.synced(t)
	res, err := undelete.Run(w.ctx, w.opts(t, point, "/big/"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Counts[undelete.ActionRestored] != n || len(w.dump(t, "/big/")) != n {
		t.Fatalf("counts %v, %d keys back", res.Counts, len(w.dump(t, "/big/")))
	}
	perRev := map[int64]int{}
	for _, k := range res.Keys {
		perRev[k.Written]++
	}
	for rev, c := range perRev {
		if c > 2 {
			t.Errorf("%d keys of 3,000 bytes written at revision %d: over the 8 KiB the member accepts", c, rev)
		}
	}
}

// TestUndeleteRefusals: a point past the journal, a point after the live
// revision, the live cluster not being the journal's, and a Kubernetes
// object that was already being deleted at the point are each refused
// before anything is written, naming what to do.
func TestUndeleteRefusals(t *testing.T) {
	t.Parallel()
	w := newWorld(t, testenv.EtcdOptions{})
	// The namespace as kube-apiserver writes it in JSON: active, then
	// marked for deletion (revision marked), then its status updated by
	// the namespace controller, still marked.
	for _, v := range []string{
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns1","uid":"u-ns1"},"spec":{"finalizers":["kubernetes"]},"status":{"phase":"Active"}}`,
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns1","uid":"u-ns1","deletionTimestamp":"2026-11-29T03:00:00Z"},"spec":{"finalizers":["kubernetes"]},"status":{"phase":"Terminating"}}`,
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns1","uid":"u-ns1","deletionTimestamp":"2026-11-29T03:00:00Z"},"spec":{"finalizers":["kubernetes"]},"status":{"phase":"Terminating","conditions":[{"type":"NamespaceDeletionContentFailure","status":"False"}]}}`,
	} {
		if _, err := w.cli.Put(w.ctx, "/registry/namespaces/ns1", v); err != nil {
			t.Fatal(err)
		}
	}
	marked := w.rev(t) - 1
	if _, err := w.cli.Put(w.ctx, "/registry/configmaps/ns1/cm", `{"metadata":{"name":"cm","namespace":"ns1","uid":"u-cm"}}`); err != nil {
		t.Fatal(err)
	}
	point := w.rev(t)
	if _, err := w.cli.Delete(w.ctx, "/registry/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	w.synced(t)
	rev := w.rev(t)

	o := w.opts(t, point)
	o.Namespaces = []string{"ns1"}
	_, err := undelete.Run(w.ctx, o)
	var ue *undelete.Error
	if !errors.As(err, &ue) || ue.Step != undelete.StepCheck || !strings.Contains(err.Error(), "/registry/namespaces/ns1") ||
		!strings.Contains(err.Error(), fmt.Sprintf("run again with --to-revision %d", marked-1)) || !strings.Contains(err.Error(), "--accept-terminating") {
		t.Errorf("terminating namespace at the point: %v", err)
	}
	// The revision it names is the right one: the namespace as it was
	// before it became Terminating (its configmap did not exist yet).
	o.ToRevision, o.DryRun = marked-1, true
	if res, err := undelete.Run(w.ctx, o); err != nil || len(res.Keys) != 1 || res.Keys[0].Action != undelete.ActionWouldRestore {
		t.Errorf("at the revision the refusal named: %+v, %v", res, err)
	}

	_, err = undelete.Run(w.ctx, w.opts(t, rev+1000, "/registry/"))
	if !errors.As(err, &ue) || ue.Step != undelete.StepPoint {
		t.Errorf("a point past the journal and the cluster: %v", err)
	}

	other := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	o = w.opts(t, point, "/registry/configmaps/")
	o.Etcd = testfix.EtcdConfig(other)
	_, err = undelete.Run(w.ctx, o)
	if !errors.As(err, &ue) || ue.Step != undelete.StepCluster || !strings.Contains(err.Error(), "--accept-other-cluster") {
		t.Errorf("another cluster's endpoints: %v", err)
	}
	if r, err := other.Client(t).Get(w.ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Errorf("the other cluster got %v keys (%v)", r, err)
	}
	if got := w.rev(t); got != rev {
		t.Errorf("refusals moved the revision from %d to %d", rev, got)
	}
	if recs, err := catalog.ListUndeleteRecords(w.ctx, w.rig.Store, w.rig.Layout, w.id); err != nil || len(recs) != 0 {
		t.Errorf("refused runs left records: %v %v", recs, err)
	}
}

// TestUndeleteTwoAtOnce: two runs of the same undelete at once (two SREs,
// or a rerun while the first still writes): every key comes back exactly
// once (one PUT each, on a watch from before both), each run reports each
// key restored by it or present (the other's), and together they restore
// each key once.
func TestUndeleteTwoAtOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, testenv.EtcdOptions{})
	const n = 200
	for i := range n {
		if _, err := w.cli.Put(w.ctx, fmt.Sprintf("/two/k%03d", i), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	point := w.rev(t)
	if _, err := w.cli.Delete(w.ctx, "/two/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	w.synced(t)
	from := w.rev(t) + 1
	wctx, stopWatch := context.WithCancel(w.ctx)
	defer stopWatch()
	wch := w.cli.Watch(wctx, "/two/", clientv3.WithPrefix(), clientv3.WithRev(from))
	type out struct {
		res *undelete.Result
		err error
	}
	outs := make(chan out, 2)
	for range 2 {
		go func() {
			o := w.opts(t, point, "/two/")
			o.MaxTxnOps = 3
			res, err := undelete.Run(w.ctx, o)
			outs <- out{res, err}
		}()
	}
	restored := map[string]int{}
	for range 2 {
		o := <-outs
		if o.err != nil {
			t.Fatal(o.err)
		}
		for _, k := range o.res.Keys {
			switch k.Action {
			case undelete.ActionRestored:
				restored[k.Key]++
			case undelete.ActionPresent:
			default:
				t.Errorf("%s: %s (%s)", k.Key, k.Action, k.Reason)
			}
		}
	}
	puts := map[string]int{}
	for total := 0; total < n; {
		select {
		case resp := <-wch:
			for _, ev := range resp.Events {
				puts[string(ev.Kv.Key)]++
				total++
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d PUT events of %d", total, n)
		}
	}
	time.Sleep(200 * time.Millisecond)
	select {
	case resp := <-wch:
		t.Errorf("more events than keys: %d more", len(resp.Events))
	default:
	}
	for i := range n {
		k := fmt.Sprintf("/two/k%03d", i)
		if puts[k] != 1 || restored[k] != 1 {
			t.Errorf("%s: %d PUTs, restored by %d runs; want 1 and 1", k, puts[k], restored[k])
		}
	}
}

// TestUndeleteVersions: the same undelete on etcd 3.4 and 3.6 (3.5 is
// every other test's): their databases at the point are read the same,
// and the guarded transactions behave the same, on a 3-member cluster.
func TestUndeleteVersions(t *testing.T) {
	t.Parallel()
	for _, v := range []testenv.Version{testenv.V34, testenv.V36} {
		t.Run(string(v), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, testenv.EtcdOptions{Version: v, Members: 3})
			for i := range 20 {
				if _, err := w.cli.Put(w.ctx, fmt.Sprintf("/v/k%02d", i), fmt.Sprintf("v%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			before := w.dump(t, "/v/")
			point := w.rev(t)
			if _, err := w.cli.Delete(w.ctx, "/v/", clientv3.WithPrefix()); err != nil {
				t.Fatal(err)
			}
			if _, err := w.cli.Put(w.ctx, "/v/k00", "again"); err != nil {
				t.Fatal(err)
			}
			w.synced(t)
			res, err := undelete.Run(w.ctx, w.opts(t, point, "/v/"))
			if err != nil {
				t.Fatal(err)
			}
			before["/v/k00"] = "again"
			if got := w.dump(t, "/v/"); fmt.Sprint(got) != fmt.Sprint(before) || res.Counts[undelete.ActionRestored] != 19 ||
				res.Counts[undelete.ActionDiffers] != 1 {
				t.Errorf("etcd %s: counts %v, keys %v", v, res.Counts, got)
			}
		})
	}
}

// nsJSON is a namespace object as kube-apiserver stores it in JSON,
// marked for deletion when deleting is set.
func nsJSON(name, uid, deleting string) string {
	del := ""
	if deleting != "" {
		del = `,"deletionTimestamp":"` + deleting + `"`
	}
	return `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + name + `","uid":"` + uid + `"` + del + `},"spec":{"finalizers":["kubernetes"]}}`
}

func cmJSON(ns, name, uid, deleting string, owners ...string) string {
	extra := ""
	if deleting != "" {
		extra += `,"deletionTimestamp":"` + deleting + `"`
	}
	if len(owners) > 0 {
		var refs []string
		for _, o := range owners {
			refs = append(refs, `{"apiVersion":"v1","kind":"ConfigMap","name":"o","uid":"`+o+`"}`)
		}
		extra += `,"ownerReferences":[` + strings.Join(refs, ",") + `]`
	}
	return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"` + ns + `","uid":"` + uid + `"` + extra + `},"data":{"k":"` + name + `"}}`
}

// TestUndeleteChecks: what undelete refuses or leaves alone before it
// writes, and what it finds after, each on keys laid out as kube-apiserver
// lays them out (the real API server's: kube_test.go):
//   - a namespace being deleted NOW (stuck Terminating): refused, nothing
//     written;
//   - an object (not a namespace) already being deleted at the point: skipped
//     as terminating, the rest written;
//   - objects written and deleted again at once (as a namespace controller
//     would): the run fails, each key deleted-again, the record failed;
//   - objects whose owner the run does not write: a warning naming them;
//   - a break in the cluster's history after the point (the journal's
//     lineage gap record): refused;
//   - --to-time after the journal's newest revision: refused;
//   - a point at which nothing matches: refused.
func TestUndeleteChecks(t *testing.T) {
	t.Parallel()
	w := newWorld(t, testenv.EtcdOptions{})
	put := func(k, v string) {
		t.Helper()
		if _, err := w.cli.Put(w.ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	put("/registry/namespaces/stuck", nsJSON("stuck", "u-stuck", ""))
	put("/registry/namespaces/ok", nsJSON("ok", "u-ok", ""))
	for i := range 5 {
		put(fmt.Sprintf("/registry/configmaps/stuck/c%d", i), cmJSON("stuck", fmt.Sprintf("c%d", i), fmt.Sprintf("u-s%d", i), ""))
		put(fmt.Sprintf("/registry/configmaps/ok/c%d", i), cmJSON("ok", fmt.Sprintf("c%d", i), fmt.Sprintf("u-o%d", i), "", "u-gone"))
	}
	put("/registry/configmaps/ok/going", cmJSON("ok", "going", "u-going", "2026-11-29T03:00:00Z"))
	point := w.rev(t)
	// The namespace "stuck" is marked and its configmaps deleted (a
	// finalizer holds the namespace); "ok"'s configmaps are deleted.
	put("/registry/namespaces/stuck", nsJSON("stuck", "u-stuck", "2026-11-29T03:05:00Z"))
	if _, err := w.cli.Delete(w.ctx, "/registry/configmaps/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	w.synced(t)
	var ue *undelete.Error

	t.Run("NamespaceTerminatingNow", func(t *testing.T) {
		rev := w.rev(t)
		o := w.opts(t, point)
		o.Namespaces = []string{"stuck"}
		_, err := undelete.Run(w.ctx, o)
		if !errors.As(err, &ue) || ue.Step != undelete.StepCheck || !strings.Contains(err.Error(), "being deleted now: /registry/namespaces/stuck") ||
			!strings.Contains(err.Error(), "--accept-terminating") {
			t.Errorf("a namespace Terminating now: %v", err)
		}
		if got := w.rev(t); got != rev {
			t.Errorf("the refusal moved the revision from %d to %d", rev, got)
		}
	})

	t.Run("TerminatingAtThePointAndOwners", func(t *testing.T) {
		o := w.opts(t, point)
		o.Namespaces = []string{"ok"}
		o.DryRun = true
		res, err := undelete.Run(w.ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		a := actions(res)
		if a["/registry/configmaps/ok/going"] != undelete.ActionTerminating || res.Counts[undelete.ActionWouldRestore] != 5 {
			t.Errorf("counts %v, going %s", res.Counts, a["/registry/configmaps/ok/going"])
		}
		if !strings.Contains(strings.Join(res.Warnings, "\n"), "5 object(s) to write name owners this run does not write") {
			t.Errorf("warnings %q", res.Warnings)
		}
	})

	t.Run("DeletedAgain", func(t *testing.T) {
		// A controller that deletes every configmap of "ok" as it comes.
		wctx, stop := context.WithCancel(w.ctx)
		defer stop()
		wch := w.cli.Watch(wctx, "/registry/configmaps/ok/", clientv3.WithPrefix(), clientv3.WithRev(w.rev(t)+1))
		go func() {
			for resp := range wch {
				for _, ev := range resp.Events {
					if ev.Type == clientv3.EventTypePut {
						w.cli.Delete(wctx, string(ev.Kv.Key))
					}
				}
			}
		}()
		o := w.opts(t, point)
		o.Namespaces = []string{"ok"}
		o.Settle = 500 * time.Millisecond
		res, err := undelete.Run(w.ctx, o)
		if !errors.As(err, &ue) || ue.Step != undelete.StepVerify || res.Counts[undelete.ActionDeletedAgain] != 5 {
			t.Fatalf("deleted again: %v, counts %v", err, res.Counts)
		}
		recs, err := catalog.ListUndeleteRecords(w.ctx, w.rig.Store, w.rig.Layout, w.id)
		if err != nil || len(recs) == 0 || recs[len(recs)-1].Outcome != catalog.UndeleteFailed ||
			recs[len(recs)-1].Counts[string(undelete.ActionDeletedAgain)] != 5 || len(recs[len(recs)-1].Warnings) == 0 {
			t.Errorf("records %+v, %v", recs, err)
		}
	})

	t.Run("ToTimeAfterTheJournal", func(t *testing.T) {
		o := w.opts(t, 0)
		o.Prefixes = []string{"/registry/"}
		o.ToTime = time.Now().Add(time.Hour)
		_, err := undelete.Run(w.ctx, o)
		if !errors.As(err, &ue) || ue.Step != undelete.StepPoint || !strings.Contains(err.Error(), "is after the journal's newest revision") {
			t.Errorf("--to-time an hour ahead: %v", err)
		}
	})

	t.Run("NothingMatches", func(t *testing.T) {
		_, err := undelete.Run(w.ctx, w.opts(t, point, "/nothing/"))
		if !errors.As(err, &ue) || ue.Step != undelete.StepKeys || !strings.Contains(err.Error(), "no key matches") {
			t.Errorf("nothing at the point: %v", err)
		}
	})

	t.Run("LineageBreakAfterThePoint", func(t *testing.T) {
		g := catalog.JournalGap{ClusterID: w.id, From: point + 1, Reason: "lineage", Lineage: true, Time: time.Now()}
		g.Key = w.rig.Layout.JournalGapKey(w.id, g.From)
		if err := catalog.WriteJournalGap(w.ctx, w.rig.Store, g); err != nil {
			t.Fatal(err)
		}
		o := w.opts(t, point)
		o.Namespaces = []string{"ok"}
		_, err := undelete.Run(w.ctx, o)
		if !errors.As(err, &ue) || ue.Step != undelete.StepCluster || !strings.Contains(err.Error(), "history was replaced after the point") {
			t.Errorf("a lineage break after the point: %v", err)
		}
	})
}

// TestUndeleteUnprovenJournal: a point in a window whose journal proof
// failed (the journal replayed into one backup did not hash as the next)
// is refused, as a point-in-time restore refuses it, naming the proof and
// --accept-unproven-journal; with it, the keys come back and the record
// says the flag was given.
func TestUndeleteUnprovenJournal(t *testing.T) {
	t.Parallel()
	w := newWorld(t, testenv.EtcdOptions{})
	for i := range 10 {
		if _, err := w.cli.Put(w.ctx, fmt.Sprintf("/p/k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	point := w.rev(t)
	if _, err := w.cli.Put(w.ctx, "/p/after", "v"); err != nil {
		t.Fatal(err)
	}
	next := w.rig.TakeBackup(t, w.c, w.id, catalog.KindScheduled)
	if _, err := w.cli.Delete(w.ctx, "/p/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	w.synced(t)
	proof := &catalog.JournalProof{ClusterID: w.id, Base: w.base.Name, BaseRevision: w.base.Revision(), Target: next.Name,
		TargetRevision: next.Revision(), Verdict: catalog.ProofFailed, Detail: "the hashes differ", Time: time.Now()}
	if err := catalog.PutJournalProof(w.ctx, w.rig.Store, w.rig.Layout, proof); err != nil {
		t.Fatal(err)
	}
	var pe *restore.JournalProofError
	_, err := undelete.Run(w.ctx, w.opts(t, point, "/p/"))
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "--accept-unproven-journal") {
		t.Fatalf("a point in a window whose proof failed: %v", err)
	}
	if n := len(w.dump(t, "/p/")); n != 0 {
		t.Fatalf("the refused run wrote %d keys", n)
	}
	o := w.opts(t, point, "/p/")
	o.AcceptUnprovenJournal = true
	res, err := undelete.Run(w.ctx, o)
	if err != nil || res.Counts[undelete.ActionRestored] != 10 || !slices.Contains(res.Accepted, "--accept-unproven-journal") {
		t.Fatalf("with --accept-unproven-journal: %+v, %v", res, err)
	}
}
