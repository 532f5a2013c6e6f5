package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/restore"
)

// etcdDump is every key of the cluster cli reaches: its value, create and
// mod revision and version.
func etcdDump(tb testing.TB, ctx context.Context, cli *clientv3.Client) map[string]string {
	tb.Helper()
	r, err := cli.Get(ctx, "", clientv3.WithFromKey())
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range r.Kvs {
		out[string(kv.Key)] = fmt.Sprintf("%q c%d m%d v%d", kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version)
	}
	return out
}

// pitrWrites changes cluster i of the test through cli: "good" writes
// before T (puts, an update, a delete of one of the world's keys), "bad"
// ones after it (puts, the good keys overwritten and deleted, another of
// the world's keys deleted), a different number in each cluster so that
// each is at its own revision. It returns the cluster's revision after.
func pitrWrites(tb testing.TB, ctx context.Context, cli *clientv3.Client, i int, phase string) int64 {
	tb.Helper()
	must := func(r *clientv3.OpResponse, err error) {
		tb.Helper()
		if err != nil {
			tb.Fatalf("cluster %d, %s writes: %v", i, phase, err)
		}
	}
	worldKey := func() string {
		tb.Helper()
		r, err := cli.Get(ctx, "/registry/k", clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())
		if err != nil || len(r.Kvs) == 0 {
			tb.Fatalf("cluster %d: no key of the world left: %v", i, err)
		}
		return string(r.Kvs[0].Key)
	}
	do := func(op clientv3.Op) {
		tb.Helper()
		r, err := cli.Do(ctx, op)
		must(&r, err)
	}
	switch phase {
	case "good":
		for j := range 3 + i {
			do(clientv3.OpPut(fmt.Sprintf("/registry/good/%d", j), fmt.Sprintf("good-%d-%d", i, j)))
		}
		do(clientv3.OpPut("/registry/good/0", fmt.Sprintf("good-%d-0-updated", i)))
		do(clientv3.OpDelete(worldKey()))
	case "late":
		// Before T, but after the journal stopped.
		for j := range 2 {
			do(clientv3.OpPut(fmt.Sprintf("/registry/late/%d", j), "late"))
		}
	case "bad":
		for j := range 2 + 2*i {
			do(clientv3.OpPut(fmt.Sprintf("/registry/bad/%d", j), "bad"))
		}
		do(clientv3.OpPut("/registry/good/0", "bad"))
		do(clientv3.OpDelete("/registry/good/1"))
		do(clientv3.OpDelete(worldKey()))
	}
	r, err := cli.Get(ctx, "/registry/good/0")
	if err != nil {
		tb.Fatal(err)
	}
	return r.Header.Revision
}

// runJournal runs the real journal job for one cluster of w
// (fleet.JournalAll with its endpoints, 300 ms segments) until the
// returned stop is called or the test ends.
func runJournal(tb testing.TB, ctx context.Context, w *kubetest.FleetWorld, n *kubetest.FleetNamespace, c *kubetest.FleetCluster, logs *testfix.SyncBuffer) (stop func()) {
	tb.Helper()
	jctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		err := fleet.JournalAll(jctx, fleet.JournalAllOptions{ClusterID: c.Name, Etcd: testfix.EtcdConfig(c.Etcd), Store: w.Store, Layout: n.Layout,
			MaxBackoff: 2 * time.Second, Capture: journal.CaptureOptions{SegmentInterval: 300 * time.Millisecond},
			Backup: backup.Options{V2: backup.V2Off, ProbeTimeout: time.Second, Recipients: testfix.RecipientsOf(tb, w.Key)},
			Log:    slog.New(slog.NewTextHandler(logs, nil)).With("cluster", c.Name)})
		fmt.Fprintf(logs, "JournalAll of %s returned: %v\n", c.Name, err)
		done <- err
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("the journal of %s: %v", c.Name, err)
		}
	}
	tb.Cleanup(stop)
	return stop
}

// Point in time, fleet-wide: a bad automation changed every cluster of a
// namespace at T. On a world of its own (kubetest.StartFleetWorld: one
// namespace, five EtcdClusters on real etcd with TLS, etcd-f00 of three
// members, each with an encrypted backup), the real journal job runs for
// etcd-f00, f01, f02 and f04 from those backups; every cluster gets
// writes, f04's journal is stopped and f04 written again, then T is
// recorded and every cluster gets "bad" writes and deletes, each cluster
// at its own revisions; f02 then loses its only member (its journal
// holds it all). f01's journal stops before T and f01 stays idle.
// restore-all --to-time T (a dry run, then the run):
//
//   - f00, f01 (healthy) and f02 (quorum lost) are restored, each to its
//     own revision at T (f01's, its journal's end: its revision, read
//     after T, says it did not change since): the plan and the report name it (the report
//     with the restore's bump), and every key of the restored cluster
//     (value, create and mod revision, version) is what the cluster held
//     at T: the good writes, none of the bad ones;
//   - f03 (no journal) and f04 (its journal stopped before T, and the
//     cluster written after) fail at StepJournalReach, each cause naming
//     the journal's window, with a next step, untouched; without that
//     check f04 would be restored to its journal's end, which is not its
//     state at T.
func TestRestoreAllToTime(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 5*time.Minute)
	w := kubetest.StartFleetWorld(t, kubetest.FleetWorldOptions{Namespaces: []string{"kubx-etcd-17"}, Subnet: 47, Customers: -1,
		Keys: 20, ValueSize: 128})
	n := w.Namespaces[0]
	cs := n.Clusters
	f00, f01, f02, f03, f04 := cs[0], cs[1], cs[2], cs[3], cs[4]
	journaled := []*kubetest.FleetCluster{f00, f01, f02}
	logs := &testfix.SyncBuffer{}
	var stops []func()
	for _, c := range []*kubetest.FleetCluster{f00, f01, f02, f04} {
		stops = append(stops, runJournal(t, ctx, w, n, c, logs))
	}
	clis := map[string]*clientv3.Client{}
	for _, c := range cs {
		clis[c.Name] = c.Etcd.Client(t)
	}

	// Before T: every cluster changed; f04's journal holds its changes,
	// then stops, and f04 changes again.
	revs := map[string]int64{}
	for i, c := range cs {
		revs[c.Name] = pitrWrites(t, ctx, clis[c.Name], i, "good")
	}
	waitReach(t, ctx, w.Store, n.Layout, f04.Name, revs[f04.Name], logs)
	stops[3]()
	stopRev := revs[f04.Name]
	revs[f04.Name] = pitrWrites(t, ctx, clis[f04.Name], 4, "late")
	for _, c := range journaled {
		waitReach(t, ctx, w.Store, n.Layout, c.Name, revs[c.Name], logs)
	}
	// f01's journal stops too, and f01 stays idle: T is after its
	// journal's end, and its revision says nothing changed since.
	stops[1]()
	want := map[string]map[string]string{}
	for _, c := range cs {
		want[c.Name] = etcdDump(t, ctx, clis[c.Name])
	}
	time.Sleep(300 * time.Millisecond)
	at := time.Now()
	time.Sleep(300 * time.Millisecond)

	// After T: the bad automation, in every cluster.
	after := map[string]int64{}
	for i, c := range cs {
		if c == f01 {
			after[c.Name] = revs[c.Name]
			continue
		}
		after[c.Name] = pitrWrites(t, ctx, clis[c.Name], i, "bad")
	}
	for _, c := range journaled {
		waitReach(t, ctx, w.Store, n.Layout, c.Name, after[c.Name], logs)
	}
	for _, s := range stops {
		s()
	}
	f02.LoseQuorum(t)
	if len(slices.Compact(slices.Sorted(maps.Values(revs)))) != len(cs) {
		t.Fatalf("the clusters' revisions at T are not all different: %v", revs)
	}
	t.Logf("revisions at T: %v; after the bad writes: %v; f04's journal stopped at %d", revs, after, stopRev)

	o := restoreAllOptions(t, w, nil, n)
	o.ToTime = at
	checkFailed := func(t *testing.T, rows map[string]fleet.RestoreAllRow) {
		t.Helper()
		for c, cause := range map[*kubetest.FleetCluster]string{
			f03: "cluster " + f03.Name + " has no journal under " + n.Layout.JournalPrefix(f03.Name),
			f04: fmt.Sprintf("the journal of cluster %s ends at revision %d, received ", f04.Name, stopRev),
		} {
			r := rows[c.Name]
			if r.Outcome != fleet.OutcomeFailed || r.FailedStep != fleet.StepJournalReach || !strings.Contains(r.Cause, cause) || r.NextStep == "" {
				t.Errorf("%s: %+v, want failed at %q: %q", c.Name, r, fleet.StepJournalReach, cause)
			}
		}
		if r := rows[f04.Name]; !strings.Contains(r.Cause, fmt.Sprintf("the cluster is at revision %d: revisions %d to %d are in no segment", after[f04.Name], stopRev+1, after[f04.Name])) {
			t.Errorf("%s: cause %q does not name the revisions its journal missed", f04.Name, r.Cause)
		}
	}

	t.Run("DryRun", func(t *testing.T) {
		d := o
		d.DryRun = true
		rep, err := fleet.RestoreAll(ctx, d)
		var rae *fleet.RestoreAllError
		if !errors.As(err, &rae) {
			t.Fatalf("dry run --to-time: %v, want f03 and f04 failed", err)
		}
		got := rows(t, rep.Clusters)
		for _, c := range journaled {
			if r := got[c.Name]; r.Outcome != fleet.OutcomePlanned || r.Action != fleet.ActionRestore || r.Revision != revs[c.Name] {
				t.Errorf("dry run: %s: %+v, want planned at revision %d (its own at T)", c.Name, r, revs[c.Name])
			}
		}
		checkFailed(t, got)
		if l, err := w.Dyn.Resource(kube.EtcdRestoreGVR).Namespace(n.Name).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
			t.Errorf("the dry run created EtcdRestores: %v", err)
		}
	})

	start := time.Now()
	rep, err := fleet.RestoreAll(ctx, o)
	var rae *fleet.RestoreAllError
	if !errors.As(err, &rae) || rep == nil {
		t.Fatalf("restore-all --to-time: %v, want f03 and f04 failed", err)
	}
	t.Logf("restore-all --to-time of %s: %v: %v", n.Name, time.Since(start).Round(time.Millisecond), err)
	if want := []string{n.Name + "/" + f03.Name, n.Name + "/" + f04.Name}; !slices.Equal(slices.Sorted(slices.Values(rep.Failed)), want) {
		t.Errorf("failed %v, want %v", rep.Failed, want)
	}
	got := rows(t, rep.Clusters)
	checkFailed(t, got)
	for _, c := range []*kubetest.FleetCluster{f03, f04} {
		if uid := w.EtcdClusterUID(t, ctx, n.Name, c.Name); uid != c.UID || n.Restores(c.Name) != 0 {
			t.Errorf("%s: touched: uid %s (was %s), %d EtcdRestores", c.Name, uid, c.UID, n.Restores(c.Name))
		}
	}
	for _, c := range journaled {
		r := got[c.Name]
		if r.Outcome != fleet.OutcomeRestored || r.Revision != revs[c.Name]+int64(restore.DefaultBumpRevision) {
			t.Errorf("%s: %+v, want restored at its revision at T %d (+ the bump)", c.Name, r, revs[c.Name])
		}
		rec, ok := n.Restored(c.Name)
		if !ok {
			t.Errorf("%s: not restored by the operator", c.Name)
			continue
		}
		gotKeys := etcdDump(t, ctx, rec.Members[0].Client(t))
		if !maps.Equal(gotKeys, want[c.Name]) {
			var diffs []string
			for k, v := range want[c.Name] {
				if gotKeys[k] != v {
					diffs = append(diffs, fmt.Sprintf("%s: %s, at T %s", k, gotKeys[k], v))
				}
			}
			for k, v := range gotKeys {
				if _, ok := want[c.Name][k]; !ok {
					diffs = append(diffs, fmt.Sprintf("%s: %s, not there at T", k, v))
				}
			}
			slices.Sort(diffs)
			t.Errorf("%s: the restored keys differ from those at T in %d:\n%s", c.Name, len(diffs), strings.Join(diffs[:min(8, len(diffs))], "\n"))
		}
		if _, bad := gotKeys["/registry/bad/0"]; bad {
			t.Errorf("%s: the bad writes are restored", c.Name)
		}
	}
	n.Adopt(t)
}
