package journal

// FormatVersion is the version of the segment format.
const FormatVersion = 1

// Event types.
const (
	Put    = "put"
	Delete = "delete"
)

// Event is one change of one key at one revision, exactly as etcd's MVCC
// stored it: replaying the events of a revision in Sub order reproduces
// the key bucket's entries of that revision (a put's KeyValue under
// revision {Rev, Sub}; a delete's tombstone under {Rev, Sub} marked 't').
type Event struct {
	Rev  int64  `json:"rev"`  // the main revision (ModRevision of the change)
	Sub  int64  `json:"sub"`  // its index within the revision (a txn's order)
	Type string `json:"type"` // Put or Delete
	Key  []byte `json:"key"`
	// For a put: the key's value and metadata after the change.
	Value     []byte `json:"value,omitempty"`
	CreateRev int64  `json:"createRev,omitempty"`
	Version   int64  `json:"version,omitempty"`
	Lease     int64  `json:"lease,omitempty"`
}

// Lease is a lease as the journal saw it: enough to restore it with its
// ID and TTL, so that restored leased keys keep their lease, as etcd's own
// snapshot keeps them.
type Lease struct {
	ID  int64 `json:"id"`
	TTL int64 `json:"ttl"` // granted TTL, seconds
	// Rev is the revision at (or after) which the journal first saw the
	// lease; Revoked is the revision of its revoke or expiry (the deletes
	// of its keys), 0 while it lives.
	//
	// A revoke record (the lease found gone when one of its keys was
	// deleted) may come in a later segment than the lease's first record,
	// with Rev = Revoked: Revoked is the last revision, up to the one at
	// which the journal found the lease gone, that deleted one of its keys
	// (a revoke or expiry deletes all its keys in one revision).
	Rev     int64 `json:"rev"`
	Revoked int64 `json:"revoked,omitempty"`
	// TTLUnknown: the lookup of the granted TTL failed twice, or the lease
	// was gone by then (TTL is 0). A replay keeps such a lease's entry
	// when the snapshot has one, else writes it with UnknownLeaseTTL,
	// never 0 (a 0-TTL lease would expire its keys at once).
	TTLUnknown bool `json:"ttlUnknown,omitempty"`
}

// UnknownLeaseTTL (seconds) is the TTL a replay gives a live lease whose
// granted TTL the journal could not learn (Lease.TTLUnknown): an hour,
// longer than Kubernetes' leases (events 1 h, leader leases seconds), so a
// restored leased key outlives the restore and its owner renews or
// re-grants it; etcd restarts every lease's TTL on restore anyway.
const UnknownLeaseTTL = 3600

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
