package journal

import "github.com/armada/etcd-recovery/internal/kvevent"

// FormatVersion is the version of the segment format.
const FormatVersion = 1

// The journal stores etcd's changes as internal/kvevent records; these
// names keep the journal's vocabulary for its callers.
type (
	Event = kvevent.Event
	Lease = kvevent.Lease
)

// Event types.
const (
	Put    = kvevent.Put
	Delete = kvevent.Delete
)

// UnknownLeaseTTL is kvevent.UnknownLeaseTTL: the TTL a replay gives a
// live lease whose granted TTL the journal could not learn.
const UnknownLeaseTTL = kvevent.UnknownLeaseTTL

// Header opens every segment: whose it is and where it sits, so a
// segment of another cluster, of another base backup, or out of order is
// refused by name, never applied.
type Header struct {
	Format     int    `json:"format"`
	ClusterID  string `json:"clusterID"`
	BaseBackup string `json:"baseBackup"` // the full backup the journal continues
	BaseRev    int64  `json:"baseRev"`    // that backup's revision
	FirstRev   int64  `json:"firstRev"`   // the first revision in the segment
	LastRev    int64  `json:"lastRev"`    // the last revision in the segment
	// Received maps revisions to when the journal received them (unix
	// milliseconds), at least the first and last; from time to revision.
	Received map[int64]int64 `json:"received,omitempty"`
	Events   int             `json:"events"`
	Leases   []Lease         `json:"leases,omitempty"`
	// EtcdClusterID is etcd's cluster ID (hex) of the cluster the
	// segment's events came from (lineage.go): a journal never continues
	// a chain whose last segment names another. Empty in segments written
	// before it was recorded.
	EtcdClusterID string `json:"etcdClusterID,omitempty"`
	// Prev is the sha256 (hex) the segment before it in its chain records
	// in its trailer (of every raw byte before that trailer: its header
	// and events): the chain is tamper-evident (chain.go). A reader that
	// read the segment before refuses this one when they differ
	// (ReasonForged). Empty in a chain's first segment, after a capture
	// that could not read the segment before (encrypted, no identity), and
	// in segments written before it was recorded.
	Prev string `json:"prev,omitempty"`
}
