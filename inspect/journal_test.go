package inspect

import (
	"strings"
	"testing"
	"time"
)

// The journal lag check, pure: within the bound no flag, past it a
// warning naming the revision, the lag, the bound and the runbook; a
// journal that could not be listed is unknown; no journal, no line.
func TestVerdictJournalLag(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	newest := &BackupInfo{Name: "b", Kind: "scheduled", Time: at.Add(-time.Hour), Revision: 10}
	for _, tc := range []struct {
		name      string
		j         *JournalStatus
		state     JournalState
		flag      FlagKind
		line      string
		wantWords []string
	}{
		{"no journal", nil, "", "", "", nil},
		{"within the bound", &JournalStatus{LastRev: 42, LastReceived: at, From: "header", Lag: 20 * time.Second, Bound: DefaultJournalLagBound},
			JournalOK, "", "20s (revision 42 received 2026-11-20T12:00:00Z): OK (bound 5m0s)", nil},
		{"past the bound", &JournalStatus{LastRev: 42, LastReceived: at, From: "stored", Lag: 7 * time.Minute, Bound: DefaultJournalLagBound},
			JournalLagging, FlagJournalLagging, "7m (revision 42 received 2026-11-20T12:00:00Z, the segment's stored time): LAGGING (bound 5m0s)",
			[]string{"revision 42", "7m ago", "more than 5m0s", "cluster c1"}},
		{"store failed", &JournalStatus{Error: "listing: boom", Bound: DefaultJournalLagBound},
			JournalUnknown, FlagJournalUnknown, "UNKNOWN: listing: boom", []string{"could not be listed", "boom"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bs := &BackupStatus{ClusterID: "c1", Newest: newest, Age: time.Hour, MaxAge: DefaultMaxBackupAge, Journal: tc.j}
			a := Verdict(nil, bs, Thresholds{})
			var got *Flag
			for i, f := range a.Flags {
				if f.Kind == FlagJournalLagging || f.Kind == FlagJournalUnknown {
					if got != nil {
						t.Fatalf("two journal flags: %+v", a.Flags)
					}
					got = &a.Flags[i]
				}
			}
			switch {
			case tc.flag == "" && got != nil:
				t.Fatalf("unexpected flag %+v", *got)
			case tc.flag != "" && (got == nil || got.Kind != tc.flag || got.Severity != SeverityWarning || got.Runbook != RunbookJournalLagging):
				t.Fatalf("flag %+v, want a %s warning with runbook %s", got, tc.flag, RunbookJournalLagging)
			}
			for _, w := range tc.wantWords {
				if !strings.Contains(got.Message, w) {
					t.Errorf("flag message %q lacks %q", got.Message, w)
				}
			}
			r := &Report{Assessment: a}
			if l := r.journalLine(); l != tc.line {
				t.Errorf("line %q, want %q", l, tc.line)
			}
			if tc.j != nil && a.Backup.Journal.State != tc.state {
				t.Errorf("state %q, want %q", a.Backup.Journal.State, tc.state)
			}
			if tc.j != nil && tc.j.State != "" {
				t.Error("Verdict changed its input")
			}
		})
	}
}
