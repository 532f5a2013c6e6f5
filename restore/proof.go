package restore

import (
	"context"
	"fmt"

	"github.com/armada/etcd-recovery/internal/catalog"
)

// CheckJournalProof is the plan's check of the journal proof of a
// point-in-time restore's window (see checkJournalProof).
const CheckJournalProof = "journal proof"

// JournalProofError is a point-in-time restore refused because the journal
// it would replay was proven wrong: the full backup before the window plus
// the journal did not hash as the backup after it (catalog.JournalProof,
// recorded by drill.ProveJournal). Options.AcceptUnprovenJournal
// (--accept-unproven-journal) restores anyway.
type JournalProofError struct {
	ClusterID  string
	ToRevision int64
	Key        string
	Proof      *catalog.JournalProof
}

func (e *JournalProofError) Error() string {
	p := e.Proof
	return fmt.Sprintf("revision %d of cluster %s is in the window from backup %s (revision %d) to backup %s (revision %d) whose journal proof failed (%s: %s; hash %d, want %d): "+
		"the window is not offered for point-in-time restore; restore backup %s or %s as they are, or pass --accept-unproven-journal to replay the journal anyway",
		e.ToRevision, e.ClusterID, p.Base, p.BaseRevision, p.Target, p.TargetRevision, e.Key, p.Detail, p.Got.Hash, p.Want.Hash, p.Base, p.Target)
}

// checkJournalProof is the select stage's check, for a point-in-time
// restore that replays the journal (to.Revision above the chosen
// backup's revision), of the journal proofs recorded for the cluster: a
// failed proof whose window (its base's revision, its target's] the replay
// from the chosen backup to ToRevision passes through refuses the restore
// (a *JournalProofError naming the proof and the hashes) unless
// to.AcceptUnproven; a passed proof from the chosen backup that
// reaches ToRevision says so; otherwise the window is unproven (the newest
// one, after the last backup, always is), offered and marked so. A dry
// run shows the same check.
func checkJournalProof(ctx context.Context, src source, to Target, plan *Plan) (string, error) {
	chosen := plan.Chosen
	if to.Revision <= 0 || chosen == nil || chosen.survivor || to.Revision <= chosen.Revision {
		return "", nil
	}
	if step, err := checkLineage(ctx, src, to, plan); err != nil {
		return step, err
	}
	proofs, err := catalog.ListJournalProofs(ctx, src.store, src.layout, src.clusterID)
	if err != nil {
		if to.AcceptUnproven && ctx.Err() == nil {
			plan.Checks = append(plan.Checks, Check{Name: CheckJournalProof, Status: CheckSkipped,
				Detail: fmt.Sprintf("the journal proofs could not be read (%v): accepted with --accept-unproven-journal", err)})
			return "", nil
		}
		return StepList, fmt.Errorf("%w (a point-in-time restore checks them; --accept-unproven-journal replays without)", err)
	}
	var failed, passed *catalog.JournalProof
	if pin, ok := to.Journal.(JournalPinner); ok {
		// Every segment a passed proof replayed is read as proven.
		for _, p := range proofs {
			if !p.Failed() {
				pin.Pin(p.Proven)
			}
		}
	}
	for _, p := range proofs {
		switch {
		case p.Failed() && p.Target != chosen.Name && chosen.Revision < p.TargetRevision && to.Revision > p.BaseRevision:
			failed = p
		case !p.Failed() && p.Covers(chosen.Name, to.Revision):
			passed = p
		}
	}
	switch {
	case failed != nil:
		key := src.layout.JournalProofKey(src.clusterID, failed.Target)
		perr := &JournalProofError{ClusterID: src.clusterID, ToRevision: to.Revision, Key: key, Proof: failed}
		if to.AcceptUnproven {
			plan.Checks = append(plan.Checks, Check{Name: CheckJournalProof, Status: CheckSkipped,
				Detail: "accepted with --accept-unproven-journal: " + perr.Error()})
			src.log.Warn("replaying a journal whose proof failed (--accept-unproven-journal)", "cluster", src.clusterID,
				"proof", key, "got_hash", failed.Got.Hash, "want_hash", failed.Want.Hash)
			return "", nil
		}
		plan.Checks = append(plan.Checks, Check{Name: CheckJournalProof, Status: CheckFailed, Detail: perr.Error()})
		return StepSelect, perr
	case passed != nil && to.Revision < passed.Compact:
		// The proof hashed the state at its compact revision and every
		// change after it: a revision below was compacted away in the
		// backup it was proven against, and is not covered.
		plan.Checks = append(plan.Checks, Check{Name: CheckJournalProof, Status: CheckSkipped,
			Detail: fmt.Sprintf("unproven: %s covers revisions %d to %d only (backup %s was compacted at %d, its hash holds nothing of the history below); revision %d is below them",
				src.layout.JournalProofKey(src.clusterID, passed.Target), passed.Compact, passed.TargetRevision, passed.Target, passed.Compact, to.Revision)})
	case passed != nil:
		plan.Checks = append(plan.Checks, Check{Name: CheckJournalProof, Status: CheckPassed,
			Detail: fmt.Sprintf("proven by %s: backup %s plus the journal hashes %d at revision %d, as backup %s; it covers revisions %d (its compact revision) to %d",
				src.layout.JournalProofKey(src.clusterID, passed.Target), passed.Base, passed.Got.Hash, passed.TargetRevision, passed.Target, max(passed.Compact, passed.BaseRevision), passed.TargetRevision)})
	default:
		plan.Checks = append(plan.Checks, Check{Name: CheckJournalProof, Status: CheckSkipped,
			Detail: fmt.Sprintf("unproven: no proof of the journal after backup %s up to revision %d yet (a window is proven once the next full backup is drilled or `journal prove` runs)", chosen.Name, to.Revision)})
	}
	return "", nil
}
