package inspect

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// Every member lost: with a journal, NEXT STEP rules out the network
// first (unreachable.md) and then points to the restore from the journal
// (restore --to-latest, naming the revision it reaches); without one, to
// unreachable.md alone. A quorum loss with a survivor keeps survivor-first.
func TestNextStepEveryMemberLostWithJournal(t *testing.T) {
	t.Parallel()
	backup := func(journal bool) *BackupStatus {
		return &BackupStatus{ClusterID: "etcd-x", MaxAge: 9 * time.Hour, Age: time.Hour, Newest: &BackupInfo{Name: "b", Revision: 10},
			Journal: map[bool]*JournalStatus{true: {LastRev: 4711}}[journal]}
	}
	for _, tc := range []struct {
		name     string
		members  []MemberHealth
		journal  bool
		runbooks []string
		action   []string
	}{
		{"all down, journal", cluster(3, 0), true, []string{RunbookUnreachable, RunbookJournalRestore},
			[]string{"rule out the network", "every member is lost", "revision 4711", "restore --cluster-id etcd-x --to-latest"}},
		{"all down, no journal", cluster(3, 0), false, []string{RunbookUnreachable}, []string{"check the network path"}},
		{"survivor, journal", []MemberHealth{down("m0", "1"), noQuorum("m1", "2", 100), down("m2", "3")}, true,
			[]string{RunbookSurvivorSnapshot, RunbookRestore}, []string{"survivor snapshot of m1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Verdict(tc.members, backup(tc.journal), Thresholds{})
			if !slices.Equal(a.NextStep.Runbooks, tc.runbooks) {
				t.Errorf("runbooks %v, want %v", a.NextStep.Runbooks, tc.runbooks)
			}
			for _, want := range tc.action {
				if !strings.Contains(a.NextStep.Action, want) {
					t.Errorf("NEXT STEP %q does not say %q", a.NextStep.Action, want)
				}
			}
		})
	}
	if !slices.Contains(Runbooks, RunbookJournalRestore) {
		t.Errorf("Runbooks does not list %s", RunbookJournalRestore)
	}
}
