package fleet_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// waitReach waits until the cluster's journal holds rev, in a chain
// without a problem from the base a restarting journal would choose.
func waitReach(tb testing.TB, ctx context.Context, st store.Store, layout catalog.Layout, id string, rev int64, logs *testfix.SyncBuffer) {
	tb.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, ch, err := fleet.JournalBase(ctx, st, layout, id, nil)
		if err == nil && ch.Reach >= rev {
			return
		}
		if time.Now().After(deadline) {
			reach := int64(-1)
			if ch != nil {
				reach = ch.Reach
			}
			tb.Fatalf("the journal of %s reaches %d (%v), want %d; log:\n%s", id, reach, err, rev, testfix.LastLines(logs.String(), 30))
		}
	}
}

// JournalAll --all against a real kube-apiserver (the deployment's RBAC,
// a service account's token) with three EtcdClusters backed by real etcd
// 3.5 members, on MinIO:
//   - j0 has a backup and was compacted past it: a gap (compaction), its
//     record, an Event JournalGap, a scheduled backup, then its journal;
//   - j1 has a backup: journaled from it; its EtcdCluster deleted, its
//     journal stops at the next rediscovery, and its later writes are in
//     no segment;
//   - j2 has no backup: a gap (no base), a backup, then its journal; its
//     etcd killed, j0's journal goes on.
func TestJournalAll(t *testing.T) {
	t.Parallel()
	const jns = "kubx-etcd-07"
	ctx := testfix.Context(t, 3*time.Minute)
	w := kubetest.StartRBACWorld(t, jns)
	k, admin, dyn, a := w.K, w.Admin, w.Dyn, w.A
	var cl []kubetest.Cluster
	for i := range 3 {
		name := fmt.Sprintf("j%d", i)
		c := kubetest.AddEtcdCluster(t, admin, dyn, jns, name, testenv.EtcdOptions{IP: fmt.Sprintf("127.0.7.%d", 10+i), Members: 1})
		kubetest.PerClusterAccess(t, a, jns, name)
		testenv.PutKeys(t, c.Etcd.Client(t), "/registry/k", 20, 64)
		cl = append(cl, c)
	}
	rig := testfix.NewStoreRig(t)
	st, layout := rig.Store, rig.Layout
	token := kubetest.SAToken(t, admin, jns, "etcd-recovery")
	sa, err := kube.New(kube.Config{Rest: k.RestConfig(token), Namespace: jns})
	if err != nil {
		t.Fatal(err)
	}
	// Backups of j0 and j1 (not j2), as the CronJob takes them.
	if _, err := fleet.BackupAll(ctx, fleet.BackupAllOptions{Kube: sa, Names: []string{"j0", "j1"}, NoEvents: true,
		Template: backup.Options{Kind: catalog.KindScheduled, V2: backup.V2Off, Store: st, Layout: layout}}); err != nil {
		t.Fatal(err)
	}
	// j0 is written and compacted past its backup.
	c0 := cl[0].Etcd.Client(t)
	testenv.PutKeys(t, c0, "/registry/more", 10, 64)
	cr, err := c0.Put(ctx, "/registry/compacted", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c0.Compact(ctx, cr.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	base0, _, err := fleet.JournalBase(ctx, st, layout, "j0", nil)
	if err != nil {
		t.Fatal(err)
	}

	logs := &testfix.SyncBuffer{}
	var gapsMu sync.Mutex
	gaps := map[string]fleet.JournalGap{}
	jctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		err := fleet.JournalAll(jctx, fleet.JournalAllOptions{
			Kube: sa, Store: st, Layout: layout, Rediscover: time.Second, DialTimeout: 2 * time.Second,
			Capture: journal.CaptureOptions{SegmentInterval: 300 * time.Millisecond},
			Backup:  backup.Options{V2: backup.V2Off, ProbeTimeout: 2 * time.Second},
			Log:     slog.New(slog.NewTextHandler(logs, nil)),
			OnGap: func(g fleet.JournalGap) {
				gapsMu.Lock()
				defer gapsMu.Unlock()
				gaps[g.ClusterID] = g
			},
		})
		fmt.Fprintf(logs, "JournalAll returned: %v\n", err)
		done <- err
	}()
	stopped := false
	stopAll := func() error {
		if stopped {
			return nil
		}
		stopped = true
		stop()
		return <-done
	}
	defer stopAll()

	// All three journaled.
	revs := map[string]int64{}
	for i, c := range cl {
		r, err := c.Etcd.Client(t).Put(ctx, "/registry/now", fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		revs[c.Name] = r.Header.Revision
	}
	for _, c := range cl {
		waitReach(t, ctx, st, layout, c.Name, revs[c.Name], logs)
	}

	// How long a gap took to heal (its record, the backup, the journal
	// again), from the job's own lines.
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "cluster=j0") && (strings.Contains(line, "journal: gap") || strings.Contains(line, "journal: capturing") ||
			strings.Contains(line, "full backup after the gap committed")) {
			t.Log(line[:min(len(line), 160)])
		}
	}

	// The gaps: j0's compaction, j2's missing base; none for j1.
	stored := map[string][]catalog.JournalGap{}
	for _, id := range []string{"j0", "j1", "j2"} {
		g, err := catalog.ReadJournalGaps(ctx, st, layout, id)
		if err != nil {
			t.Fatal(err)
		}
		stored[id] = g
	}
	g0 := stored["j0"]
	if len(g0) != 1 || g0[0].From != base0.Rev+1 || g0[0].To != cr.Header.Revision-1 || !strings.Contains(g0[0].Reason, "compacted") ||
		g0[0].OldBase == nil || g0[0].OldBase.Name != base0.Name {
		t.Fatalf("j0's gap records: %+v; want from %d to %d after %s", g0, base0.Rev+1, cr.Header.Revision-1, base0.Name)
	}
	if g2 := stored["j2"]; len(g2) != 1 || g2[0].OldBase != nil || g2[0].Reason != fleet.ErrNoJournalBase.Error() || g2[0].From != 1 {
		t.Fatalf("j2's gap records: %+v", g2)
	}
	if len(stored["j1"]) != 0 {
		t.Fatalf("j1 has gap records: %+v", stored["j1"])
	}
	gapsMu.Lock()
	if len(gaps) != 2 || !gaps["j0"].Recorded || !gaps["j2"].Recorded {
		t.Errorf("OnGap: %+v", gaps)
	}
	gapsMu.Unlock()
	for _, id := range []string{"j0", "j2"} {
		bs, err := catalog.ListBackups(ctx, st, layout, id)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, b := range bs {
			if b.Manifest != nil && b.Manifest.Kind == catalog.KindScheduled {
				n++
			}
		}
		if want := map[string]int{"j0": 2, "j2": 1}[id]; n != want {
			t.Fatalf("%s: %d scheduled backups, want %d (the gap's)", id, n, want)
		}
	}
	// The Events: JournalGap (Warning) and the backup's on j0 and j2.
	kadmin, err := kube.New(kube.Config{Rest: k.RestConfig(""), Namespace: jns})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"j0", "j1", "j2"} {
		evs, err := kadmin.Events(ctx, kube.Cluster{Namespace: jns, Name: id})
		if err != nil {
			t.Fatal(err)
		}
		var gapEv, backupEv int
		for _, ev := range evs {
			switch ev.Reason {
			case fleet.ReasonJournalGap:
				gapEv++
				if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, layout.JournalGapKey(id, stored[id][0].From)) {
					t.Errorf("%s: event %s %s: %s", id, ev.Type, ev.Reason, ev.Message)
				}
			case kube.ReasonBackupSucceeded:
				backupEv++
			}
		}
		want := 1
		if id == "j1" {
			want = 0
		}
		if gapEv != want || backupEv != want {
			t.Errorf("%s: %d JournalGap and %d BackupSucceeded events, want %d each: %+v", id, gapEv, backupEv, want, evs)
		}
	}

	// j2's etcd dies: j0 goes on.
	cl[2].Etcd.Members[0].Kill()
	r0, err := c0.Put(ctx, "/registry/after-kill", "x")
	if err != nil {
		t.Fatal(err)
	}
	waitReach(t, ctx, st, layout, "j0", r0.Header.Revision, logs)

	// j1's EtcdCluster deleted: its journal stops at the next rediscovery.
	if err := dyn.Resource(kube.EtcdClusterGVR).Namespace(jns).Delete(ctx, "j1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logs.String(), `msg="journal: stopped" cluster=j1`); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("j1's journal did not stop; log:\n%s", testfix.LastLines(logs.String(), 30))
		}
	}
	if !strings.Contains(logs.String(), `msg="journal: etcdcluster gone: stopping its journal" cluster=j1`) {
		t.Fatalf("no log of j1 gone:\n%s", testfix.LastLines(logs.String(), 30))
	}
	r1, err := cl[1].Etcd.Client(t).Put(ctx, "/registry/after-delete", "x")
	if err != nil {
		t.Fatal(err)
	}
	// j0 journals a write made after j1's; by then j1's would be stored
	// too had its journal still run (same interval, same store).
	r0, err = c0.Put(ctx, "/registry/after-delete", "x")
	if err != nil {
		t.Fatal(err)
	}
	waitReach(t, ctx, st, layout, "j0", r0.Header.Revision, logs)
	time.Sleep(time.Second) // two more intervals
	if _, ch, err := fleet.JournalBase(ctx, st, layout, "j1", nil); err != nil || ch.Reach >= r1.Header.Revision {
		t.Fatalf("j1's journal after its EtcdCluster was deleted: %+v %v (write at %d)", ch, err, r1.Header.Revision)
	}

	if err := stopAll(); err != nil {
		t.Fatalf("JournalAll: %v", err)
	}
	if !strings.Contains(logs.String(), `msg="journal: stopped" cluster=j0`) {
		t.Fatalf("j0's journal did not stop; log:\n%s", testfix.LastLines(logs.String(), 30))
	}
}
