package prune_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// prune deletes a staged plaintext copy older than an hour and keeps a
// young one, reporting both; a dry run deletes nothing.
func TestPruneStagedCopies(t *testing.T) {
	t.Parallel()
	sr := testfix.NewStoreRig(t)
	st, layout := sr.Store, sr.Layout
	ctx := context.Background()
	const id = "staged"
	key := layout.StagedKey(id, "20261122T112102.831Z-scheduled-0a1b2c3d")
	if _, err := st.Put(ctx, key, strings.NewReader("plaintext snapshot")); err != nil {
		t.Fatal(err)
	}
	runPrune := func(now time.Time, dry bool) *prune.PruneReport {
		t.Helper()
		rep, err := prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: layout, ClusterIDs: []string{id}, Policy: retention.DefaultPolicy(), Now: now, DryRun: dry})
		if err != nil && rep == nil {
			t.Fatalf("prune: %v", err)
		}
		return rep
	}
	check := func(rep *prune.PruneReport, action string, left int) {
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
	check(runPrune(now, false), catalog.StagedKeep, 1)                   // young: kept
	check(runPrune(now.Add(2*time.Hour), true), catalog.StagedDelete, 1) // dry run
	check(runPrune(now.Add(2*time.Hour), false), catalog.StagedDeleted, 0)
	if copies, err := catalog.ListStaged(ctx, st, layout, nil, now); err != nil || len(copies) != 0 {
		t.Fatalf("listed %v, %v after the prune", copies, err)
	}
}

// A staged plaintext copy that prune cannot delete fails the prune (a
// *PruneError at its own step, naming the key) and is counted in the
// report, dry run or not; the backups' plan still ran.
func TestPruneStagedCopyNotDeletedFails(t *testing.T) {
	t.Parallel()
	m := testenv.SharedMinIO(t)
	inner := testfix.Store(t, m, m.NewBucket(t))
	st := faults.Wrap(inner)
	layout := catalog.Layout{Prefix: testenv.Prefix(t)}
	ctx := context.Background()
	const id = "staged-stuck"
	key := layout.StagedKey(id, "20261122T112102.831Z-scheduled-0a1b2c3d")
	if _, err := st.Put(ctx, key, strings.NewReader("plaintext snapshot")); err != nil {
		t.Fatal(err)
	}
	st.Inject(faults.Fault{Op: faults.OpDelete, Key: key, Kind: faults.ServerError})
	rep, err := prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: layout, ClusterIDs: []string{id},
		Policy: retention.DefaultPolicy(), Now: time.Now().Add(2 * time.Hour)})
	var pe *prune.PruneError
	if !errors.As(err, &pe) || pe.Step() != prune.PruneStepStaged || pe.NothingDeleted || !strings.Contains(err.Error(), key) {
		t.Fatalf("prune error %v (%#v); want a *PruneError at step %q naming %s", err, pe, prune.PruneStepStaged, key)
	}
	if len(pe.StagedFailed) != 1 || pe.StagedFailed[0] != key {
		t.Errorf("PruneError.StagedFailed %v, want [%s]", pe.StagedFailed, key)
	}
	if rep == nil || rep.StagedFailed != 1 || rep.StagedDeleted != 0 || len(rep.Staged) != 1 || rep.Staged[0].Action != catalog.StagedFailed {
		t.Fatalf("report %+v; want one staged copy FAILED, counted", rep)
	}
	b, jerr := json.Marshal(rep)
	if jerr != nil || !strings.Contains(string(b), `"stagedFailed":1`) {
		t.Errorf("-o json of the report does not count the staged copy left: %s (%v)", b, jerr)
	}
	if got := testfix.Keys(t, inner, layout.StagedPrefix(id)); len(got) != 1 {
		t.Fatalf("staged copies left %v, want the one that could not be deleted", got)
	}
}

// A folder named like the staged folder ("restore") directly under the
// prefix, holding a backup written by a version that accepted "restore" as
// a cluster id, is neither a cluster for prune --all-cluster-ids nor a set
// of staged copies: prune deletes none of its objects, however old.
func TestPruneAllLeavesReservedFolderAlone(t *testing.T) {
	t.Parallel()
	sr := testfix.NewStoreRig(t)
	st, layout := sr.Store, sr.Layout
	ctx := context.Background()
	name := "20261122T112102.831Z-scheduled-0a1b2c3d"
	// layout.Key would now be refused by ValidateClusterID's callers; the
	// keys are what an older version wrote.
	var keys []string
	for _, obj := range []string{catalog.StartedObject, catalog.SnapshotObjectZstd, catalog.ManifestObject} {
		k := layout.RootPrefix() + "restore/" + name + "/" + obj
		keys = append(keys, k)
		if _, err := st.Put(ctx, k, strings.NewReader("not yours to delete")); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: layout, All: true,
		Policy: retention.DefaultPolicy(), Now: time.Now().Add(48 * time.Hour)})
	if err != nil {
		t.Fatalf("prune --all-cluster-ids: %v", err)
	}
	for _, c := range rep.Clusters {
		if c.ClusterID == "restore" {
			t.Errorf("prune --all-cluster-ids treated the reserved folder as a cluster: %+v", c)
		}
	}
	if len(rep.Staged) != 0 {
		t.Errorf("prune read a backup folder as staged copies: %+v", rep.Staged)
	}
	if got := testfix.Keys(t, st, layout.RootPrefix()+"restore/"); len(got) != len(keys) {
		t.Fatalf("objects left under the reserved folder: %v, want all of %v", got, keys)
	}
}
