// Package kvevent is the record of one change in etcd's MVCC key space:
// an Event (a put or delete of one key at one revision, as etcd stored it)
// and a Lease as a watcher saw it. It is the vocabulary shared by the
// journal (which captures and stores events) and internal/etcdinternals
// (which applies them to a bbolt file), so that the table of etcd's
// internals depends on no feature's storage format.
package kvevent

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
