// Package drill proves that a backup restores: Run downloads and verifies
// a backup exactly as restore does (or verifies a local plaintext copy
// the backup job streamed), restores it into a private scratch directory
// with restore's own stages (restore.Resolve, then its Config's
// PlanTargets, Select or SelectLocal, Fetch, restore.Replay, Prepare and
// restore.WriteDataDirs), starts a real single-member etcd of
// the backup's minor version on it, checks that it serves and holds what
// the snapshot holds, compares it with the source where it can, records
// the result next to the backup (catalog.DrillRecord, drill.json) and
// removes everything it started and wrote. Verdict judges a drill by its
// checks; a drill the node, not the backup, stopped is inconclusive and
// records nothing (Error.Inconclusive).
//
// ProveJournal (prove.go) proves the journal before a full backup: the
// backup before it plus the journal, replayed offline with restore's
// stages, must hash (etcdinternals.HashKV) as the backup does; the verdict
// is recorded as a catalog.JournalProof. Every Run of a stored backup
// proves the journal before it when none is recorded (journal.go), as an
// info check that never judges the backup; Options.ToRevision drills a
// point-in-time restore (the journal replayed up to it).
//
// report.go is how a drill is reported wherever it ran: Outcome
// (NewOutcome, from Run's record and error), a cluster's row (Result) and
// a run's table (Report; RunNewest drills one cluster's newest backup).
// ForBackup are the options of the drill of a backup just committed.
//
// It imports restore and plumbing. The CLI's drill, backup/drilled (a
// backup and then its drill: backup --drill, one cluster or a fleet's),
// fleet and metrics use it; backup and drill do not import each other.
package drill
