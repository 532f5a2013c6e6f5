package prune_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// putUndeleteRecords writes an undelete run's start and end records for
// cluster at t and returns their keys, sorted as a listing is.
func putUndeleteRecords(tb testing.TB, st store.Store, l catalog.Layout, cluster string, t time.Time) []string {
	tb.Helper()
	ctx := context.Background()
	r := catalog.UndeleteRecord{Run: catalog.NewUndeleteRunID(t), ClusterID: cluster, Operator: "sre@host", Started: t,
		Namespaces: []string{"shop"}, Revision: 42}
	start, err := catalog.WriteUndeleteRecord(ctx, st, l, r, true)
	if err != nil {
		tb.Fatal(err)
	}
	r.Ended, r.Outcome = t.Add(time.Second), catalog.UndeleteComplete
	r.Keys = []catalog.UndeleteKey{{Key: "/registry/namespaces/shop", Action: "restored", Written: 50}}
	end, err := catalog.WriteUndeleteRecord(ctx, st, l, r, false)
	if err != nil {
		tb.Fatal(err)
	}
	keys := []string{start, end}
	slices.Sort(keys) // as listed
	return keys
}

// A cluster's undelete records hold its customer's key names: retention
// (prune) never touches them and never calls them unknown; delete
// --all-backups (the cluster's end) reports them in its dry run and
// deletes them with the last backup; another cluster's stay. In a real
// bucket.
func TestUndeleteRecordsGoWithTheLastBackup(t *testing.T) {
	t.Parallel()
	st, l, now := storeRig(t)
	ctx := context.Background()
	for i := range 3 {
		testfix.PutEscrowBackup(t, st, l, "und-d", now.Add(-time.Duration(3-i)*time.Hour), nil)
	}
	testfix.PutEscrowBackup(t, st, l, "und-keep", now.Add(-time.Hour), nil)
	recs := putUndeleteRecords(t, st, l, "und-d", now.Add(-30*time.Minute))
	keep := putUndeleteRecords(t, st, l, "und-keep", now.Add(-20*time.Minute))

	// Retention deletes backups, never the records, and knows them.
	rep, err := prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, All: true, Policy: escrowPolicy(), Now: now})
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	deleted := 0
	for _, a := range actionsByName(rep) {
		if a.Action == prune.ActionDeleted {
			deleted++
		}
	}
	if deleted != 2 {
		t.Fatalf("prune deleted %d backups, want the 2 older of und-d", deleted)
	}
	if got := testfix.Keys(t, st, l.UndeletesRoot()); len(got) != 4 {
		t.Fatalf("after prune: undelete records %v, want all 4", got)
	}
	if len(rep.Unknown) != 0 {
		t.Errorf("prune calls keys unknown: %v", rep.Unknown)
	}

	// delete --all-backups --dry-run: listed, nothing deleted.
	dry, err := prune.DeleteAll(ctx, prune.DeleteAllOptions{Store: st, Layout: l, ClusterID: "und-d", DryRun: true})
	if err != nil {
		t.Fatalf("delete --all-backups --dry-run: %v", err)
	}
	if !slices.Equal(dry.UndeleteRecords, recs) {
		t.Errorf("dry run: undelete records %v, want %v", dry.UndeleteRecords, recs)
	}
	if notes := strings.Join(dry.Table().Notes, "\n"); !strings.Contains(notes, "would delete 2 undelete record(s) of the cluster") {
		t.Errorf("dry run notes: %s", notes)
	}
	if got := testfix.Keys(t, st, l.UndeletesPrefix("und-d")); len(got) != 2 {
		t.Fatalf("the dry run deleted undelete records: %v left", got)
	}

	// The real one: und-d's records are gone with its last backup,
	// und-keep's are untouched.
	if _, err := prune.DeleteAll(ctx, prune.DeleteAllOptions{Store: st, Layout: l, ClusterID: "und-d"}); err != nil {
		t.Fatalf("delete --all-backups: %v", err)
	}
	if got := testfix.Keys(t, st, l.UndeletesRoot()); !slices.Equal(got, keep) {
		t.Errorf("undelete records after delete --all-backups of und-d: %v, want only und-keep's %v", got, keep)
	}
	if got := testfix.Keys(t, st, l.ClusterPrefix("und-d")); len(got) != 0 {
		t.Errorf("und-d keys left: %v", got)
	}
}

// A backup retained by object lock keeps the cluster's undelete records
// (they go with the last backup, when its lock ends).
func TestUndeleteRecordsStayWithALockedBackup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	layout := catalog.Layout{Prefix: "p"}
	const id = "c1"
	st := memstore.NewLocked(store.LockInfo{Enabled: true, DefaultMode: store.LockGovernance, DefaultPeriod: 48 * time.Hour})
	now := time.Now().UTC()
	putVersioned(t, st, layout, id, now.Add(-time.Hour), "locked")
	recs := putUndeleteRecords(t, st, layout, id, now.Add(-time.Minute))
	rep, err := prune.DeleteAll(ctx, prune.DeleteAllOptions{Store: st, Layout: layout, ClusterID: id})
	if err != nil {
		t.Fatalf("delete --all-backups: %v", err)
	}
	if len(rep.Backups) != 1 || rep.Backups[0].Action != prune.ActionRetained {
		t.Fatalf("backups: %+v, want the one retained", rep.Backups)
	}
	objs, err := st.List(ctx, layout.UndeletesPrefix(id))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != len(recs) {
		t.Errorf("%d undelete records left, want %d: a retained backup keeps them", len(objs), len(recs))
	}
}

// The orphan pass deletes an orphan's undelete records with its backups
// once its grace has passed, and never a live cluster's.
func TestOrphanUndeleteRecordsGoWithTheBackups(t *testing.T) {
	t.Parallel()
	st, l, now := storeRig(t)
	ctx := context.Background()
	opts := orphanPasses(t, st, l, now, "und-live")
	testfix.PutEscrowBackup(t, st, l, "und-gone", now.Add(-2*time.Hour), nil)
	testfix.PutEscrowBackup(t, st, l, "und-live", now.Add(-2*time.Hour), nil)
	putUndeleteRecords(t, st, l, "und-gone", now.Add(-time.Hour))
	live := putUndeleteRecords(t, st, l, "und-live", now.Add(-time.Hour))
	rep, err := prune.Orphans(ctx, opts(now))
	if err != nil {
		t.Fatalf("orphans: %v", err)
	}
	if len(rep.Unknown) != 0 {
		t.Errorf("the orphan pass calls keys unknown: %v", rep.Unknown)
	}
	if n := len(testfix.Keys(t, st, l.UndeletesRoot())); n != 4 {
		t.Fatalf("%d undelete records after the first orphan pass, want 4 (nothing deleted)", n)
	}
	rep, err = prune.Orphans(ctx, opts(now.Add(2*prune.MinOrphanGrace)))
	if err != nil {
		t.Fatalf("orphans: %v", err)
	}
	gone := orphanOf(rep, "und-gone")
	if gone == nil || gone.State != prune.OrphanDeleted || len(gone.UndeleteRecords) != 2 {
		t.Errorf("orphan und-gone: %+v; want deleted with its 2 undelete records", gone)
	}
	if got := testfix.Keys(t, st, l.UndeletesRoot()); !slices.Equal(got, live) {
		t.Errorf("undelete records after the orphan pass: %v, want only the live cluster's %v", got, live)
	}
}
