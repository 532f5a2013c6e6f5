package replicate_test

import (
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/replicate"
)

// TestLockedSecondSite: a second site whose bucket has object lock, on a
// MinIO server of its own, and a copier with --second-lock-mode
// governance and its own journal retention. A pass copies a backup
// folder, journal segments and a gap record; every copy carries its
// retention: the backup's objects until retention.LockPlan of the backup
// (its name's time, its kind, the second site's policy), the journal's
// until its time on the primary plus the second site's journal retention
// less the margin. The second site's own credential cannot delete a
// copied version while it is retained (governance, no bypass: the
// bucket's lock refuses, whatever the credential may do otherwise). A
// second pass over the same primary overwrites nothing: every key keeps
// its one version and its retention.
func TestLockedSecondSite(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	r := newRig(t)
	r.second = testfix.Store(t, r.sm, r.sm.NewLockedBucket(t))
	const id, keep, margin = "c1", 48 * time.Hour, time.Hour
	now := time.Now().UTC()
	m := fakeBackup(t, r.primary, r.pl, id, now.Add(-time.Hour))
	s1 := segment(t, r.primary, r.pl, id, m.Name, 11, 20)
	s2 := segment(t, r.primary, r.pl, id, m.Name, 21, 30)
	gap := r.pl.JournalGapKey(id, 31)
	record(t, r.primary, gap)
	lp := retention.LockPolicy{Mode: catalog.LockGovernanceMode, Margin: margin}
	o := r.opts(t)
	o.Lock, o.JournalRetention = lp, keep
	began := time.Now()
	p, err := replicate.Once(ctx, o)
	if err != nil {
		t.Fatalf("Once: %v\n%+v", err, p)
	}
	n := r.checkSame(t)

	// The retention each copy must carry.
	entries, err := catalog.Inventory(ctx, r.primary, r.pl, id)
	if err != nil || len(entries) != 1 {
		t.Fatalf("the primary's inventory: %+v %v", entries, err)
	}
	term := retention.LockPlan(m.Kind, entries[0].Time, retention.AnchorCandidate(entries, entries[0].Time), retention.DefaultPolicy(), lp.WithDefaults())
	if !term.Locked() || !term.Until.After(now.Add(12*time.Hour)) {
		t.Fatalf("the lock plan of %s: %+v; want a lock of hours", m.Name, term)
	}
	want := map[string]time.Time{}
	for _, o := range entries[0].Objects {
		want[r.dst(o.Key)] = term.Until
	}
	for _, k := range []string{s1.Key, s2.Key, gap} {
		mod := primaryTime(t, r, k)
		want[r.dst(k)] = retention.SegmentLockUntil(mod, keep, lp)
	}
	lk := r.second.(store.Locker)
	vr := r.second.(store.Versioner)
	versions := map[string]string{}
	for k, until := range want {
		ret, err := lk.Retention(ctx, k, "")
		if err != nil {
			t.Fatalf("retention of %s: %v", k, err)
		}
		// S3 keeps retain-until to the second.
		if ret.Mode != store.LockGovernance || ret.Until.Before(until.Add(-time.Second)) || ret.Until.After(until.Add(time.Second)) {
			t.Errorf("%s: retention %+v, want governance until %s", k, ret, until)
		}
		vs, err := vr.ListVersions(ctx, k)
		if err != nil || len(vs) != 1 {
			t.Fatalf("versions of %s: %+v %v", k, vs, err)
		}
		versions[k] = vs[0].VersionID
	}
	if len(want) != n {
		t.Fatalf("checked %d copies of the %d on the second site", len(want), n)
	}
	if time.Since(began) > 20*time.Second {
		t.Logf("the pass and the checks took %s", time.Since(began))
	}

	// The second site's own credential cannot delete a retained copy.
	for _, k := range []string{r.dst(r.pl.Key(id, m.Name, m.Snapshot.Object)), r.dst(r.pl.Key(id, m.Name, catalog.ManifestObject)), r.dst(s1.Key)} {
		err := vr.DeleteVersions(ctx, []store.VersionRef{{Key: k, VersionID: versions[k]}}, store.DeleteOptions{})
		if !store.IsLocked(err) {
			t.Errorf("deleting the retained %s with the second site's credential: %v, want store.ErrLocked", k, err)
		}
	}

	// A second pass overwrites nothing.
	p, err = replicate.Once(ctx, o)
	if err != nil || p.Copied != 0 || p.Already == 0 {
		t.Fatalf("the second pass: %v, %d copied, %d already; want nothing copied", err, p.Copied, p.Already)
	}
	for k, v := range versions {
		vs, err := vr.ListVersions(ctx, k)
		if err != nil || len(vs) != 1 || vs[0].VersionID != v {
			t.Errorf("%s after the second pass: versions %+v %v, want only %s", k, vs, err, v)
		}
	}
	r.checkSame(t)
}

// primaryTime is key's time on the primary.
func primaryTime(tb testing.TB, r *rig, key string) time.Time {
	tb.Helper()
	objs, err := r.primary.List(testfix.Context(tb, 10*time.Second), key)
	if err != nil {
		tb.Fatal(err)
	}
	for _, o := range objs {
		if o.Key == key {
			return o.LastModified
		}
	}
	tb.Fatalf("%s is not on the primary", key)
	return time.Time{}
}
