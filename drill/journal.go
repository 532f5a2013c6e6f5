package drill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/restore"
)

// Step and check of the journal proof a drill makes.
const (
	StepProveJournal  = "prove journal"
	CheckJournalProof = "journal proof"
)

// pointInTime sets restore's options of a point-in-time drill
// (Options.ToRevision): the revision and the journal.
func (d *drill) pointInTime(ro *restore.Options) {
	if d.opts.ToRevision <= 0 {
		return
	}
	ro.ToRevision = d.opts.ToRevision
	// Without a journal of its own, the drill replays the store's.
	ro.Journal, ro.JournalInStore = d.opts.Journal, d.opts.Journal == nil
}

// proveJournal is the drill's journal proof (the journal is proven
// continuously, not only when a restore needs it): a drill of a stored backup (not a local plaintext copy,
// not one read from object versions, not a point-in-time drill, not with
// NoJournalProof) proves the journal before the drilled backup with
// ProveJournal when the cluster has a journal and no proof of that backup
// is recorded, so that drill --all proves every window as it drills each
// newest backup. The result is an info check (it never changes the
// drill's verdict of the backup) and DrillRecord.JournalProof; a failed
// proof is logged as an error and recorded by ProveJournal (the metric
// and the alert come from that record).
func (d *drill) proveJournal(ctx context.Context) {
	if d.opts.Plaintext != "" || d.opts.NoJournalProof || d.opts.ToRevision > 0 || d.chosen.FromVersions || d.rec.Backup == "" {
		return
	}
	if v, _, _ := Verdict(d.rec.Checks); v != catalog.VerdictPassed {
		// The backup itself did not restore: its proof would fail to
		// fetch it.
		return
	}
	d.step(ctx, StepProveJournal)
	t := time.Now()
	verdict, detail, err := d.journalProof(ctx)
	d.addStep(StepProveJournal, t, err)
	if verdict == "" {
		return
	}
	d.rec.JournalProof = verdict
	d.rec.Checks = append(d.rec.Checks, catalog.DrillCheck{Name: CheckJournalProof, Status: catalog.DrillCheckInfo, Detail: verdict + ": " + detail})
	if verdict == catalog.ProofFailed {
		d.log.Error("journal proof failed: the window before this backup is withdrawn from point-in-time restore", "backup", d.rec.Backup, "detail", detail)
	}
}

// journalProof proves, or reads the proof of, the journal before the
// drilled backup: the verdict ("" when the cluster has no journal at
// all), its detail, and the error of a proof that could not judge.
func (d *drill) journalProof(ctx context.Context) (verdict, detail string, err error) {
	o := d.opts
	objs, err := o.Store.List(ctx, o.Layout.JournalPrefix(o.ClusterID))
	if err != nil {
		return catalog.ProofInconclusive, fmt.Sprintf("listing the journal: %v", err), err
	}
	segments := false
	for _, obj := range objs {
		if o.Layout.Classify(obj.Key).Kind == catalog.KeyJournal {
			segments = true
			break
		}
	}
	if !segments {
		return "", "", nil
	}
	key := o.Layout.JournalProofKey(o.ClusterID, d.rec.Backup)
	if p, err := catalog.ReadJournalProof(ctx, o.Store, o.Layout, o.ClusterID, d.rec.Backup); err == nil {
		return p.Verdict, fmt.Sprintf("recorded already (%s): %s", key, proofSummary(p)), nil
	} else if !store.IsNotFound(err) {
		return catalog.ProofInconclusive, err.Error(), err
	}
	p, err := ProveJournal(ctx, ProveOptions{ClusterID: o.ClusterID, Store: o.Store, Layout: o.Layout, Target: d.rec.Backup,
		Identities: o.Identities, ScratchDir: o.ScratchDir, NoRecord: o.NoRecord, Log: o.Log, Now: o.Now})
	var pe *ProveError
	switch {
	case err == nil:
		return p.Verdict, fmt.Sprintf("proven now (%s): %s", key, proofSummary(p)), nil
	case errors.As(err, &pe) && pe.NoJournal:
		return "none", err.Error(), nil
	default:
		return catalog.ProofInconclusive, err.Error(), err
	}
}

// proofSummary is a proof in words.
func proofSummary(p *catalog.JournalProof) string {
	s := fmt.Sprintf("backup %s plus %d journal events hashes %d at revision %d (compact revision %d), backup %s hashes %d",
		p.Base, p.Events, p.Got.Hash, p.TargetRevision, p.Compact, p.Target, p.Want.Hash)
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	return s
}
