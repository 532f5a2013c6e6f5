package inspect

// Runbook sections the NEXT STEP line and flags point to, relative to the
// repository root, each as file#anchor (GitHub's anchor of the section's
// heading). They are kept here, in one place, so the runbooks can be written
// (and renamed) against this list. runbooks/runbooks_test.go checks that
// each names a heading and that a test scenario executes the commands of
// that section in the failure it is written for; runbooks/README.md's table
// links the same sections.
const (
	RunbookReplaceMember    = "runbooks/member-failure.md#replace-a-failed-member"
	RunbookRestore          = "runbooks/quorum-loss.md#restore-from-snapshot"
	RunbookSurvivorSnapshot = "runbooks/quorum-loss.md#survivor-snapshot"
	RunbookUnreachable      = "runbooks/unreachable.md#find-why-no-member-answers"
	RunbookNoSpace          = "runbooks/nospace.md#reclaim-space"
	RunbookMissedBackup     = "runbooks/backup.md#missed-backup"
	RunbookDrill            = "runbooks/backup.md#failed-or-missing-restore-drill"
)

// Runbooks lists every runbook reference above (for docs and tests).
var Runbooks = []string{
	RunbookReplaceMember, RunbookRestore, RunbookSurvivorSnapshot,
	RunbookUnreachable, RunbookNoSpace, RunbookMissedBackup, RunbookDrill,
	RunbookNamespaceGone,
}
