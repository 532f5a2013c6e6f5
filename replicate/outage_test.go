package replicate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/replicate"
	"github.com/armada/etcd-recovery/restore"
)

// secondSiteOutage is how long TestSecondSiteDownTenMinutes keeps the
// second site stopped: the 10 minutes.
const secondSiteOutage = 10 * time.Minute

// outageSegmentInterval is the journal's --segment-interval in that test
// (production's is 30 s: a third of it, for more segments to check; the
// copier runs with its production intervals).
const outageSegmentInterval = 10 * time.Second

// objectsOf is the journal segments and gap records of id on st, with
// their times.
func objectsOf(tb testing.TB, ctx context.Context, st store.Store, l catalog.Layout, id string, kind catalog.KeyKind) []store.ObjectInfo {
	tb.Helper()
	objs, err := st.List(ctx, l.JournalPrefix(id))
	if err != nil {
		tb.Fatal(err)
	}
	var out []store.ObjectInfo
	for _, o := range objs {
		if l.Classify(o.Key).Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// onDisk reports whether a stopped MinIO server's data dir holds key of
// bucket (MinIO's single-drive layout: <dir>/<bucket>/<key>/xl.meta).
func onDisk(tb testing.TB, m *testenv.MinIO, bucket, key string) bool {
	tb.Helper()
	_, err := os.Stat(filepath.Join(m.DataDir, bucket, filepath.FromSlash(key), "xl.meta"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		tb.Fatal(err)
	}
	return err == nil
}

// TestSecondSiteDownTenMinutes: the second site is down for a real 10
// minutes during a workload. A light workload (a few writes a second,
// leases granted, attached and revoked, overwrites, deletes, txns) runs on
// etcd 3.5 with the journal capture on (10 s segments) into the primary,
// and the copier (replicate.Run, production intervals: journal polls every
// 5 s, full scans every 2 min, the status record every 30 s) copies to the
// second site, a MinIO server of its own. It is stopped for 10 minutes:
// the journal writes a segment every interval (none waits: no gap between
// two is much longer than the interval), records no gap, and two backups
// taken meanwhile succeed promptly; the copier keeps running, backs off
// and logs that the second site is behind; the segments and backups of
// the outage are not on the second site's disk while it is down. Once it
// is started again, the copier catches up exactly: the second site holds
// every complete object of the primary with its sha256, nothing more; its
// journal chain has no gap and no overlap and reaches the primary's end;
// the status record has nothing pending and no failure; and a point-in-time
// restore from the second site alone to its newest revision gives
// exactly the source's keyspace there (every key's value, create and mod
// revision, version and lease; every lease with its TTL).
func TestSecondSiteDownTenMinutes(t *testing.T) {
	t.Parallel()
	start := time.Now()
	ctx := testfix.Context(t, secondSiteOutage+8*time.Minute)
	r := newRig(t)
	const id = "c1"
	c, rig, base := r.backedUpEtcd(t, id)
	cli := c.Client(t)

	cctx, stopCapture := context.WithCancel(ctx)
	defer stopCapture()
	capDone := make(chan error, 1)
	var capLog testfix.SyncBuffer
	go func() {
		capDone <- journal.Capture(cctx, journal.CaptureOptions{Client: cli, ClusterID: id, BaseBackup: base.Name, BaseRev: base.Revision(),
			Store: r.primary, Layout: r.pl, Encoding: objectio.Encoding{Compression: objectio.CompressZstd},
			SegmentInterval: outageSegmentInterval, Log: slog.New(slog.NewTextHandler(&capLog, nil))})
	}()
	seed := uint64(time.Now().UnixNano())
	t.Logf("workload seed %d", seed)
	w := testfix.NewWorkload(cli, seed)
	stopWrites := w.Start(t, ctx, 300*time.Millisecond)

	var copierLog testfix.SyncBuffer
	o := r.opts(t)
	o.Log = slog.New(slog.NewTextHandler(&copierLog, nil))
	cp := runInBackground(t, ctx, o)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the copier's log, its end:\n%s\nthe capture's log, its end:\n%s",
				testfix.LastLines(copierLog.String(), 40), testfix.LastLines(capLog.String(), 20))
		}
	})
	status := func() *replicate.StatusReport {
		t.Helper()
		st, err := replicate.ReadStatus(ctx, r.second, r.sl, time.Now())
		if err != nil && !store.IsNotFound(err) {
			t.Fatalf("the status record: %v", err)
		}
		return st
	}

	// Before: the backup and a segment reach the second site.
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		if st := status(); st != nil && st.Clusters[id].NewestBackup == base.Name && st.Clusters[id].JournalLastSegment != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no segment and backup on the second site after 90 s: %+v", status())
		}
	}
	before := objectsOf(t, ctx, r.second, r.sl, id, catalog.KeyJournal)

	// The second site is down for secondSiteOutage.
	r.sm.Stop()
	down := time.Now()
	t.Logf("the second site stopped at %s (%d segments there); down for %s", down.Format(time.TimeOnly), len(before), secondSiteOutage)
	var outageBackups []*catalog.Manifest
	for i := 1; i <= 2; i++ {
		time.Sleep(time.Until(down.Add(time.Duration(i) * secondSiteOutage / 3)))
		began := time.Now()
		m := rig.TakeBackup(t, c, id, catalog.KindScheduled)
		if took := time.Since(began); took > 30*time.Second {
			t.Errorf("backup %s took %s while the second site was down", m.Name, took)
		}
		t.Logf("backup %s during the outage: %s", m.Name, time.Since(began).Round(time.Millisecond))
		outageBackups = append(outageBackups, m)
	}
	time.Sleep(time.Until(down.Add(secondSiteOutage)))
	select {
	case err := <-capDone:
		t.Fatalf("the capture ended while the second site was down: %v", err)
	case err := <-cp.done:
		t.Fatalf("the copier ended while the second site was down: %v", err)
	default:
	}
	// The primary's journal went on: a segment every interval, none
	// waiting on the second site, no gap.
	var during []store.ObjectInfo
	last := down
	var longest time.Duration
	for _, s := range objectsOf(t, ctx, r.primary, r.pl, id, catalog.KeyJournal) {
		if s.LastModified.After(down) {
			during = append(during, s)
			longest = max(longest, s.LastModified.Sub(last))
			last = s.LastModified
		}
	}
	if want := int(secondSiteOutage / outageSegmentInterval * 8 / 10); len(during) < want {
		t.Errorf("%d segments written on the primary during the %s outage, want at least %d", len(during), secondSiteOutage, want)
	}
	if longest > 2*outageSegmentInterval+5*time.Second {
		t.Errorf("the primary's journal waited %s between two segments during the outage (interval %s)", longest, outageSegmentInterval)
	}
	if gaps := objectsOf(t, ctx, r.primary, r.pl, id, catalog.KeyJournalGap); len(gaps) > 0 {
		t.Errorf("the journal recorded %d gaps while the second site was down: %s", len(gaps), gaps[0].Key)
	}
	// The copier says it is behind.
	behind := 0
	for _, l := range strings.Split(copierLog.String(), "\n") {
		if strings.Contains(l, "second site behind by") {
			behind++
		}
	}
	if behind == 0 {
		t.Errorf("the copier never said the second site was behind:\n%s", testfix.LastLines(copierLog.String(), 20))
	}
	// The second site lacked what the outage wrote: not on its disk (the
	// segments before it are).
	sb := r.second.(*cos.Store).Bucket()
	if !onDisk(t, r.sm, sb, before[0].Key) {
		t.Fatalf("%s is not in the stopped server's data dir %s: the check below would prove nothing", before[0].Key, r.sm.DataDir)
	}
	for _, s := range during {
		if onDisk(t, r.sm, sb, r.dst(s.Key)) {
			t.Errorf("segment %s of the outage is on the second site while it is down", s.Key)
		}
	}
	for _, m := range outageBackups {
		if onDisk(t, r.sm, sb, r.dst(r.pl.Key(id, m.Name, catalog.ManifestObject))) {
			t.Errorf("backup %s of the outage is on the second site while it is down", m.Name)
		}
	}
	t.Logf("during the %s outage: %d segments (longest wait between two %s), 2 backups, no gap; the copier said it was behind %d times",
		secondSiteOutage, len(during), longest.Round(time.Millisecond), behind)

	// The second site returns; the copier catches up.
	r.sm.Start(t)
	back := time.Now()
	newest := outageBackups[len(outageBackups)-1].Name
	for {
		st := status()
		if st != nil && st.Clusters[id].JournalSyncedAt.After(back) && st.Clusters[id].NewestBackup == newest && st.Pending == 0 && st.SyncedAt.After(back) {
			break
		}
		if time.Since(back) > 4*time.Minute {
			t.Fatalf("the second site has not caught up 4 min after it came back: %+v", st)
		}
		time.Sleep(time.Second)
	}
	t.Logf("caught up %s after the second site came back", time.Since(back).Round(time.Second))
	stopWrites()
	top, _ := w.Last()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		ch, err := journal.ListSegments(ctx, r.primary, r.pl, id, base.Revision())
		if err != nil {
			t.Fatal(err)
		}
		if ch.Reach >= top {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the primary's journal reaches %d, not %d", ch.Reach, top)
		}
	}
	stopCapture()
	if err := <-capDone; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("capture: %v", err)
	}
	want := r.copyable(t)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		got := testfix.Sums(t, r.second, r.sl)
		delete(got, r.sl.ReplicaStatusKey())
		if diff(want, got) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second site differs from the primary a minute after the journal stopped: %s", diff(want, got))
		}
	}
	// A last status record with the last poll in it.
	time.Sleep(o.JournalInterval + time.Second)
	cp.stop(t)

	// Exactly the primary's: every object's sha256, no extra, no
	// duplicate, the chain whole.
	n := r.checkSame(t)
	pc, sc := r.chains(t, ctx, id, base.Revision())
	if pc.Problem != nil || sc.Problem != nil || sc.Reach != pc.Reach || sc.Reach < top || len(sc.All) != len(pc.All) || len(sc.Segments) != len(sc.All) {
		t.Fatalf("the second site's chain: reach %d of %d segments (%d chained, problem %v); the primary's: reach %d of %d (problem %v); the workload's last revision %d",
			sc.Reach, len(sc.All), len(sc.Segments), sc.Problem, pc.Reach, len(pc.All), pc.Problem, top)
	}
	next := base.Revision() + 1
	for _, s := range sc.Segments {
		if s.FirstRev != next {
			t.Fatalf("the second site's segment %s starts at %d, want %d (a gap or a duplicate)", s.Key, s.FirstRev, next)
		}
		next = s.LastRev + 1
	}
	st := status()
	if st == nil || st.Pending != 0 || len(st.Failures) != 0 || st.Clusters[id].JournalLastRevision != pc.Reach || st.Clusters[id].NewestBackup != newest {
		t.Fatalf("status after the catch-up: %+v; want nothing pending, no failure, the journal at %d, newest backup %s", st, pc.Reach, newest)
	}

	// A point-in-time restore from the second site alone, to its newest
	// revision.
	wantDump := testfix.Dump(t, ctx, cli, sc.Reach)
	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	client := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	res, err := restore.Run(ctx, restore.Options{ClusterID: id, Store: r.second, Layout: r.sl, NoLive: true, ToLatest: true,
		Journal: journal.NewSource(r.second, r.sl, id, nil), Targets: restore.Targets{InitialCluster: "r0=" + peer, DataDirRoot: t.TempDir()},
		Log: testfix.Logger(t)})
	if err != nil {
		t.Fatalf("restore --to-latest from the second site: %v", err)
	}
	if res.Replay == nil || res.Replay.ToRevision != sc.Reach || res.Chosen == nil || res.Chosen.Name != newest {
		t.Fatalf("restore from the second site: replay %+v, chosen %+v; want %s to %d", res.Replay, res.Chosen, newest, sc.Reach)
	}
	ncli := testfix.StartRestoredMember(t, res.Members[0].DataDir, res.Token, client, peer)
	testfix.SameKeyspace(t, fmt.Sprintf("the restore from the second site at %d", sc.Reach), wantDump, testfix.Dump(t, ctx, ncli, 0),
		w.LeasesAt(sc.Reach), testfix.Leases(t, ctx, ncli))
	granted, revoked := w.Counts(sc.Reach)
	t.Logf("%d objects on both sites, each sha256 the same; %d segments reach revision %d; the restore from the second site is exact: %d keys, %d leases (%d granted, %d revoked); %d writes in %s",
		n, len(sc.All), sc.Reach, len(wantDump), granted-revoked, granted, revoked, w.Writes(), time.Since(start).Round(time.Second))
}
