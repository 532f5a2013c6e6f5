package inspect

import (
	"net/url"
	"time"

	"github.com/armada/etcd-recovery/internal/probe"
)

// This file holds the report's types: a member's row, the verdict, the
// flags, the backup and drill status and the next step, all of them
// JSON fields of Report.

// Report is the result of an inspection: the assessment plus how it was
// made. It is what `-o json` prints.
type Report struct {
	Assessment
	// MemberList says where the member list came from.
	MemberList string    `json:"memberList"`
	Endpoints  []string  `json:"endpoints"`
	Warnings   []string  `json:"warnings,omitempty"`
	CheckedAt  time.Time `json:"checkedAt"`
	Timeout    string    `json:"timeout"`
	ElapsedMS  int64     `json:"elapsedMs"`
	// Thresholds used for the flags.
	MaxLag     uint64 `json:"maxLag"`
	QuotaBytes int64  `json:"quotaBytes"`
}

// ExitCode is the process exit code for the report's verdict.
func (r *Report) ExitCode() int { return r.Verdict.ExitCode() }

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
	// Journal is the cluster's journal lag (journal.go); nil when the
	// cluster has no journal or it was not checked.
	Journal *JournalStatus `json:"journal,omitempty"`
	// Escrow is the newest committed backup's escrow (escrow.go); nil
	// when there is no such backup or the store failed.
	Escrow *EscrowStatus `json:"escrow,omitempty"`
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
