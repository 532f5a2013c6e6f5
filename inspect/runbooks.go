package inspect

// Runbook sections the NEXT STEP line and flags point to, relative to the
// repository root. They are kept here, in one place, so the runbooks can be
// written (and renamed) against this list.
const (
	RunbookReplaceMember    = "runbooks/member-failure.md#replace-a-failed-member"
	RunbookRestore          = "runbooks/quorum-loss.md#restore-from-snapshot"
	RunbookSurvivorSnapshot = "runbooks/quorum-loss.md#survivor-snapshot"
	RunbookUnreachable      = "runbooks/unreachable.md"
	RunbookNoSpace          = "runbooks/nospace.md"
	RunbookMissedBackup     = "runbooks/backup.md#missed-backup"
)

// Runbooks lists every runbook reference above (for docs and tests).
var Runbooks = []string{
	RunbookReplaceMember, RunbookRestore, RunbookSurvivorSnapshot,
	RunbookUnreachable, RunbookNoSpace, RunbookMissedBackup,
}
