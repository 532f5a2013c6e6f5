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
// A restore is a sequence of exported stages (stages.go), each returning
// an *Error that names its step:
//
//  1. PlanTargets: the members, data dirs and token; every data dir checked.
//  2. Select: the survivor snapshot taken (Options.Survivor), the
//     committed backups listed and ranked, one chosen (SelectLocal: a
//     local plaintext snapshot of a committed backup instead). On a
//     versioned bucket, deleted and overwritten backups join them
//     (versions.go: Options.IncludeDeleted, or no live backup checks out).
//  3. Fetch: the chosen backup streamed and verified into a staged file
//     (or a local one verified in place; a deleted or overwritten one at
//     its versions, Candidate.Versions), its database read; a backup
//     refused for its bytes makes Run try the next candidate.
//  4. Prepare: the staged file given a freelist and the revision bump
//     (etcdinternals.PrepareSnapshot), or left to etcdutl's public path.
//  5. WriteDataDirs: every member's data dir written, all or none.
//  6. VerifyRebuilt: the rebuilt cluster, once started, waited for and
//     checked (revision, keys, members; judged by inspect's Verdict).
//
// Run composes them (moving non-empty data dirs aside with Force between
// Fetch and Prepare); SelectSnapshot, for etcd-operator's restore (kube),
// is Select and Fetch; package drill composes PlanTargets, Select or
// SelectLocal, Fetch (FetchOptions.Prove), Prepare without the compaction
// mark and WriteDataDirs with take-over, then checks the member it runs.
// Replay, the journal's replay (point-in-time restore, Options.ToRevision
// and Options.Journal, a JournalSource), is one more stage, between Fetch
// and Prepare: the events after the staged snapshot's revision, up to the
// revision asked for, are applied straight into the staged file
// (etcdinternals.ApplyEvents); Run composes it when ToRevision is set.
// Select of a point-in-time restore also reads the journal proofs
// (catalog.JournalProof, proof.go): a replay through a window whose proof
// failed is refused with a *JournalProofError unless
// Options.AcceptUnprovenJournal, and the plan's "journal proof" check says
// whether the window is proven, failed (accepted) or unproven.
// Options.ToLatest (latest.go) resolves the revision first: the newest the
// journal (a JournalReacher) reaches exactly from the backup the selection
// would choose (Plan.Latest), with a warning when a member of the old
// cluster still answers (its survivor snapshot loses nothing).
// SelectSnapshot with a point in time (select_pitr.go) replays too, then
// bumps the revision and writes etcd's sha256 trailer again: the staged
// copy etcd-operator's snapshot restore accepts.
//
// CheckCluster is `restore verify` (VerifyRebuilt with what the backup
// says the cluster must hold), and RestoreV2 puts the legacy v2 keys back.
//
// restore imports plumbing and inspect, never backup: the survivor
// snapshot is backup's, given by the composer (restore/survivor.Backup,
// set by the CLI, kube and the tests). It is imported by the CLI, kube,
// drill and restore/survivor.
package restore
