package catalog_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// prune deletes a staged plaintext copy older than an hour and keeps a
// young one, reporting both; a dry run deletes nothing.
func TestPruneStagedCopies(t *testing.T) {
	t.Parallel()
	m := testenv.SharedMinIO(t)
	st := testfix.Store(t, m, m.NewBucket(t))
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	ctx := context.Background()
	const id = "staged"
	key := layout.StagedKey(id, "20261122T112102.831Z-scheduled-0a1b2c3d")
	if _, err := st.Put(ctx, key, strings.NewReader("plaintext snapshot")); err != nil {
		t.Fatal(err)
	}
	prune := func(now time.Time, dry bool) *catalog.PruneReport {
		t.Helper()
		rep, err := catalog.Prune(ctx, catalog.PruneOptions{Store: st, Layout: layout, ClusterIDs: []string{id}, Policy: catalog.DefaultPolicy(), Now: now, DryRun: dry})
		if err != nil && rep == nil {
			t.Fatalf("prune: %v", err)
		}
		return rep
	}
	check := func(rep *catalog.PruneReport, action string, left int) {
		t.Helper()
		if len(rep.Staged) != 1 || rep.Staged[0].Key != key || rep.Staged[0].Action != action || rep.Staged[0].ClusterID != id {
			t.Fatalf("staged copies reported %+v, want %s %s", rep.Staged, key, action)
		}
		if !strings.Contains(rep.Table().Footer, key) {
			t.Errorf("the prune table does not name the staged copy:\n%s", rep.Table().Footer)
		}
		if got := testfix.Keys(t, st, layout.StagedPrefix(id)); len(got) != left {
			t.Fatalf("after %s: %v left", action, got)
		}
	}
	now := time.Now()
	check(prune(now, false), catalog.StagedKeep, 1)                   // young: kept
	check(prune(now.Add(2*time.Hour), true), catalog.StagedDelete, 1) // dry run
	check(prune(now.Add(2*time.Hour), false), catalog.StagedDeleted, 0)
	if copies, err := catalog.ListStaged(ctx, st, layout, nil, now); err != nil || len(copies) != 0 {
		t.Fatalf("listed %v, %v after the prune", copies, err)
	}
}
