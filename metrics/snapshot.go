package metrics

import (
	"sort"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/kube"
)

// BackupState is the newest committed backup of one kind that checks out.
type BackupState struct {
	Time     time.Time `json:"time"`
	Revision int64     `json:"revision"`
	Stored   int64     `json:"storedBytes"`
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
	// DrillLast is the newest drill of any backup (zero: never drilled);
	// DrillLastPassed its result; DrillLastPass the newest passed one.
	DrillLast       time.Time `json:"drillLast,omitzero"`
	DrillLastPassed bool      `json:"drillLastPassed"`
	DrillLastPass   time.Time `json:"drillLastPass,omitzero"`

	// Inspection side (Inspected: an InspectAll row exists).
	Inspected bool                `json:"inspected"`
	Verdict   inspect.VerdictKind `json:"verdict,omitempty"`
	Up        int                 `json:"up"`
	Voting    int                 `json:"voting"`
	DBSize    int64               `json:"dbSize"`
	Leader    string              `json:"leader,omitempty"`
	// LeaderChanges counts the leader changes seen between refreshes.
	LeaderChanges uint64 `json:"leaderChanges"`
}

// Snapshot is the outcome of one refresh: what /metrics serves until the
// next one.
type Snapshot struct {
	// Clusters in name order.
	Clusters []ClusterState `json:"clusters"`
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

// storeState summarises a cluster's backup folders (newest first, each
// checked with catalog.CheckEntries and its drill record loaded with
// catalog.LoadDrills; manifests[i] is entries[i]'s).
func storeState(st *ClusterState, entries []catalog.Entry, manifests []*catalog.Manifest) {
	st.Stored = true
	st.Backups = nil
	st.Incomplete, st.Damaged = 0, 0
	st.DrillLast, st.DrillLastPassed, st.DrillLastPass = time.Time{}, false, time.Time{}
	for i, e := range entries {
		switch {
		case !e.Committed:
			st.Incomplete++
		case e.Damaged != "":
			st.Damaged++
		case manifests[i] != nil:
			if _, ok := st.Backups[e.Kind]; !ok {
				if st.Backups == nil {
					st.Backups = map[catalog.Kind]BackupState{}
				}
				m := manifests[i]
				st.Backups[e.Kind] = BackupState{Time: e.Time, Revision: m.Revision(), Stored: m.Snapshot.StoredSize}
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

// inspectState copies an inspect --all row; prevLeader is the leader the
// previous refresh saw.
func inspectState(st *ClusterState, row kube.InspectRow) {
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
