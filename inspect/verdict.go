package inspect

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/output"
)

// This file, with checks.go and nextstep.go, is the pure half of inspect:
// from what the probes saw, the verdict, the flags and the next step. No
// network, no clock. Here: the thresholds, Verdict composing the checks,
// and judge, the verdict itself.

// Thresholds tune the flags.
type Thresholds struct {
	// MaxLag flags a member whose raft index is more than this many entries
	// behind the highest one (and an applied index this far behind its own
	// raft index). Default DefaultMaxLag.
	MaxLag uint64
	// QuotaBytes is the cluster's --quota-backend-bytes. Default 2 GiB.
	QuotaBytes int64
	// QuotaRatio flags a DB at or above this fraction of QuotaBytes.
	// Default 0.8.
	QuotaRatio float64
}

// Defaults for Thresholds and Options.
const (
	DefaultMaxLag       = 1000
	DefaultQuotaBytes   = 2 << 30 // etcd's own default quota
	DefaultQuotaRatio   = 0.8
	DefaultTimeout      = 3 * time.Second
	DefaultMaxBackupAge = 9 * time.Hour // one missed 8-hourly run
	// DefaultMaxDrillAge: the CronJob drills each cluster's newest backup
	// at least once a day, right after taking it (backup --drill), so the
	// newest proven backup is at most about 24h old; 2h of slack for a
	// late or slow run.
	DefaultMaxDrillAge = 26 * time.Hour
)

func (t Thresholds) withDefaults() Thresholds {
	if t.MaxLag == 0 {
		t.MaxLag = DefaultMaxLag
	}
	if t.QuotaBytes <= 0 {
		t.QuotaBytes = DefaultQuotaBytes
	}
	if t.QuotaRatio <= 0 || t.QuotaRatio > 1 {
		t.QuotaRatio = DefaultQuotaRatio
	}
	return t
}

// Verdict judges the cluster from its members (as probed) and, when the
// store was checked, its backup freshness. It is pure: it copies its inputs
// and fills Lag in the copy. Backup may be nil (not checked).
//
// It composes the checks, each its own function: quorum (checkQuorum),
// lag (fillLag, lagFlags), split brain and the leader (checkLeaders),
// alarms (groupAlarms, alarmFlags), members down (memberFlags), quota
// (quotaFlags), unlisted endpoints (unlistedFlags), and backup freshness
// with its restore drill (checkBackupFreshness, judgeDrill); nextStep
// then picks the one thing to do.
func Verdict(members []MemberHealth, backup *BackupStatus, th Thresholds) Assessment {
	th = th.withDefaults()
	a := Assessment{Members: slices.Clone(members), Flags: []Flag{}}
	ms := a.Members
	add := func(fs ...Flag) { a.Flags = append(a.Flags, fs...) }

	q := checkQuorum(ms)
	a.Voting, a.Quorum, a.Up, a.Alive, a.Tolerates = q.voting, q.quorum, q.up, q.alive, q.tolerates
	maxIndex := fillLag(ms)
	ls := checkLeaders(ms)
	a.Leader, a.LeaderID, a.LeaderNote, a.ClusterID = ls.leader, ls.leaderID, ls.leaderNote, ls.clusterID
	al := groupAlarms(ms)
	a.Verdict, a.Summary = judge(a, q, al, len(ls.splitBrain) > 0)

	// Flags, most urgent first.
	add(alarmFlags(al)...)
	add(ls.splitBrain...)
	if a.Verdict != VerdictUnreachable {
		add(memberFlags(ms)...)
		if a.Leader == "" && a.Alive > 0 {
			add(Flag{Kind: FlagNoLeader, Severity: SeverityCritical, Message: "no member that answers knows a leader"})
		}
	}
	for _, m := range ms {
		if !m.StatusOK || m.Unlisted {
			continue
		}
		add(lagFlags(m, maxIndex, th)...)
		add(quotaFlags(m, th)...)
	}
	add(unlistedFlags(ms)...)
	if backup != nil {
		var fs []Flag
		a.Backup, fs = checkBackupFreshness(*backup)
		add(fs...)
	}

	a.NextStep = nextStep(a, al.noSpace(), al.corrupt(), al.members, len(ls.splitBrain) > 0)
	return a
}

// judge is the verdict and its summary: UNREACHABLE when no member
// answers, QUORUM LOST without a linearizable read, DEGRADED with members
// down, an alarm or split-brain signs, else HEALTHY.
func judge(a Assessment, q quorumCount, al alarmGroups, splitBrain bool) (VerdictKind, string) {
	switch {
	case q.anyAlive == 0:
		return VerdictUnreachable, fmt.Sprintf("no member answers; %d checked", len(a.Members))
	case !q.have:
		return VerdictQuorumLost, fmt.Sprintf("quorum lost: %d of %d voting members serve linearizable reads, %d needed; %d still %s",
			a.Up, a.Voting, a.Quorum, a.Alive, output.Plural(a.Alive, "answers", "answer"))
	}
	verdict := VerdictHealthy
	var why []string
	if a.Up < a.Voting {
		why = append(why, fmt.Sprintf("%d of %d voting members down or unable to serve", a.Voting-a.Up, a.Voting))
	}
	if len(al.types) > 0 {
		why = append(why, "alarm "+strings.Join(al.types, ", ")+" active")
	}
	if splitBrain {
		why = append(why, "split-brain signs")
	}
	if len(why) > 0 {
		verdict = VerdictDegraded
	}
	up := fmt.Sprintf("%d/%d voting members healthy, quorum %d, tolerates %d more %s",
		a.Up, a.Voting, a.Quorum, a.Tolerates, output.Plural(a.Tolerates, "failure", "failures"))
	if a.Up < a.Quorum {
		up += fmt.Sprintf(" (a linearizable read proves a quorum, but only %d voting %s serve from here)", a.Up, output.Plural(a.Up, "member", "members"))
	}
	if len(why) > 0 {
		return verdict, strings.Join(why, "; ") + "; " + up
	}
	return verdict, up
}
