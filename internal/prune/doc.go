// Package prune is what the tool does to the bucket over the backups'
// lives, built on the catalog's read model (internal/catalog) and its
// policies (internal/retention): the deletions, and the list that shows
// what they would do.
//
//   - List (list.go, render.go): what `list` shows: the backups, their
//     uploads and drills, and the retention decision for each (ListRows).
//   - Prune and Delete (prune.go, prunejournal.go): Prune runs listPrune
//     (list and check everything), planPrune (ApplyPolicy per cluster,
//     journal retention, retention.GuardPlan, uploads) and executePrune
//     (delete), in that order; Delete removes named backups the same way.
//   - Orphans (orphans.go): the ownership record of a prefix, orphan
//     markers, Orphans (prune --orphans) and DeleteAll (delete --all).
//   - Escrows (escrow.go): an escrow (<prefix>/_escrow/<cluster>/) goes
//     with the last backup that names it, decided after the backups are
//     deleted (retention.DecideEscrows) by Prune, Delete, DeleteAll and
//     the orphan pass; kept while younger than the escrow grace or while
//     a backup is in flight, retained while locked.
//   - Undelete records (undeletes.go): a cluster's
//     <prefix>/_undeletes/<cluster>/ go with its last backup (DeleteAll
//     and the orphan pass), kept while one is retained; Prune never
//     touches them.
//   - Versions (versions.go): on a versioned bucket, the backups only
//     object versions hold, deleted or overwritten (VersionedBackups, at
//     the earliest manifest version that checks out: list
//     --include-deleted, restore, drill), and list's LOCKED UNTIL.
//     Delete, DeleteAll and the orphan pass retain a backup still under
//     object lock (locked.go: ActionRetained) instead of hiding it behind
//     a delete marker; Relock (relock.go) extends the newest backup's.
//
// # Contract
//
//   - Prune and Delete delete manifests first, then the rest, so a
//     deletion stopped halfway leaves an incomplete folder, never a
//     committed but broken backup.
//   - Retention never deletes after a failure: if a listing, a manifest
//     read or a drill record read fails (other than for a damaged backup),
//     Prune returns a *PruneError with NothingDeleted and deletes nothing
//     (Orphans an *OrphanError).
//   - The node's clock is checked first (clock.go): with a ClockTolerance
//     (the CLI's DefaultClockTolerance), Prune and Orphans compare Now
//     with the store's own time (store.Clock) before listing, and refuse,
//     deleting nothing (a *ClockError at PruneStepClock), when they differ
//     by more, or when the store's time cannot be read.
//   - Keys outside the layout (catalog.Layout.Classify: unknown) are never
//     touched: list, prune, delete and the orphan pass report them
//     (Unknown in their reports, JSON "unknown", a line under the table),
//     and do not fail.
//
// # Errors and options
//
// Each step error has Step() naming the step that failed: *PruneError
// (Prune, PruneStep*), *OrphanError (Orphans, OrphanStep*) and *ListError
// (List, ListStep*). Prune, Delete, DeleteAll and Orphans count their
// store work in StoreStats. ListOptions, PruneOptions, DeleteOptions,
// DeleteAllOptions and OrphanOptions each have a Validate (list.go,
// options.go) that List, Prune, Delete, DeleteAll and Orphans call first;
// it returns usage errors (internal/usage), which the CLI maps to exit 4,
// and contacts nothing.
package prune
