package journal

import "github.com/armada/etcd-recovery/internal/kvevent"

// FormatVersion is the version of the segment format.
const FormatVersion = 1

// FormatRevoking is the version of a segment whose header carries pending
// revokes (Header.Revoking): format 1 and that field. It is written only
// when the field is, so that every other segment stays readable by a
// release that reads format 1 only (which refuses this one as "not a
// segment header: unknown field "revoking""). This release reads the
// format before the rest of the header, so a later format is refused by
// its number.
const FormatRevoking = 2

// FormatCaughtUp is the version of a segment whose header carries catch-ups
// (Header.CaughtUp): format 2 and that field, written only when the field
// is, as format 2 is.
const FormatCaughtUp = 3

// formatOf is the format a segment of header h is written in.
func formatOf(h Header) int {
	switch {
	case len(h.CaughtUp) > 0:
		return FormatCaughtUp
	case len(h.Revoking) > 0:
		return FormatRevoking
	}
	return FormatVersion
}

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
	// Revoking are the revokes the capture had not placed yet when it
	// sealed the segment (capture.go, revokesAhead): leases found gone
	// after a delete of one of their keys, at a revision past the
	// segment's last (a later delete of one of their keys, up to there,
	// may be the revoke's own), or whose lookup failed. A capture that
	// resumes after the segment goes on with them, and a replay reads on
	// until they are placed (Source.Leases); without them, a capture
	// killed after storing the deletes lost the revoke for good. Empty in
	// segments written before it was recorded.
	Revoking []PendingRevoke `json:"revoking,omitempty"`
	// CaughtUp are the catch-ups of the segment's revisions: revisions
	// the journal received only after a watch opened again (a start, a
	// restart, a stall, a pause for memory) that etcd had committed
	// before. Their receive times are the catch-up's, not their commit's,
	// so a time between the revision before them and the catch-up maps
	// to no revision (Source.PointAt). Empty in segments without one, and
	// in segments written before it was recorded.
	CaughtUp []CatchUp `json:"caughtUp,omitempty"`
}

// CatchUp is a watch opened again at revision From whose first answer
// said etcd was past it: the revisions from From were committed before
// they were received, behind the backlog. It closes when the watch has
// delivered every revision up to a response's own revision: To, at At
// (unix milliseconds). The revisions From to To were committed by At, and
// what came after was received live. Open: the segment was sealed before
// the watch caught up (To is etcd's revision as last seen, At 0): its
// revisions from From were received behind a backlog. Between the
// revision before From (received when the journal last watched) and the
// close, the journal did not see which of them etcd had committed when.
type CatchUp struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
	At   int64 `json:"at,omitempty"`
	Open bool  `json:"open,omitempty"`
}

// PendingRevoke is a revoke not placed yet: lease ID was found gone at
// the cluster's revision SeenGone (-1: its lookup failed, to be made
// again) after a delete of one of its keys, the last of which, up to the
// segment's end, was at Last. Its revoke is at the last revision up to
// SeenGone that deletes one of its keys: Last, or a later one.
type PendingRevoke struct {
	ID       int64 `json:"id"`
	Last     int64 `json:"last"`
	SeenGone int64 `json:"seenGone"`
}
