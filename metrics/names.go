package metrics

import "github.com/prometheus/client_golang/prometheus"

// Metric names (the alert rules in deploy/40-alerts.yaml use exactly
// these). Labels: cluster (the EtcdCluster's name, its cluster id in the
// store) and kind (a backup kind); never a backup name, so the series of
// a namespace are bounded by its clusters × 4 kinds.
const (
	NameClusterInfo         = "etcd_recovery_cluster_info"
	NameBackupLastSuccess   = "etcd_recovery_backup_last_success_timestamp_seconds"
	NameBackupLastRevision  = "etcd_recovery_backup_last_revision"
	NameBackupStoredBytes   = "etcd_recovery_backup_stored_bytes"
	NameBackupsIncomplete   = "etcd_recovery_backups_incomplete"
	NameBackupsDamaged      = "etcd_recovery_backups_damaged"
	NameDrillLastTimestamp  = "etcd_recovery_drill_last_timestamp_seconds"
	NameDrillLastResult     = "etcd_recovery_drill_last_result"
	NameDrillLastPass       = "etcd_recovery_drill_last_pass_timestamp_seconds"
	NameInspectVerdict      = "etcd_recovery_inspect_verdict"
	NameMembers             = "etcd_recovery_members"
	NameMembersUp           = "etcd_recovery_members_up"
	NameDBSize              = "etcd_recovery_db_size_bytes"
	NameLeaderChanges       = "etcd_recovery_leader_changes_seen_total"
	NameRefreshDuration     = "etcd_recovery_refresh_duration_seconds"
	NameRefreshErrors       = "etcd_recovery_refresh_errors_total"
	NameRefreshLastSuccess  = "etcd_recovery_refresh_last_success_timestamp_seconds"
	NameBackupLastRun       = "etcd_recovery_backup_last_run_timestamp_seconds"
	NameBackupLastRunResult = "etcd_recovery_backup_last_run_success"
	NameDrillLastRun        = "etcd_recovery_drill_last_run_timestamp_seconds"
	NameDrillLastRunResult  = "etcd_recovery_drill_last_run_success"

	// Orphans: cluster ids with backups in the store and no EtcdCluster.
	NameOrphanInfo        = "etcd_recovery_orphan_info"
	NameOrphanDeleteAfter = "etcd_recovery_orphan_delete_after_timestamp_seconds"
	// Backups whose time is in the future (beyond retention's tolerance).
	NameBackupsFutureDated      = "etcd_recovery_backups_future_dated"
	NameBackupFutureDatedLatest = "etcd_recovery_backup_future_dated_latest_timestamp_seconds"
	// Plaintext copies staged for etcd-operator under <prefix>/_staged/ (restore/ from earlier versions).
	NameStagedCopies         = "etcd_recovery_staged_copies"
	NameStagedOldestModified = "etcd_recovery_staged_oldest_timestamp_seconds"
	// Whether a mounted identity opens the newest encrypted backup.
	NameBackupUndecryptable = "etcd_recovery_backup_undecryptable"
	// Object lock: the bucket's, and until when each cluster's newest
	// backup is locked.
	NameBucketObjectLock  = "etcd_recovery_bucket_object_lock"
	NameBackupLockedUntil = "etcd_recovery_backup_locked_until_timestamp_seconds"
	// The newest backup's run (its manifest's start and end, and its
	// database size), and where the restorable window starts.
	NameBackupDuration   = "etcd_recovery_backup_duration_seconds"
	NameBackupThroughput = "etcd_recovery_backup_throughput_bytes_per_second"
	NameRestorableFrom   = "etcd_recovery_restorable_window_start_timestamp_seconds"
)

// Refresh steps, the step label of etcd_recovery_refresh_errors_total.
const (
	StepListClusters  = "list_clusters"  // the EtcdClusters could not be listed
	StepInspect       = "inspect"        // the inspection did not finish within the deadline
	StepListStore     = "list_store"     // the store listing of the prefix failed
	StepReadManifests = "read_manifests" // a manifest could not be read (a store failure, not damage)
	StepReadDrills    = "read_drills"    // a drill record could not be read (a store failure)
	StepOrphans       = "orphans"        // the orphans could not be computed (store, EtcdCluster or EtcdRestore listing)
	StepCheckDecrypt  = "check_decrypt"  // the identity file or an encrypted backup's header could not be read
	StepReadLocks     = "read_locks"     // the bucket's object-lock configuration or a newest backup's retention could not be read
	StepReadRestores  = "read_restores"  // a record of the newest namespace-wide restore run could not be read (restorerun.go)
	StepReadReplica   = "read_replica"   // a second site's copier status record could not be read (a store failure; replica.go)
)

// Steps are every refresh step, in order.
var Steps = []string{StepListClusters, StepInspect, StepListStore, StepReadManifests, StepReadDrills, StepOrphans, StepCheckDecrypt, StepReadLocks, StepReadRestores, StepReadReplica}

// Orphan state label values of etcd_recovery_orphan_info: the orphan pass's
// states (prune.OrphanWaiting, ...) as label values.
var OrphanStates = []string{"waiting", "delete", "restoring", "report_only", "marker_only"}

// Verdict label values of etcd_recovery_inspect_verdict.
var Verdicts = []string{"healthy", "degraded", "quorum_lost", "unreachable"}

var (
	cl  = []string{"cluster"}
	clk = []string{"cluster", "kind"}

	descClusterInfo = prometheus.NewDesc(NameClusterInfo,
		"1 for every EtcdCluster of the namespace (without a Kubernetes client: every cluster id with backups in the store). A cluster id with backups and no EtcdCluster is an orphan (etcd_recovery_orphan_info), never listed here.", cl, nil)
	descBackupLastSuccess = prometheus.NewDesc(NameBackupLastSuccess,
		"Time (unix seconds, from its name) of the newest committed backup of that kind that checks out (manifest read, objects present with their sizes) and is not dated in the future (beyond retention's clock-skew tolerance); absent when there is none.", clk, nil)
	descBackupLastRevision = prometheus.NewDesc(NameBackupLastRevision,
		"etcd revision of the newest committed backup of that kind.", clk, nil)
	descBackupStoredBytes = prometheus.NewDesc(NameBackupStoredBytes,
		"Stored (compressed) size in bytes of the snapshot object of the newest committed backup of that kind.", clk, nil)
	descBackupDuration = prometheus.NewDesc(NameBackupDuration,
		"Duration in seconds of the newest committed backup of that kind that checks out, from its manifest's startedAt to its finishedAt (the snapshot's stream, its upload and checks); absent when the manifest records no duration.", clk, nil)
	descBackupThroughput = prometheus.NewDesc(NameBackupThroughput,
		"Database bytes (the manifest's rawSize) the newest committed backup of that kind streamed a second over its duration; absent with the duration.", clk, nil)
	descRestorableFrom = prometheus.NewDesc(NameRestorableFrom,
		"Time (unix seconds, from its name) of the oldest committed backup of any kind that checks out and is not dated in the future: the start of the restorable window (the journal extends its end, not its start); absent when there is none.", cl, nil)
	descBackupsIncomplete = prometheus.NewDesc(NameBackupsIncomplete,
		"Backup folders without a manifest (in flight, or left by a failed run until prune removes them).", cl, nil)
	descBackupsDamaged = prometheus.NewDesc(NameBackupsDamaged,
		"Committed backups that cannot restore: manifest unreadable, an object missing or of the wrong size.", cl, nil)
	descDrillLast = prometheus.NewDesc(NameDrillLastTimestamp,
		"Time (unix seconds) the newest restore drill of any of the cluster's backups finished; absent when never drilled.", cl, nil)
	descDrillLastResult = prometheus.NewDesc(NameDrillLastResult,
		"1 when the newest restore drill passed, 0 when it failed; absent when never drilled.", cl, nil)
	descDrillLastPass = prometheus.NewDesc(NameDrillLastPass,
		"Time (unix seconds) the newest passed restore drill finished; absent when no drill passed.", cl, nil)
	descVerdict = prometheus.NewDesc(NameInspectVerdict,
		"1 for the cluster's current inspect verdict (healthy, degraded, quorum_lost, unreachable), 0 for the others.", []string{"cluster", "verdict"}, nil)
	descMembers = prometheus.NewDesc(NameMembers,
		"Voting members of the cluster (its member list).", cl, nil)
	descMembersUp = prometheus.NewDesc(NameMembersUp,
		"Voting members that serve linearizable reads.", cl, nil)
	descDBSize = prometheus.NewDesc(NameDBSize,
		"DB size in bytes, the largest any member reported.", cl, nil)
	descLeaderChanges = prometheus.NewDesc(NameLeaderChanges,
		"Leader changes the exporter has seen between its refreshes (the leader's member id differed from the previous refresh's), since it first saw the cluster.", cl, nil)
	descRefreshDuration = prometheus.NewDesc(NameRefreshDuration,
		"Duration of the last refresh in seconds.", nil, nil)
	descRefreshErrors = prometheus.NewDesc(NameRefreshErrors,
		"Refresh steps that failed, by step (list_clusters, inspect, list_store, read_manifests, read_drills, orphans, check_decrypt, read_locks, read_restores, read_replica).", []string{"step"}, nil)
	descRefreshLastSuccess = prometheus.NewDesc(NameRefreshLastSuccess,
		"Time (unix seconds) the last refresh with no failed step finished; absent until one did.", nil, nil)

	descOrphanInfo = prometheus.NewDesc(NameOrphanInfo,
		"1 for every orphan of the namespace's prefix (a cluster id with backups and no EtcdCluster), with its state as the orphan pass computes it: waiting (within its grace), delete (deleted by the next orphan pass), restoring (an EtcdRestore references it), report_only (the namespace does not own the prefix: never deleted), marker_only (a marker without backups).", []string{"cluster", "state"}, nil)
	descOrphanDeleteAfter = prometheus.NewDesc(NameOrphanDeleteAfter,
		"Time (unix seconds) after which the orphan pass deletes the orphan's backups (the later of its newest backup and its first sighting by an orphan pass, now when none has recorded it yet, + the orphan grace); absent when they are not to be deleted (report_only, restoring, marker_only).", cl, nil)
	descBackupsFutureDated = prometheus.NewDesc(NameBackupsFutureDated,
		"Backups whose time (from their name) is later than now plus retention's clock-skew tolerance: written by a clock ahead. They never count as the newest backup.", cl, nil)
	descBackupFutureDatedLatest = prometheus.NewDesc(NameBackupFutureDatedLatest,
		"Time (unix seconds) of the furthest future-dated backup; absent when there is none.", cl, nil)
	descStagedCopies = prometheus.NewDesc(NameStagedCopies,
		"Plaintext (decrypted, uncompressed) snapshot copies staged for etcd-operator under <prefix>/_staged/<cluster>/ (<prefix>/restore/<cluster>/ from earlier versions); absent when there is none.", cl, nil)
	descStagedOldest = prometheus.NewDesc(NameStagedOldestModified,
		"Time (unix seconds, the object's last modification) of the oldest staged copy; absent when there is none.", cl, nil)
	descBackupUndecryptable = prometheus.NewDesc(NameBackupUndecryptable,
		"1 when no mounted age identity opens the header of the newest encrypted backup (a restore of it would fail), 0 when one does; absent when the cluster has no encrypted backup or the check could not read the store.", cl, nil)
	descBucketObjectLock = prometheus.NewDesc(NameBucketObjectLock,
		"1 when the namespace's bucket has object lock (its backups can be written with a retention that no credential can shorten), 0 when it has not; absent until the bucket's lock configuration could be read.", nil, nil)
	descBackupLockedUntil = prometheus.NewDesc(NameBackupLockedUntil,
		"Time (unix seconds) until which the newest committed backup that checks out is under object-lock retention (its manifest's current version), 0 when it is not locked; only when the bucket has object lock, absent when the cluster has no such backup or its retention could not be read.", cl, nil)

	// Pushed by backup and drill runs only (Pushgateway).
	descBackupLastRun = prometheus.NewDesc(NameBackupLastRun,
		"Pushed by a backup run: when it finished (unix seconds), succeeded or not.", nil, nil)
	descBackupLastRunResult = prometheus.NewDesc(NameBackupLastRunResult,
		"Pushed by a backup run: 1 when its backup was committed, 0 when it failed.", nil, nil)
	descDrillLastRun = prometheus.NewDesc(NameDrillLastRun,
		"Pushed by a drill run: when it finished (unix seconds).", nil, nil)
	descDrillLastRunResult = prometheus.NewDesc(NameDrillLastRunResult,
		"Pushed by a drill run: 1 when the drill passed, 0 when it failed or could not run.", nil, nil)
)
