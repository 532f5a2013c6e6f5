package prune_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// The lifecycle records live beside the backups but are never backups:
// ParseKey rejects their keys and GroupEntries ignores them, so retention,
// list and restore never see them.
func TestLifecycleRecordsAreNotBackups(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "kubx-etcd-01", "a/b"} {
		l := catalog.Layout{Prefix: prefix}
		name := catalog.NewBackupName(time.Date(2026, 11, 22, 3, 3, 0, 0, time.UTC), catalog.KindScheduled)
		keys := []string{catalog.OwnerKey(l), catalog.OrphanMarkerKey(l, "etcd-a"), l.Key("etcd-a", name, catalog.ManifestObject)}
		for _, k := range keys[:2] {
			if pk, ok := l.ParseKey(k); ok {
				t.Errorf("prefix %q: ParseKey(%q) = %+v, a backup", prefix, k, pk)
			}
		}
		var objs []store.ObjectInfo
		for _, k := range keys {
			objs = append(objs, store.ObjectInfo{Key: k, Size: 1})
		}
		g := catalog.GroupEntries(l, objs)
		if len(g) != 1 || len(g["etcd-a"]) != 1 || len(g["etcd-a"][0].Objects) != 1 || g["etcd-a"][0].Name != name {
			t.Errorf("prefix %q: GroupEntries = %+v, want only the backup %s", prefix, g, name)
		}
	}
}

// The grace runs from the first sighting too: a cluster whose newest
// backup is already older than the grace (a namespace gone for days, then
// recreated while its clusters are rebuilt one by one) is recorded by the
// first pass and keeps its backups, escrows and undelete records for the
// whole grace after that, not only until the second pass. Against MinIO.
func TestOrphanGraceRunsFromFirstSighting(t *testing.T) {
	t.Parallel()
	st, l, now := storeRig(t)
	now = now.Truncate(time.Second) // backup names hold milliseconds
	ctx := context.Background()
	grace := prune.DefaultOrphanGrace
	passes := orphanPasses(t, st, l, now, "old-live")
	pass := func(at time.Time) *prune.Orphan {
		t.Helper()
		o := passes(at)
		o.Grace = grace
		rep, err := prune.Orphans(ctx, o)
		if err != nil {
			t.Fatalf("orphan pass at %s: %v", at, err)
		}
		if got := orphanOf(rep, "old-gone"); got != nil {
			return got
		}
		t.Fatalf("orphan pass at %s: no orphan old-gone: %+v", at, rep.Orphans)
		return nil
	}
	a := testfix.EscrowAddress("old")
	testfix.PutEscrowBackup(t, st, l, "old-gone", now.Add(-96*time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, a))
	testfix.PutEscrowBackup(t, st, l, "old-gone", now.Add(-80*time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, a))
	recs := putUndeleteRecords(t, st, l, "old-gone", now.Add(-85*time.Hour))
	intact := func(when string) {
		t.Helper()
		if n := len(testfix.Keys(t, st, l.ClusterPrefix("old-gone"))); n < 4 {
			t.Errorf("%s: %d objects under old-gone/, want its 2 backups (4 objects) and its marker", when, n)
		}
		if got := escrowsIn(t, st, l, "old-gone"); len(got) != 1 {
			t.Errorf("%s: escrows %v, want its one escrow", when, got)
		}
		if got := testfix.Keys(t, st, l.UndeletesRoot()); len(got) != len(recs) {
			t.Errorf("%s: undelete records %v, want %v", when, got, recs)
		}
	}

	// Pass 1: first seen, recorded; the deadline is now + the grace
	// (the newest backup + the grace is long past).
	o := pass(now)
	want := now.Add(grace)
	if o.State != prune.OrphanWaiting || !o.DeleteAfter.Equal(want) || !o.FirstSeen.Equal(now) {
		t.Errorf("pass 1: %+v; want waiting, first seen now, delete after %s", o, want)
	}
	m, err := prune.ReadOrphanMarker(ctx, st, l, "old-gone")
	if err != nil || m == nil || !m.FirstSeen.Equal(now) || !m.DeleteAfter.Equal(want) || !m.NewestBackup.Equal(now.Add(-80*time.Hour)) {
		t.Errorf("marker after pass 1: %+v, %v; want first seen %s, delete after %s", m, err, now, want)
	}
	intact("pass 1")

	// Pass 2, the next CronJob run: still waiting, nothing deleted.
	o = pass(now.Add(8 * time.Hour))
	if o.State != prune.OrphanWaiting || !o.DeleteAfter.Equal(want) || len(o.Deleted) != 0 {
		t.Fatalf("pass 2 (8 h after the first sighting): %+v; want waiting until %s", o, want)
	}
	if !strings.Contains(o.Reason, "first sighting") {
		t.Errorf("pass 2: reason %q does not say the deadline runs from the first sighting", o.Reason)
	}
	intact("pass 2")

	// Just before the deadline: still kept.
	if o = pass(want.Add(-time.Minute)); o.State != prune.OrphanWaiting {
		t.Fatalf("a minute before %s: %+v; want waiting", want, o)
	}
	intact("a minute before the deadline")

	// Pass at first sighting + the grace: every backup, escrow and
	// undelete record goes.
	o = pass(want)
	if o.State != prune.OrphanDeleted || len(o.Deleted) != 2 || len(o.Escrows) != 1 || len(o.UndeleteRecords) != len(recs) {
		t.Fatalf("pass at %s: %+v; want deleted with its 2 backups, escrow and undelete records", want, o)
	}
	if got := testfix.Keys(t, st, l.ClusterPrefix("old-gone")); len(got) != 0 {
		t.Errorf("after the deadline: left under old-gone/: %v", got)
	}
	if got := testfix.Keys(t, st, l.UndeletesRoot()); len(got) != 0 {
		t.Errorf("after the deadline: undelete records left: %v", got)
	}
}

// An orphan marker that does not say when its cluster was first seen
// (hand-written, damaged) counts as first seen by the pass that reads it,
// which rewrites it so: the grace runs from there. Taken as it was, its
// grace ran from the newest backup alone, long past: every backup went
// at the first pass.
func TestOrphanMarkerWithoutFirstSeen(t *testing.T) {
	t.Parallel()
	st, l, now := storeRig(t)
	now = now.Truncate(time.Second)
	ctx := context.Background()
	passes := orphanPasses(t, st, l, now, "old-live")
	testfix.PutEscrowBackup(t, st, l, "old-gone", now.Add(-80*time.Hour), testfix.StoredEscrow(catalog.EscrowPresent, testfix.EscrowAddress("old")))
	if _, err := st.Put(ctx, catalog.OrphanMarkerKey(l, "old-gone"), strings.NewReader(`{"format":1,"clusterID":"old-gone"}`)); err != nil {
		t.Fatal(err)
	}
	o := passes(now)
	o.Grace = prune.DefaultOrphanGrace
	rep, err := prune.Orphans(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	want := now.Add(prune.DefaultOrphanGrace)
	if got := orphanOf(rep, "old-gone"); got == nil || got.State != prune.OrphanWaiting || !got.DeleteAfter.Equal(want) || len(got.Deleted) != 0 {
		t.Fatalf("a marker without firstSeen: %+v; want waiting until %s", got, want)
	}
	m, err := prune.ReadOrphanMarker(ctx, st, l, "old-gone")
	if err != nil || m == nil || !m.FirstSeen.Equal(now) || !m.DeleteAfter.Equal(want) {
		t.Errorf("the marker after the pass: %+v, %v; want first seen %s, delete after %s", m, err, now, want)
	}
}
