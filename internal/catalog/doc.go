// Package catalog owns what is in the bucket once a backup is taken: the
// object layout, the manifest, the inventory (listing and checking
// backups), the retention policy, prune and delete, the lifecycle of
// deleted clusters (orphans), and the restore drill record. backup writes
// through it, restore, inspect, kube and the CLI read through it. It
// imports only plumbing (internal/store, internal/fanout, internal/output,
// internal/seal and the standard library), never a feature package.
//
// # What it owns
//
//   - Layout (layout.go): every key the tool writes, and only there:
//     <prefix>/<cluster-id>/<time>-<kind>-<suffix>/<object> (backup names:
//     NewBackupName, ParseBackupName; kinds; ParseKey), the ownership
//     record (OwnerKey), orphan markers (OrphanMarkerKey), staged copies
//     (StagedKey under <prefix>/_staged/, and the legacy
//     <prefix>/restore/, still read) and the journal (JournalPrefix,
//     JournalSegmentKey under <prefix>/_journal/, written by internal/journal).
//     Layout.Classify says what any key is: backup, owner marker, orphan
//     marker, staged copy, journal or unknown. The tool's folders start
//     with '_', which no cluster id can. ValidatePrefix and
//     ValidateClusterID keep keys listable.
//   - Manifest (manifest.go): the record a backup is committed by
//     (MarshalManifest, UnmarshalManifest), written last by backup.Run.
//   - Inventory (inventory.go): Inventory/GroupEntries turn a listing into
//     Entries (one per backup folder), CheckEntries reads each committed
//     backup's manifest and checks the objects it names (Entry.Damaged),
//     ListBackups returns them with their manifests. List (list.go) is
//     what `list` shows: those, their uploads and drills, and the
//     retention decision for each (ListRows).
//   - Retention (retention.go): Policy and ApplyPolicy, a pure function from
//     entries, "now" and a policy to a Plan (keep/delete and the Rule* that
//     keep each backup); StaleUploads ages multipart uploads.
//   - Object lock (lock.go): LockPlan, pure, the retain-until time of a
//     backup written to a locked bucket, derived from the retention rule
//     so that no backup retention deletes is still locked; RelockUntil
//     and Relock for the newest backup; EntryLock, by which prune retains
//     (ActionRetained) a backup whose lock has not ended. lockstate.go:
//     NewestLock and BucketLock, what inspect --all and the exporter show
//     of each cluster's newest backup's lock.
//   - Journal retention (journalretention.go): ApplyJournalRetention,
//     pure, which journal segments to keep (the window reaches back
//     JournalRetention, default 7 days, from a base backup) and which
//     backups the backup rule lets go stay as the journal's bases
//     (RuleJournalBase); prunejournal.go applies it in Prune (segments
//     listed before any delete, deleted after the backups) and List.
//     Segments are known here by their keys only (Layout.Classify); this
//     package never imports internal/journal.
//   - Prune and Delete (prune.go): Prune runs listPrune (list and check
//     everything), planPrune (ApplyPolicy per cluster, guardPlan, uploads)
//     and executePrune (delete), in that order; Delete removes named
//     backups the same way.
//   - Orphans (orphans.go): the ownership record of a prefix, orphan
//     markers, Orphans (prune --orphans) and DeleteAll (delete --all).
//   - Versions (versions.go): on a versioned bucket, the backups only
//     object versions hold, deleted or overwritten (VersionedBackups, at
//     the earliest manifest version that checks out: list
//     --include-deleted, restore, drill), and list's LOCKED UNTIL.
//     Delete, DeleteAll and the orphan pass retain a backup still under
//     object lock (locked.go: ActionRetained) instead of hiding it behind
//     a delete marker.
//   - Staged copies (staged.go): the plaintext copies a restore via
//     etcd-operator stages, ListStaged and PruneStaged.
//   - Drill records (drill.go, drillview.go): drill.json next to a
//     committed backup (PutDrill, LoadDrill, LoadDrills), which the drilled
//     retention rule and `list` read.
//
// # Contract
//
//   - A backup exists only once its manifest does: a folder without one is
//     incomplete (a backup in flight, or one that failed), never restored
//     from, and removed by retention only after Policy.IncompleteAfter.
//   - Prune and Delete delete manifests first, then the rest, so a
//     deletion stopped halfway leaves an incomplete folder, never a
//     committed but broken backup.
//   - Retention never deletes after a failure: if a listing, a manifest
//     read or a drill record read fails (other than for a damaged backup),
//     Prune returns a *PruneError with NothingDeleted and deletes nothing
//     (Orphans an *OrphanError).
//     An invalid policy keeps everything (RuleInvalidPolicy).
//   - The newest committed backup of each cluster is always kept
//     (RuleNewest), so is the newest one that checks out and the newest
//     proven one (RuleDrilled). guardPlan checks every plan against this
//     before anything is deleted, as a last guard against a policy bug.
//   - Keys outside the layout (Classify: unknown) are never touched: list,
//     prune, delete and the orphan pass report them (Unknown in their
//     reports, JSON "unknown", a line under the table), and do not fail.
//
// # Errors
//
// Each step error has Step() naming the step that failed: *PruneError
// (Prune, PruneStep*), *OrphanError (Orphans, OrphanStep*) and *ListError
// (List, ListStep*). Prune, Delete, DeleteAll and Orphans count their
// store work in StoreStats.
//
// # Adding a retention rule
//
// Add its Rule* constant in retention.go and its keep function beside the
// others (keepPlaced, keepKind, keepIncomplete, keepDamaged, keepFuture),
// called from clusterView.decide in the order its rule is to be recorded;
// what it needs to know about the cluster as a whole (like the newest or
// the anchors) is worked out once in newClusterView. All of it is pure: no
// I/O, no clock. Add a row to retention_test.go's TestRetentionApplyPolicy
// table and, if it interacts with time, a case in the simulation
// (retention_sim_test.go). guardPlan must still hold; a rule that needs a
// new Policy field validates it in Policy.Validate.
//
// # Options
//
// ListOptions, PruneOptions, DeleteOptions, DeleteAllOptions and
// OrphanOptions each have a Validate (list.go, options.go) that List,
// Prune, Delete, DeleteAll and Orphans call first; it returns usage errors
// (internal/usage), which the CLI maps to exit 4, and contacts nothing.
package catalog
