package inspect

import (
	"strings"
	"testing"
	"time"
)

// The restore-drill proof, judged like the backup freshness: a warning
// with its runbook that leaves a healthy cluster HEALTHY (exit 0), and
// NEXT STEP after the cluster's own problems and a missed backup.
func TestVerdictDrill(t *testing.T) {
	const (
		newestName = "20260102T030000.000Z-scheduled-0a1b2c3d"
		olderName  = "20260101T190000.000Z-scheduled-9f8e7d6c"
		check      = "compare with source: HashKV at revision 1234: restored 0x1f2e3d4c, source 0x5a6b7c8d"
	)
	newest := &BackupInfo{Name: newestName, Kind: "scheduled", Revision: 7}
	proven := func(name string) *ProvenBackup {
		return &ProvenBackup{Name: name, Kind: "scheduled", Mode: "source"}
	}
	passed := func(name string) *DrillInfo {
		return &DrillInfo{Backup: name, Result: DrillPassed, Mode: "source", Age: time.Hour}
	}
	failed := &DrillInfo{Backup: newestName, Result: DrillFailedResult, Failed: check, Mode: "source", Age: 30 * time.Minute}
	for _, tc := range []struct {
		name      string
		backupAge time.Duration
		noBackup  bool
		drill     DrillStatus
		state     DrillState
		flags     []FlagKind // the drill flags, in order
		runbook   string     // NEXT STEP's
		says      []string   // in the flags and the next step
		line      string     // in the DRILL line
	}{
		{name: "never drilled", backupAge: 2 * time.Hour, drill: DrillStatus{},
			state: DrillNever, flags: []FlagKind{FlagDrillMissing}, runbook: RunbookDrill,
			says: []string{"never drilled", "etcd-recovery drill --cluster-id c"}, line: "NEVER: no backup of cluster c is proven restorable"},
		{name: "old drill", backupAge: 2 * time.Hour,
			drill: DrillStatus{Proven: proven(olderName), Age: 30 * time.Hour, Last: passed(olderName)},
			state: DrillOld, flags: []FlagKind{FlagDrillStale}, runbook: RunbookDrill,
			says: []string{"restore drill old", olderName, "30h00m old", "more than 26h0m0s"}, line: "is 30h00m old: OLD (max 26h0m0s)"},
		{name: "failed newest drill, an older backup proven", backupAge: 2 * time.Hour,
			drill: DrillStatus{Proven: proven(olderName), Age: 10 * time.Hour, Last: failed},
			state: DrillFailed, flags: []FlagKind{FlagDrillFailed}, runbook: RunbookDrill,
			says: []string{"restore drill failed", newestName, check, "--kind manual --drill"},
			line: "newest drill FAILED (" + newestName + ", 30m ago): " + check},
		{name: "failed, never proven", backupAge: 2 * time.Hour, drill: DrillStatus{Last: failed},
			state: DrillFailed, flags: []FlagKind{FlagDrillFailed, FlagDrillMissing}, runbook: RunbookDrill,
			says: []string{"restore drill failed", check}, line: "NEVER"},
		{name: "failed and old", backupAge: 2 * time.Hour,
			drill: DrillStatus{Proven: proven(olderName), Age: 50 * time.Hour, Last: failed},
			state: DrillFailed, flags: []FlagKind{FlagDrillFailed, FlagDrillStale}, runbook: RunbookDrill,
			says: []string{"restore drill failed"}, line: "OLD"},
		{name: "passed recent drill", backupAge: 2 * time.Hour,
			drill: DrillStatus{Proven: proven(newestName), Age: 2 * time.Hour, Last: passed(newestName)},
			state: DrillOK, line: "is 2h00m old: OK (max 26h0m0s)"},
		{name: "passed drill of an older backup", backupAge: 2 * time.Hour,
			drill: DrillStatus{Proven: proven(olderName), Age: 10 * time.Hour, Last: passed(olderName)},
			state: DrillOK, line: olderName},
		{name: "records unreadable", backupAge: 2 * time.Hour, drill: DrillStatus{Error: "cos: get drill.json: connection reset"},
			state: DrillUnknown, flags: []FlagKind{FlagDrillUnknown}, says: []string{"connection reset"}, line: "UNKNOWN"},
		// A missed backup outranks the drill: one warning to act on.
		{name: "no backup", noBackup: true, drill: DrillStatus{},
			state: DrillNever, runbook: RunbookMissedBackup, line: "NEVER"},
		{name: "stale backup, old drill", backupAge: 30 * time.Hour,
			drill: DrillStatus{Proven: proven(newestName), Age: 30 * time.Hour, Last: passed(newestName)},
			state: DrillOld, flags: []FlagKind{FlagDrillStale}, runbook: RunbookMissedBackup, line: "OLD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := BackupStatus{ClusterID: "c", MaxAge: 9 * time.Hour, Newest: newest, Age: tc.backupAge}
			if tc.noBackup {
				in.Newest, in.Age = nil, 0
			}
			d := tc.drill
			d.MaxAge = DefaultMaxDrillAge
			if d.Last != nil {
				l := *d.Last
				d.Last = &l
			}
			in.Drill = &d
			a := Verdict(cluster(3, 3), &in, Thresholds{})
			if a.Verdict != VerdictHealthy || a.Verdict.ExitCode() != 0 {
				t.Errorf("the drill changed the verdict: %s", a.Verdict)
			}
			if a.Backup == nil || a.Backup.Drill == nil {
				t.Fatalf("no drill status in %+v", a.Backup)
			}
			if got := a.Backup.Drill.State; got != tc.state {
				t.Errorf("state %q, want %q", got, tc.state)
			}
			var got []FlagKind
			var texts []string
			for _, f := range a.Flags {
				texts = append(texts, f.Message)
				if strings.HasPrefix(string(f.Kind), "drill-") {
					got = append(got, f.Kind)
					if f.Kind != FlagDrillUnknown && f.Runbook != RunbookDrill {
						t.Errorf("flag %s points to %q, want %s", f.Kind, f.Runbook, RunbookDrill)
					}
					if f.Severity != SeverityWarning {
						t.Errorf("flag %s is %s, want a warning", f.Kind, f.Severity)
					}
				}
			}
			if strings.Join(kinds(got), ",") != strings.Join(kinds(tc.flags), ",") {
				t.Errorf("drill flags %v, want %v (all: %+v)", got, tc.flags, a.Flags)
			}
			rb := ""
			if len(a.NextStep.Runbooks) > 0 {
				rb = a.NextStep.Runbooks[0]
			}
			if rb != tc.runbook {
				t.Errorf("next step %+v, want runbook %q", a.NextStep, tc.runbook)
			}
			all := strings.Join(texts, "\n") + "\n" + a.NextStep.Action
			for _, s := range tc.says {
				if !strings.Contains(all, s) {
					t.Errorf("flags and next step do not say %q:\n%s", s, all)
				}
			}
			rep := &Report{Assessment: a}
			var line string
			for _, l := range rep.Lines() {
				if strings.HasPrefix(l, "DRILL: ") {
					line = l
				}
			}
			if !strings.Contains(line, tc.line) {
				t.Errorf("DRILL line %q does not say %q", line, tc.line)
			}
			if in.Drill.State != "" || (in.Drill.Last != nil && in.Drill.Last.AgeText != "") {
				t.Error("Verdict changed its input")
			}
		})
	}

	// A member failure outranks a failed drill; so does a NOSPACE alarm.
	b := &BackupStatus{ClusterID: "c", MaxAge: 9 * time.Hour, Newest: newest, Age: time.Hour,
		Drill: &DrillStatus{MaxAge: DefaultMaxDrillAge, Last: failed}}
	a := Verdict(cluster(3, 2), b, Thresholds{})
	if a.Verdict != VerdictDegraded || a.NextStep.Runbooks[0] != RunbookReplaceMember || !hasFlag(a, FlagDrillFailed, newestName) {
		t.Errorf("member down and a failed drill: %s %+v %+v", a.Verdict, a.NextStep, a.Flags)
	}
	// The store failed: the backup is unknown, and nothing is said of the
	// drills beyond it.
	a = Verdict(cluster(3, 3), &BackupStatus{ClusterID: "c", Error: "cos: list: connection refused", Drill: &DrillStatus{}}, Thresholds{})
	if a.Backup.Drill != nil || hasFlag(a, FlagDrillMissing, "") || a.NextStep.Action != "none" {
		t.Errorf("store failed: drill %+v flags %+v next %+v", a.Backup.Drill, a.Flags, a.NextStep)
	}
	// Drills not checked (nil): as before.
	a = Verdict(cluster(3, 3), &BackupStatus{ClusterID: "c", MaxAge: 9 * time.Hour, Newest: newest, Age: time.Hour}, Thresholds{})
	if len(a.Flags) != 0 || a.NextStep.Action != "none" {
		t.Errorf("drills not checked: flags %+v next %+v", a.Flags, a.NextStep)
	}
}

func kinds(fs []FlagKind) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = string(f)
	}
	return out
}
