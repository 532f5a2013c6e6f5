package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/store"
)

// A second site (docs/second-site.md) is an independent bucket, in another
// region or on another provider, that the copier (package replicate)
// fills from the primary: create-only copies of every backup, journal
// segment, journal gap and proof record, escrow and drill record, each
// verified by its sha256. The second site has the primary's key layout
// under its own prefix, so every reader (list, restore, PITR, drill,
// restore-all, the exporter) reads it as it reads the primary.
//
// Beside the copies, the copier keeps one record of its own on the second
// site, so that the DR side can tell how far behind it is with nothing but
// that bucket:
//
//	<prefix>/_replica/status.json   the copier's status (ReplicaStatus), rewritten as it progresses
//
// It is the one object the copier ever replaces (a plain Put, never with a
// retention: a versioned bucket keeps its older versions only until the
// second site's lifecycle expires them). Nothing is ever copied into
// _replica/, and the copier never copies the primary's own _replica/,
// _staged/ (plaintext) or _restores/ folders.

const (
	replicaDir          = "_replica/"
	replicaStatusObject = "status.json"
)

// KeyReplica is the copier's status record on a second site.
const KeyReplica KeyKind = "replica status"

// ReplicaStatusVersion is the status record's format version.
const ReplicaStatusVersion = 1

// ReplicaStatusKey is the copier's status record:
// <prefix>/_replica/status.json.
func (l Layout) ReplicaStatusKey() string { return l.RootPrefix() + replicaDir + replicaStatusObject }

// ReplicaPrefix is the copier's own folder: <prefix>/_replica/.
func (l Layout) ReplicaPrefix() string { return l.RootPrefix() + replicaDir }

// ReplicaStatus is the copier's account of the second site, written there.
//
// The lag: every object complete on the primary when the copier last
// listed it (at SyncedAt for the whole prefix; at a cluster's
// JournalSyncedAt for its journal) was on the second site, verified, when
// the record was written. So now - JournalSyncedAt bounds the journal
// writes the second site misses, with no access to the primary.
type ReplicaStatus struct {
	Version int `json:"version"`
	// Copier names the process (its pod or host name).
	Copier string `json:"copier"`
	// Source is where it copies from: the primary's bucket and prefix
	// (never a credential).
	Source string `json:"source"`
	// Updated is when the record was written.
	Updated time.Time `json:"updated"`
	// SyncedAt: every object complete on the primary when the copier
	// listed the whole prefix at SyncedAt is on the second site, or named
	// in Failures (zero: no full pass has completed yet). A verification
	// failure does not hold it back: Failures alert on their own.
	SyncedAt time.Time `json:"syncedAt"`
	// Pending is the number (and stored bytes) of objects seen on the
	// primary and not yet on the second site at Updated.
	Pending      int   `json:"pending"`
	PendingBytes int64 `json:"pendingBytes"`
	// Copied and CopiedBytes count the copies made since the copier
	// started.
	Copied      int64 `json:"copied"`
	CopiedBytes int64 `json:"copiedBytes"`
	// Failures are the copies that failed verification (a sha256 that is
	// not the manifest's, or an object already on the second site with
	// other bytes), newest last, at most MaxReplicaFailures: each one is
	// kept (never overwritten) and named here until it is resolved.
	Failures []ReplicaFailure `json:"failures,omitempty"`
	// Clusters is each cluster's progress.
	Clusters map[string]ReplicaCluster `json:"clusters,omitempty"`
}

// MaxReplicaFailures bounds ReplicaStatus.Failures.
const MaxReplicaFailures = 100

// ReplicaFailure is a copy that failed verification.
type ReplicaFailure struct {
	Key    string    `json:"key"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// ReplicaCluster is one cluster's progress on the second site.
type ReplicaCluster struct {
	// JournalSyncedAt: every segment of the cluster's journal stored on
	// the primary when it was listed at JournalSyncedAt is on the second
	// site; JournalLastRevision is the newest revision copied.
	JournalSyncedAt     time.Time `json:"journalSyncedAt,omitempty"`
	JournalLastRevision int64     `json:"journalLastRevision,omitempty"`
	// NewestBackup is the newest backup (its folder name) whose manifest
	// is on the second site.
	NewestBackup string `json:"newestBackup,omitempty"`
	// Pending objects of this cluster not yet on the second site.
	Pending int `json:"pending,omitempty"`
	// JournalLastSegment is the key (on the primary) of the newest
	// segment copied and verified: every segment before it in key order
	// was too when the record was written. It is a report, not an input:
	// a copier that restarts compares the two sites' journal folders
	// instead (anyone holding the second site's credential can write
	// this record).
	JournalLastSegment string `json:"journalLastSegment,omitempty"`
}

// WriteReplicaStatus replaces the status record (a plain Put: the one
// object the copier rewrites).
func WriteReplicaStatus(ctx context.Context, st store.Store, l Layout, s ReplicaStatus) error {
	b, err := EncodeReplicaStatus(s)
	if err != nil {
		return err
	}
	key := l.ReplicaStatusKey()
	if _, err := st.Put(ctx, key, bytes.NewReader(b)); err != nil {
		return fmt.Errorf("replica status %s: %w", key, err)
	}
	return nil
}

// EncodeReplicaStatus is the status record's bytes (its format version
// set), as WriteReplicaStatus stores them: for a writer that holds the
// second site through a narrower interface than store.Store.
func EncodeReplicaStatus(s ReplicaStatus) ([]byte, error) {
	s.Version = ReplicaStatusVersion
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("replica status: %w", err)
	}
	return append(b, '\n'), nil
}

// ReadReplicaStatus reads the status record: store.ErrNotFound (wrapped)
// when no copier has written one, objectio.ErrDamagedRecord when it is not
// one.
func ReadReplicaStatus(ctx context.Context, st store.Store, l Layout) (ReplicaStatus, error) {
	var s ReplicaStatus
	key := l.ReplicaStatusKey()
	if err := objectio.ReadRecord(ctx, st, key, &s, objectio.RecordOptions{Max: maxSmallRecordBytes}); err != nil {
		return ReplicaStatus{}, fmt.Errorf("replica status %s: %w", key, err)
	}
	if s.Version != ReplicaStatusVersion {
		return ReplicaStatus{}, fmt.Errorf("replica status %s: format version %d, want %d: %w", key, s.Version, ReplicaStatusVersion, objectio.ErrDamagedRecord)
	}
	return s, nil
}
