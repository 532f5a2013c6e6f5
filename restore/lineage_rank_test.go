package restore_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// After a restore without a revision bump (a cluster recreated under the
// same name: real etcd 3.5, a second cluster's backups under the first's
// id), the new history's backups are below the old history's revisions.
// With the journal's lineage break recorded, a restore of the newest state
// chooses the new history's newest backup, and says which history it
// chose from; before, the old history's backup of a higher revision won.
// A point-in-time restore still chooses by revision (its revision names a
// state of one history; the lineage check refuses a splice).
func TestRestoreRanksTheNewHistoryFirst(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	r := newStoreRig(t)
	const id = "lineage-rank"
	old := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, old.Client(t), "/old/a/", 40, 8)
	r.TakeBackup(t, old, id, catalog.KindScheduled)
	testenv.PutKeys(t, old.Client(t), "/old/b/", 40, 8)
	oldNewest := r.TakeBackup(t, old, id, catalog.KindScheduled)

	// The journal found the cluster gone back: its lineage break record.
	found := time.Now().UTC()
	rec, _ := json.Marshal(map[string]any{"clusterID": id, "from": oldNewest.Revision() + 1, "lineage": true, "time": found,
		"reason": "journal lineage break: the cluster's revision went back"})
	if _, err := r.Store.Put(ctx, r.Layout.JournalGapKey(id, oldNewest.Revision()+1), strings.NewReader(string(rec))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // backup names are to the second
	fresh := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, fresh.Client(t), "/new/", 10, 8)
	newest := r.TakeBackup(t, fresh, id, catalog.KindScheduled)
	if newest.Revision() >= oldNewest.Revision() {
		t.Fatalf("the new history's backup is at revision %d, the old one's at %d: the test's premise is a lower one", newest.Revision(), oldNewest.Revision())
	}
	opts := restore.Options{ClusterID: id, Store: r.Store, Layout: r.Layout, NoLive: true, DryRun: true,
		Targets: restore.Targets{InitialCluster: "r0=http://127.0.0.1:2380", DataDirRoot: t.TempDir()}, Log: testfix.Logger(t)}
	var plan restore.Plan
	sel, err := selectBackup(ctx, opts, &plan)
	if err != nil {
		t.Fatal(err)
	}
	if got := sel.Chosen().Name; got != newest.Name {
		t.Fatalf("chose %s (revision %d), want the new history's %s (revision %d)", got, sel.Chosen().Revision, newest.Name, newest.Revision())
	}
	var detail string
	for _, c := range plan.Checks {
		if c.Name == restore.CheckHistory {
			detail = c.Detail
		}
	}
	if !strings.Contains(detail, newest.Name) || !strings.Contains(detail, "newest history") || !strings.Contains(detail, fmt.Sprint(2)) {
		t.Fatalf("the plan's history check: %q", detail)
	}
	// Point in time: by revision, within the old history.
	opts.ToRevision, opts.Journal = oldNewest.Revision(), noEvents{}
	plan = restore.Plan{}
	if sel, err = selectBackup(ctx, opts, &plan); err != nil || sel.Chosen().Name != oldNewest.Name {
		t.Fatalf("a point-in-time restore to the old history's revision %d: %v", oldNewest.Revision(), err)
	}
}

// --to-latest after a lineage break starts from the backup a plain restore
// would choose, of the new history. That backup is below the old history's
// end, and the only journal after it is the old history's (the journal
// stores nothing of the new history below that end): --to-latest is
// refused, naming the break and the backup to restore as it is. Ranked by
// revision alone, the old history's newest backup was the base and the old
// journal took it to the old history's end: the replaced cluster's state,
// with exit 0.
func TestToLatestAfterALineageBreak(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 2*time.Minute)
	r := newStoreRig(t)
	const id = "lineage-latest"
	old := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	ocli := old.Client(t)
	testenv.PutKeys(t, ocli, "/old/a/", 10, 8)
	first := r.TakeBackup(t, old, id, catalog.KindScheduled)
	stop := testfix.StartJournal(t, ocli, r.Store, r.Layout, id, first, 300*time.Millisecond, testfix.Logger(t))
	for i := range 6 { // one revision each
		testenv.PutKeys(t, ocli, fmt.Sprintf("/old/b%d/", i), 4, 8)
	}
	oldNewest := r.TakeBackup(t, old, id, catalog.KindScheduled)
	for i := range 3 { // after the old history's last backup
		testenv.PutKeys(t, ocli, fmt.Sprintf("/old/c%d/", i), 4, 8)
	}
	gr, err := ocli.Get(ctx, "\x00")
	if err != nil {
		t.Fatal(err)
	}
	end := gr.Header.Revision
	testfix.WaitJournalReach(t, ctx, r.Store, r.Layout, id, end, time.Minute)
	stop()

	rec, _ := json.Marshal(map[string]any{"clusterID": id, "from": end + 1, "lineage": true, "time": time.Now().UTC(),
		"reason": "journal lineage break: the cluster's revision went back"})
	if _, err := r.Store.Put(ctx, r.Layout.JournalGapKey(id, end+1), strings.NewReader(string(rec))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // backup names are to the second
	fresh := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	for i := range 3 {
		testenv.PutKeys(t, fresh.Client(t), fmt.Sprintf("/new/%d/", i), 4, 8)
	}
	// The new history's backup, 10 minutes after the old history ended
	// (by more than two pods' clocks may differ).
	res, err := backup.Run(ctx, backup.Options{ClusterID: id, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(fresh), Store: r.Store,
		Layout: r.Layout, ProbeTimeout: 3 * time.Second, Log: testfix.Logger(t), Now: func() time.Time { return time.Now().Add(10 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	newest := res.Manifest
	if newest.Revision() <= first.Revision() || newest.Revision() >= oldNewest.Revision() {
		t.Fatalf("the new history's backup is at revision %d: the test's premise is one inside the old journal (%d to %d), below the old newest backup's %d",
			newest.Revision(), first.Revision()+1, end, oldNewest.Revision())
	}

	opts := restore.Options{ClusterID: id, Store: r.Store, Layout: r.Layout, NoLive: true, DryRun: true, ToLatest: true, JournalInStore: true,
		Targets: restore.Targets{InitialCluster: "r0=http://127.0.0.1:2380", DataDirRoot: t.TempDir()}, Log: testfix.Logger(t)}
	var plan restore.Plan
	sel, err := selectBackup(ctx, opts, &plan)
	if err == nil {
		t.Fatalf("--to-latest chose %s and revision %d (plan.Latest %+v): want a refusal, the new history's backup %s having no journal of its own",
			sel.Chosen().Name, opts.ToRevision, plan.Latest, newest.Name)
	}
	var lerr *restore.LineageError
	if !errors.As(err, &lerr) || lerr.Backup != newest.Name || !strings.Contains(err.Error(), "--to-latest") {
		t.Fatalf("--to-latest: want a lineage refusal naming %s, got %v", newest.Name, err)
	}
	// The break found only after the new history's backup was taken (the
	// journal down while the cluster was restored without a bump): the
	// backup is still of the new history, below the old end and taken
	// after the journal received it. Told apart by the found time alone,
	// it was the old history's, and the old backup won by revision.
	rec, _ = json.Marshal(map[string]any{"clusterID": id, "from": end + 1, "lineage": true, "time": time.Now().Add(11 * time.Minute).UTC(),
		"reason": "journal lineage break: the cluster's revision went back"})
	if _, err := r.Store.Put(ctx, r.Layout.JournalGapKey(id, end+1), strings.NewReader(string(rec))); err != nil {
		t.Fatal(err)
	}
	plan = restore.Plan{}
	if sel, err = selectBackup(ctx, opts, &plan); !errors.As(err, &lerr) || lerr.Backup != newest.Name {
		t.Fatalf("--to-latest, the break found after the new history's backup: %v (latest %+v), want a lineage refusal naming %s", err, plan.Latest, newest.Name)
	}
	// Without the break on record, the old history is the only one: its
	// newest backup and the journal to its end.
	if err := r.Store.Delete(ctx, []string{r.Layout.JournalGapKey(id, end+1)}); err != nil {
		t.Fatal(err)
	}
	plan = restore.Plan{}
	if sel, err = selectBackup(ctx, opts, &plan); err != nil || plan.Latest == nil || plan.Latest.Revision != end || sel.Chosen().Name != oldNewest.Name {
		t.Fatalf("--to-latest without a break on record: %v, latest %+v", err, plan.Latest)
	}
}
