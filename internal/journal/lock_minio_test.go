package journal_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/memstore"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// SegmentLockUntil: the journal retention less the lock's margin from the
// write, never longer than retention; nothing without an explicit mode
// or when the margin eats the retention.
func TestSegmentLockUntil(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	gov := retention.LockPolicy{Mode: catalog.LockGovernanceMode}
	for _, c := range []struct {
		name      string
		retention time.Duration
		lp        retention.LockPolicy
		want      time.Time
	}{
		{"default margin", 7 * 24 * time.Hour, gov, at.Add(7*24*time.Hour - retention.DefaultLockMargin)},
		{"own margin", 48 * time.Hour, retention.LockPolicy{Mode: catalog.LockComplianceMode, Margin: 2 * time.Hour}, at.Add(46 * time.Hour)},
		{"default retention", 0, gov, at.Add(retention.DefaultJournalRetention - retention.DefaultLockMargin)},
		{"margin eats the retention", time.Hour, gov, time.Time{}},
		{"bucket default: not per segment", 48 * time.Hour, retention.LockPolicy{Mode: catalog.LockBucketDefault}, time.Time{}},
		{"off", 48 * time.Hour, retention.LockPolicy{}, time.Time{}},
	} {
		if got := retention.SegmentLockUntil(at, c.retention, c.lp); !got.Equal(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// A journal with a lock mode on a bucket without object lock refuses to
// start, naming the cluster and the bucket, before it watches anything.
func TestCaptureLockNeedsALockedBucket(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 30*time.Second)
	_, cli := startEtcd(t, testenv.V35)
	o := captureOptions(t, cli, memstore.New(), memLayout, objectio.Encoding{}, 1)
	o.Lock = retention.LockPolicy{Mode: catalog.LockGovernanceMode}
	err := journal.Capture(ctx, o)
	if err == nil || !strings.Contains(err.Error(), "no object lock") || !strings.Contains(err.Error(), "c1") {
		t.Fatalf("got %v, want a refusal naming the bucket without object lock", err)
	}
}

// Segments under object lock, on real etcd 3.5 and MinIO with a locked
// bucket: a journal with a governance lock writes every segment locked
// until its write + the journal retention - the margin; the tool's
// credential cannot delete a segment's version; prune retains (does not
// delete, does not fail on) a segment journal retention lets go while it
// is locked, and deletes it once the lock ended.
func TestCaptureLocksSegments(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 2*time.Minute)
	_, cli := startEtcd(t, testenv.V35)
	mi := testenv.SharedMinIO(t)
	st := testfix.Store(t, mi, mi.NewLockedBucket(t))
	l := catalog.Layout{Prefix: testenv.Prefix(t)}
	const id = "lk"
	r, err := cli.Put(ctx, "/k/base", "0")
	if err != nil {
		t.Fatal(err)
	}
	base := r.Header.Revision
	const keep, margin = 7 * time.Second, time.Second
	o := captureOptions(t, cli, st, l, zstdEnc, base)
	o.ClusterID, o.SegmentInterval = id, 300*time.Millisecond
	o.Lock = retention.LockPolicy{Mode: catalog.LockGovernanceMode, Margin: margin}
	o.JournalRetention = keep
	began := time.Now()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- journal.Capture(cctx, o) }()
	var ch *journal.Chain
	waitReach := func(rev int64) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if ch, err = journal.ListSegments(ctx, st, l, id, base); err != nil {
				t.Fatal(err)
			}
			if ch.Reach >= rev || time.Now().After(deadline) {
				return
			}
		}
	}
	var last int64
	for i := range 6 {
		r, err := cli.Put(ctx, fmt.Sprintf("/k/%d", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
		if i == 0 {
			// The first segment is written before the other puts: a
			// capture that started late (a loaded machine) would
			// otherwise catch them all up into one.
			waitReach(last)
		}
		time.Sleep(200 * time.Millisecond)
	}
	waitReach(last)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	if ch.Reach < last || len(ch.Segments) < 2 {
		t.Fatalf("the journal reaches %d in %d segments, want %d in 2 or more", ch.Reach, len(ch.Segments), last)
	}

	// Every segment locked, governance, for the retention less the margin
	// from its write (S3 keeps retain-until to the second).
	var lk store.Locker = st
	for _, s := range ch.Segments {
		ret, err := lk.Retention(ctx, s.Key, "")
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := began.Add(keep-margin-time.Second), ended.Add(keep-margin+time.Second)
		if ret.Mode != store.LockGovernance || ret.Until.Before(lo) || ret.Until.After(hi) {
			t.Fatalf("segment %s: retention %+v, want governance until between %s and %s", s.Key, ret, lo, hi)
		}
	}
	first := ch.Segments[0]

	// The tool's credential cannot delete the locked version.
	vs, err := store.Versioner(st).ListVersions(ctx, first.Key)
	if err != nil || len(vs) != 1 {
		t.Fatalf("versions of %s: %+v %v", first.Key, vs, err)
	}
	if err := store.Versioner(st).DeleteVersions(ctx, []store.VersionRef{{Key: first.Key, VersionID: vs[0].VersionID}}, store.DeleteOptions{}); !store.IsLocked(err) {
		t.Fatalf("deleting the locked segment's version: %v, want store.ErrLocked", err)
	}

	// Backups: b1 at the journal's base, b2 inside it (its revision the
	// first segment's last): journal retention lets the first segment go
	// once the window starts at b2.
	now := time.Now().UTC()
	putBackup(t, st, l, id, now.Add(-2*time.Hour), base)
	putBackup(t, st, l, id, now.Add(-time.Hour), first.LastRev)
	policy := retention.DefaultPolicy()
	policy.Recent, policy.Anchors, policy.AnchorDays = 1, 0, nil
	runPrune := func() *prune.PruneReport {
		t.Helper()
		rep, err := prune.Prune(ctx, prune.PruneOptions{Store: st, Layout: l, ClusterIDs: []string{id}, Policy: policy, Now: time.Now(), JournalRetention: time.Millisecond})
		if err != nil {
			t.Fatalf("prune: %v", err)
		}
		return rep
	}
	rep := runPrune()
	var acts []prune.SegmentAction
	for _, c := range rep.Clusters {
		acts = append(acts, c.Segments...)
	}
	i := slices.IndexFunc(acts, func(a prune.SegmentAction) bool { return a.Key == first.Key })
	if i < 0 || acts[i].Action != prune.ActionRetained || !strings.Contains(acts[i].Reason, "retained until") ||
		rep.SegmentsRetained != 1 || rep.SegmentsDeleted != 0 || rep.SegmentsFailed != 0 {
		t.Fatalf("prune while the first segment is locked: %+v (retained %d, deleted %d, failed %d)", acts, rep.SegmentsRetained, rep.SegmentsDeleted, rep.SegmentsFailed)
	}
	t.Logf("prune while locked: %s", acts[i].Reason)
	if !slices.Contains(journalKeys(t, st, l, id), first.Key) {
		t.Fatalf("the retained segment %s is hidden", first.Key)
	}

	// Once the lock ended, prune deletes it.
	ret, _ := lk.Retention(ctx, first.Key, "")
	if d := time.Until(ret.Until) + 1500*time.Millisecond; d > 0 {
		time.Sleep(d)
	}
	rep = runPrune()
	if rep.SegmentsDeleted != 1 || rep.SegmentsRetained != 0 || slices.Contains(journalKeys(t, st, l, id), first.Key) {
		t.Fatalf("prune after the lock: deleted %d, retained %d; keys %v", rep.SegmentsDeleted, rep.SegmentsRetained, journalKeys(t, st, l, id))
	}
}
