package inspect

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/armada/etcd-recovery/internal/output"
)

// The checks Verdict composes, one function each: quorum, lag, DB quota,
// the leader and split brain, alarms, members down, unlisted endpoints,
// backup freshness and the restore drill. Each reads the members (or the
// backup status) and returns its flags; none has a side effect beyond the
// copy it is handed.

// quorumCount is the quorum arithmetic over voting members.
type quorumCount struct {
	voting, quorum, up, alive, tolerates int
	// anyAlive: members of any kind that answer.
	anyAlive int
	// have: a linearizable read succeeded on some voting member, so the
	// cluster committed a ReadIndex with a quorum, even if the probe cannot
	// see all of it.
	have bool
}

// checkQuorum counts the voting members (learners and unlisted endpoints
// excluded), those up (healthy) and alive, and the quorum they need.
func checkQuorum(ms []MemberHealth) quorumCount {
	var q quorumCount
	for _, m := range ms {
		if m.Alive() {
			q.anyAlive++
		}
		if m.Learner || m.Unlisted {
			continue
		}
		q.voting++
		if m.Health == HealthHealthy {
			q.up++
		}
		if m.Alive() {
			q.alive++
		}
	}
	q.quorum = q.voting/2 + 1
	q.have = q.up > 0
	if q.have {
		q.tolerates = max(q.up-q.quorum, 0)
	}
	return q
}

// fillLag sets each listed member's Lag behind the highest raft index any
// listed member reported, and returns that index.
func fillLag(ms []MemberHealth) (maxIndex uint64) {
	for _, m := range ms {
		if m.StatusOK && !m.Unlisted {
			maxIndex = max(maxIndex, m.RaftIndex)
		}
	}
	for i := range ms {
		if ms[i].StatusOK && !ms[i].Unlisted {
			ms[i].Lag = maxIndex - ms[i].RaftIndex
		}
	}
	return maxIndex
}

// lagFlags flags a member far behind the highest raft index, or whose
// applied index is far behind its own raft index.
func lagFlags(m MemberHealth, maxIndex uint64, th Thresholds) []Flag {
	var fs []Flag
	if m.Lag > th.MaxLag {
		fs = append(fs, Flag{Kind: FlagLagging, Severity: SeverityWarning, Members: []string{m.Label()},
			Message: fmt.Sprintf("member %s is %d raft entries behind the highest raft index %d (threshold %d)", m.Label(), m.Lag, maxIndex, th.MaxLag)})
	}
	if m.AppliedIndex < m.RaftIndex && m.RaftIndex-m.AppliedIndex > th.MaxLag {
		fs = append(fs, Flag{Kind: FlagLagging, Severity: SeverityWarning, Members: []string{m.Label()},
			Message: fmt.Sprintf("member %s has applied %d of %d committed entries (%d behind; threshold %d)",
				m.Label(), m.AppliedIndex, m.RaftIndex, m.RaftIndex-m.AppliedIndex, th.MaxLag)})
	}
	return fs
}

// quotaFlags flags a member whose DB is at or above QuotaRatio of the quota.
func quotaFlags(m MemberHealth, th Thresholds) []Flag {
	if float64(m.DBSize) < th.QuotaRatio*float64(th.QuotaBytes) {
		return nil
	}
	return []Flag{{Kind: FlagNearQuota, Severity: SeverityWarning, Members: []string{m.Label()}, Runbook: RunbookNoSpace,
		Message: fmt.Sprintf("member %s: DB size %s is %.0f%% of the %s quota (%s in use); compact and defragment before writes fail",
			m.Label(), output.Bytes(m.DBSize), 100*float64(m.DBSize)/float64(th.QuotaBytes), output.Bytes(th.QuotaBytes), output.Bytes(m.DBSizeInUse))}}
}

// leaders is what checkLeaders found.
type leaders struct {
	leader, leaderID, leaderNote, clusterID string
	splitBrain                              []Flag
}

// checkLeaders reads the leader and the split-brain signs from the members
// that answered Status: several leaders in one term or across terms,
// members following different leaders, different cluster IDs. The leader
// is the member that says it leads (the newest term when several do), else
// the one most members report; the cluster ID the one most listed members
// report.
func checkLeaders(ms []MemberHealth) leaders {
	byID := map[string]*MemberHealth{}
	for i := range ms {
		if ms[i].ID != "" {
			byID[ms[i].ID] = &ms[i]
		}
	}
	name := func(id string) string {
		if m := byID[id]; m != nil {
			return m.Label()
		}
		return id
	}
	s := readLeaderSigns(ms)
	ls := leaders{splitBrain: splitBrainFlags(s, name)}
	ls.leader, ls.leaderID = pickLeader(ms, s, name)
	if lm := byID[ls.leaderID]; lm != nil {
		ls.leaderNote = leaderNote(*lm)
	}
	ls.clusterID = majorityClusterID(ms)
	return ls
}

// leaderSigns are what the members that answered Status say about the
// leader: claims maps a raft term to the listed members claiming
// leadership in it (terms: those terms, newest first), reported a leader
// id to the listed members following it, clusterIDs a cluster id to the
// members in it (unlisted endpoints included).
type leaderSigns struct {
	claims     map[uint64][]string
	terms      []uint64
	reported   map[string][]string
	clusterIDs map[string][]string
}

// readLeaderSigns gathers the leaderSigns of the members.
func readLeaderSigns(ms []MemberHealth) leaderSigns {
	s := leaderSigns{claims: map[uint64][]string{}, reported: map[string][]string{}, clusterIDs: map[string][]string{}}
	for _, m := range ms {
		if !m.StatusOK {
			continue
		}
		if m.ClusterID != "" {
			s.clusterIDs[m.ClusterID] = append(s.clusterIDs[m.ClusterID], m.Label())
		}
		if m.Unlisted {
			continue
		}
		if m.Leader {
			if len(s.claims[m.RaftTerm]) == 0 {
				s.terms = append(s.terms, m.RaftTerm)
			}
			s.claims[m.RaftTerm] = append(s.claims[m.RaftTerm], m.Label())
		}
		if m.LeaderID != "" {
			s.reported[m.LeaderID] = append(s.reported[m.LeaderID], m.Label())
		}
	}
	sort.Slice(s.terms, func(i, j int) bool { return s.terms[i] > s.terms[j] })
	return s
}

// pickLeader is the leader's label and id: the listed member that says it
// leads in the newest term claimed, else the id most members report (the
// smallest on a tie), named by name.
func pickLeader(ms []MemberHealth, s leaderSigns, name func(string) string) (label, id string) {
	if len(s.terms) > 0 {
		for _, m := range ms {
			if m.StatusOK && !m.Unlisted && m.Leader && m.RaftTerm == s.terms[0] {
				return m.Label(), m.ID
			}
		}
		return "", ""
	}
	best := ""
	for id, by := range s.reported {
		if best == "" || len(by) > len(s.reported[best]) || (len(by) == len(s.reported[best]) && id < best) {
			best = id
		}
	}
	if best == "" {
		return "", ""
	}
	return name(best), best
}

// leaderNote qualifies a leader that is not healthy: it claims leadership
// without quorum, or others report it but it does not answer.
func leaderNote(lm MemberHealth) string {
	switch {
	case lm.Health == HealthHealthy:
		return ""
	case lm.Alive():
		return "claims leadership but cannot serve linearizable reads (no quorum)"
	}
	return "reported by other members, but does not answer"
}

// majorityClusterID is the cluster ID most listed members report in their
// response headers (the smallest on a tie); empty when none does.
func majorityClusterID(ms []MemberHealth) string {
	listedIDs := map[string]int{}
	for _, m := range ms {
		if m.StatusOK && !m.Unlisted && m.ClusterID != "" {
			listedIDs[m.ClusterID]++
		}
	}
	clusterID := ""
	for id, n := range listedIDs {
		if clusterID == "" || n > listedIDs[clusterID] || (n == listedIDs[clusterID] && id < clusterID) {
			clusterID = id
		}
	}
	return clusterID
}

// splitBrainFlags are the split-brain signs in s: several members claiming
// leadership in one raft term, claims in more than one term, members
// following different leaders (named by name), different cluster IDs.
func splitBrainFlags(s leaderSigns, name func(string) string) []Flag {
	var fs []Flag
	for _, t := range s.terms {
		if c := s.claims[t]; len(c) > 1 {
			fs = append(fs, Flag{Kind: FlagSplitBrain, Severity: SeverityCritical, Members: c,
				Message: fmt.Sprintf("split brain: %s all claim leadership in raft term %d", strings.Join(c, ", "), t)})
		}
	}
	if len(s.terms) > 1 {
		fs = append(fs, groupsFlag(s.terms, s.claims,
			func(t uint64, who string) string { return fmt.Sprintf("%s in term %d", who, t) },
			"split-brain sign: more than one member claims leadership (",
			"): the older leader is cut off from the cluster but still believes it leads"))
	}
	if len(s.reported) > 1 {
		fs = append(fs, groupsFlag(slices.Sorted(maps.Keys(s.reported)), s.reported,
			func(id, who string) string { return fmt.Sprintf("%s follow %s", who, name(id)) },
			"split-brain sign: members disagree on the leader (",
			"); if it persists across runs, the cluster is partitioned"))
	}
	if len(s.clusterIDs) > 1 {
		fs = append(fs, groupsFlag(slices.Sorted(maps.Keys(s.clusterIDs)), s.clusterIDs,
			func(id, who string) string { return fmt.Sprintf("%s in cluster %s", who, id) },
			"different cluster IDs in response headers (",
			"): the endpoints are not one cluster (a member restored or re-bootstrapped on its own?)"))
	}
	return fs
}

// groupsFlag is one split-brain flag over groups of members: for each key
// in order, part describes its group (given the key and its members
// joined by ", "); the message is before, the parts joined by "; ", then
// after, and the flag names every member of every group.
func groupsFlag[K comparable](keys []K, groups map[K][]string, part func(K, string) string, before, after string) Flag {
	var parts, who []string
	for _, k := range keys {
		parts = append(parts, part(k, strings.Join(groups[k], ", ")))
		who = append(who, groups[k]...)
	}
	return Flag{Kind: FlagSplitBrain, Severity: SeverityCritical, Members: who,
		Message: before + strings.Join(parts, "; ") + after}
}

// alarmGroups are the active alarms grouped by type.
type alarmGroups struct {
	types   []string            // sorted
	members map[string][]string // type -> members it is raised on
}

func (g alarmGroups) noSpace() bool { return len(g.members[AlarmNoSpace]) > 0 }
func (g alarmGroups) corrupt() bool { return len(g.members[AlarmCorrupt]) > 0 }

// groupAlarms groups the members' alarms by type.
func groupAlarms(ms []MemberHealth) alarmGroups {
	g := alarmGroups{members: map[string][]string{}}
	for _, m := range ms {
		for _, al := range m.Alarms {
			if len(g.members[al]) == 0 {
				g.types = append(g.types, al)
			}
			g.members[al] = append(g.members[al], m.Label())
		}
	}
	sort.Strings(g.types)
	return g
}

// alarmFlags is one flag per alarm type, with its remedy.
func alarmFlags(g alarmGroups) []Flag {
	var fs []Flag
	for _, t := range g.types {
		f := Flag{Kind: FlagAlarm, Severity: SeverityCritical, Alarm: t, Members: g.members[t]}
		switch t {
		case AlarmNoSpace:
			f.Message = fmt.Sprintf("NOSPACE alarm on %s: the DB reached its quota and every write fails; compact, defragment, then disarm the alarm",
				strings.Join(g.members[t], ", "))
			f.Runbook = RunbookNoSpace
		case AlarmCorrupt:
			f.Message = fmt.Sprintf("CORRUPT alarm on %s: its data diverged from the cluster; replace that member", strings.Join(g.members[t], ", "))
			f.Runbook = RunbookReplaceMember
		default:
			f.Message = fmt.Sprintf("%s alarm on %s", t, strings.Join(g.members[t], ", "))
		}
		fs = append(fs, f)
	}
	return fs
}

// memberFlags flags every listed member that is not healthy (a learner as
// a warning).
func memberFlags(ms []MemberHealth) []Flag {
	var fs []Flag
	for _, m := range ms {
		if m.Unlisted || m.Health == HealthHealthy {
			continue
		}
		if m.Learner {
			fs = append(fs, Flag{Kind: FlagMemberDown, Severity: SeverityWarning, Members: []string{m.Label()},
				Message: fmt.Sprintf("learner %s is %s: %s", m.Label(), m.Health, m.Error)})
			continue
		}
		f := Flag{Kind: FlagMemberDown, Severity: SeverityCritical, Members: []string{m.Label()}}
		switch m.Health {
		case HealthNoQuorum:
			f.Message = fmt.Sprintf("member %s is alive but has no quorum: serializable reads work, linearizable reads fail", m.Label())
			m.Error = strings.TrimPrefix(m.Error, "linearizable read failed: ")
		case HealthUnhealthy:
			f.Message = fmt.Sprintf("member %s answers its status but serves no reads", m.Label())
		default:
			f.Message = fmt.Sprintf("member %s is down", m.Label())
		}
		if m.Error != "" {
			f.Message += ": " + m.Error
		}
		fs = append(fs, f)
	}
	return fs
}

// unlistedFlags flags endpoints that answer as members not in the list.
func unlistedFlags(ms []MemberHealth) []Flag {
	var fs []Flag
	for _, m := range ms {
		if m.Unlisted {
			fs = append(fs, Flag{Kind: FlagUnlisted, Severity: SeverityWarning, Members: []string{m.Label()},
				Message: fmt.Sprintf("endpoint %s answers as member %s, which is not in the member list", m.ClientURL, m.ID)})
		}
	}
	return fs
}

// checkBackupFreshness sets the state and texts of a copy of b (and of its
// drill status, judged by judgeDrill) and returns it with its flags.
func checkBackupFreshness(b BackupStatus) (*BackupStatus, []Flag) {
	var fs []Flag
	b.MaxAgeText = b.MaxAge.String()
	loc := "cluster " + b.ClusterID
	if b.Location != "" {
		loc += " in " + b.Location
	}
	switch {
	case b.Error != "":
		b.State = BackupUnknown
		fs = append(fs, Flag{Kind: FlagBackupUnknown, Severity: SeverityWarning,
			Message: "backup freshness unknown: the object store could not be read (error under BACKUP)"})
	case b.Newest == nil:
		b.State = BackupMissing
		fs = append(fs, Flag{Kind: FlagBackupMissing, Severity: SeverityWarning, Runbook: RunbookMissedBackup,
			Message: "no backup: no committed backup of " + loc})
	default:
		b.AgeText, b.AgeSeconds = output.Age(b.Age), int64(b.Age.Seconds())
		b.State = BackupOK
		if b.MaxAge > 0 && b.Age > b.MaxAge {
			b.State = BackupStale
			fs = append(fs, Flag{Kind: FlagBackupStale, Severity: SeverityWarning, Runbook: RunbookMissedBackup,
				Message: fmt.Sprintf("backup stale: the newest backup %s is %s old (more than %s: a scheduled run was missed)",
					b.Newest.Name, output.Age(b.Age), b.MaxAge)})
		}
	}
	if len(b.Unreadable) > 0 {
		fs = append(fs, Flag{Kind: FlagBackupUnreadable, Severity: SeverityWarning, Runbook: RunbookMissedBackup,
			Message: "newer backups that do not check out (damaged: they would not restore) were skipped: " + strings.Join(b.Unreadable, ", ")})
	}
	if b.Drill != nil && b.Error == "" {
		d := *b.Drill
		if d.Last != nil {
			l := *d.Last
			d.Last = &l
		}
		b.Drill = &d
		fs = append(fs, judgeDrill(&d, b.Newest != nil, loc)...)
	} else {
		b.Drill = nil // the store failed: the backup line says so
	}
	if b.Journal != nil {
		j := *b.Journal
		b.Journal = &j
		fs = append(fs, judgeJournal(&j, loc)...)
	}
	if b.Escrow != nil && b.Error == "" {
		var efs []Flag
		b.Escrow, efs = escrowFlags(*b.Escrow, loc)
		fs = append(fs, efs...)
	}
	return &b, fs
}

// judgeDrill sets d's state and texts and returns its flags. haveBackup:
// the cluster has a backup that checks out (without one, "no backup" is
// the only warning worth reading).
func judgeDrill(d *DrillStatus, haveBackup bool, loc string) []Flag {
	d.MaxAgeText = d.MaxAge.String()
	if d.Error != "" {
		d.State = DrillUnknown
		return []Flag{{Kind: FlagDrillUnknown, Severity: SeverityWarning,
			Message: "restore-drill proof unknown: the drill records could not be read: " + d.Error}}
	}
	if d.Proven != nil {
		d.AgeText, d.AgeSeconds = output.Age(d.Age), int64(d.Age.Seconds())
	}
	if l := d.Last; l != nil {
		l.AgeText, l.AgeSeconds = output.Age(l.Age), int64(l.Age.Seconds())
	}
	failed := d.Last != nil && d.Last.Result != DrillPassed
	old := d.Proven != nil && d.MaxAge > 0 && d.Age > d.MaxAge
	switch {
	case failed:
		d.State = DrillFailed
	case d.Proven == nil:
		d.State = DrillNever
	case old:
		d.State = DrillOld
	default:
		d.State = DrillOK
	}
	var flags []Flag
	if failed {
		l := d.Last
		flags = append(flags, Flag{Kind: FlagDrillFailed, Severity: SeverityWarning, Runbook: RunbookDrill,
			Message: fmt.Sprintf("restore drill failed: the newest drill, of backup %s (%s ago), failed at %s; treat that backup as bad",
				l.Backup, l.AgeText, l.Failed)})
	}
	switch {
	case d.Proven == nil && haveBackup:
		flags = append(flags, Flag{Kind: FlagDrillMissing, Severity: SeverityWarning, Runbook: RunbookDrill,
			Message: "never drilled: no backup of " + loc + " is proven restorable (no drill of a backup that checks out passed)"})
	case old:
		flags = append(flags, Flag{Kind: FlagDrillStale, Severity: SeverityWarning, Runbook: RunbookDrill,
			Message: fmt.Sprintf("restore drill old: the newest backup proven restorable, %s, is %s old (more than %s: drills are not running, or not passing)",
				d.Proven.Name, d.AgeText, d.MaxAge)})
	}
	return flags
}
