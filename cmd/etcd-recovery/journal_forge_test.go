package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/restore"
)

// A forged segment version on a locked bucket, through the CLI on real
// etcd 3.5 and MinIO with object lock, the journal written with a
// governance lock. The reproduction: a PUT over a locked segment made a
// newer version, every reader read it, `journal prove` passed and restore
// --to-revision restored the forged value saying "journal proof: passed".
//
//   - The proof records every segment it replayed by sha256 and version,
//     and is itself locked like the newest of them.
//   - A segment overwritten by a forged version (same revisions, versions
//     and create revisions: the replay's history check cannot tell), and
//     another hidden under a delete marker: a point-in-time restore into
//     the window exits 0, having replayed the journal's own versions (its
//     warnings name both segments), and proving the window again, now,
//     still passes: the forged value was not replayed.
//   - The proof record overwritten by a forged one and then hidden under a
//     delete marker: the restore still reads the recorded one.
func TestJournalForgedVersionOnALockedBucket(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 4*time.Minute)
	m := testenv.SharedMinIO(t)
	w := newProofWorldIn(t, ctx, "forge-lock", m.NewLockedBucket(t), "--lock-mode", "governance")

	code, res, errOut := w.prove(t, ctx)
	if code != 0 || len(res.Proofs) != 1 || res.Proofs[0].Verdict != catalog.ProofPassed {
		t.Fatalf("journal prove: exit %d, %+v\n%s", code, res, errOut)
	}
	target := res.Proofs[0].Target
	rec, err := catalog.ReadJournalProof(ctx, w.st, w.layout, w.id, target)
	if err != nil || len(rec.Proven) == 0 || len(rec.Proven) != len(rec.Segments) {
		t.Fatalf("recorded proof: %+v %v: want every segment replayed named", rec, err)
	}
	for _, p := range rec.Proven {
		if len(p.SHA256) != 64 || p.VersionID == "" || p.VersionID == "null" {
			t.Fatalf("proven segment %+v: want its sha256 and its version", p)
		}
	}
	lk := w.st.(store.Locker)
	proofKey := w.layout.JournalProofKey(w.id, target)
	if r, err := lk.Retention(ctx, proofKey, ""); err != nil || !r.Locked(time.Now()) || r.Mode != store.LockGovernance {
		t.Fatalf("the proof record's retention: %+v %v: want locked as its segments are", r, err)
	}

	forged := w.forge(t, ctx, false)
	hidden := rec.Proven[0].Key
	if hidden == forged {
		t.Fatalf("one segment between the backups (%s): nothing to hide beside the forged one", forged)
	}
	if err := w.st.Delete(ctx, []string{hidden}); err != nil {
		t.Fatal(err)
	}
	// The newest version of the forged key is the forgery: a reader of the
	// newest replays it.
	_, evs, err := journal.ReadSegment(ctx, w.st, w.layout, forged, nil, journal.Want{ClusterID: w.id})
	if err != nil || !slices.ContainsFunc(evs, func(ev journal.Event) bool { return string(ev.Value) == "not what etcd holds" }) {
		t.Fatalf("the forged segment's newest version: %d events, none forged (err %v)", len(evs), err)
	}
	// The proof record forged "passed" over a made-up one, then hidden.
	if _, err := w.st.Put(ctx, proofKey, strings.NewReader(`{"format":1,"clusterID":"forge-lock"}`)); err != nil {
		t.Fatal(err)
	}
	if err := w.st.Delete(ctx, []string{proofKey}); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runCtx(t, ctx, w.restoreArgs(t, w.lastRev-1, "-o", "json")...)
	var got restore.Result
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Replay == nil || got.Replay.ToRevision != w.lastRev-1 {
		t.Fatalf("restore --to-revision with a forged version and a delete marker in the window: exit %d\n%s\n%s", code, out, lastLinesOf(errOut, 20))
	}
	if c := checkOf(got, restore.CheckJournalProof); c == nil || c.Status != restore.CheckPassed {
		t.Fatalf("journal proof check: %+v (the recorded proof, behind its forgery and its delete marker)", c)
	}
	warn := strings.Join(got.Warnings, "\n")
	if !strings.Contains(warn, forged) || !strings.Contains(warn, "newer version") || !strings.Contains(warn, hidden) || !strings.Contains(warn, "delete marker") {
		t.Fatalf("restore's warnings name neither the overwritten nor the hidden segment:\n%s", warn)
	}
	// A proof record forged at a new key, "passed", naming the forged
	// version and its sha256: it cannot make the replay read the forgery
	// (the earliest version is read whatever a proof says), only refuse.
	vers, err := w.st.(store.Versioner).ListVersions(ctx, forged)
	if err != nil || len(vers) < 2 {
		t.Fatalf("versions of %s: %+v %v", forged, vers, err)
	}
	fr, err := journal.OpenSegment(ctx, w.st, w.layout, forged, nil, journal.Want{ClusterID: w.id})
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = fr.Next()
	}
	fr.Close()
	fake := &catalog.JournalProof{ClusterID: w.id, Base: rec.Base, BaseRevision: rec.BaseRevision,
		Target: catalog.BackupName(time.Now().Add(time.Hour), catalog.KindScheduled), TargetRevision: w.lastRev + 1000,
		Verdict: catalog.ProofPassed, Time: time.Now(), Proven: []catalog.ProvenSegment{{Key: forged, SHA256: fr.Sum(), VersionID: vers[0].VersionID}}}
	if err := catalog.PutJournalProof(ctx, w.st, w.layout, fake); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCtx(t, ctx, w.restoreArgs(t, w.lastRev-1)...)
	if code == 0 || !strings.Contains(errOut, forged) || !strings.Contains(errOut, string(journal.ReasonForged)) {
		t.Fatalf("restore --to-revision with a forged proof naming the forged version: exit %d, want a refusal naming %s\n%s\n%s", code, forged, out, lastLinesOf(errOut, 20))
	}

	// The window proven again, now: the replay of the journal's own
	// versions still hashes as backup k+1.
	code, again, errOut := w.prove(t, ctx, "--backup", target, "--dry-run")
	if code != 0 || len(again.Proofs) != 1 || again.Proofs[0].Verdict != catalog.ProofPassed ||
		!slices.Equal(again.Proofs[0].Replaced, []string{hidden, forged}) {
		t.Fatalf("journal prove --dry-run after the forgery: exit %d %+v (want passed, naming %s and %s)\n%s", code, again.Proofs[0], hidden, forged, lastLinesOf(errOut, 20))
	}
}

// A forged segment on a bucket without versioning, through the CLI on real
// etcd 3.5 and MinIO: nothing keeps the journal's own bytes, so the chain
// and the proof must refuse what they no longer find.
//
//   - The newest segment of a proven window replaced (the one no later
//     segment names): restore --to-revision into the window fails, naming
//     the segment, its sha256 against the one the proof recorded.
//   - An earlier segment replaced (its successor names it by sha256):
//     `journal prove` of the window fails, a verdict naming both segments,
//     never a hash of a state that never existed, and never inconclusive.
func TestJournalForgedSegmentRefused(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 4*time.Minute)
	w := newProofWorld(t, ctx, "forge-plain")
	code, res, errOut := w.prove(t, ctx)
	if code != 0 || len(res.Proofs) != 1 || res.Proofs[0].Verdict != catalog.ProofPassed {
		t.Fatalf("journal prove: exit %d, %+v\n%s", code, res, errOut)
	}
	target := res.Proofs[0].Target

	forged := w.forge(t, ctx, false)
	code, out, errOut := runCtx(t, ctx, w.restoreArgs(t, w.lastRev-1)...)
	if code == 0 || !strings.Contains(errOut, forged) || !strings.Contains(errOut, string(journal.ReasonForged)) || !strings.Contains(errOut, "proof") {
		t.Fatalf("restore --to-revision through a proven segment replaced: exit %d\n%s\n%s", code, out, lastLinesOf(errOut, 20))
	}

	// A restore that ends just before it still reads its lease records
	// (a revoke is recorded in the segment after the revision): the
	// segment is read whole and checked as the replayed ones.
	ki := w.layout.Classify(forged)
	if ki.FirstRev-1 <= w.baseRev {
		t.Fatalf("the forged segment %s starts right after the base backup (%d): no restore ends before it", forged, w.baseRev)
	}
	code, out, errOut = runCtx(t, ctx, w.restoreArgs(t, ki.FirstRev-1)...)
	if code == 0 || !strings.Contains(errOut, forged) || !strings.Contains(errOut, string(journal.ReasonForged)) {
		t.Fatalf("restore --to-revision %d, the segment after it replaced: exit %d\n%s\n%s", ki.FirstRev-1, code, out, lastLinesOf(errOut, 20))
	}

	// An earlier segment: a put of the first loop's keys.
	early := w.forgeWhere(t, ctx, func(ev journal.Event) bool {
		return ev.Type == journal.Put && strings.HasPrefix(string(ev.Key), "/p/w0-")
	}, false)
	if early == forged {
		t.Fatalf("the first loop's puts are in the newest segment %s: no later segment names it", early)
	}
	code, again, errOut := w.prove(t, ctx, "--backup", target, "--dry-run")
	if code == 0 || len(again.Proofs) != 1 {
		t.Fatalf("journal prove after an earlier segment was replaced: exit %d %+v\n%s", code, again, lastLinesOf(errOut, 20))
	}
	p := again.Proofs[0]
	if p.Verdict != catalog.ProofFailed || !strings.Contains(p.Detail, "chain is broken") || !strings.Contains(p.Detail, early) || !strings.Contains(p.Detail, string(journal.ReasonForged)) {
		t.Fatalf("proof: verdict %s, detail %q: want failed, naming %s", p.Verdict, p.Detail, early)
	}
}
