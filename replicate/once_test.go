package replicate_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/faults"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/replicate"
)

// TestOnceCopiesEverythingComplete: on real etcd 3.5 (mutual TLS) and two
// MinIO servers, a pass copies a plain backup, an encrypted one with its
// escrow, a drill record, journal segments, a gap and a proof record and
// the owner record, each with the primary's sha256; it copies no staged
// plaintext, no restore run's record, no undelete record (key names of a
// live cluster's operations, deleted with the cluster's last backup on the
// primary: a copy would outlive them), no primary _replica/ object and no
// folder in flight. The second site's inventory is the primary's. A second
// pass (a restart: a new copier) copies nothing and finds everything.
func TestOnceCopiesEverythingComplete(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 90*time.Second)
	r := newRig(t)
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/registry/", 20, 64)
	const id = "c1"
	take := func(o backup.Options) *catalog.Manifest {
		t.Helper()
		o.ClusterID, o.Etcd, o.Store, o.Layout, o.ProbeTimeout, o.Log = id, testfix.EtcdConfig(c), r.primary, r.pl, 3*time.Second, testfix.Logger(t)
		if o.Kind == "" {
			o.Kind = catalog.KindScheduled
		}
		res, err := backup.Run(ctx, o)
		if err != nil {
			t.Fatalf("backup: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
		return res.Manifest
	}
	plain := take(backup.Options{})
	key := testfix.NewAgeKey(t)
	sealed := take(backup.Options{Kind: catalog.KindManual, Recipients: testfix.RecipientsOf(t, key),
		Escrow: func(context.Context) (*catalog.EscrowList, []string, error) {
			return testfix.EscrowList(t, c.PKI, "kubx-etcd-01", id), nil, nil
		}})
	if !sealed.Escrow.Stored() {
		t.Fatalf("the encrypted backup stored no escrow: %+v", sealed.Escrow)
	}
	put(t, r.primary, r.pl.Key(id, plain.Name, catalog.DrillObject), []byte(`{"format":1}`))
	s1 := segment(t, r.primary, r.pl, id, plain.Name, plain.Revision()+1, plain.Revision()+5)
	s2 := segment(t, r.primary, r.pl, id, plain.Name, plain.Revision()+6, plain.Revision()+9)
	record(t, r.primary, r.pl.JournalGapKey(id, plain.Revision()+10))
	record(t, r.primary, r.pl.JournalProofKey(id, sealed.Name))
	record(t, r.primary, catalog.OwnerKey(r.pl))
	// Never copied: plaintext staged for etcd-operator, a restore run's
	// record, an undelete's records, the primary's own _replica/, a folder
	// in flight.
	notCopied := []string{
		r.pl.StagedKey(id, plain.Name),
		r.pl.RootPrefix() + "_restores/20260101T000000.000Z-0a1b2c3d/plan.json",
		r.pl.UndeleteRecordKey(id, catalog.NewUndeleteRunID(time.Now()), true),
		r.pl.UndeleteRecordKey(id, catalog.NewUndeleteRunID(time.Now()), false),
		r.pl.ReplicaStatusKey(),
		r.pl.Key(id, catalog.NewBackupName(time.Now(), catalog.KindScheduled), catalog.StartedObject),
	}
	for _, k := range notCopied {
		put(t, r.primary, k, []byte("not for the second site"))
	}

	p, err := replicate.Once(ctx, r.opts(t))
	if err != nil {
		t.Fatalf("Once: %v\n%+v", err, p)
	}
	n := r.checkSame(t)
	if p.Copied != n || p.Already != 0 || len(p.Failures) != 0 {
		t.Errorf("pass: %d copied, %d already, failures %v; want the %d objects copied", p.Copied, p.Already, p.Failures, n)
	}
	if p.VerifyBytes < p.CopiedBytes {
		t.Errorf("read back %d bytes of the %d copied", p.VerifyBytes, p.CopiedBytes)
	}
	for _, k := range notCopied {
		if k == r.pl.ReplicaStatusKey() {
			// The second site's own record is there: the copier's, not
			// the primary's.
			if b := testfix.ReadObject(t, r.second, r.dst(k)); string(b) == "not for the second site" {
				t.Errorf("the primary's %s was copied", k)
			}
			continue
		}
		if _, err := r.second.Get(ctx, r.dst(k)); !store.IsNotFound(err) {
			t.Errorf("%s on the second site: %v", r.dst(k), err)
		}
	}
	// list reads the second site as the primary.
	pe, err := catalog.Inventory(ctx, r.primary, r.pl, id)
	if err != nil {
		t.Fatal(err)
	}
	se, err := catalog.Inventory(ctx, r.second, r.sl, id)
	if err != nil {
		t.Fatal(err)
	}
	committed := func(es []catalog.Entry, l catalog.Layout) (out []string) {
		for _, e := range es {
			if e.Committed {
				for _, o := range e.Objects {
					out = append(out, o.Key[len(l.RootPrefix()):])
				}
			}
		}
		return out
	}
	if a, b := committed(pe, r.pl), committed(se, r.sl); !slices.Equal(a, b) || len(a) == 0 {
		t.Errorf("the second site's backups %q, the primary's %q", b, a)
	}
	st, err := replicate.ReadStatus(ctx, r.second, r.sl, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if cl := st.Clusters[id]; cl.JournalLastRevision != s2.LastRev || cl.JournalLastSegment != s2.Key || cl.NewestBackup != sealed.Name || st.SyncedAt.IsZero() || st.Pending != 0 {
		t.Errorf("status record: %+v (cluster %+v); want the journal at %d (%s; before it %s), newest backup %s", st.ReplicaStatus, cl, s2.LastRev, s2.Key, s1.Key, sealed.Name)
	}

	// A restart: nothing to copy, everything found with the same bytes.
	p, err = replicate.Once(ctx, r.opts(t))
	if err != nil || p.Copied != 0 || p.Already == 0 {
		t.Errorf("the second pass: %v, %d copied, %d already (want none copied)", err, p.Copied, p.Already)
	}
	r.checkSame(t)
}

// TestPrimaryWipedDeletesNothing: the primary's credential deletes every
// object on the primary; the copier's next passes and its loop, holding the
// second site through a wrapper that records every call, issue no delete
// there, and the second site holds everything it held.
func TestPrimaryWipedDeletesNothing(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	r := newRig(t)
	now := time.Now().UTC()
	m := fakeBackup(t, r.primary, r.pl, "c1", now.Add(-time.Hour))
	fakeBackup(t, r.primary, r.pl, "c2", now.Add(-time.Minute))
	segment(t, r.primary, r.pl, "c1", m.Name, 11, 20)
	segment(t, r.primary, r.pl, "c1", m.Name, 21, 30)
	if _, err := replicate.Once(ctx, r.opts(t)); err != nil {
		t.Fatal(err)
	}
	n := r.checkSame(t)
	before := testfix.Sums(t, r.second, r.sl)

	objs, err := r.primary.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	if err := r.primary.Delete(ctx, keys); err != nil {
		t.Fatal(err)
	}
	if left, _ := r.primary.List(ctx, ""); len(left) != 0 {
		t.Fatalf("%d objects left on the primary", len(left))
	}

	rec := faults.Wrap(r.second)
	o := r.opts(t)
	o.Second = rec
	if _, err := replicate.Once(ctx, o); err != nil {
		t.Fatalf("a pass over the wiped primary: %v", err)
	}
	o.JournalInterval, o.ScanInterval, o.StatusEvery = 100*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := replicate.Run(rctx, o); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v", err)
	}
	calls := rec.Calls()
	for _, c := range calls {
		if c.Op == faults.OpDelete || c.Op == faults.OpDeleteVersion {
			t.Errorf("the copier deleted on the second site: %+v", c)
		}
	}
	if rec.CountCalls(faults.OpPut, "status.json") < 2 {
		t.Errorf("the loop wrote the status record %d times", rec.CountCalls(faults.OpPut, "status.json"))
	}
	after := testfix.Sums(t, r.second, r.sl)
	delete(before, r.sl.ReplicaStatusKey())
	delete(after, r.sl.ReplicaStatusKey())
	if d := diff(before, after); d != "" || len(after) != n {
		t.Errorf("the second site changed after the primary was wiped (%d calls): %s", len(calls), d)
	}
}

// TestVerificationFailuresAreKept: an object already on the second site
// with other bytes (forged there) is reported and never overwritten, and
// its backup's manifest is not copied; a primary object that does not
// match its manifest (damaged or forged there) is not copied and is
// reported; a forged segment is reported and the journal goes on past it.
// The status record names all three.
func TestVerificationFailuresAreKept(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 60*time.Second)
	r := newRig(t)
	now := time.Now().UTC()
	a := fakeBackup(t, r.primary, r.pl, "c1", now.Add(-2*time.Hour))
	b := fakeBackup(t, r.primary, r.pl, "c1", now.Add(-time.Hour))
	good := fakeBackup(t, r.primary, r.pl, "c2", now.Add(-time.Hour))
	segment(t, r.primary, r.pl, "c1", a.Name, 11, 20)
	forgedSeg := segment(t, r.primary, r.pl, "c1", a.Name, 21, 30)
	last := segment(t, r.primary, r.pl, "c1", a.Name, 31, 40)

	aSnap := r.pl.Key("c1", a.Name, a.Snapshot.Object)
	forged := []byte("forged on the second site")
	put(t, r.second, r.dst(aSnap), forged)
	put(t, r.second, r.dst(forgedSeg.Key), forged)
	bSnap := r.pl.Key("c1", b.Name, b.Snapshot.Object)
	damaged := testfix.ReadObject(t, r.primary, bSnap)
	damaged[100] ^= 0xff
	put(t, r.primary, bSnap, damaged)

	p, err := replicate.Once(ctx, r.opts(t))
	if err == nil {
		t.Fatalf("a pass with three verification failures succeeded: %+v", p)
	}
	var failed []string
	for _, f := range p.Failures {
		failed = append(failed, f.Key)
	}
	slices.Sort(failed)
	want := []string{bSnap, r.dst(forgedSeg.Key), r.dst(aSnap)}
	slices.Sort(want)
	if !slices.Equal(failed, want) {
		t.Errorf("failures %q, want %q (err %v)", failed, want, err)
	}
	if got := testfix.ReadObject(t, r.second, r.dst(aSnap)); string(got) != string(forged) {
		t.Errorf("the forged snapshot on the second site was overwritten")
	}
	if got := testfix.ReadObject(t, r.second, r.dst(forgedSeg.Key)); string(got) != string(forged) {
		t.Errorf("the forged segment on the second site was overwritten")
	}
	for _, k := range []string{r.pl.Key("c1", a.Name, catalog.ManifestObject), bSnap, r.pl.Key("c1", b.Name, catalog.ManifestObject)} {
		if _, err := r.second.Get(ctx, r.dst(k)); !store.IsNotFound(err) {
			t.Errorf("%s was copied: %v", r.dst(k), err)
		}
	}
	// The rest went on: the other cluster's backup, the segment after the
	// forged one.
	for _, k := range []string{r.pl.Key("c2", good.Name, catalog.ManifestObject), last.Key} {
		if _, err := r.second.Get(ctx, r.dst(k)); err != nil {
			t.Errorf("%s was not copied: %v", r.dst(k), err)
		}
	}
	st, err := replicate.ReadStatus(ctx, r.second, r.sl, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var recorded []string
	for _, f := range st.Failures {
		recorded = append(recorded, f.Key)
	}
	slices.Sort(recorded)
	if !slices.Equal(recorded, want) {
		t.Errorf("the status record's failures %q, want %q", recorded, want)
	}
	// A restart still reports them (from the record and by comparing).
	if p, err := replicate.Once(ctx, r.opts(t)); err == nil || len(p.Failures) < 2 {
		t.Errorf("a second pass: %v, failures %+v", err, p.Failures)
	}
}
