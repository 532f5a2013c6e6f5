package inspect

import (
	"fmt"
	"strings"

	"github.com/armada/etcd-recovery/internal/output"
)

// The next-step policy: from the assessment, the one thing to do now and
// the runbook sections that say how, most urgent first.

// nextStep picks the one thing to do now, most urgent first.
func nextStep(a Assessment, noSpace, corrupt bool, alarmMembers map[string][]string, splitBrain bool) NextStep {
	restoreFrom := "the newest snapshot"
	if b := a.Backup; b != nil && b.Newest != nil {
		restoreFrom = fmt.Sprintf("the newest snapshot (backup %s, revision %d)", b.Newest.Name, b.Newest.Revision)
	}
	switch a.Verdict {
	case VerdictUnreachable:
		if ns, ok := journalLossStep(a); ok {
			return ns
		}
		return NextStep{Action: "no member answers: check the network path, the TLS settings (--cacert/--cert/--key) and that the etcd pods run",
			Runbooks: []string{RunbookUnreachable}}
	case VerdictQuorumLost:
		if s := survivor(a.Members); s != nil {
			return NextStep{
				Action: fmt.Sprintf("majority failure: take a survivor snapshot of %s (it still answers) first, then restore the cluster from %s",
					s.Label(), restoreFrom),
				Runbooks: []string{RunbookSurvivorSnapshot, RunbookRestore}}
		}
		return NextStep{Action: "majority failure: restore the cluster from " + restoreFrom, Runbooks: []string{RunbookRestore}}
	}
	if noSpace {
		return NextStep{Action: "NOSPACE alarm: writes fail; compact and defragment the DB, then disarm the alarm",
			Runbooks: []string{RunbookNoSpace}}
	}
	if splitBrain {
		return NextStep{Action: "split-brain signs: find which members form the real cluster before replacing or restoring anything; run inspect again to see if it persists"}
	}
	var failed []string
	for _, m := range a.Members {
		if !m.Learner && !m.Unlisted && m.Health != HealthHealthy {
			failed = append(failed, m.Label())
		}
	}
	if len(failed) > 0 {
		return NextStep{Action: fmt.Sprintf("minority failure: replace the failed %s %s (the cluster tolerates %d more %s meanwhile)",
			output.Plural(len(failed), "member", "members"), strings.Join(failed, ", "), a.Tolerates, output.Plural(a.Tolerates, "failure", "failures")),
			Runbooks: []string{RunbookReplaceMember}}
	}
	if corrupt {
		return NextStep{Action: "CORRUPT alarm: replace " + strings.Join(alarmMembers[AlarmCorrupt], ", "),
			Runbooks: []string{RunbookReplaceMember}}
	}
	if b := a.Backup; b != nil && (b.State == BackupMissing || b.State == BackupStale) {
		return NextStep{Action: "backup " + string(b.State) + ": take a backup now (etcd-recovery backup --kind manual) and find why the scheduled backup did not run",
			Runbooks: []string{RunbookMissedBackup}}
	}
	if b := a.Backup; b != nil && b.Drill != nil {
		if ns, ok := drillNextStep(b.ClusterID, b.Drill); ok {
			return ns
		}
	}
	for _, f := range a.Flags {
		if f.Kind == FlagNearQuota {
			return NextStep{Action: "DB near its quota: compact and defragment before writes fail", Runbooks: []string{RunbookNoSpace}}
		}
	}
	return NextStep{Action: "none"}
}

// drillNextStep is the next step a failed, missing or old drill asks for.
func drillNextStep(clusterID string, d *DrillStatus) (NextStep, bool) {
	rb := []string{RunbookDrill}
	switch d.State {
	case DrillFailed:
		return NextStep{Action: fmt.Sprintf("restore drill failed: backup %s failed its drill at %s; treat it as bad: take a manual backup and drill it now (etcd-recovery backup --cluster-id %s --kind manual --drill)",
			d.Last.Backup, d.Last.Failed, clusterID), Runbooks: rb}, true
	case DrillNever:
		return NextStep{Action: fmt.Sprintf("never drilled: no backup is proven restorable; drill the newest backup now (etcd-recovery drill --cluster-id %s)", clusterID),
			Runbooks: rb}, true
	case DrillOld:
		return NextStep{Action: fmt.Sprintf("restore drill old: drill the newest backup now (etcd-recovery drill --cluster-id %s) and find why the scheduled drills did not run or pass", clusterID),
			Runbooks: rb}, true
	}
	return NextStep{}, false
}

// survivor is the member to take a survivor snapshot from: an answering
// voting member with the highest raft index.
func survivor(ms []MemberHealth) *MemberHealth {
	var best *MemberHealth
	for i := range ms {
		m := &ms[i]
		if m.Unlisted || m.Learner || !m.Alive() {
			continue
		}
		if best == nil || m.RaftIndex > best.RaftIndex || (m.RaftIndex == best.RaftIndex && m.Health == HealthNoQuorum && best.Health != HealthNoQuorum) {
			best = m
		}
	}
	return best
}
