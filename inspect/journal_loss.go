package inspect

import (
	"context"
	"fmt"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
)

// RunbookJournalRestore is the runbook section for a cluster that lost
// every member and has a journal: restore --to-latest brings it back to
// within one segment interval of the loss.
const RunbookJournalRestore = "runbooks/quorum-loss.md#every-member-lost-restore-from-the-journal"

func init() { Runbooks = append(Runbooks, RunbookJournalRestore) }

// checkJournal records whether the cluster has a journal (a stored
// segment under catalog.Layout.JournalPrefix) and the last revision its
// segments name: what NEXT STEP needs when no member answers. A store
// failure is left in the status's JournalError, never returned.
func checkJournal(ctx context.Context, opts Options, bs *BackupStatus) {
	objs, err := opts.Store.List(ctx, opts.Layout.JournalPrefix(opts.ClusterID))
	if err != nil {
		bs.JournalError = output.OneLine(fmt.Errorf("listing the journal: %w", err))
		return
	}
	for _, o := range objs {
		ki := opts.Layout.Classify(o.Key)
		if ki.Kind != catalog.KeyJournal || ki.ClusterID != opts.ClusterID {
			continue
		}
		bs.HasJournal = true
		bs.JournalLastRevision = max(bs.JournalLastRevision, ki.LastRev)
	}
}

// journalLossStep is the next step when no member answers and the cluster
// has a journal: the network and TLS are ruled out first (unreachable.md),
// then, if every member is really lost, restore from the journal to its
// newest revision (restore --to-latest).
func journalLossStep(a Assessment) (NextStep, bool) {
	b := a.Backup
	if b == nil || !b.HasJournal {
		return NextStep{}, false
	}
	return NextStep{
		Action: fmt.Sprintf("no member answers: rule out the network path, the TLS settings (--cacert/--cert/--key) and the etcd pods first; "+
			"if every member is lost (pods and volumes gone), restore from the journal (it reaches revision %d): "+
			"etcd-recovery restore --cluster-id %s --to-latest", b.JournalLastRevision, b.ClusterID),
		Runbooks: []string{RunbookUnreachable, RunbookJournalRestore}}, true
}
