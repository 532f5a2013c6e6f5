package inspect

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/probe"
)

// This file is the pure half of inspect: from what the probes saw, the
// verdict, the flags and the next step. No network, no clock.

// Health is one member's state as its probe saw it: probe.Health, whose
// package doc defines it.
type Health = probe.Health

// The member states (see probe.Health).
const (
	// HealthHealthy: the member serves linearizable reads (for a learner,
	// which never serves them: serializable reads).
	HealthHealthy = probe.Healthy
	// HealthNoQuorum: alive, serves serializable reads, but linearizable
	// reads fail: it cannot reach a quorum.
	HealthNoQuorum = probe.NoQuorum
	// HealthUnhealthy: answers its status but serves no read at all.
	HealthUnhealthy = probe.Unhealthy
	// HealthDown: answers nothing within the timeout.
	HealthDown = probe.Down
)

// Classify derives a member's health from its three probes (probe.Classify).
func Classify(statusOK, linearizableOK, serializableOK, learner bool) Health {
	return probe.Classify(statusOK, linearizableOK, serializableOK, learner)
}

// Alarm types as etcd names them.
const (
	AlarmNoSpace = "NOSPACE"
	AlarmCorrupt = "CORRUPT"
)

// MemberHealth is one member in the report.
type MemberHealth struct {
	Name      string `json:"name"`
	ID        string `json:"id,omitempty"` // hex, as etcdctl prints it
	ClientURL string `json:"clientURL"`
	Version   string `json:"version,omitempty"`
	Health    Health `json:"health"`
	Leader    bool   `json:"leader"` // the member says it is the leader
	Learner   bool   `json:"learner"`
	// Unlisted: the member answered at an --endpoints address but is not in
	// the member list (another cluster?). It does not count for quorum.
	Unlisted bool `json:"unlisted,omitempty"`

	// StatusOK: the member answered the Status call; the raft and DB fields
	// below are only meaningful then.
	StatusOK     bool   `json:"statusOK"`
	LeaderID     string `json:"leaderID,omitempty"`  // hex: the leader this member reports; empty when none
	ClusterID    string `json:"clusterID,omitempty"` // hex, from response headers
	RaftTerm     uint64 `json:"raftTerm"`
	RaftIndex    uint64 `json:"raftIndex"`
	AppliedIndex uint64 `json:"appliedIndex"`
	// Lag is how far the member's raft index is behind the highest raft
	// index any member reported (filled by Verdict).
	Lag         uint64 `json:"lag"`
	DBSize      int64  `json:"dbSize"`
	DBSizeInUse int64  `json:"dbSizeInUse"`

	// Alarms active for this member (NOSPACE, CORRUPT), from the Alarm API
	// or, without quorum, from its status.
	Alarms []string `json:"alarms,omitempty"`

	LinearizableRead bool `json:"linearizableRead"`
	SerializableRead bool `json:"serializableRead"`
	// StatusErrors are the errors the member reports about itself (alarms,
	// "no leader").
	StatusErrors []string `json:"statusErrors,omitempty"`

	LatencyMS float64 `json:"latencyMs"` // of the read that decided its health (else of its status)
	// Revision is the revision the member's linearizable read saw (0 when
	// it failed).
	Revision int64  `json:"revision,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Healthy is probe.Member.Healthy for a row: the member serves reads
// (Health is HealthHealthy) and no alarm is raised against it.
func (m MemberHealth) Healthy() bool { return m.Health == HealthHealthy && len(m.Alarms) == 0 }

// Alive reports whether the member answered anything.
func (m MemberHealth) Alive() bool { return m.Health != HealthDown }

// Label names the member for messages: its name, else its host, else its id.
func (m MemberHealth) Label() string {
	switch {
	case m.Name != "":
		return m.Name
	case m.ClientURL != "":
		if u, err := url.Parse(m.ClientURL); err == nil && u.Host != "" {
			return u.Host
		}
		return m.ClientURL
	case m.ID != "":
		return m.ID
	}
	return "?"
}

// VerdictKind is the one-word answer.
type VerdictKind string

const (
	VerdictHealthy     VerdictKind = "HEALTHY"
	VerdictDegraded    VerdictKind = "DEGRADED"
	VerdictQuorumLost  VerdictKind = "QUORUM LOST"
	VerdictUnreachable VerdictKind = "UNREACHABLE"
)

// Exit codes of `etcd-recovery inspect`, one per verdict (4 is usage).
const (
	ExitHealthy     = 0
	ExitDegraded    = 1
	ExitQuorumLost  = 2
	ExitUnreachable = 3
)

// ExitCode is the process exit code for the verdict.
func (v VerdictKind) ExitCode() int {
	switch v {
	case VerdictHealthy:
		return ExitHealthy
	case VerdictDegraded:
		return ExitDegraded
	case VerdictQuorumLost:
		return ExitQuorumLost
	}
	return ExitUnreachable
}

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

// FlagKind classifies a flag.
type FlagKind string

const (
	FlagMemberDown       FlagKind = "member-down"       // a voting member is down or cannot serve
	FlagNoLeader         FlagKind = "no-leader"         // no member answering knows a leader
	FlagSplitBrain       FlagKind = "split-brain"       // two leaders, different leaders, different cluster IDs
	FlagLagging          FlagKind = "lagging"           // raft or applied index far behind
	FlagNearQuota        FlagKind = "db-near-quota"     // DB size at or above QuotaRatio of the quota
	FlagAlarm            FlagKind = "alarm"             // NOSPACE, CORRUPT or another alarm
	FlagUnlisted         FlagKind = "unlisted"          // an endpoint answers as a member not in the list
	FlagBackupMissing    FlagKind = "backup-missing"    // no committed backup at all
	FlagBackupStale      FlagKind = "backup-stale"      // newest backup older than the maximum age
	FlagBackupUnknown    FlagKind = "backup-unknown"    // the object store could not be read
	FlagBackupUnreadable FlagKind = "backup-unreadable" // newer backups that are damaged (manifest or objects)
	FlagDrillFailed      FlagKind = "drill-failed"      // the newest restore drill (of any backup) failed
	FlagDrillMissing     FlagKind = "drill-missing"     // no good backup was ever proven restorable by a drill
	FlagDrillStale       FlagKind = "drill-stale"       // the newest proven-restorable backup is older than the maximum drill age
	FlagDrillUnknown     FlagKind = "drill-unknown"     // the drill records could not be read
)

// Severity of a flag.
type Severity string

const (
	SeverityCritical Severity = "critical"
	SeverityWarning  Severity = "warning"
)

// Flag is one thing an SRE must know beyond the verdict.
type Flag struct {
	Kind     FlagKind `json:"kind"`
	Severity Severity `json:"severity"`
	Alarm    string   `json:"alarm,omitempty"` // for FlagAlarm: NOSPACE, CORRUPT, ...
	Members  []string `json:"members,omitempty"`
	Message  string   `json:"message"`
	Runbook  string   `json:"runbook,omitempty"`
}

// BackupState is the backup freshness answer.
type BackupState string

const (
	BackupOK      BackupState = "ok"
	BackupStale   BackupState = "stale"
	BackupMissing BackupState = "missing"
	BackupUnknown BackupState = "unknown" // the store failed
)

// BackupInfo is one committed backup.
type BackupInfo struct {
	Name     string    `json:"name"`
	Kind     string    `json:"kind"`
	Time     time.Time `json:"time"`
	Revision int64     `json:"revision"`
	Source   string    `json:"source,omitempty"` // member the snapshot was taken from
}

// BackupStatus is the backup freshness of one cluster in the store.
type BackupStatus struct {
	ClusterID string `json:"clusterID"`
	Location  string `json:"location,omitempty"` // bucket/prefix, for messages
	// State is set by Verdict from the fields below.
	State  BackupState   `json:"state"`
	Newest *BackupInfo   `json:"newest,omitempty"`
	Age    time.Duration `json:"-"` // of Newest, when the store was read
	MaxAge time.Duration `json:"-"`
	// AgeText/MaxAgeText are Age and MaxAge for JSON readers.
	AgeText    string `json:"age,omitempty"`
	AgeSeconds int64  `json:"ageSeconds,omitempty"`
	MaxAgeText string `json:"maxAge"`
	// Unreadable lists newer committed backups that do not check out (their
	// manifest is unreadable, or an object it names is missing or of another
	// size); they were skipped.
	Unreadable []string `json:"unreadable,omitempty"`
	Error      string   `json:"error,omitempty"` // the store failed
	// Drill is the restore-drill proof of the cluster's backups; nil when
	// it was not checked.
	Drill *DrillStatus `json:"drill,omitempty"`
}

// DrillState is the restore-drill answer: is a recent backup proven to
// restore, and did the newest drill pass?
type DrillState string

const (
	// DrillOK: the newest proven-restorable backup is at most MaxAge old
	// and the newest drill passed.
	DrillOK DrillState = "ok"
	// DrillOld: the newest proven-restorable backup is older than MaxAge.
	DrillOld DrillState = "old"
	// DrillNever: no backup that checks out was ever proven restorable.
	DrillNever DrillState = "never"
	// DrillFailed: the newest drill (of any backup) failed. It outranks
	// old and never (both may hold as well: see Proven).
	DrillFailed DrillState = "failed"
	// DrillUnknown: the drill records could not be read.
	DrillUnknown DrillState = "unknown"
)

// ProvenBackup is the newest backup that checks out and whose drill passed
// (catalog.DrillSummary.Proven).
type ProvenBackup struct {
	Name string    `json:"name"`
	Kind string    `json:"kind"`
	Time time.Time `json:"time"` // when the backup was taken
	// DrilledAt is when its drill finished; Mode the comparison it made
	// (catalog.CompareSource or catalog.CompareSelf).
	DrilledAt time.Time `json:"drilledAt"`
	Mode      string    `json:"mode,omitempty"`
}

// DrillInfo is the newest drill of any backup of the cluster.
type DrillInfo struct {
	Backup string    `json:"backup"`
	Result string    `json:"result"` // DrillPassed or DrillFailedResult
	At     time.Time `json:"at"`     // when it finished
	// Failed is the failing check ("<check>: <detail>"), when it failed.
	Failed string `json:"failed,omitempty"`
	Mode   string `json:"mode,omitempty"`
	// Age is how long ago it finished.
	Age        time.Duration `json:"-"`
	AgeText    string        `json:"age,omitempty"`
	AgeSeconds int64         `json:"ageSeconds,omitempty"`
}

// Results of a drill (DrillInfo.Result).
const (
	DrillPassed       = "passed"
	DrillFailedResult = "failed"
)

// DrillStatus is the restore-drill proof of one cluster's backups.
type DrillStatus struct {
	// State is set by Verdict from the fields below.
	State DrillState `json:"state"`
	// Proven is the newest backup proven restorable; Age is its age (since
	// the backup was taken, as the backup freshness).
	Proven     *ProvenBackup `json:"proven,omitempty"`
	Age        time.Duration `json:"-"`
	AgeText    string        `json:"age,omitempty"`
	AgeSeconds int64         `json:"ageSeconds,omitempty"`
	MaxAge     time.Duration `json:"-"`
	MaxAgeText string        `json:"maxAge"`
	// Last is the newest drill of any backup (by when it finished).
	Last *DrillInfo `json:"last,omitempty"`
	// Unreadable lists drill records that do not parse (they prove
	// nothing).
	Unreadable []string `json:"unreadable,omitempty"`
	Error      string   `json:"error,omitempty"` // the store failed
}

// NextStep is the one thing to do now.
type NextStep struct {
	Action   string   `json:"action"`
	Runbooks []string `json:"runbooks,omitempty"`
}

// Assessment is everything Verdict concludes.
type Assessment struct {
	Verdict VerdictKind `json:"verdict"`
	Summary string      `json:"summary"`
	// Voting members (learners and unlisted endpoints excluded), the quorum
	// they need, how many serve linearizable reads (Up) and how many answer
	// at all (Alive).
	Voting int `json:"voting"`
	Quorum int `json:"quorum"`
	Up     int `json:"up"`
	Alive  int `json:"alive"`
	// Tolerates is how many more voting members may fail with quorum kept
	// (0 without quorum).
	Tolerates int    `json:"tolerates"`
	Leader    string `json:"leader,omitempty"`   // its name (or id); empty when none
	LeaderID  string `json:"leaderID,omitempty"` // hex
	// LeaderNote qualifies a leader that cannot lead: it claims leadership
	// without quorum, or others report it but it does not answer.
	LeaderNote string         `json:"leaderNote,omitempty"`
	ClusterID  string         `json:"clusterID,omitempty"`
	Members    []MemberHealth `json:"members"`
	Flags      []Flag         `json:"flags"`
	Backup     *BackupStatus  `json:"backup,omitempty"`
	NextStep   NextStep       `json:"nextStep"`
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
	var ls leaders
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
	claims := map[uint64][]string{} // term -> members saying they lead
	var claimTerms []uint64
	reported := map[string][]string{} // leader id -> members reporting it
	clusterIDs := map[string][]string{}
	for _, m := range ms {
		if !m.StatusOK {
			continue
		}
		if m.ClusterID != "" {
			clusterIDs[m.ClusterID] = append(clusterIDs[m.ClusterID], m.Label())
		}
		if m.Unlisted {
			continue
		}
		if m.Leader {
			if len(claims[m.RaftTerm]) == 0 {
				claimTerms = append(claimTerms, m.RaftTerm)
			}
			claims[m.RaftTerm] = append(claims[m.RaftTerm], m.Label())
		}
		if m.LeaderID != "" {
			reported[m.LeaderID] = append(reported[m.LeaderID], m.Label())
		}
	}
	sort.Slice(claimTerms, func(i, j int) bool { return claimTerms[i] > claimTerms[j] })
	ls.splitBrain = splitBrainFlags(claims, claimTerms, reported, clusterIDs, name)

	if len(claimTerms) > 0 {
		for _, m := range ms {
			if m.StatusOK && !m.Unlisted && m.Leader && m.RaftTerm == claimTerms[0] {
				ls.leader, ls.leaderID = m.Label(), m.ID
				break
			}
		}
	} else if len(reported) > 0 {
		best := ""
		for id, by := range reported {
			if best == "" || len(by) > len(reported[best]) || (len(by) == len(reported[best]) && id < best) {
				best = id
			}
		}
		ls.leader, ls.leaderID = name(best), best
	}
	if lm := byID[ls.leaderID]; lm != nil && lm.Health != HealthHealthy {
		if lm.Alive() {
			ls.leaderNote = "claims leadership but cannot serve linearizable reads (no quorum)"
		} else {
			ls.leaderNote = "reported by other members, but does not answer"
		}
	}
	listedIDs := map[string]int{}
	for _, m := range ms {
		if m.StatusOK && !m.Unlisted && m.ClusterID != "" {
			listedIDs[m.ClusterID]++
		}
	}
	for id, n := range listedIDs {
		if ls.clusterID == "" || n > listedIDs[ls.clusterID] || (n == listedIDs[ls.clusterID] && id < ls.clusterID) {
			ls.clusterID = id
		}
	}
	return ls
}

// splitBrainFlags are the split-brain signs: claims maps a raft term to
// the members claiming leadership in it (claimTerms, newest first),
// reported a leader id to the members following it, clusterIDs a cluster
// id to the members in it.
func splitBrainFlags(claims map[uint64][]string, claimTerms []uint64, reported, clusterIDs map[string][]string, name func(string) string) []Flag {
	var splitBrain []Flag
	for _, t := range claimTerms {
		if c := claims[t]; len(c) > 1 {
			splitBrain = append(splitBrain, Flag{Kind: FlagSplitBrain, Severity: SeverityCritical, Members: c,
				Message: fmt.Sprintf("split brain: %s all claim leadership in raft term %d", strings.Join(c, ", "), t)})
		}
	}
	if len(claimTerms) > 1 {
		var parts, who []string
		for _, t := range claimTerms {
			parts = append(parts, fmt.Sprintf("%s in term %d", strings.Join(claims[t], ", "), t))
			who = append(who, claims[t]...)
		}
		splitBrain = append(splitBrain, Flag{Kind: FlagSplitBrain, Severity: SeverityCritical, Members: who,
			Message: "split-brain sign: more than one member claims leadership (" + strings.Join(parts, "; ") +
				"): the older leader is cut off from the cluster but still believes it leads"})
	}
	if len(reported) > 1 {
		ids := make([]string, 0, len(reported))
		for id := range reported {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		var parts, who []string
		for _, id := range ids {
			parts = append(parts, fmt.Sprintf("%s follow %s", strings.Join(reported[id], ", "), name(id)))
			who = append(who, reported[id]...)
		}
		splitBrain = append(splitBrain, Flag{Kind: FlagSplitBrain, Severity: SeverityCritical, Members: who,
			Message: "split-brain sign: members disagree on the leader (" + strings.Join(parts, "; ") +
				"); if it persists across runs, the cluster is partitioned"})
	}
	if len(clusterIDs) > 1 {
		ids := make([]string, 0, len(clusterIDs))
		for id := range clusterIDs {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		var parts, who []string
		for _, id := range ids {
			parts = append(parts, fmt.Sprintf("%s in cluster %s", strings.Join(clusterIDs[id], ", "), id))
			who = append(who, clusterIDs[id]...)
		}
		splitBrain = append(splitBrain, Flag{Kind: FlagSplitBrain, Severity: SeverityCritical, Members: who,
			Message: "different cluster IDs in response headers (" + strings.Join(parts, "; ") +
				"): the endpoints are not one cluster (a member restored or re-bootstrapped on its own?)"})
	}
	return splitBrain
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

// judge is the verdict and its summary: UNREACHABLE when no member
// answers, QUORUM LOST without a linearizable read, DEGRADED with members
// down, an alarm or split-brain signs, else HEALTHY.
func judge(a Assessment, q quorumCount, al alarmGroups, splitBrain bool) (VerdictKind, string) {
	switch {
	case q.anyAlive == 0:
		return VerdictUnreachable, fmt.Sprintf("no member answers; %d checked", len(a.Members))
	case !q.have:
		return VerdictQuorumLost, fmt.Sprintf("quorum lost: %d of %d voting members serve linearizable reads, %d needed; %d still %s",
			a.Up, a.Voting, a.Quorum, a.Alive, plural(a.Alive, "answers", "answer"))
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
		a.Up, a.Voting, a.Quorum, a.Tolerates, plural(a.Tolerates, "failure", "failures"))
	if a.Up < a.Quorum {
		up += fmt.Sprintf(" (a linearizable read proves a quorum, but only %d voting %s serve from here)", a.Up, plural(a.Up, "member", "members"))
	}
	if len(why) > 0 {
		return verdict, strings.Join(why, "; ") + "; " + up
	}
	return verdict, up
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
	return &b, fs
}

// nextStep picks the one thing to do now, most urgent first.
func nextStep(a Assessment, noSpace, corrupt bool, alarmMembers map[string][]string, splitBrain bool) NextStep {
	restoreFrom := "the newest snapshot"
	if b := a.Backup; b != nil && b.Newest != nil {
		restoreFrom = fmt.Sprintf("the newest snapshot (backup %s, revision %d)", b.Newest.Name, b.Newest.Revision)
	}
	switch a.Verdict {
	case VerdictUnreachable:
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
			plural(len(failed), "member", "members"), strings.Join(failed, ", "), a.Tolerates, plural(a.Tolerates, "failure", "failures")),
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

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
