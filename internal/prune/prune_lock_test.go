package prune_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

// lockFolder sets the retention of every object of f.
func lockFolder(tb testing.TB, st *memstore.Store, l catalog.Layout, f folder, r store.Retention) {
	tb.Helper()
	for _, k := range f.keys(l) {
		if err := st.SetRetention(context.Background(), k, "", r); err != nil {
			tb.Fatal(err)
		}
	}
}

// Prune on a bucket with object lock (memstore, its clock moved): a
// backup retention lets go that is still locked is retained until its
// lock ends (not deleted, not hidden, no error); an expired one is
// deleted; once the lock has ended a later prune deletes it; the newest
// backup is re-locked (PruneOptions.Lock).
func TestPruneLockedBucket(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 3, 10, 3, 3, 0, 0, time.UTC)
	now := t0.Add(4*8*time.Hour + time.Hour)
	st := memstore.NewLocked(store.LockInfo{})
	st.Now = func() time.Time { return now }
	l := catalog.Layout{Prefix: "p/"}
	var fs []folder
	for k := range 5 {
		f := folder{cluster: "c1", at: t0.Add(time.Duration(k) * 8 * time.Hour), kind: catalog.KindScheduled}
		putGood(t, st, l, f)
		fs = append(fs, f)
	}
	lockedUntil := now.Add(2 * time.Hour)
	lockFolder(t, st, l, fs[0], store.Retention{Mode: store.LockGovernance, Until: lockedUntil})
	lockFolder(t, st, l, fs[1], store.Retention{Mode: store.LockGovernance, Until: now.Add(-time.Minute)}) // expired

	opts := prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{"c1"}, Policy: retention.DefaultPolicy(), Now: now,
		Lock: retention.LockPolicy{Mode: catalog.LockGovernanceMode}}
	rep, err := prune.Prune(ctx, opts)
	if err != nil {
		t.Fatalf("prune on a locked bucket: %v", err)
	}
	byName := map[string]prune.BackupAction{}
	for _, a := range rep.Clusters[0].Backups {
		byName[a.Name] = a
	}
	a0, a1 := byName[fs[0].name()], byName[fs[1].name()]
	if a0.Action != prune.ActionRetained || a0.LockedUntil == nil || !a0.LockedUntil.Equal(lockedUntil) || a0.Keep {
		t.Fatalf("locked backup: %+v, want retained until %s", a0, lockedUntil)
	}
	if want := "retained until " + lockedUntil.Format(time.RFC3339) + " (governance object lock)"; !strings.Contains(a0.Reason, want) {
		t.Fatalf("reason %q, want it to say %q", a0.Reason, want)
	}
	if a1.Action != prune.ActionDeleted {
		t.Fatalf("expired backup: %+v, want deleted", a1)
	}
	if rep.Retained != 1 || rep.Deleted != 1 || rep.Failed != 0 || rep.Kept != 3 {
		t.Fatalf("report: retained %d deleted %d failed %d kept %d", rep.Retained, rep.Deleted, rep.Failed, rep.Kept)
	}
	// Not hidden under a delete marker: still readable.
	for _, k := range fs[0].keys(l) {
		rc, err := st.Get(ctx, k)
		if err != nil {
			t.Fatalf("retained backup's %s: %v", k, err)
		}
		_, _ = io.Copy(io.Discard, rc)
		rc.Close()
	}
	// The newest backup was re-locked: at least now + 3*8h - 1h.
	want := now.Add(23 * time.Hour)
	for _, k := range fs[4].keys(l) {
		r, err := st.Retention(ctx, k, "")
		if err != nil || r.Mode != store.LockGovernance || r.Until.Before(want) {
			t.Fatalf("newest backup's %s: retention %+v, %v; want governance until >= %s", k, r, err, want)
		}
	}
	if len(rep.Relocked) != 1 || rep.Relocked[0] != "c1/"+fs[4].name() {
		t.Fatalf("relocked %v", rep.Relocked)
	}
	// The table says it.
	if tb := rep.Table(); !strings.Contains(tableText(tb.Rows), "retained") {
		t.Fatalf("table rows do not say retained: %v", tb.Rows)
	}

	// A dry run after the lock ended would delete it; the prune deletes it.
	now = lockedUntil.Add(time.Second)
	opts.Now = now
	opts.Lock = retention.LockPolicy{}
	rep, err = prune.Prune(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Deleted != 1 || rep.Retained != 0 {
		t.Fatalf("after the lock ended: deleted %d retained %d, want 1 and 0", rep.Deleted, rep.Retained)
	}
	if _, err := st.Get(ctx, l.Key("c1", fs[0].name(), catalog.ManifestObject)); !store.IsNotFound(err) {
		t.Fatalf("manifest of the expired backup: %v, want not found", err)
	}
}

// On a bucket without object lock nothing changes: no retention is read.
func TestPruneUnlockedBucketUnchanged(t *testing.T) {
	st := memstore.New()
	l := catalog.Layout{Prefix: "p/"}
	t0 := time.Date(2026, 3, 10, 3, 3, 0, 0, time.UTC)
	for k := range 5 {
		putGood(t, st, l, folder{cluster: "c1", at: t0.Add(time.Duration(k) * 8 * time.Hour), kind: catalog.KindScheduled})
	}
	rep, err := prune.Prune(context.Background(), prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{"c1"},
		Policy: retention.DefaultPolicy(), Now: t0.Add(33 * time.Hour), Lock: retention.LockPolicy{Mode: catalog.LockGovernanceMode}})
	if err != nil || rep.Deleted != 2 || rep.Retained != 0 || len(rep.Relocked) != 0 {
		t.Fatalf("prune: %v; deleted %d retained %d relocked %v", err, rep.Deleted, rep.Retained, rep.Relocked)
	}
}

func tableText(rows [][]string) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(strings.Join(r, " ") + "\n")
	}
	return b.String()
}
