package prune_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// drillRecord is a drill record of a made-up backup: passed, or failed at
// a hash comparison.
func drillRecord(cluster, name string, passed bool, at time.Time) *catalog.DrillRecord {
	r := &catalog.DrillRecord{ClusterID: cluster, Backup: name, Passed: passed, StartedAt: at.Add(-time.Minute), FinishedAt: at,
		SourceVersion: "3.5.35", EtcdVersion: "3.5.35", ToolVersion: "test", Revision: 100, BumpRevision: 1_000_000,
		Comparison: catalog.DrillComparison{Mode: catalog.CompareSource},
		Checks:     []catalog.DrillCheck{{Name: "health", Status: catalog.DrillCheckPassed}}}
	if !passed {
		r.Failed = "hashkv: restored keyspace 0x1234 differs from the source's 0x5678"
		r.Checks = append(r.Checks, catalog.DrillCheck{Name: "hashkv", Status: catalog.DrillCheckFailed, Detail: r.Failed})
	}
	return r
}

func putDrill(tb testing.TB, st store.Store, l catalog.Layout, r *catalog.DrillRecord) {
	tb.Helper()
	if err := catalog.PutDrill(context.Background(), st, l, r); err != nil {
		tb.Fatalf("PutDrill %s/%s: %v", r.ClusterID, r.Backup, err)
	}
}

// A drill record the store fails to return leaves the proof unknown: the
// prune deletes nothing, and says which cluster, which step and why. On the
// old code (drill records never read) the prune deleted 8 backups.
func TestPruneDrillReadFailsDeletesNothing(t *testing.T) {
	t.Parallel()
	_, _, st, l := smallFixture(t)
	// small-b's oldest backup passed its drill: the drilled rule keeps it.
	old := catalog.BackupName(at("2100-01-13 19:03"), catalog.KindScheduled)
	putDrill(t, st, l, drillRecord("small-b", old, true, at("2100-01-13 20:00")))
	before := stateOf(t, st)
	victim := l.Key("small-b", old, catalog.DrillObject)
	cause := fmt.Errorf("cos: get %s: RequestError: send request failed: read: connection reset by peer", victim)
	for _, dry := range []bool{true, false} {
		fs := &faultyStore{Store: st, failGet: func(k string) error {
			if path.Base(k) == catalog.DrillObject {
				return cause
			}
			return nil
		}}
		rep, err := prune.Prune(context.Background(), prune.PruneOptions{Store: fs, Layout: l, All: true, DryRun: dry,
			Policy: retention.DefaultPolicy(), Now: pruneNow, Log: testfix.DebugLogger(t)})
		var pe *prune.PruneError
		if !errors.As(err, &pe) || pe.Step() != prune.PruneStepDrills || !pe.NothingDeleted || rep != nil {
			t.Fatalf("dry run %v: want a %q error that deleted nothing, got %v (report %v)", dry, prune.PruneStepDrills, err, rep != nil)
		}
		for _, sub := range []string{"nothing was deleted", `"read drill records"`, "cluster small-b", "small-b/" + old, "connection reset by peer"} {
			if !strings.Contains(err.Error(), sub) {
				t.Errorf("error %q does not say %q", err, sub)
			}
		}
		if len(fs.deletes) != 0 || fs.aborts != 0 {
			t.Errorf("%d delete and %d abort calls after a failed drill record read", len(fs.deletes), fs.aborts)
		}
	}
	if after := stateOf(t, st); !after.equal(before) {
		t.Errorf("the bucket changed: %s", diffKeys(after.keys, before.keys))
	}
}

// Drill records in a real bucket: the newest backup whose drill passed is
// kept by the drilled rule (shown in the dry run's plan and JSON), a
// failed drill keeps nothing, a bad record is no proof and does not stop
// the prune; the real prune then deletes by that plan, drill.json with
// its folder. On the old code the proven backup was deleted.
func TestPruneKeepsNewestDrilled(t *testing.T) {
	t.Parallel()
	sr := testfix.NewStoreRig(t)
	st, l := sr.Store, sr.Layout
	const id = "drl"
	runs := scheduledRuns(id, at("2100-01-13 19:00"), pruneNow) // 8 runs, 13th 19:03 .. 16th 03:03
	putAll(t, st, l, runs)
	name := func(i int) string { return runs[i].name() }
	putDrill(t, st, l, drillRecord(id, name(0), true, at("2100-01-13 20:00")))  // proven, older: released
	putDrill(t, st, l, drillRecord(id, name(1), true, at("2100-01-14 04:00")))  // the newest proven
	putDrill(t, st, l, drillRecord(id, name(2), false, at("2100-01-14 12:00"))) // failed
	putObject(t, st, l.Key(id, name(3), catalog.DrillObject), []byte(`{"format": 1, "passed": tr`))

	opts := prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{id}, Policy: retention.DefaultPolicy(), Now: pruneNow, DryRun: true, Log: testfix.DebugLogger(t)}
	for _, dry := range []bool{true, false} {
		opts.DryRun = dry
		rep, err := prune.Prune(context.Background(), opts)
		if err != nil {
			t.Fatalf("dry run %v: %v", dry, err)
		}
		if rep.Stats.DrillsRead != 4 {
			t.Errorf("dry run %v: %d drill records read, want 4", dry, rep.Stats.DrillsRead)
		}
		byName := actionsByName(rep)
		acts := func(n string) prune.BackupAction { return byName[id+"/"+n] }
		a := acts(name(1))
		if !a.Keep || !slices.Equal(a.Rules, []string{retention.RuleDrilled}) || !strings.Contains(a.Reason, "drilled (passed 2100-01-14T04:00:00Z)") {
			t.Errorf("dry run %v: the newest proven backup: keep %v rules %q reason %q", dry, a.Keep, a.Rules, a.Reason)
		}
		if a.Drill == nil || !a.Drill.Passed || a.Drill.At == nil || !a.Drill.At.Equal(at("2100-01-14 04:00")) || a.Drill.Mode != catalog.CompareSource {
			t.Errorf("dry run %v: drill of the proven backup: %+v", dry, a.Drill)
		}
		for i, want := range map[int]string{0: "but " + name(1) + " is the newest drilled backup", 2: "drill FAILED 2100-01-14T12:00:00Z, no proof: hashkv",
			3: "drill record unreadable, no proof"} {
			if a := acts(name(i)); a.Keep || !strings.Contains(a.Reason, want) {
				t.Errorf("dry run %v: %s: keep %v reason %q, want deleted with %q", dry, name(i), a.Keep, a.Reason, want)
			}
		}
		if d := acts(name(2)).Drill; d == nil || d.Passed || !strings.HasPrefix(d.Failed, "hashkv") {
			t.Errorf("dry run %v: drill of the failed backup: %+v", dry, d)
		}
		js, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(js), `"rules":["drilled"]`) || !strings.Contains(string(js), `"drill":{"passed":true,"at":"2100-01-14T04:00:00Z","mode":"source"}`) {
			t.Errorf("dry run %v: JSON lacks the drilled rule or the drill: %s", dry, js)
		}
		wantDeleted := 3 // 8 runs: newest and recent keep 3, the 15th's anchor 1, drilled 1 (the 1st is outside)
		if dry && rep.Planned != wantDeleted || !dry && rep.Deleted != wantDeleted {
			t.Errorf("dry run %v: planned %d deleted %d, want %d", dry, rep.Planned, rep.Deleted, wantDeleted)
		}
	}
	// The proven backup and its drill record are still there; the deleted
	// folders are gone with their drill records.
	keys := stateOf(t, st).keys
	if !slices.Contains(keys, l.Key(id, name(1), catalog.DrillObject)) || !slices.Contains(keys, l.Key(id, name(1), catalog.ManifestObject)) {
		t.Errorf("the proven backup %s lost objects: %q", name(1), keys)
	}
	for _, i := range []int{0, 2, 3} {
		if slices.Contains(keys, l.Key(id, name(i), catalog.DrillObject)) {
			t.Errorf("%s's drill record outlived its folder", name(i))
		}
	}
}

// delete refuses the newest proven backup without Force (--allow-newest),
// like the newest backup; with Force it goes. On the old code it was
// deleted without Force.
func TestDeleteRefusesNewestProven(t *testing.T) {
	t.Parallel()
	sr := testfix.NewStoreRig(t)
	st, l := sr.Store, sr.Layout
	const id = "delp"
	runs := scheduledRuns(id, at("2100-01-15 03:00"), at("2100-01-15 20:00"))
	putAll(t, st, l, runs)
	old, older := runs[1].name(), runs[0].name()
	putDrill(t, st, l, drillRecord(id, older, true, at("2100-01-15 04:00")))
	putDrill(t, st, l, drillRecord(id, old, true, at("2100-01-15 12:00")))
	ctx := context.Background()
	_, err := prune.Delete(ctx, prune.DeleteOptions{Store: st, Layout: l, ClusterID: id, Names: []string{old}})
	if !errors.Is(err, prune.ErrNewestProven) || !strings.Contains(err.Error(), "nothing was deleted") || !strings.Contains(err.Error(), id+"/"+old) {
		t.Fatalf("delete of the newest proven backup: %v", err)
	}
	// An older proven backup may go.
	if _, err := prune.Delete(ctx, prune.DeleteOptions{Store: st, Layout: l, ClusterID: id, Names: []string{older}}); err != nil {
		t.Fatalf("delete of an older proven backup: %v", err)
	}
	rep, err := prune.Delete(ctx, prune.DeleteOptions{Store: st, Layout: l, ClusterID: id, Names: []string{old}, Force: true})
	if err != nil || len(rep.Backups) != 1 || !strings.Contains(rep.Backups[0].Reason, "newest backup whose restore drill passed") {
		t.Fatalf("forced delete: %+v %v", rep, err)
	}
}
