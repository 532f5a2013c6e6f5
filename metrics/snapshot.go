package metrics

import (
	"sort"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/retention"
	"github.com/armada/etcd-recovery/internal/store"
)

// BackupState is the newest committed backup of one kind that checks out.
type BackupState struct {
	Time     time.Time `json:"time"`
	Revision int64     `json:"revision"`
	Stored   int64     `json:"storedBytes"`
	// Raw is the snapshot's database size (the manifest's rawSize);
	// Duration the backup's run, from its manifest's startedAt to its
	// finishedAt (0: not recorded).
	Raw      int64         `json:"rawBytes"`
	Duration time.Duration `json:"duration"`
}

// throughput is the bytes of the database the backup streamed a second
// (0: no duration recorded).
func (b BackupState) throughput() float64 {
	if b.Duration <= 0 {
		return 0
	}
	return float64(b.Raw) / b.Duration.Seconds()
}

// ClusterState is what one refresh knows of a cluster: the store's side
// (backups, drills) and the inspection's (verdict, members, DB size).
type ClusterState struct {
	Cluster string `json:"cluster"`

	// Store side (Stored: the cluster was in the store listing or the
	// listing succeeded and it has nothing there).
	Stored     bool                         `json:"stored"`
	Backups    map[catalog.Kind]BackupState `json:"backups,omitempty"`
	Incomplete int                          `json:"incomplete"`
	Damaged    int                          `json:"damaged"`
	// Oldest is the time of the oldest committed backup of any kind that
	// checks out and is not future-dated: where the restorable window
	// starts (zero: none).
	Oldest time.Time `json:"oldest,omitzero"`
	// DrillLast is the newest drill of any backup (zero: never drilled);
	// DrillLastPassed its result; DrillLastPass the newest passed one.
	DrillLast       time.Time `json:"drillLast,omitzero"`
	DrillLastPassed bool      `json:"drillLastPassed"`
	DrillLastPass   time.Time `json:"drillLastPass,omitzero"`
	// FutureDated counts the backups dated later than the refresh time plus
	// retention's clock-skew tolerance (retention.Policy.FutureTolerance);
	// FutureLatest is the furthest one's time. They never count as the
	// newest backup (Backups) or for the decryption check.
	FutureDated  int       `json:"futureDated"`
	FutureLatest time.Time `json:"futureLatest,omitzero"`
	// DecryptBackup is the newest encrypted backup whose age header was
	// checked with the mounted identities (empty: no encrypted backup, or
	// its check could not read the store); Undecryptable: none opened it.
	DecryptBackup string `json:"decryptBackup,omitempty"`
	Undecryptable bool   `json:"undecryptable"`
	// LockBackup is the newest backup (committed, checked out, not
	// future-dated) whose object lock was read on a bucket with object
	// lock (empty: none, no lock on the bucket, or its retention could
	// not be read); LockedUntil is when its lock ends (zero: not locked),
	// LockMode its mode.
	LockBackup  string         `json:"lockBackup,omitempty"`
	LockedUntil time.Time      `json:"lockedUntil,omitzero"`
	LockMode    store.LockMode `json:"lockMode,omitempty"`
	// JournalKey is the cluster's newest stored journal segment (empty:
	// no journal), JournalLastRev its last revision and JournalReceived
	// when the journal received it (journal.go).
	JournalKey      string    `json:"journalKey,omitempty"`
	JournalLastRev  int64     `json:"journalLastRev,omitempty"`
	JournalReceived time.Time `json:"journalReceived,omitzero"`
	// JournalGaps is how many gap records the journal has; JournalGapKey
	// the newest's key and JournalGapTime when that gap was found
	// (journalgap.go).
	JournalGaps    int       `json:"journalGaps,omitempty"`
	JournalGapKey  string    `json:"journalGapKey,omitempty"`
	JournalGapTime time.Time `json:"journalGapTime,omitzero"`
	// Escrow is the escrow of the newest committed backup that checks
	// out and is not future-dated (escrow.go); nil when there is none.
	Escrow *EscrowState `json:"escrow,omitempty"`

	// Inspection side (Inspected: an InspectAll row exists).
	Inspected bool                `json:"inspected"`
	Verdict   inspect.VerdictKind `json:"verdict,omitempty"`
	Up        int                 `json:"up"`
	Voting    int                 `json:"voting"`
	DBSize    int64               `json:"dbSize"`
	Leader    string              `json:"leader,omitempty"`
	// LeaderChanges counts the leader changes seen between refreshes.
	LeaderChanges uint64 `json:"leaderChanges"`
	// JournalProof is the newest journal proof recorded (nil: none).
	JournalProof *JournalProofState `json:"journalProof,omitempty"`
}

// OrphanState is one orphan of the namespace's prefix: a cluster id with
// backups in the store and no EtcdCluster, as the orphan pass sees it.
type OrphanState struct {
	Cluster string `json:"cluster"`
	// State is the label value of the orphan pass's state (prune.Orphan.State; OrphanStates lists them).
	State string `json:"state"`
	// DeleteAfter: when the orphan pass deletes its backups (zero: never,
	// or not while it is in this state).
	DeleteAfter time.Time `json:"deleteAfter,omitzero"`
}

// StagedState is a cluster id's plaintext copies staged for etcd-operator
// (<prefix>/_staged/<cluster>/, or restore/ from earlier versions).
type StagedState struct {
	Cluster string    `json:"cluster"`
	Copies  int       `json:"copies"`
	Oldest  time.Time `json:"oldest"`
}

// Snapshot is the outcome of one refresh: what /metrics serves until the
// next one.
type Snapshot struct {
	// Clusters in name order: the EtcdClusters of the namespace (without a
	// Kubernetes client, every cluster id with backups).
	Clusters []ClusterState `json:"clusters"`
	// Orphans (cluster ids with backups and no EtcdCluster) and the staged
	// copies, in name order.
	Orphans []OrphanState `json:"orphans,omitempty"`
	Staged  []StagedState `json:"staged,omitempty"`
	// ObjectLock: whether the bucket has object lock (nil: not known, no
	// store or its lock configuration never read).
	ObjectLock *bool `json:"objectLock,omitempty"`
	// RestoreRun is the newest namespace-wide restore run under the
	// prefix's _restores/ (nil: none, or never read).
	RestoreRun *RestoreRunState `json:"restoreRun,omitempty"`
	// At is when the refresh finished; Duration how long it took.
	At       time.Time     `json:"at"`
	Duration time.Duration `json:"duration"`
	// Errors are the steps that failed, with the cause.
	Errors map[string]string `json:"errors,omitempty"`
}

// Cluster returns the state of one cluster (nil when unknown).
func (s *Snapshot) Cluster(name string) *ClusterState {
	if s == nil {
		return nil
	}
	i := sort.Search(len(s.Clusters), func(i int) bool { return s.Clusters[i].Cluster >= name })
	if i < len(s.Clusters) && s.Clusters[i].Cluster == name {
		return &s.Clusters[i]
	}
	return nil
}

// Orphan returns the state of one orphan (nil when it is not one).
func (s *Snapshot) Orphan(name string) *OrphanState {
	if s == nil {
		return nil
	}
	for i := range s.Orphans {
		if s.Orphans[i].Cluster == name {
			return &s.Orphans[i]
		}
	}
	return nil
}

// futureTolerance is retention's clock-skew tolerance: a backup dated
// later than now plus this is "from the future" (retention.RuleFuture).
var futureTolerance = retention.DefaultPolicy().FutureTolerance

// storeState summarises a cluster's backup folders (newest first, each
// checked with catalog.CheckEntries and its drill record loaded with
// catalog.LoadDrills; manifests[i] is entries[i]'s). A backup dated after
// futureCut is counted as future-dated and never as the newest.
func storeState(st *ClusterState, entries []catalog.Entry, manifests []*catalog.Manifest, futureCut time.Time) {
	st.Stored = true
	st.Backups = nil
	st.Incomplete, st.Damaged = 0, 0
	st.Oldest = time.Time{}
	st.FutureDated, st.FutureLatest = 0, time.Time{}
	st.DrillLast, st.DrillLastPassed, st.DrillLastPass = time.Time{}, false, time.Time{}
	st.Escrow = nil
	if i := newestGood(entries, manifests, futureCut); i >= 0 {
		st.Escrow = escrowState(entries[i].Name, manifests[i])
	}
	for i, e := range entries {
		future := e.Time.After(futureCut)
		if future {
			st.FutureDated++
			if e.Time.After(st.FutureLatest) {
				st.FutureLatest = e.Time
			}
		}
		switch {
		case !e.Committed:
			st.Incomplete++
		case e.Damaged != "":
			st.Damaged++
		case future:
			// Never the newest: its time cannot be placed.
		case manifests[i] != nil:
			st.Oldest = e.Time // entries are newest first
			if _, ok := st.Backups[e.Kind]; !ok {
				if st.Backups == nil {
					st.Backups = map[catalog.Kind]BackupState{}
				}
				m := manifests[i]
				b := BackupState{Time: e.Time, Revision: m.Revision(), Stored: m.Snapshot.StoredSize, Raw: m.Snapshot.RawSize}
				if !m.StartedAt.IsZero() && m.FinishedAt.After(m.StartedAt) {
					b.Duration = m.FinishedAt.Sub(m.StartedAt)
				}
				st.Backups[e.Kind] = b
			}
		}
		// A drill record proves or disproves only when it was read.
		if d := e.Drill; d != nil && d.Err == "" && !d.At.IsZero() {
			if d.At.After(st.DrillLast) {
				st.DrillLast, st.DrillLastPassed = d.At, d.Proven()
			}
			if d.Proven() && d.At.After(st.DrillLastPass) {
				st.DrillLastPass = d.At
			}
		}
	}
}

// newestEncrypted is the index of the newest committed backup that checks
// out, is not future-dated and is encrypted (-1: none).
func newestEncrypted(entries []catalog.Entry, manifests []*catalog.Manifest, futureCut time.Time) int {
	for i, e := range entries {
		if e.Committed && e.Damaged == "" && manifests[i] != nil && !e.Time.After(futureCut) && manifests[i].Encrypted() {
			return i
		}
	}
	return -1
}

// newestGood is the index of the newest committed backup that checks
// out and is not future-dated (-1: none): the backup of
// etcd_recovery_backup_locked_until_timestamp_seconds.
func newestGood(entries []catalog.Entry, manifests []*catalog.Manifest, futureCut time.Time) int {
	for i, e := range entries {
		if e.Committed && e.Damaged == "" && manifests[i] != nil && !e.Time.After(futureCut) {
			return i
		}
	}
	return -1
}

// orphanLabel is an orphan state (prune.Orphan.State) as a label value.
func orphanLabel(state string) string { return strings.ReplaceAll(state, " ", "_") }

// inspectState copies an inspect --all row; prevLeader is the leader the
// previous refresh saw.
func inspectState(st *ClusterState, row fleet.InspectRow) {
	st.Inspected = true
	st.Verdict, st.Up, st.Voting, st.DBSize = row.Verdict, row.Up, row.Voting, row.DBSize
	if row.Leader != "" {
		if st.Leader != "" && st.Leader != row.Leader {
			st.LeaderChanges++
		}
		st.Leader = row.Leader
	}
}

// verdictLabel is the verdict as a label value: healthy, degraded,
// quorum_lost, unreachable.
func verdictLabel(v inspect.VerdictKind) string {
	return strings.ReplaceAll(strings.ToLower(string(v)), " ", "_")
}
