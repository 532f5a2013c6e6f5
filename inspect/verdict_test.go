package inspect

import (
	"strings"
	"testing"
	"time"
)

// Fakes for the pure verdict logic only: members as a probe would report
// them.

func healthy(name, id string, term, index uint64) MemberHealth {
	return MemberHealth{Name: name, ID: id, ClientURL: "https://" + name + ":2379", Health: HealthHealthy, StatusOK: true,
		LeaderID: "1", ClusterID: "c1", RaftTerm: term, RaftIndex: index, AppliedIndex: index,
		DBSize: 1 << 20, DBSizeInUse: 1 << 19, LinearizableRead: true, SerializableRead: true, Leader: id == "1"}
}

func down(name, id string) MemberHealth {
	return MemberHealth{Name: name, ID: id, ClientURL: "https://" + name + ":2379", Health: HealthDown, Error: "connection refused"}
}

func noQuorum(name, id string, index uint64) MemberHealth {
	return MemberHealth{Name: name, ID: id, ClientURL: "https://" + name + ":2379", Health: HealthNoQuorum, StatusOK: true,
		ClusterID: "c1", RaftTerm: 3, RaftIndex: index, AppliedIndex: index, SerializableRead: true}
}

// cluster returns n members, the first up healthy (member "1" leads), the
// rest down.
func cluster(n, up int) []MemberHealth {
	var ms []MemberHealth
	for i := range n {
		name, id := "m"+string(rune('0'+i)), string(rune('1'+i))
		if i < up {
			ms = append(ms, healthy(name, id, 2, 100))
		} else {
			ms = append(ms, down(name, id))
		}
	}
	return ms
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		status, lin, ser, learner bool
		want                      Health
	}{
		{true, true, true, false, HealthHealthy},
		{false, true, true, false, HealthHealthy},
		{true, false, true, false, HealthNoQuorum},
		{true, false, true, true, HealthHealthy}, // learners never serve linearizable reads
		{true, false, false, false, HealthUnhealthy},
		{false, false, false, false, HealthDown},
		{false, false, true, false, HealthNoQuorum},
	} {
		if got := Classify(tc.status, tc.lin, tc.ser, tc.learner); got != tc.want {
			t.Errorf("Classify(status=%v lin=%v ser=%v learner=%v) = %s, want %s", tc.status, tc.lin, tc.ser, tc.learner, got, tc.want)
		}
	}
}

func TestVerdictTolerance(t *testing.T) {
	for _, tc := range []struct {
		name      string
		members   []MemberHealth
		verdict   VerdictKind
		quorum    int
		up        int
		tolerates int
		runbooks  []string
	}{
		{"n=1 up", cluster(1, 1), VerdictHealthy, 1, 1, 0, nil},
		{"n=1 down", cluster(1, 0), VerdictUnreachable, 1, 0, 0, []string{RunbookUnreachable}},
		{"n=3 all up", cluster(3, 3), VerdictHealthy, 2, 3, 1, nil},
		{"n=3 one down", cluster(3, 2), VerdictDegraded, 2, 2, 0, []string{RunbookReplaceMember}},
		{"n=3 two down, survivor without quorum",
			[]MemberHealth{down("m0", "1"), noQuorum("m1", "2", 100), down("m2", "3")},
			VerdictQuorumLost, 2, 0, 0, []string{RunbookSurvivorSnapshot, RunbookRestore}},
		{"n=3 all down", cluster(3, 0), VerdictUnreachable, 2, 0, 0, []string{RunbookUnreachable}},
		{"n=5 all up", cluster(5, 5), VerdictHealthy, 3, 5, 2, nil},
		{"n=5 one down", cluster(5, 4), VerdictDegraded, 3, 4, 1, []string{RunbookReplaceMember}},
		{"n=5 two down", cluster(5, 3), VerdictDegraded, 3, 3, 0, []string{RunbookReplaceMember}},
		{"n=5 three down, two without quorum",
			[]MemberHealth{noQuorum("m0", "1", 90), noQuorum("m1", "2", 100), down("m2", "3"), down("m3", "4"), down("m4", "5")},
			VerdictQuorumLost, 3, 0, 0, []string{RunbookSurvivorSnapshot, RunbookRestore}},
		{"n=4 (even) one down", cluster(4, 3), VerdictDegraded, 3, 3, 0, []string{RunbookReplaceMember}},
		{"learner does not count",
			append(cluster(3, 3), MemberHealth{Name: "l", ID: "9", Learner: true, Health: HealthDown}),
			VerdictHealthy, 2, 3, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Verdict(tc.members, nil, Thresholds{})
			if a.Verdict != tc.verdict || a.Quorum != tc.quorum || a.Up != tc.up || a.Tolerates != tc.tolerates {
				t.Errorf("got %s quorum %d up %d tolerates %d; want %s quorum %d up %d tolerates %d (%s)",
					a.Verdict, a.Quorum, a.Up, a.Tolerates, tc.verdict, tc.quorum, tc.up, tc.tolerates, a.Summary)
			}
			if strings.Join(a.NextStep.Runbooks, " ") != strings.Join(tc.runbooks, " ") {
				t.Errorf("next step runbooks %v, want %v (%s)", a.NextStep.Runbooks, tc.runbooks, a.NextStep.Action)
			}
			if len(tc.runbooks) == 0 && a.NextStep.Action != "none" {
				t.Errorf("next step %q, want none", a.NextStep.Action)
			}
		})
	}
}

func TestVerdictExitCodes(t *testing.T) {
	for v, code := range map[VerdictKind]int{VerdictHealthy: 0, VerdictDegraded: 1, VerdictQuorumLost: 2, VerdictUnreachable: 3} {
		if v.ExitCode() != code {
			t.Errorf("%s exit code %d, want %d", v, v.ExitCode(), code)
		}
	}
}

func TestVerdictQuorumLostNamesSurvivor(t *testing.T) {
	ms := []MemberHealth{down("m0", "1"), noQuorum("m1", "2", 90), noQuorum("m2", "3", 120)}
	ms[1].LeaderID, ms[2].LeaderID = "1", "1" // still following the dead leader
	a := Verdict(ms, &BackupStatus{ClusterID: "x", MaxAge: 9 * time.Hour, Age: time.Hour,
		Newest: &BackupInfo{Name: "20260101T000000.000Z-scheduled", Revision: 42}}, Thresholds{})
	if a.Verdict != VerdictQuorumLost || a.Alive != 2 {
		t.Fatalf("%s alive %d", a.Verdict, a.Alive)
	}
	if a.Leader != "m0" || a.LeaderNote != "reported by other members, but does not answer" {
		t.Errorf("leader %q note %q", a.Leader, a.LeaderNote)
	}
	// The old leader still claiming leadership just after losing quorum.
	ms2 := []MemberHealth{down("m0", "1"), noQuorum("m1", "2", 90), down("m2", "3")}
	ms2[1].Leader, ms2[1].LeaderID = true, "2"
	if a := Verdict(ms2, nil, Thresholds{}); a.Leader != "m1" || !strings.Contains(a.LeaderNote, "no quorum") {
		t.Errorf("leader %q note %q", a.Leader, a.LeaderNote)
	}
	// The survivor with the highest raft index.
	if !strings.Contains(a.NextStep.Action, "survivor snapshot of m2") || !strings.Contains(a.NextStep.Action, "20260101T000000.000Z-scheduled") {
		t.Errorf("next step %q", a.NextStep.Action)
	}
	var noq int
	for _, f := range a.Flags {
		if f.Kind == FlagMemberDown && strings.Contains(f.Message, "alive but has no quorum") {
			noq++
		}
	}
	if noq != 2 {
		t.Errorf("want both survivors flagged alive without quorum: %+v", a.Flags)
	}
}

func hasFlag(a Assessment, kind FlagKind, substr string) bool {
	for _, f := range a.Flags {
		if f.Kind == kind && strings.Contains(f.Message, substr) {
			return true
		}
	}
	return false
}

func TestVerdictSplitBrain(t *testing.T) {
	t.Run("two leaders in one term", func(t *testing.T) {
		ms := cluster(3, 3)
		ms[1].Leader, ms[1].LeaderID = true, "2"
		a := Verdict(ms, nil, Thresholds{})
		if !hasFlag(a, FlagSplitBrain, "m0, m1 all claim leadership in raft term 2") || a.Verdict != VerdictDegraded {
			t.Errorf("%s %+v", a.Verdict, a.Flags)
		}
	})
	t.Run("leaders in different terms", func(t *testing.T) {
		ms := cluster(3, 3)
		ms[2].Leader, ms[2].LeaderID, ms[2].RaftTerm = true, "3", 5
		a := Verdict(ms, nil, Thresholds{})
		if !hasFlag(a, FlagSplitBrain, "m2 in term 5; m0 in term 2") || a.Verdict != VerdictDegraded {
			t.Errorf("%s %+v", a.Verdict, a.Flags)
		}
		if a.Leader != "m2" {
			t.Errorf("leader %q: want the one with the newest term", a.Leader)
		}
	})
	t.Run("followers disagree", func(t *testing.T) {
		ms := cluster(3, 3)
		ms[2].LeaderID = "2"
		a := Verdict(ms, nil, Thresholds{})
		if !hasFlag(a, FlagSplitBrain, "members disagree on the leader") {
			t.Errorf("%+v", a.Flags)
		}
	})
	t.Run("cluster ids differ", func(t *testing.T) {
		ms := cluster(3, 3)
		ms[2].ClusterID = "c2"
		a := Verdict(ms, nil, Thresholds{})
		if !hasFlag(a, FlagSplitBrain, "different cluster IDs") || a.Verdict != VerdictDegraded || a.ClusterID != "c1" {
			t.Errorf("%s %s %+v", a.Verdict, a.ClusterID, a.Flags)
		}
	})
	t.Run("healthy cluster has none", func(t *testing.T) {
		a := Verdict(cluster(5, 5), nil, Thresholds{})
		if len(a.Flags) != 0 || a.Leader != "m0" || a.LeaderID != "1" {
			t.Errorf("leader %q flags %+v", a.Leader, a.Flags)
		}
	})
	t.Run("leader from reports when it does not answer", func(t *testing.T) {
		ms := cluster(3, 3)
		ms[0] = down("m0", "1")
		a := Verdict(ms, nil, Thresholds{})
		if a.Leader != "m0" || hasFlag(a, FlagSplitBrain, "") {
			t.Errorf("leader %q flags %+v", a.Leader, a.Flags)
		}
	})
	t.Run("no leader", func(t *testing.T) {
		ms := []MemberHealth{down("m0", "1"), noQuorum("m1", "2", 1), down("m2", "3")}
		a := Verdict(ms, nil, Thresholds{})
		if a.Leader != "" || !hasFlag(a, FlagNoLeader, "") {
			t.Errorf("leader %q flags %+v", a.Leader, a.Flags)
		}
	})
}

func TestVerdictLag(t *testing.T) {
	ms := cluster(3, 3)
	ms[0].RaftIndex, ms[0].AppliedIndex = 5000, 5000
	ms[1].RaftIndex, ms[1].AppliedIndex = 3999, 3999 // 1001 behind
	ms[2].RaftIndex, ms[2].AppliedIndex = 4000, 2500 // 1000 behind: not flagged; applied 1500 behind its own index
	a := Verdict(ms, nil, Thresholds{})
	if a.Members[0].Lag != 0 || a.Members[1].Lag != 1001 || a.Members[2].Lag != 1000 {
		t.Errorf("lags %d %d %d", a.Members[0].Lag, a.Members[1].Lag, a.Members[2].Lag)
	}
	if ms[1].Lag != 0 {
		t.Error("Verdict changed its input")
	}
	if !hasFlag(a, FlagLagging, "m1 is 1001 raft entries behind") || hasFlag(a, FlagLagging, "m2 is") ||
		!hasFlag(a, FlagLagging, "m2 has applied 2500 of 4000") {
		t.Errorf("%+v", a.Flags)
	}
	if a.Verdict != VerdictHealthy || a.NextStep.Action != "none" {
		t.Errorf("lag is a warning, not a verdict: %s %q", a.Verdict, a.NextStep.Action)
	}
	a = Verdict(ms, nil, Thresholds{MaxLag: 2000})
	if hasFlag(a, FlagLagging, "") {
		t.Errorf("threshold 2000: %+v", a.Flags)
	}
}

func TestVerdictQuota(t *testing.T) {
	ms := cluster(3, 3)
	ms[0].DBSize = 1717986919 // 80% of 2 GiB, rounded up
	ms[1].DBSize = 1600 << 20
	a := Verdict(ms, nil, Thresholds{})
	if !hasFlag(a, FlagNearQuota, "member m0") || hasFlag(a, FlagNearQuota, "member m1") {
		t.Errorf("%+v", a.Flags)
	}
	if a.Verdict != VerdictHealthy || a.NextStep.Runbooks[0] != RunbookNoSpace {
		t.Errorf("%s %+v", a.Verdict, a.NextStep)
	}
	ms = cluster(1, 1)
	ms[0].DBSize = 14 << 20
	if a := Verdict(ms, nil, Thresholds{QuotaBytes: 16 << 20}); !hasFlag(a, FlagNearQuota, "88% of the 16.0 MiB quota") {
		t.Errorf("16 MiB quota: %+v", a.Flags)
	}
}

func TestVerdictAlarms(t *testing.T) {
	ms := cluster(3, 3)
	ms[0].Alarms = []string{AlarmNoSpace}
	ms[2].Alarms = []string{AlarmNoSpace}
	a := Verdict(ms, nil, Thresholds{})
	if a.Verdict != VerdictDegraded || !hasFlag(a, FlagAlarm, "NOSPACE alarm on m0, m2") {
		t.Errorf("%s %+v", a.Verdict, a.Flags)
	}
	if a.NextStep.Runbooks[0] != RunbookNoSpace || !strings.Contains(a.NextStep.Action, "disarm") {
		t.Errorf("next step %+v", a.NextStep)
	}
	// NOSPACE comes before a minority failure: writes fail now.
	ms[1] = down("m1", "2")
	if a := Verdict(ms, nil, Thresholds{}); a.NextStep.Runbooks[0] != RunbookNoSpace {
		t.Errorf("next step %+v", a.NextStep)
	}
	ms = cluster(3, 3)
	ms[1].Alarms = []string{AlarmCorrupt}
	a = Verdict(ms, nil, Thresholds{})
	if a.Verdict != VerdictDegraded || !hasFlag(a, FlagAlarm, "CORRUPT alarm on m1") || a.NextStep.Runbooks[0] != RunbookReplaceMember {
		t.Errorf("%s %+v %+v", a.Verdict, a.Flags, a.NextStep)
	}
}

func TestVerdictBackup(t *testing.T) {
	newest := &BackupInfo{Name: "20260101T000000.000Z-scheduled", Kind: "scheduled", Revision: 7}
	for _, tc := range []struct {
		name    string
		b       BackupStatus
		state   BackupState
		flag    FlagKind
		runbook string
	}{
		{"fresh", BackupStatus{Newest: newest, Age: 2 * time.Hour}, BackupOK, "", ""},
		{"stale", BackupStatus{Newest: newest, Age: 10 * time.Hour}, BackupStale, FlagBackupStale, RunbookMissedBackup},
		{"missing", BackupStatus{}, BackupMissing, FlagBackupMissing, RunbookMissedBackup},
		{"store failed", BackupStatus{Error: "cos: list: connection refused"}, BackupUnknown, FlagBackupUnknown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.b.ClusterID, tc.b.MaxAge = "c", 9*time.Hour
			a := Verdict(cluster(3, 3), &tc.b, Thresholds{})
			if a.Backup == nil || a.Backup.State != tc.state {
				t.Fatalf("backup %+v", a.Backup)
			}
			if a.Verdict != VerdictHealthy {
				t.Errorf("backup freshness changed the verdict: %s", a.Verdict)
			}
			if tc.flag == "" && len(a.Flags) != 0 || tc.flag != "" && !hasFlag(a, tc.flag, "") {
				t.Errorf("flags %+v, want %q", a.Flags, tc.flag)
			}
			got := ""
			if len(a.NextStep.Runbooks) > 0 {
				got = a.NextStep.Runbooks[0]
			}
			if got != tc.runbook {
				t.Errorf("next step %+v, want runbook %q", a.NextStep, tc.runbook)
			}
			if tc.b.State != "" {
				t.Error("Verdict changed its input")
			}
		})
	}
	// A member failure outranks a stale backup.
	a := Verdict(cluster(3, 2), &BackupStatus{MaxAge: time.Hour, Age: 2 * time.Hour, Newest: newest}, Thresholds{})
	if a.NextStep.Runbooks[0] != RunbookReplaceMember || !hasFlag(a, FlagBackupStale, "") {
		t.Errorf("%+v %+v", a.NextStep, a.Flags)
	}
}

func TestVerdictUnlisted(t *testing.T) {
	ms := cluster(3, 3)
	stray := healthy("", "77", 9, 10)
	stray.ClientURL, stray.Unlisted, stray.ClusterID, stray.Leader = "https://10.0.0.9:2379", true, "c9", true
	a := Verdict(append(ms, stray), nil, Thresholds{})
	if a.Voting != 3 || a.Tolerates != 1 || a.Leader != "m0" || a.ClusterID != "c1" {
		t.Errorf("voting %d tolerates %d leader %q", a.Voting, a.Tolerates, a.Leader)
	}
	if !hasFlag(a, FlagUnlisted, "10.0.0.9") || !hasFlag(a, FlagSplitBrain, "different cluster IDs") {
		t.Errorf("%+v", a.Flags)
	}
}
