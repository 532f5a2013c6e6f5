package catalog_test

import (
	"errors"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// The journal proof key is classified as a proof (never unknown, never a
// segment, so list and prune leave it alone and the segment listing skips
// it); anything else under proofs/ is unknown.
func TestClassifyJournalProof(t *testing.T) {
	t.Parallel()
	l := catalog.Layout{Prefix: "p"}
	name := "20261122T031500.123Z-scheduled-0a1b2c3d"
	key := l.JournalProofKey("c1", name)
	if key != "p/_journal/c1/proofs/"+name+".json" {
		t.Fatalf("JournalProofKey = %q", key)
	}
	if ki := l.Classify(key); ki.Kind != catalog.KeyJournalProof || ki.ClusterID != "c1" || ki.Name != name || ki.BackupKind != catalog.KindScheduled {
		t.Errorf("Classify(%s) = %+v", key, ki)
	}
	for _, k := range []string{"p/_journal/c1/proofs/not-a-backup.json", "p/_journal/c1/proofs/" + name, "p/_journal/c1/proofs/" + name + ".json/x",
		"p/_journal/_x/proofs/" + name + ".json"} {
		if ki := l.Classify(k); ki.Kind != catalog.KeyUnknown {
			t.Errorf("Classify(%s) = %+v, want unknown", k, ki)
		}
	}
	if ki := l.Classify(l.JournalSegmentKey("c1", 5, 9)); ki.Kind != catalog.KeyJournal {
		t.Errorf("a segment classifies as %+v", ki)
	}
}

// On MinIO: a proof is written create-only (a second one of the same
// backup is refused with ErrProofExists, the first stays), read back, and
// listed by target revision; a verdict other than passed or failed is
// never written; a missing proof reads as not found.
func TestPutJournalProof(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, time.Minute)
	rig := testfix.NewStoreRig(t)
	st, l := rig.Store, rig.Layout
	mk := func(target string, rev int64, verdict string) *catalog.JournalProof {
		return &catalog.JournalProof{ClusterID: "c1", Base: "20261122T031500.123Z-scheduled-0a1b2c3d", BaseRevision: 10,
			Target: target, TargetRevision: rev, Verdict: verdict, Got: catalog.ProofHash{Hash: 1, Revision: rev},
			Want: catalog.ProofHash{Hash: 2, Revision: rev}, Time: time.Now().UTC()}
	}
	newer, older := "20261122T111500.123Z-scheduled-0a1b2c3e", "20261122T071500.123Z-scheduled-0a1b2c3f"
	if err := catalog.PutJournalProof(ctx, st, l, mk(newer, 30, catalog.ProofFailed)); err != nil {
		t.Fatal(err)
	}
	err := catalog.PutJournalProof(ctx, st, l, mk(newer, 30, catalog.ProofPassed))
	if !errors.Is(err, catalog.ErrProofExists) {
		t.Fatalf("second proof of %s: %v, want ErrProofExists", newer, err)
	}
	if err := catalog.PutJournalProof(ctx, st, l, mk(older, 20, catalog.ProofPassed)); err != nil {
		t.Fatal(err)
	}
	if err := catalog.PutJournalProof(ctx, st, l, mk("20261122T151500.123Z-scheduled-0a1b2c40", 40, catalog.ProofInconclusive)); err == nil {
		t.Error("an inconclusive proof was recorded")
	}
	p, err := catalog.ReadJournalProof(ctx, st, l, "c1", newer)
	if err != nil || !p.Failed() || p.Format != catalog.JournalProofFormat || !p.Covers(p.Base, 25) || p.Covers(p.Base, 10) || p.Covers(p.Base, 31) {
		t.Fatalf("read back: %+v %v", p, err)
	}
	ps, err := catalog.ListJournalProofs(ctx, st, l, "c1")
	if err != nil || len(ps) != 2 || ps[0].Target != older || ps[1].Target != newer {
		t.Fatalf("ListJournalProofs: %+v %v", ps, err)
	}
	if _, err := catalog.ReadJournalProof(ctx, st, l, "c1", "20261122T151500.123Z-scheduled-0a1b2c40"); !store.IsNotFound(err) {
		t.Errorf("a missing proof: %v, want not found", err)
	}
}
