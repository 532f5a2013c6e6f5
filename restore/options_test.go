package restore_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/etcdconn"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/usage"
	"github.com/armada/etcd-recovery/restore"
	"github.com/armada/etcd-recovery/restore/survivor"
)

// Options are validated by the package, before anything is contacted:
// each mistake is a usage error (the CLI's exit 4) naming the option, and
// Run reports it at step "validate" with the chain kept.
func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	two := restore.Targets{InitialCluster: "a=http://127.0.0.1:1,b=http://127.0.0.1:2", DataDirRoot: t.TempDir()}
	ok := restore.Options{Survivor: survivor.Backup{}, ClusterID: "c1", Targets: two, BumpRevision: 1, MarkCompacted: true}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*restore.Options)
		want string
	}{
		{"no cluster", func(o *restore.Options) { o.ClusterID = "" }, "--cluster-id is required"},
		{"bad cluster", func(o *restore.Options) { o.ClusterID = "../x" }, "invalid cluster id"},
		{"no initial cluster", func(o *restore.Options) { o.InitialCluster = "" }, "--initial-cluster is required"},
		{"bad backup", func(o *restore.Options) { o.Backup = "latest" }, "not a backup name"},
		{"bump alone", func(o *restore.Options) { o.MarkCompacted = false }, "--mark-compacted"},
		{"negative parallel", func(o *restore.Options) { o.Parallel = -1 }, "--parallel-data-dirs"},
		{"negative probe", func(o *restore.Options) { o.ProbeTimeout = -time.Second }, "--probe-timeout"},
		{"one of two", func(o *restore.Options) { o.Name = "a" }, "--initial-cluster-token"},
		{"not a member", func(o *restore.Options) { o.Name = "zz" }, "not a member"},
		{"bad old endpoint", func(o *restore.Options) { o.Old = etcdconn.Config{Endpoints: []string{"foo://x"}}; o.NoLive = true }, "foo://x"},
		{"verify a dry run", func(o *restore.Options) {
			o.DryRun, o.Verify.Etcd = true, etcdconn.Config{Endpoints: []string{"http://127.0.0.1:3"}}
		}, "dry run"},
	} {
		o := ok
		tc.edit(&o)
		err := o.Validate()
		if err == nil || !usage.Is(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v (usage error: %t), want a usage error naming %q", tc.name, err, usage.Is(err), tc.want)
			continue
		}
		// Run refuses it the same way, before it needs a store.
		_, rerr := restore.Run(context.Background(), o)
		var re *restore.Error
		if !errors.As(rerr, &re) || re.Step() != restore.StepValidate || !usage.Is(rerr) || !strings.Contains(rerr.Error(), tc.want) {
			t.Errorf("%s: Run = %v, want a step %q usage error", tc.name, rerr, restore.StepValidate)
		}
	}
	// A missing store is the caller's bug, not a usage error.
	if _, err := restore.Run(context.Background(), ok); err == nil || usage.Is(err) {
		t.Errorf("Run without a store: %v, want a non-usage error", err)
	}
}

// Prepare refuses a plan PlanTargets did not fill: the members and the
// revision bump are its, and a snapshot prepared without them would
// reuse revisions.
func TestPrepareNeedsPlannedTargets(t *testing.T) {
	t.Parallel()
	two := restore.Targets{InitialCluster: "a=http://127.0.0.1:1,b=http://127.0.0.1:2", DataDirRoot: t.TempDir()}
	opts := restore.Options{Survivor: survivor.Backup{}, ClusterID: "c1", Targets: two, BumpRevision: 1, MarkCompacted: true, Store: memstore.New()}
	cfg, plan, err := restore.Resolve(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	var re *restore.Error
	if _, err := cfg.Prepare(context.Background(), plan, filepath.Join(t.TempDir(), "snap.db"), true); !errors.As(err, &re) || re.Step() != restore.StepWrite || !strings.Contains(err.Error(), "PlanTargets did not run") {
		t.Fatalf("Prepare without PlanTargets: %v", err)
	}
	if err := cfg.PlanTargets(plan); err != nil {
		t.Fatal(err)
	}
	if plan.BumpRevision != 1 || plan.InitialCluster == "" {
		t.Fatalf("planned: bump %d, initial cluster %q", plan.BumpRevision, plan.InitialCluster)
	}
}
