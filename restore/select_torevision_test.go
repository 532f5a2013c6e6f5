package restore_test

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// noEvents is a journal a selection never reads.
type noEvents struct{}

func (noEvents) Leases(context.Context, int64, int64) ([]journal.Lease, error) { return nil, nil }
func (noEvents) Events(context.Context, int64, int64) (iter.Seq2[journal.Event, error], error) {
	return func(func(journal.Event, error) bool) {}, nil
}

// A point-in-time restore to R selects the newest backup at or below R
// (the others set aside, with the reason); none at or below R is a clear
// error naming the oldest; --backup naming one above R is refused; a dry
// run says what it would replay, writing nothing.
func TestSelectToRevision(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1})
	r := newStoreRig(t)
	const id = "select-to-rev"
	var bs []*catalog.Manifest
	for i := range 3 {
		for j := range 3 {
			testenv.PutKeys(t, c.Client(t), fmt.Sprintf("/k%d/%d/", i, j), 5, 8)
		}
		bs = append(bs, r.TakeBackup(t, c, id, catalog.KindScheduled))
	}
	ctx := testfix.Context(t, time.Minute)
	opts := func(rev int64, backup string) restore.Options {
		return restore.Options{ClusterID: id, Store: r.Store, Layout: r.Layout, NoLive: true, Backup: backup, DryRun: true,
			Targets:    restore.Targets{InitialCluster: "r0=http://127.0.0.1:2380", DataDirRoot: t.TempDir()},
			ToRevision: rev, Journal: noEvents{}, Log: testfix.Logger(t)}
	}
	between := bs[1].Revision() + 1
	if between >= bs[2].Revision() {
		t.Fatalf("backups at %d, %d: no revision between", bs[1].Revision(), bs[2].Revision())
	}
	var plan restore.Plan
	sel, err := selectBackup(ctx, opts(between, ""), &plan)
	if err != nil {
		t.Fatal(err)
	}
	if got := sel.Chosen().Name; got != bs[1].Name || !strings.Contains(plan.Reason, fmt.Sprintf("at or below --to-revision %d", between)) {
		t.Fatalf("chose %s (%s), want %s", got, plan.Reason, bs[1].Name)
	}
	aside := false
	for _, ig := range plan.Ignored {
		aside = aside || (ig.Name == bs[2].Name && strings.Contains(ig.Reason, "above --to-revision"))
	}
	if !aside || plan.Survivor == nil || !strings.Contains(plan.Survivor.Skipped, "--to-revision") {
		t.Fatalf("ignored %+v, survivor %+v", plan.Ignored, plan.Survivor)
	}

	_, err = selectBackup(ctx, opts(bs[0].Revision()-1, ""), &restore.Plan{})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("no committed backup of cluster %s at or below revision %d: the oldest, %s", id, bs[0].Revision()-1, bs[0].Name)) {
		t.Fatalf("below every backup: %v", err)
	}
	_, err = selectBackup(ctx, opts(between, bs[2].Name), &restore.Plan{})
	if err == nil || !strings.Contains(err.Error(), "above --to-revision") {
		t.Fatalf("--backup above: %v", err)
	}

	res, err := restore.Run(ctx, opts(between, ""))
	if err != nil {
		t.Fatal(err)
	}
	if res.Replay == nil || res.Replay.ToRevision != between || res.Replay.FromRevision < bs[1].Revision() {
		t.Fatalf("dry run's replay: %+v", res.Replay)
	}
	planned := false
	for _, ch := range res.Checks {
		planned = planned || (ch.Name == "journal" && ch.Status == restore.CheckPlanned && strings.Contains(ch.Detail, "would replay"))
	}
	if !planned {
		t.Fatalf("dry run's checks: %+v", res.Checks)
	}
}
