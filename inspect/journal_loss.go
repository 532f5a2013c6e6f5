package inspect

import (
	"fmt"
)

// RunbookJournalRestore is the runbook section for a cluster that lost
// every member and has a journal: restore --to-latest brings it back to
// within one segment interval of the loss.
const RunbookJournalRestore = "runbooks/quorum-loss.md#every-member-lost-restore-from-the-journal"

func init() { Runbooks = append(Runbooks, RunbookJournalRestore) }

// journalLossStep is the next step when no member answers and the cluster
// has a journal: the network and TLS are ruled out first (unreachable.md),
// then, if every member is really lost, restore from the journal to its
// newest revision (restore --to-latest).
func journalLossStep(a Assessment) (NextStep, bool) {
	b := a.Backup
	if b == nil || b.Journal == nil || b.Journal.Error != "" || b.Journal.LastRev == 0 {
		return NextStep{}, false
	}
	return NextStep{
		Action: fmt.Sprintf("no member answers: rule out the network path, the TLS settings (--cacert/--cert/--key) and the etcd pods first; "+
			"if every member is lost (pods and volumes gone), restore from the journal (it reaches revision %d): "+
			"etcd-recovery restore --cluster-id %s --to-latest", b.Journal.LastRev, b.ClusterID),
		Runbooks: []string{RunbookUnreachable, RunbookJournalRestore}}, true
}
