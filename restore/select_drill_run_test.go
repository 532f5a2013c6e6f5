package restore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/restore/survivor"
)

// A restore dry run against real MinIO and a real snapshot, with drill
// records written by catalog.PutDrill: three backups at the same revision;
// the oldest passed its drill, the newest failed it. The dry run chooses
// the drilled one over the newer undrilled one and says so, and lists the
// failed one as ignored with its check. On the old code it chose the
// newest backup, whose drill failed.
//
// Subtests: --backup of the failed one uses it (verified in the dry run)
// with a WARNING naming the failed check in the plan's reason and the
// candidate's detail; a cluster whose every backup failed its drill fails
// at step "select backup", naming them and saying to pass --backup. Both
// fail when restore.go does not call selectCandidate: --backup is refused
// ("--backup X: restore drill FAILED ...") and the all-failed cluster says
// "no committed backup".
func TestRestoreDryRunPrefersDrilled(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/pods/", 50, 16)
	r := newStoreRig(t)
	const id = "drillsel"
	proven := r.TakeBackup(t, c, id, catalog.KindScheduled)
	plain := r.TakeBackup(t, c, id, catalog.KindScheduled)
	failed := r.TakeBackup(t, c, id, catalog.KindScheduled)
	if proven.Revision() != failed.Revision() || plain.Revision() != failed.Revision() {
		t.Fatalf("the fixture needs equal revisions: %d %d %d", proven.Revision(), plain.Revision(), failed.Revision())
	}
	ctx := testfix.Context(t, 2*time.Minute)
	now := time.Now().UTC().Truncate(time.Second)
	const check = "hashkv: restored 0x1 != source 0x2"
	drill := func(m *catalog.Manifest, passed bool) *catalog.DrillRecord {
		d := &catalog.DrillRecord{ClusterID: m.ClusterID, Backup: m.Name, Passed: passed, StartedAt: now.Add(-time.Minute), FinishedAt: now,
			EtcdVersion: "3.5.35", ToolVersion: "test", Revision: m.Revision(), Comparison: catalog.DrillComparison{Mode: catalog.CompareSource}}
		if !passed {
			d.Failed = check
		}
		return d
	}
	// A second cluster whose every backup failed its drill.
	const allFailedID = "drillallfail"
	allFailed := []*catalog.Manifest{r.TakeBackup(t, c, allFailedID, catalog.KindScheduled), r.TakeBackup(t, c, allFailedID, catalog.KindScheduled)}
	for _, d := range []*catalog.DrillRecord{drill(proven, true), drill(failed, false), drill(allFailed[0], false), drill(allFailed[1], false)} {
		if err := catalog.PutDrill(ctx, r.Store, r.Layout, d); err != nil {
			t.Fatal(err)
		}
	}
	ic, _ := newCluster(t, 1, false)
	dryRun := func(t *testing.T, clusterID, name string) (*restore.Result, error) {
		t.Helper()
		return restore.Run(ctx, restore.Options{Survivor: survivor.Backup{},
			ClusterID: clusterID, Store: r.Store, Layout: r.Layout, NoLive: true, ProbeTimeout: 2 * time.Second, Backup: name,
			Targets:      restore.Targets{InitialCluster: ic, DataDirRoot: t.TempDir()},
			BumpRevision: restore.DefaultBumpRevision, MarkCompacted: true, DryRun: true, Log: testfix.Logger(t),
		})
	}
	before := r.BucketListing(t)
	res, err := dryRun(t, id, "")
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if res.Chosen == nil || res.Chosen.Name != proven.Name {
		t.Fatalf("chose %+v, want the drilled backup %s", res.Chosen, proven.Name)
	}
	if res.Chosen.Drill == nil || !res.Chosen.Drill.Passed {
		t.Errorf("the chosen candidate's drill: %+v", res.Chosen.Drill)
	}
	for _, want := range []string{"ties with " + plain.Name + ", and was drilled", "drilled " + now.Format(time.RFC3339) + ": proven restorable"} {
		if !strings.Contains(res.Reason, want) {
			t.Errorf("reason %q lacks %q", res.Reason, want)
		}
	}
	var ig string
	for _, x := range res.Ignored {
		if x.Name == failed.Name {
			ig = x.Reason
		}
	}
	if !strings.Contains(ig, "restore drill FAILED "+now.Format(time.RFC3339)+": "+check) {
		t.Errorf("the failed backup is not ignored with its check: %+v", res.Ignored)
	}
	for _, cand := range res.Candidates {
		if cand.Name == failed.Name {
			t.Errorf("the failed backup is a candidate: %+v", cand)
		}
	}

	// --backup of the failed one: used, verified, with the WARNING.
	t.Run("backup-failed-drill", func(t *testing.T) {
		res, err := dryRun(t, id, failed.Name)
		if err != nil {
			t.Fatalf("dry run --backup %s: %v", failed.Name, err)
		}
		if res.Chosen == nil || res.Chosen.Name != failed.Name {
			t.Fatalf("chose %+v, want the forced backup %s", res.Chosen, failed.Name)
		}
		warning := "WARNING: restore drill FAILED " + now.Format(time.RFC3339) + ": " + check
		if !strings.HasPrefix(res.Chosen.Detail, warning) {
			t.Errorf("the chosen candidate's detail %q does not start with %q", res.Chosen.Detail, warning)
		}
		for _, want := range []string{"forced with --backup", "WARNING: its restore drill FAILED " + now.Format(time.RFC3339) + ": " + check,
			"the newest candidate would have been " + proven.Name} {
			if !strings.Contains(res.Reason, want) {
				t.Errorf("reason %q lacks %q", res.Reason, want)
			}
		}
		if !strings.Contains(res.Chosen.Status, "verified") {
			t.Errorf("the forced backup was not verified in the dry run: status %q", res.Chosen.Status)
		}
		if res.Chosen.Drill == nil || res.Chosen.Drill.Passed {
			t.Errorf("the chosen candidate's drill: %+v", res.Chosen.Drill)
		}
	})

	// Every backup failed its drill: no silent choice, and the way out.
	t.Run("all-failed", func(t *testing.T) {
		res, err := dryRun(t, allFailedID, "")
		var re *restore.Error
		if !errors.As(err, &re) || re.Step() != restore.StepSelect || re.ClusterID != allFailedID {
			t.Fatalf("want a restore.Error at step %q of cluster %s, got %v (result %+v)", restore.StepSelect, allFailedID, err, res)
		}
		for _, want := range []string{"every committed backup of cluster " + allFailedID + " failed its restore drill",
			allFailed[0].Name + " (drill FAILED " + now.Format(time.RFC3339) + ": " + check + ")",
			allFailed[1].Name + " (drill FAILED " + now.Format(time.RFC3339) + ": " + check + ")", "pass --backup NAME"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
	})

	if after := r.BucketListing(t); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("the dry runs changed the bucket")
	}
}
