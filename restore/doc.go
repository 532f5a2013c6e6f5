// Package restore rebuilds a quorum-lost etcd cluster from the newest
// snapshot: a fresh one of a surviving member when any answers, else the
// newest committed backup in the object store. The snapshot is verified
// while it streams, before any data dir is touched; every member's data dir
// is then written with etcdutl's own restore code, with the revision bumped
// and compacted so watchers never see it go back. Encrypted backups are
// decrypted while they stream, with Options.Identities (internal/seal),
// checked against the manifest's recipients before anything is downloaded
// or written.
//
// # Stages
//
// Resolve (options.go) checks Options once (Validate), fills in the
// defaults and resolves the point in time before any stage runs:
// Options.ToTime (through a JournalClock) and Options.ToLatest (latest.go:
// the newest revision the journal, a JournalReacher, reaches exactly from
// the backup the selection would choose; Plan.Latest, with a warning when
// a member of the old cluster still answers) become the Target's revision.
// It returns a Config and the Plan the stages fill in. Each stage is a
// method of the Config, or a function of the plan, in a file of its own,
// and returns an *Error that names its step:
//
//  1. PlanTargets (stage_targets.go): the members, data dirs and token;
//     every data dir checked.
//  2. Select (stage_select.go): the survivor snapshot taken
//     (Options.Survivor, survivor.go), the committed backups listed and
//     ranked (select.go), one chosen (SelectLocal: a local plaintext
//     snapshot of a committed backup instead). On a versioned bucket,
//     deleted and overwritten backups join them (versions.go:
//     Options.IncludeDeleted, or no live backup checks out). A point in
//     time also reads the journal proofs (catalog.JournalProof, proof.go):
//     a replay through a window whose proof failed is refused with a
//     *JournalProofError unless Options.AcceptUnprovenJournal.
//  3. Fetch (stage_fetch.go): the chosen backup streamed and verified into
//     a staged file (or a local one verified in place; a deleted or
//     overwritten one at its versions, Candidate.Versions), its database
//     read; a backup refused for its bytes makes Run try the next
//     candidate.
//  4. Replay (stage_replay.go), for a point in time only: the journal's
//     events after the staged snapshot's revision, up to the Target's,
//     applied straight into the staged file (etcdinternals.ApplyEvents);
//     a dry run only plans it. It is the one replay: Run, SelectSnapshot
//     and package drill all call it.
//  5. Prepare (stage_write.go): the staged file given a freelist and the
//     revision bump (etcdinternals.PrepareSnapshot), or left to etcdutl's
//     public path.
//  6. WriteDataDirs (stage_write.go): every member's data dir written,
//     all or none.
//  7. Result.CheckRebuilt (VerifyRebuilt, verify.go): the rebuilt cluster,
//     once started, waited for and checked (revision, keys, members;
//     judged by inspect's Verdict).
//
// Run (restore.go) composes them (moving non-empty data dirs aside with
// Force between Replay and Prepare); SelectSnapshot, for etcd-operator's
// restore (kube), is Select, Fetch and Replay, then bumps the revision and
// writes etcd's sha256 trailer again (select_snapshot.go,
// select_pitr.go): the staged copy etcd-operator's snapshot restore
// accepts. Package drill composes PlanTargets, Select or SelectLocal,
// Fetch (FetchOptions.Prove), Replay, Prepare without the compaction mark
// and WriteDataDirs with take-over, then checks the member it runs; its
// journal proof stages two backups with Select and Fetch and replays the
// journal between them with Replay.
//
// CheckCluster is `restore verify` (VerifyRebuilt with what the backup
// says the cluster must hold), and RestoreV2 puts the legacy v2 keys back.
//
// restore imports plumbing and inspect, never backup: the survivor
// snapshot is backup's, given by the composer (restore/survivor.Backup,
// set by the CLI, kube and the tests). It is imported by the CLI, kube,
// drill and restore/survivor.
package restore
