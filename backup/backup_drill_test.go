package backup_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/backup/drilled"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// drilled.Run: the drill is called once the backup is committed (its
// manifest listed) and before the prune; its record and error are in the
// Result; a failed drill (or one that could not run) leaves the backup
// committed, is an *Error at StepDrill saying so, and the prune still
// runs after it; a drill cut short by cancellation is followed by no
// prune. The hook here stands in for drill.Run; the real drill is wired
// and tested in cmd/etcd-recovery (TestCLIBackupDrill) and fleet
// (TestBackupAllDrill).
func TestRunDrillHook(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	testenv.PutKeys(t, c.Client(t), "/registry/pods/", 50, 64)
	r := newRig(t, c, nil)
	ctx := context.Background()
	policy := retention.DefaultPolicy()
	policy.Recent, policy.Anchors = 1, 0

	record := func(m *catalog.Manifest, passed bool) *catalog.DrillRecord {
		rec := &catalog.DrillRecord{Format: catalog.DrillFormat, ClusterID: m.ClusterID, Backup: m.Name, Passed: passed,
			StartedAt: time.Now().UTC(), FinishedAt: time.Now().UTC(), Comparison: catalog.DrillComparison{Mode: catalog.CompareSelf}}
		if !passed {
			rec.Failed = "key count: 49 restored, 50 in the snapshot"
		}
		return rec
	}
	for _, tc := range []struct {
		name      string
		passed    bool
		noRecord  bool
		cancel    bool
		wantErr   string
		wantPrune bool
	}{
		{name: "passed", passed: true, wantPrune: true},
		{name: "failed", wantErr: "its restore drill failed", wantPrune: true},
		{name: "not run", noRecord: true, wantErr: "its restore drill could not run", wantPrune: true},
		{name: "cancelled", noRecord: true, cancel: true, wantErr: "context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "hook-" + strings.ReplaceAll(tc.name, " ", "-")
			for range 2 {
				if _, err := backup.Run(ctx, r.Options(t, id)); err != nil {
					t.Fatal(err)
				}
			}
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			opts := r.Options(t, id)
			opts.Prune = &policy
			calls := 0
			hook := func(ctx context.Context, m *catalog.Manifest, _ string) (*catalog.DrillRecord, error) {
				calls++
				// Committed, and nothing pruned yet.
				l := r.Listed(t, id)
				if len(l) != 3 || l[len(l)-1].Name != m.Name && l[0].Name != m.Name {
					t.Errorf("at the drill, %d backups listed; want the 2 seeded and %s", len(l), m.Name)
				}
				for _, b := range l {
					if b.Name == m.Name && b.Manifest == nil {
						t.Errorf("the drill was called before %s was committed", m.Name)
					}
				}
				if tc.cancel {
					cancel()
					return nil, ctx.Err()
				}
				if tc.noRecord {
					return nil, errors.New(`drill of cluster ` + id + ` failed at step "find etcd": no executable etcd-3.5`)
				}
				rec := record(m, tc.passed)
				if err := catalog.PutDrill(ctx, r.Store, r.Layout, rec); err != nil {
					t.Fatal(err)
				}
				if !tc.passed {
					return rec, errors.New("check key count failed")
				}
				return rec, nil
			}
			res, err := drilled.Run(rctx, opts, hook)
			if res == nil {
				t.Fatalf("no result for a committed backup: %v", err)
			}
			if calls != 1 {
				t.Errorf("drill called %d times", calls)
			}
			var be *backup.Error
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Run: %v", err)
			case tc.wantErr != "" && (!errors.As(err, &be) || be.Step() != backup.StepDrill || !strings.Contains(err.Error(), tc.wantErr) ||
				!strings.Contains(err.Error(), id+" committed") || !strings.Contains(err.Error(), res.Manifest.Name)):
				t.Fatalf("Run: %v; want an *Error at step %q naming the cluster, the committed backup and %q", err, backup.StepDrill, tc.wantErr)
			}
			if (res.Drill != nil) != (!tc.noRecord) || (res.DrillErr != nil) != (tc.wantErr != "") {
				t.Errorf("result: drill %+v, drill error %v", res.Drill, res.DrillErr)
			}
			l := r.Listed(t, id)
			if tc.wantPrune {
				if res.Pruned == nil || res.Pruned.Deleted != 2 || len(l) != 1 || l[0].Name != res.Manifest.Name {
					t.Errorf("prune after the drill: %+v; left %d backups, want only %s", res.Pruned, len(l), res.Manifest.Name)
				}
			} else if res.Pruned != nil || len(l) != 3 {
				t.Errorf("a cancelled drill was followed by a prune: %+v, %d backups left", res.Pruned, len(l))
			}
		})
	}
}
