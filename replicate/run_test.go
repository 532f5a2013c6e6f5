package replicate_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/replicate"
)

// segmentKeys is the keys of cluster id's journal segments.
func segmentKeys(tb testing.TB, ctx context.Context, st store.Store, l catalog.Layout, id string) []string {
	tb.Helper()
	objs, err := st.List(ctx, l.JournalPrefix(id))
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		if l.Classify(o.Key).Kind == catalog.KeyJournal {
			out = append(out, o.Key)
		}
	}
	return out
}

// TestRunFollowsTheJournalThroughAnOutage: a real journal capture (1 s
// segments) of a workload on etcd 3.5 into the primary, and the copier's
// loop (journal polls every 300 ms). Each new segment reaches the second
// site within a few seconds of landing on the primary. Then the second
// site's MinIO is stopped for 25 s: the capture's segments and a full
// backup keep landing on the primary, unaffected; once it is started
// again the second site catches up exactly: the same segments and backups,
// each with the primary's sha256, a chain without a gap or a duplicate,
// and a status record with nothing pending.
func TestRunFollowsTheJournalThroughAnOutage(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 2*time.Minute)
	r := newRig(t)
	const id = "c1"
	c, rig, base := r.backedUpEtcd(t, id)
	cli := c.Client(t)

	cctx, stopCapture := context.WithCancel(ctx)
	capDone := make(chan error, 1)
	go func() {
		capDone <- journal.Capture(cctx, journal.CaptureOptions{Client: cli, ClusterID: id, BaseBackup: base.Name, BaseRev: base.Revision(),
			Store: r.primary, Layout: r.pl, Encoding: objectio.Encoding{Compression: objectio.CompressZstd},
			SegmentInterval: time.Second, Log: testfix.Logger(t)})
	}()
	wctx, stopWrites := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; wctx.Err() == nil; i++ {
			cli.Put(wctx, fmt.Sprintf("/w/%d", i%40), fmt.Sprint(i))
			time.Sleep(20 * time.Millisecond)
		}
	}()

	o := r.opts(t)
	o.JournalInterval, o.ScanInterval, o.StatusEvery = 300*time.Millisecond, 2*time.Second, time.Second
	cp := runInBackground(t, ctx, o)

	// RPO: a new segment on the primary reaches the second site within a
	// bound well above the poll interval (a loaded machine).
	const bound = 5 * time.Second
	var lags []time.Duration
	seen := len(segmentKeys(t, ctx, r.primary, r.pl, id))
	for len(lags) < 3 {
		keys := segmentKeys(t, ctx, r.primary, r.pl, id)
		if len(keys) == seen {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		seen = len(keys)
		newest, landed := keys[len(keys)-1], time.Now()
		for {
			if _, err := r.second.Get(ctx, r.dst(newest)); err == nil {
				break
			}
			if time.Since(landed) > bound {
				t.Fatalf("segment %s is not on the second site %s after it landed on the primary", newest, bound)
			}
			time.Sleep(50 * time.Millisecond)
		}
		lags = append(lags, time.Since(landed))
		seen = len(segmentKeys(t, ctx, r.primary, r.pl, id))
	}
	t.Logf("segment on the primary → on the second site: %v (journal interval %s)", lags, o.JournalInterval)

	// The second site goes away; the primary's journal and backups do not
	// notice.
	r.sm.Stop()
	down := time.Now()
	before := len(segmentKeys(t, ctx, r.primary, r.pl, id))
	outage := rig.TakeBackup(t, c, id, catalog.KindScheduled)
	time.Sleep(25*time.Second - time.Since(down))
	during := len(segmentKeys(t, ctx, r.primary, r.pl, id)) - before
	if during < 15 {
		t.Errorf("%d segments landed on the primary in the 25 s the second site was down, want about 25", during)
	}
	select {
	case err := <-capDone:
		t.Fatalf("the capture ended while the second site was down: %v", err)
	default:
	}
	r.sm.Start(t)
	back := time.Now()

	// Catch up: the copier copies what it missed while the workload goes
	// on; then the workload and the capture stop, and everything is there.
	for {
		st, err := replicate.ReadStatus(ctx, r.second, r.sl, time.Now())
		if err == nil && st.Clusters[id].JournalSyncedAt.After(back) && st.Clusters[id].NewestBackup == outage.Name {
			break
		}
		if time.Since(back) > 45*time.Second {
			t.Fatalf("the second site has not caught up 45 s after it came back: %+v, %v", st, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("caught up %s after the second site came back", time.Since(back).Round(time.Millisecond))
	stopWrites()
	wg.Wait()
	stopCapture()
	if err := <-capDone; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("capture: %v", err)
	}
	want := r.copyable(t)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		got := testfix.Sums(t, r.second, r.sl)
		delete(got, r.sl.ReplicaStatusKey())
		if diff(want, got) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second site differs from the primary: %s", diff(want, got))
		}
	}
	cp.stop(t)
	n := r.checkSame(t)
	pc, sc := r.chains(t, ctx, id, base.Revision())
	if sc.Problem != nil || sc.Reach != pc.Reach || len(sc.All) != len(pc.All) || len(sc.Segments) != len(sc.All) {
		t.Fatalf("the second site's chain: reach %d of %d segments (%d chained, problem %v); the primary's: reach %d of %d",
			sc.Reach, len(sc.All), len(sc.Segments), sc.Problem, pc.Reach, len(pc.All))
	}
	st, err := replicate.ReadStatus(ctx, r.second, r.sl, time.Now())
	if err != nil || st.Pending != 0 || len(st.Failures) != 0 || st.Clusters[id].JournalLastRevision != pc.Reach {
		t.Fatalf("status after the catch-up: %+v, %v; want nothing pending and the journal at %d", st, err, pc.Reach)
	}
	t.Logf("%d objects on both sites; the journal's %d segments reach revision %d", n, len(sc.All), sc.Reach)
}
