package restore_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

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
