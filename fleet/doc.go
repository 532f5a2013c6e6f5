// Package fleet runs backup, inspect and drill over many clusters, whose
// targets (Target) come from Kubernetes (the EtcdClusters of a namespace,
// through kube) or from a store listing (every cluster id with a backup
// folder under the prefix). It owns the fan-out (bounded by Parallel, one
// cluster's failure never stopping the others), the per-cluster results
// and the fleet reports: BackupAll (backup --all, with its drill share
// and the orphan pass), InspectAll (inspect --all / --cluster, also the
// exporter's inspection) and ListOrphans (inspect --all's read-only orphan
// listing), DrillAll (drill --all; its report is drill.Report, as one
// cluster's drill is), and
// Orphans (prune.Orphans fed with the namespace's EtcdCluster and
// EtcdRestore listings: prune --orphans, backup --all --prune), and
// JournalAll (the journal job: a journal.Capture per cluster, one or every
// EtcdCluster re-listed, gaps recorded at catalog.Layout.JournalGapKey
// and healed by a full backup at once; see docs/journal.md), and
// RestoreAll (restore-all: every quorum-lost EtcdCluster of one or more
// namespaces restored through etcd-operator under one parallelism limit,
// planned with RestoreModel, recorded and resumable through catalog's
// FleetRestore records; RestoreAllWatch shows it as it runs). Each
// cluster's own work is its feature package's (backup.Run, inspect.Run,
// drill.Run; a backup and its drill composed by backup/drilled); Events
// go through kube. It imports backup, drill, inspect, kube and internal/
// plumbing; the CLI's fleet commands (cmd/etcd-recovery, not its
// single-cluster backup and drill) and the exporter (metrics) import it,
// and kube never does.
package fleet
