package replicate_test

import (
	"context"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/replicate"
)

// TestVerifiedKeysFollowThePrimary: over a long run the copier's memory
// of what it verified follows the primary's listing, not its age. Eight
// rounds on two MinIO servers, each writing a backup folder (with a
// drill record) and a proof record of cluster c1 and pruning the oldest
// beyond three, as retention does, with one full pass of the same copier
// each: the copier remembers the three folders, their drill records and
// proofs and the owner record (10 keys), never one more, however many
// rounds ran; each pass copies the new objects only (nothing it forgot
// was still there to re-check), and nothing pruned on the primary is
// deleted on the second site.
func TestVerifiedKeysFollowThePrimary(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r := newRig(t)
	const id, keep, rounds = "c1", 3, 8
	record(t, r.primary, catalog.OwnerKey(r.pl))
	tc, err := replicate.NewTestCopier(ctx, r.opts(t))
	if err != nil {
		t.Fatal(err)
	}
	type folder struct{ name, proof string }
	var live []folder
	var copiedKeys []string
	t0 := time.Now().UTC().Add(-time.Duration(rounds) * time.Hour)
	for i := range rounds {
		m := fakeBackup(t, r.primary, r.pl, id, t0.Add(time.Duration(i)*time.Hour))
		put(t, r.primary, r.pl.Key(id, m.Name, catalog.DrillObject), []byte(`{"format":1}`))
		f := folder{m.Name, r.pl.JournalProofKey(id, m.Name)}
		record(t, r.primary, f.proof)
		live = append(live, f)
		copiedKeys = append(copiedKeys, r.pl.Key(id, m.Name, catalog.ManifestObject), f.proof)
		if len(live) > keep {
			old := live[0]
			live = live[1:]
			var keys []string
			for _, o := range []string{catalog.StartedObject, catalog.SnapshotObjectZstd, catalog.ManifestObject, catalog.DrillObject} {
				keys = append(keys, r.pl.Key(id, old.name, o))
			}
			if err := r.primary.Delete(ctx, append(keys, old.proof)); err != nil {
				t.Fatal(err)
			}
		}
		p := tc.FullPass(ctx)
		if err := p.Err(); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		// The new folder's started marker, snapshot, manifest and drill
		// record, its proof, and the owner record in the first round.
		wantCopied := 5
		if i == 0 {
			wantCopied++
		}
		if p.Copied != wantCopied || p.Already != 0 {
			t.Errorf("round %d: %d copied, %d re-checked; want %d copied, none re-checked", i, p.Copied, p.Already, wantCopied)
		}
		// Each live folder (its prefix and its drill record), each live
		// proof, the owner record.
		if got, want := tc.Verified(), 3*len(live)+1; got != want {
			t.Errorf("round %d: the copier remembers %d verified keys, want %d (%d backups on the primary)", i, got, want, len(live))
		}
	}
	for _, k := range copiedKeys {
		if _, err := r.second.Get(ctx, r.dst(k)); err != nil {
			t.Errorf("%s, pruned on the primary, is gone from the second site: %v", r.dst(k), err)
		}
	}
}
