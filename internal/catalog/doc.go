// Package catalog owns what is in the bucket once a backup is taken: the
// object layout, the manifest, the inventory (listing and checking
// backups), and the records kept beside them (drill, journal proof and
// gap, ownership and orphan records). backup writes through it; restore,
// inspect, kube, the CLI, internal/retention and internal/prune read
// through it. It imports only plumbing below it (internal/objectio,
// internal/store, internal/seal, internal/fanout, internal/output), never
// a feature package.
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
//     ListBackups returns them with their manifests.
//   - Object lock reads (lock.go, lockstate.go): the lock a manifest
//     records (ManifestLock), EntryLock, NewestLock and BucketLock.
//   - Object versions (versioned.go): Versioned, whether the bucket keeps
//     them.
//   - Staged copies (staged.go): the plaintext copies a restore via
//     etcd-operator stages, ListStaged and PruneStaged.
//   - Drill records (drill.go, drillview.go): drill.json next to a
//     committed backup (PutDrill, LoadDrill, LoadDrills), which the drilled
//     retention rule and `list` read.
//
// # Records
//
// Every record the tool writes beside the backups (manifest, drill.json,
// journal proof and gap records, the ownership record, orphan markers) is
// small JSON, read with objectio.ReadRecord (bounded, whole, a damaged one
// told apart from a store failure: objectio.ErrDamagedRecord) and created
// create-only with objectio.CreateRecord. A new kind of record: its key
// in layout.go, a Key* kind in Layout.Classify, a type here, and those two
// calls.
//
// # Contract
//
//   - A backup exists only once its manifest does: a folder without one is
//     incomplete (a backup in flight, or one that failed), never restored
//     from, and removed by retention only after its grace.
//   - Keys outside the layout (Classify: unknown) are reported, never
//     touched.
//
// # The rooms around it
//
// The catalog is the read model. Its pure policies are internal/retention
// (ApplyPolicy, journal retention, the lock plan), its deletions and the
// list built on them internal/prune (Prune, Delete, DeleteAll, orphans,
// object versions); both import the catalog, never the reverse
// (internal/testing/archtest's inner order).
package catalog
