package replicate_test

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/replicate"
)

// deleteJournal deletes cluster id's whole journal folder on st (the
// journal's retention or the orphan lifecycle).
func deleteJournal(tb testing.TB, ctx context.Context, st store.Store, l catalog.Layout, id string) {
	tb.Helper()
	objs, err := st.List(ctx, l.JournalPrefix(id))
	if err != nil {
		tb.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	if len(keys) == 0 {
		tb.Fatalf("no journal of %s to delete", id)
	}
	if err := st.Delete(ctx, keys); err != nil {
		tb.Fatal(err)
	}
}

// sameOnSecond fails tb unless each primary key is on the second site
// with the primary's sha256.
func (r *rig) sameOnSecond(tb testing.TB, keys ...string) {
	tb.Helper()
	for _, k := range keys {
		want := testfix.SHA256(testfix.ReadObject(tb, r.primary, k))
		rc, err := r.second.Get(context.Background(), r.dst(k))
		if err != nil {
			tb.Errorf("%s is not on the second site: %v", r.dst(k), err)
			continue
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			tb.Fatal(err)
		}
		if got := testfix.SHA256(b); got != want {
			tb.Errorf("%s on the second site: sha256 %s, the primary's %s", r.dst(k), got, want)
		}
	}
}

// waitOnSecond waits (up to bound) until every key is on the second site.
func (r *rig) waitOnSecond(tb testing.TB, ctx context.Context, bound time.Duration, keys ...string) {
	tb.Helper()
	deadline := time.Now().Add(bound)
	for _, k := range keys {
		for {
			_, err := r.second.Get(ctx, r.dst(k))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("%s is not on the second site after %s: %v", r.dst(k), bound, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestOnceCopiesSegmentsBehindTheWatermark: a pass copies a cluster's
// journal; the journal is then deleted on the primary and the cluster
// recreated (a backup, new segments of lower revisions than the old
// watermark). A new pass (a restart, from the status record) copies the
// new segments, and the record's watermark is the new journal's.
func TestOnceCopiesSegmentsBehindTheWatermark(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	const id = "c1"
	r, now, m := newBackedUpRig(t, id)
	segment(t, r.primary, r.pl, id, m.Name, 11, 20)
	old := segment(t, r.primary, r.pl, id, m.Name, 21, 30)
	if _, err := replicate.Once(ctx, r.opts(t)); err != nil {
		t.Fatal(err)
	}
	r.checkSame(t)

	deleteJournal(t, ctx, r.primary, r.pl, id)
	m2 := fakeBackup(t, r.primary, r.pl, id, now.Add(-time.Minute))
	n1 := segment(t, r.primary, r.pl, id, m2.Name, 11, 15)
	n2 := segment(t, r.primary, r.pl, id, m2.Name, 16, 18)
	if n2.Key >= old.Key {
		t.Fatalf("the new segment %s does not sort before the old watermark %s", n2.Key, old.Key)
	}
	p, err := replicate.Once(ctx, r.opts(t))
	if err != nil {
		t.Fatalf("Once: %v", err)
	}
	r.sameOnSecond(t, n1.Key, n2.Key, r.pl.Key(id, m2.Name, catalog.ManifestObject))
	st, err := replicate.ReadStatus(ctx, r.second, r.sl, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if cl := st.Clusters[id]; cl.JournalLastSegment != n2.Key || cl.JournalLastRevision != 18 || st.Pending != 0 {
		t.Errorf("status: %+v; want the watermark %s (revision 18), nothing pending (pass %+v)", cl, n2.Key, p)
	}
}

// TestRunPollFindsTheWatermarkGone: the loop, with full passes and audits
// far apart (1 h), copies a journal; the journal is deleted on the primary
// and the cluster's new history writes segments below the old watermark.
// The next journal polls find the watermark gone and copy the new segments
// within seconds; a segment after them follows.
func TestRunPollFindsTheWatermarkGone(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	const id = "c1"
	r, _, m := newBackedUpRig(t, id)
	s1 := segment(t, r.primary, r.pl, id, m.Name, 11, 20)
	s2 := segment(t, r.primary, r.pl, id, m.Name, 21, 30)
	o := r.opts(t)
	o.JournalInterval, o.ScanInterval, o.AuditInterval, o.StatusEvery = 100*time.Millisecond, time.Hour, time.Hour, 200*time.Millisecond
	cp := runInBackground(t, ctx, o)
	r.waitOnSecond(t, ctx, 10*time.Second, s1.Key, s2.Key)

	deleteJournal(t, ctx, r.primary, r.pl, id)
	n1 := segment(t, r.primary, r.pl, id, m.Name, 11, 15)
	start := time.Now()
	r.waitOnSecond(t, ctx, 5*time.Second, n1.Key)
	n2 := segment(t, r.primary, r.pl, id, m.Name, 16, 18)
	r.waitOnSecond(t, ctx, 5*time.Second, n2.Key)
	t.Logf("the new journal on the second site %s after it was written below the old watermark", time.Since(start).Round(time.Millisecond))
	cp.stop(t)
	r.sameOnSecond(t, n1.Key, n2.Key)
}

// TestRunAuditCopiesKeysBehindTheWatermark: a segment that lands on the
// primary behind the watermark while the watermark is still there (no poll
// lists it) is copied by the periodic audit.
func TestRunAuditCopiesKeysBehindTheWatermark(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	const id = "c1"
	r, _, m := newBackedUpRig(t, id)
	s := segment(t, r.primary, r.pl, id, m.Name, 21, 30)
	o := r.opts(t)
	o.JournalInterval, o.ScanInterval, o.AuditInterval, o.StatusEvery = 100*time.Millisecond, time.Hour, time.Second, 200*time.Millisecond
	cp := runInBackground(t, ctx, o)
	r.waitOnSecond(t, ctx, 10*time.Second, s.Key)
	behind := segment(t, r.primary, r.pl, id, m.Name, 11, 20)
	r.waitOnSecond(t, ctx, 5*time.Second, behind.Key)
	cp.stop(t)
	r.sameOnSecond(t, behind.Key)
}

// TestStatusRecordIsNotTrusted: a status record planted on the second site
// (by anyone holding its credential) with a watermark past every segment
// and a made-up failure, of this source or of another, stops no copy: the
// pass copies every segment, its watermark is the primary's, and the
// made-up failure is not kept.
func TestStatusRecordIsNotTrusted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, source string }{{"forged", ""}, {"another source", "bucket elsewhere/other/"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testfix.Context(t, 60*time.Second)
			const id = "c1"
			r, now, m := newBackedUpRig(t, id)
			segment(t, r.primary, r.pl, id, m.Name, 11, 20)
			last := segment(t, r.primary, r.pl, id, m.Name, 21, 30)
			source := tc.source
			if source == "" {
				source = catalog.BucketName(r.primary) + "/" + r.pl.RootPrefix()
			}
			planted := r.pl.JournalPrefix(id) + "9999999999999999-9999999999999999.seg"
			made := r.dst(r.pl.JournalGapKey(id, 5)) // on neither site
			if err := catalog.WriteReplicaStatus(ctx, r.second, r.sl, catalog.ReplicaStatus{Copier: "forger", Source: source, Updated: now, SyncedAt: now,
				Failures: []catalog.ReplicaFailure{{Key: made, Reason: "made up", At: now}},
				Clusters: map[string]catalog.ReplicaCluster{id: {JournalSyncedAt: now, JournalLastRevision: 9999999999999999, JournalLastSegment: planted, NewestBackup: "x"}}}); err != nil {
				t.Fatal(err)
			}
			if p, err := replicate.Once(ctx, r.opts(t)); err != nil {
				t.Fatalf("Once: %v\n%+v", err, p)
			}
			r.checkSame(t)
			st, err := replicate.ReadStatus(ctx, r.second, r.sl, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if cl := st.Clusters[id]; cl.JournalLastSegment != last.Key || cl.NewestBackup != m.Name || len(st.Failures) != 0 || st.Source == tc.source {
				t.Errorf("status: source %s, failures %+v, cluster %+v; want the watermark %s, newest backup %s, no failure", st.Source, st.Failures, cl, last.Key, m.Name)
			}
		})
	}
}

// TestVerificationFailureDoesNotHoldTheLag: one object that fails
// verification (forged on the second site) is a failure of the pass, and
// the pass still advances SyncedAt (the lag alert is not stuck on; the
// failure has its own alert).
func TestVerificationFailureDoesNotHoldTheLag(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	r := newRig(t)
	now := time.Now().UTC()
	a := fakeBackup(t, r.primary, r.pl, "c1", now.Add(-time.Hour))
	fakeBackup(t, r.primary, r.pl, "c2", now.Add(-time.Minute))
	aSnap := r.pl.Key("c1", a.Name, a.Snapshot.Object)
	put(t, r.second, r.dst(aSnap), []byte("forged on the second site"))
	start := time.Now().Add(-time.Second)
	p, err := replicate.Once(ctx, r.opts(t))
	if err == nil || len(p.Failures) != 1 || len(p.Errors) != 0 {
		t.Fatalf("want one verification failure: %v, %+v", err, p)
	}
	st, err := replicate.ReadStatus(ctx, r.second, r.sl, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.SyncedAt.Before(start) || len(st.Failures) != 1 || st.Failures[0].Key != r.dst(aSnap) {
		t.Errorf("status: synced at %s (the pass started after %s), failures %+v", st.SyncedAt, start, st.Failures)
	}
}

// TestPendingBytes: segments the second site refuses (a 503 on their PUT)
// are pending in the status record, with their stored bytes.
func TestPendingBytes(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	r := newRig(t)
	now := time.Now().UTC()
	m := fakeBackup(t, r.primary, r.pl, "c1", now.Add(-time.Hour))
	s1 := segment(t, r.primary, r.pl, "c1", m.Name, 11, 20)
	s2 := segment(t, r.primary, r.pl, "c1", m.Name, 21, 30)
	var want int64
	objs, err := r.primary.List(ctx, r.pl.JournalPrefix("c1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Key == s1.Key || o.Key == s2.Key {
			want += o.Size
		}
	}
	sec := faults.Wrap(r.second)
	sec.Inject(faults.Fault{Op: faults.OpPut, KeySuffix: ".seg", Kind: faults.ServerError})
	o := r.opts(t)
	o.Second = sec
	if p, err := replicate.Once(ctx, o); err == nil || len(p.Errors) == 0 {
		t.Fatalf("a pass whose segments were refused: %v, %+v", err, p)
	}
	st, err := replicate.ReadStatus(ctx, r.second, r.sl, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 2 || st.PendingBytes != want || want == 0 || !st.SyncedAt.IsZero() {
		t.Errorf("status: %d pending, %d bytes, synced at %s; want the 2 segments' %d bytes pending, not synced", st.Pending, st.PendingBytes, st.SyncedAt, want)
	}
}

// TestOrderAndBookkeeping: a gap record is copied before the segment past
// it (the second site's create calls, in order); a manifest deleted on the
// primary between the listing and its read is neither copied nor the
// newest backup; an escrow a manifest names that is not on the primary is
// a failure (the backup is copied without it).
func TestOrderAndBookkeeping(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	r := newRig(t)
	now := time.Now().UTC()
	const id = "c1"
	a := fakeBackup(t, r.primary, r.pl, id, now.Add(-2*time.Hour))
	sealed := fakeBackup(t, r.primary, r.pl, id, now.Add(-time.Hour))
	gone := fakeBackup(t, r.primary, r.pl, id, now.Add(-time.Minute))
	// sealed names an escrow never stored on the primary.
	addr := strings.Repeat("ab", 32)
	sealed.Escrow = &catalog.EscrowRef{State: catalog.EscrowPresent, Address: addr, StoredSize: 10, StoredSHA256: strings.Repeat("cd", 32),
		RawSHA256: strings.Repeat("ef", 32), Recipients: []string{"age1test"}}
	b, err := catalog.MarshalManifest(sealed)
	if err != nil {
		t.Fatal(err)
	}
	put(t, r.primary, r.pl.Key(id, sealed.Name, catalog.ManifestObject), b)
	segment(t, r.primary, r.pl, id, a.Name, 11, 20)
	gap := r.pl.JournalGapKey(id, 21)
	record(t, r.primary, gap)
	past := segment(t, r.primary, r.pl, id, a.Name, 31, 40)

	goneManifest := r.pl.Key(id, gone.Name, catalog.ManifestObject)
	prim := faults.Wrap(r.primary)
	prim.Inject(faults.Fault{Op: faults.OpGet, Key: goneManifest, Kind: faults.NotFound})
	sec := faults.Wrap(r.second)
	o := r.opts(t)
	o.Primary, o.Second = prim, sec
	p, err := replicate.Once(ctx, o)
	escrow := r.pl.EscrowKey(id, addr)
	if err == nil || len(p.Failures) != 1 || p.Failures[0].Key != escrow || len(p.Errors) != 0 {
		t.Errorf("want the missing escrow as the one failure: %v, %+v", err, p)
	}
	var order []string
	for _, c := range sec.Calls() {
		if c.Op == faults.OpPut && (c.Key == r.dst(gap) || c.Key == r.dst(past.Key)) {
			order = append(order, c.Key)
		}
	}
	if !slices.Equal(order, []string{r.dst(gap), r.dst(past.Key)}) {
		t.Errorf("the second site's creates of the gap and the segment past it: %q", order)
	}
	r.sameOnSecond(t, r.pl.Key(id, sealed.Name, catalog.ManifestObject), past.Key, gap)
	if _, err := r.second.Get(ctx, r.dst(goneManifest)); !store.IsNotFound(err) {
		t.Errorf("the deleted manifest on the second site: %v", err)
	}
	st, err := replicate.ReadStatus(ctx, r.second, r.sl, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if cl := st.Clusters[id]; cl.NewestBackup != sealed.Name || len(st.Failures) != 1 || st.Failures[0].Key != escrow {
		t.Errorf("status: newest backup %s (want %s, not the deleted %s), failures %+v", cl.NewestBackup, sealed.Name, gone.Name, st.Failures)
	}
	for _, c := range p.Clusters {
		if c.NewestBackup == gone.Name {
			t.Errorf("the pass reports the deleted backup as the newest: %+v", c)
		}
	}
}

// exactPut is a second site whose create-only PUT of some keys reads
// exactly their declared size and no further (as a store told the
// object's length does).
type exactPut struct {
	store.Store
	size map[string]int64
}

func (s exactPut) PutIfAbsent(ctx context.Context, key string, r io.Reader) (int64, error) {
	if n, ok := s.size[key]; ok {
		r = io.LimitReader(r, n)
	}
	return s.Store.(store.Conditional).PutIfAbsent(ctx, key, r)
}

// TestMismatchFoundByTheDrainFailsTheCopy: a primary snapshot longer than
// its manifest says (bytes appended to it) and a second site whose PUT
// stops at the declared size, before the reader's end where the manifest
// is checked: the mismatch found while draining fails the copy as the
// primary's object not matching its manifest (not as a bad read-back of
// the second site), and the backup's manifest is not copied.
func TestMismatchFoundByTheDrainFailsTheCopy(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	r := newRig(t)
	m := fakeBackup(t, r.primary, r.pl, "c1", time.Now().UTC().Add(-time.Hour))
	snap := r.pl.Key("c1", m.Name, m.Snapshot.Object)
	put(t, r.primary, snap, append(testfix.ReadObject(t, r.primary, snap), "appended on the primary"...))
	o := r.opts(t)
	o.Second = exactPut{r.second, map[string]int64{r.dst(snap): m.Snapshot.StoredSize}}
	p, err := replicate.Once(ctx, o)
	if err == nil || len(p.Failures) != 1 || p.Failures[0].Key != snap || !strings.Contains(p.Failures[0].Reason, "manifest says") {
		t.Fatalf("want the damaged snapshot as the one failure: %v, %+v", err, p)
	}
	if _, err := r.second.Get(ctx, r.dst(r.pl.Key("c1", m.Name, catalog.ManifestObject))); !store.IsNotFound(err) {
		t.Errorf("the manifest of the damaged backup was copied: %v", err)
	}
}

// TestRecordFailuresAreCheckedAgain: a segment forged on the second site
// with the primary's size is trusted by an audit (it compares listings);
// once the status record names it as a failure, a restarted copier
// compares it byte for byte and finds it again, while a failure the record
// names that is no longer found is dropped.
func TestRecordFailuresAreCheckedAgain(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	r := newRig(t)
	const id = "c1"
	m := fakeBackup(t, r.primary, r.pl, id, time.Now().UTC().Add(-time.Hour))
	s := segment(t, r.primary, r.pl, id, m.Name, 11, 20)
	forged := testfix.ReadObject(t, r.primary, s.Key)
	forged[len(forged)/2] ^= 0xff
	put(t, r.second, r.dst(s.Key), forged)
	if p, err := replicate.Once(ctx, r.opts(t)); err != nil || len(p.Failures) != 0 {
		t.Fatalf("the first pass (trusting the same size): %v, %+v", err, p)
	}
	st, err := replicate.ReadStatus(ctx, r.second, r.sl, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	stale := r.dst(r.pl.JournalGapKey(id, 5))
	st.Failures = []catalog.ReplicaFailure{{Key: r.dst(s.Key), Reason: "forged", At: st.Updated}, {Key: stale, Reason: "resolved since", At: st.Updated}}
	if err := catalog.WriteReplicaStatus(ctx, r.second, r.sl, st.ReplicaStatus); err != nil {
		t.Fatal(err)
	}
	p, err := replicate.Once(ctx, r.opts(t))
	if err == nil || len(p.Failures) != 1 || p.Failures[0].Key != r.dst(s.Key) {
		t.Fatalf("the restarted pass: %v, failures %+v; want the forged segment found again", err, p.Failures)
	}
	st, err = replicate.ReadStatus(ctx, r.second, r.sl, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Failures) != 1 || st.Failures[0].Key != r.dst(s.Key) || st.Failures[0].Reason == "forged" {
		t.Errorf("the status record's failures %+v; want the forged segment's, found again", st.Failures)
	}
	if got := testfix.ReadObject(t, r.second, r.dst(s.Key)); !bytes.Equal(got, forged) {
		t.Errorf("the forged segment was overwritten")
	}
}
