package prune_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
)

// delete --all-backups on a bucket with object lock: a backup still locked
// is retained (not deleted: a delete would only add a delete marker), with
// the time it can go, and that is no failure; one whose lock expired is
// deleted. The orphan marker stays while a backup is retained.
func TestDeleteAllLocked(t *testing.T) {
	ctx := context.Background()
	layout := catalog.Layout{Prefix: "p"}
	const id = "c1"
	st := memstore.NewLocked(store.LockInfo{Enabled: true, DefaultMode: store.LockGovernance, DefaultPeriod: 48 * time.Hour})
	now := time.Now().UTC()
	// Written three days ago: its 48h default retention has expired.
	st.Now = func() time.Time { return now.Add(-72 * time.Hour) }
	expired := putVersioned(t, st, layout, id, now.Add(-72*time.Hour), "expired")
	st.Now = nil
	locked := putVersioned(t, st, layout, id, now.Add(-time.Hour), "locked")
	if _, err := st.Put(ctx, catalog.OrphanMarkerKey(layout, id), stringsReader(`{"clusterID":"c1"}`)); err != nil {
		t.Fatal(err)
	}

	dry, err := prune.DeleteAll(ctx, prune.DeleteAllOptions{Store: st, Layout: layout, ClusterID: id, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]string{}
	for _, a := range dry.Backups {
		actions[a.Name] = a.Action
	}
	if actions[locked.Name] != prune.ActionRetained || actions[expired.Name] != prune.ActionDelete {
		t.Fatalf("dry run: %v", actions)
	}

	rep, err := prune.DeleteAll(ctx, prune.DeleteAllOptions{Store: st, Layout: layout, ClusterID: id})
	if err != nil {
		t.Fatalf("delete --all-backups on a locked bucket: %v", err)
	}
	for _, a := range rep.Backups {
		switch a.Name {
		case locked.Name:
			if a.Action != prune.ActionRetained || a.LockedUntil == nil || a.LockedUntil.Before(now.Add(46*time.Hour)) {
				t.Errorf("locked backup: %s until %v (%s)", a.Action, a.LockedUntil, a.Reason)
			}
		case expired.Name:
			if a.Action != prune.ActionDeleted {
				t.Errorf("expired backup: %s %s", a.Action, a.Error)
			}
		}
	}
	live, err := catalog.ListBackups(ctx, st, layout, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 1 || live[0].Name != locked.Name || !live[0].Good() {
		t.Errorf("left: %+v", live)
	}
	if m, err := prune.ReadOrphanMarker(ctx, st, layout, id); err != nil || m == nil {
		t.Errorf("orphan marker with a retained backup: %v, %v", m, err)
	}

	// Delete of a named locked backup: retained, no error.
	drep, err := prune.Delete(ctx, prune.DeleteOptions{Store: st, Layout: layout, ClusterID: id, Names: []string{locked.Name}, Force: true})
	if err != nil || len(drep.Backups) != 1 || drep.Backups[0].Action != prune.ActionRetained {
		t.Fatalf("delete of a locked backup: %+v, %v", drep, err)
	}
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
