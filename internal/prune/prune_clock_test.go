package prune_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// A node whose clock runs ahead of the store's, on a real MinIO: a
// committed backup and the journal's first chain that it bases, an older
// backup the rule lets go, a backup in flight (its started marker and a
// multipart upload) and the journal's newest chain. Pruned at the real
// time plus 25 hours, everything the store recorded looks 25 hours old:
// the in-flight folder would be deleted as abandoned, its upload aborted
// and the first chain deleted with its base. With the clock tolerance the
// prune refuses before listing, naming the clock, and the bucket is
// untouched; at the real time the normal plan runs (the old backup goes,
// the rest stays).
func TestPruneRefusesNodeClockAhead(t *testing.T) {
	t.Parallel()
	sr := testfix.NewStoreRig(t)
	mi, bucket, st, l := sr.MinIO, sr.Bucket, sr.Store, sr.Layout
	const id = "skewed"
	now := time.Now().UTC()
	old := folder{cluster: id, at: now.Add(-30 * 24 * time.Hour), kind: catalog.KindScheduled, rev: 50}
	base := folder{cluster: id, at: now.Add(-3 * time.Hour), kind: catalog.KindScheduled, rev: 100}
	newest := folder{cluster: id, at: now.Add(-2 * time.Hour), kind: catalog.KindScheduled, rev: 300}
	for _, f := range []folder{old, base, newest} {
		putGood(t, st, l, f)
	}
	inflight := folder{cluster: id, at: now.Add(-time.Minute), kind: catalog.KindScheduled, incomplete: true}
	putObject(t, st, l.Key(id, inflight.name(), catalog.StartedObject), []byte("started"))
	upID := createUpload(t, mi, bucket, l.Key(id, inflight.name(), catalog.SnapshotObjectZstd))
	firstChain := []string{l.JournalSegmentKey(id, 101, 150), l.JournalSegmentKey(id, 151, 200)}
	for _, k := range append(firstChain, l.JournalSegmentKey(id, 301, 350)) {
		putObject(t, st, k, []byte("segment"))
	}
	before := stateOf(t, st)

	p := retention.DefaultPolicy()
	p.Recent, p.Anchors, p.AnchorDays, p.KeepTodayUpdates = 1, 0, nil, false
	opts := func(at time.Time, tolerance time.Duration) prune.PruneOptions {
		return prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{id}, Policy: p, Now: at, JournalRetention: 24 * time.Hour,
			ClockTolerance: tolerance, Log: testfix.DebugLogger(t)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The node's clock 25 hours ahead: refused, nothing touched, the error
	// names the cluster, the step, both times, the difference and NTP.
	ahead := time.Now().Add(25 * time.Hour)
	rep, err := prune.Prune(ctx, opts(ahead, prune.DefaultClockTolerance))
	var pe *prune.PruneError
	var ce *prune.ClockError
	if !errors.As(err, &pe) || pe.Step() != prune.PruneStepClock || !pe.NothingDeleted || !errors.As(err, &ce) {
		t.Fatalf("prune with the node's clock 25h ahead: report %v, error %v; want a *ClockError at step %q, nothing deleted", rep != nil, err, prune.PruneStepClock)
	}
	if d := ce.Skew(); d < 25*time.Hour-time.Minute || d > 25*time.Hour+time.Minute {
		t.Errorf("skew %s, want about 25h", d)
	}
	for _, want := range []string{"cluster " + id, `step "check the clock"`, "nothing was deleted", ahead.UTC().Format(time.RFC3339),
		ce.Store.UTC().Format(time.RFC3339), "25h0m", "ahead of", "NTP"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if after := stateOf(t, st); !after.equal(before) {
		t.Errorf("a refused prune changed the bucket: %s", diffKeys(after.keys, before.keys))
	}

	// The same clock, the check off (the defect): the in-flight folder,
	// its upload and the first chain would go. A dry run shows it.
	dry := opts(ahead, 0)
	dry.DryRun = true
	rep, err = prune.Prune(ctx, dry)
	if err != nil {
		t.Fatalf("dry run without the clock check: %v", err)
	}
	if a := actionsByName(rep)[id+"/"+inflight.name()]; a.Keep {
		t.Errorf("without the check, the in-flight folder was kept (%s): the test no longer shows the defect", a.Reason)
	}
	if rep.SegmentsPlanned != len(firstChain) || rep.Stale != 1 {
		t.Errorf("without the check: %d segments and %d uploads planned, want %d and 1", rep.SegmentsPlanned, rep.Stale, len(firstChain))
	}

	// At the real time: the normal plan runs.
	rep, err = prune.Prune(ctx, opts(time.Now(), prune.DefaultClockTolerance))
	if err != nil {
		t.Fatalf("prune at the real time: %v", err)
	}
	acts := actionsByName(rep)
	if a := acts[id+"/"+old.name()]; a.Action != prune.ActionDeleted {
		t.Errorf("the old backup: %s (%s), want deleted", a.Action, a.Reason)
	}
	for _, f := range []folder{base, newest, inflight} {
		if a := acts[id+"/"+f.name()]; !a.Keep {
			t.Errorf("%s: %s (%s), want kept", f.name(), a.Action, a.Reason)
		}
	}
	if rep.SegmentsDeleted != 0 || rep.SegmentsKept != 3 || rep.Aborted != 0 {
		t.Errorf("at the real time: segments deleted %d, kept %d, uploads aborted %d; want 0, 3, 0", rep.SegmentsDeleted, rep.SegmentsKept, rep.Aborted)
	}
	if got := listUploadsExact(t, mi, bucket, l.Key(id, inflight.name(), catalog.SnapshotObjectZstd)); len(got) != 1 || got[0] != upID {
		t.Errorf("the in-flight upload: %v, want %s", got, upID)
	}
}

// The store's time cannot be read: the prune fails as a listing failure
// does, deleting nothing; without a tolerance nothing asks for it.
func TestPruneClockUnreadable(t *testing.T) {
	t.Parallel()
	sr := testfix.NewStoreRig(t)
	l := sr.Layout
	const id = "noclock"
	now := time.Now().UTC()
	putGood(t, sr.Store, l, folder{cluster: id, at: now.Add(-30 * 24 * time.Hour), kind: catalog.KindScheduled})
	putGood(t, sr.Store, l, folder{cluster: id, at: now.Add(-time.Hour), kind: catalog.KindScheduled})
	st := faults.Wrap(sr.Store)
	st.Inject(faults.Fault{Op: faults.OpTime, Kind: faults.ServerError})
	before := stateOf(t, sr.Store)
	p := retention.DefaultPolicy()
	p.Recent, p.Anchors, p.AnchorDays = 1, 0, nil
	_, err := prune.Prune(context.Background(), prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{id}, Policy: p,
		ClockTolerance: prune.DefaultClockTolerance})
	var pe *prune.PruneError
	if !errors.As(err, &pe) || pe.Step() != prune.PruneStepClock || !pe.NothingDeleted || !strings.Contains(err.Error(), "read the object store's time") {
		t.Fatalf("prune with an unreadable store time: %v", err)
	}
	if after := stateOf(t, sr.Store); !after.equal(before) {
		t.Errorf("a failed prune changed the bucket: %s", diffKeys(after.keys, before.keys))
	}
	if _, err := prune.Prune(context.Background(), prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{id}, Policy: p}); err != nil {
		t.Errorf("prune without a tolerance: %v", err)
	}
}

// The orphan pass refuses the same way: an orphan whose grace is over
// at the node's clock, 25 hours ahead of the store's, is neither recorded
// nor deleted.
func TestOrphansRefuseNodeClockAhead(t *testing.T) {
	t.Parallel()
	st, l, now := storeRig(t)
	putGood(t, st, l, folder{cluster: "gone", at: now.Add(-time.Hour), kind: catalog.KindScheduled})
	pass := orphanPasses(t, st, l, now)
	before := stateOf(t, st)
	o := pass(time.Now().Add(25 * time.Hour))
	o.ClockTolerance = prune.DefaultClockTolerance
	_, err := prune.Orphans(context.Background(), o)
	var oe *prune.OrphanError
	var ce *prune.ClockError
	if !errors.As(err, &oe) || oe.Step() != prune.OrphanStepClock || !oe.NothingDeleted || !errors.As(err, &ce) ||
		!strings.Contains(err.Error(), "namespace kubx-etcd-01") {
		t.Fatalf("orphan pass with the node's clock 25h ahead: %v", err)
	}
	if after := stateOf(t, st); !after.equal(before) {
		t.Errorf("a refused orphan pass changed the bucket: %s", diffKeys(after.keys, before.keys))
	}
}
