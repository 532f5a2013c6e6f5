// Package retention is the catalog's policies, as pure functions: no I/O,
// no clock (now is an argument).
//
//   - Retention (retention.go): Policy and ApplyPolicy, from a cluster's
//     entries (internal/catalog), "now" and a policy to a Plan: keep or
//     delete each backup, with the Rule* that keeps it. The newest
//     committed backup of each cluster is always kept (RuleNewest), so is
//     the newest one that checks out and the newest proven one
//     (RuleDrilled); GuardPlan checks every plan against this before
//     anything is deleted, as a last guard against a policy bug. An invalid
//     policy keeps everything (RuleInvalidPolicy). StaleUploads ages
//     multipart uploads.
//   - Journal retention (journalretention.go): ApplyJournalRetention,
//     which journal segments to keep (the window reaches back
//     JournalRetention, default 7 days, from a base backup) and which
//     backups the backup rule lets go stay as the journal's bases
//     (RuleJournalBase). Segments are known by their keys only.
//   - The lock plan (lock.go): LockPlan, the retain-until time of a backup
//     written to a locked bucket, derived from the retention rule so that
//     no backup retention deletes is still locked; RelockUntil for the
//     newest backup; SegmentLockUntil for a journal segment.
//
// internal/prune applies the plans to the bucket.
//
// # Adding a retention rule
//
// Add its Rule* constant in retention.go and its keep function beside the
// others (keepPlaced, keepKind, keepIncomplete, keepDamaged, keepFuture),
// called from clusterView.decide in the order its rule is to be recorded;
// what it needs to know about the cluster as a whole (like the newest or
// the anchors) is worked out once in newClusterView. Add a row to
// retention_test.go's TestRetentionApplyPolicy table and, if it interacts
// with time, a case in the simulation (retention_sim_test.go). GuardPlan
// must still hold; a rule that needs a new Policy field validates it in
// Policy.Validate.
package retention
