package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
)

// LockState is whether a cluster's newest committed backup is under
// object-lock retention, as inspect --all and the exporter show it. The
// lock is read from the store (the retention of the current version of
// the backup's manifest, the object that commits it), not from what the
// manifest says.
type LockState struct {
	// Backup is the newest committed backup's name (empty: the cluster
	// has no committed backup).
	Backup string `json:"backup,omitempty"`
	// BucketLocked: the bucket has object lock (store.LockInfo.Enabled).
	// Without it nothing else is read and Locked is false.
	BucketLocked bool `json:"bucketLocked"`
	// Locked: the manifest's current version has a retention that still
	// holds (store.Retention.Locked at the time of the check); Mode and
	// Until are that retention (empty and zero when not locked).
	Locked bool           `json:"locked"`
	Mode   store.LockMode `json:"mode,omitempty"`
	Until  time.Time      `json:"until,omitzero"`
}

// BucketLock returns the bucket's object-lock configuration: LockInfo{}
// without an error for a store without store.Locker, or a wrapper whose
// store lacks it (store.ErrUnsupported). A bucket's object lock cannot be
// turned off, so a caller checking many clusters reads it once.
func BucketLock(ctx context.Context, st store.Store) (store.LockInfo, error) {
	l, ok := st.(store.Locker)
	if !ok {
		return store.LockInfo{}, nil
	}
	info, err := l.LockConfig(ctx)
	if errors.Is(err, store.ErrUnsupported) {
		return store.LockInfo{}, nil
	}
	if err != nil {
		return store.LockInfo{}, fmt.Errorf("read the bucket's object-lock configuration: %w", err)
	}
	return info, nil
}

// NewestLock is the lock of the cluster's newest committed backup (by
// its name's time, not dated beyond now plus retention's clock-skew
// tolerance): one read of the bucket's lock configuration, one listing of
// the cluster, and one retention read of the manifest when the bucket
// has object lock. A store without lock, or a bucket without it, is
// BucketLocked false and no error.
func NewestLock(ctx context.Context, st store.Store, layout Layout, clusterID string) (LockState, error) {
	info, err := BucketLock(ctx, st)
	if err != nil || !info.Enabled {
		return LockState{}, err
	}
	entries, err := Inventory(ctx, st, layout, clusterID)
	if err != nil {
		return LockState{BucketLocked: true}, err
	}
	now := time.Now()
	cut := now.Add(DefaultFutureTolerance)
	for _, e := range entries { // newest first
		if e.Committed && !e.Time.After(cut) {
			return BackupLock(ctx, st, layout, info, clusterID, e.Name, now)
		}
	}
	return LockState{BucketLocked: true}, nil
}

// BackupLock is the lock of one committed backup at now, given the
// bucket's configuration (BucketLock): the retention of its manifest's
// current version. Without object lock on the bucket it reads nothing.
func BackupLock(ctx context.Context, st store.Store, layout Layout, bucket store.LockInfo, clusterID, name string, now time.Time) (LockState, error) {
	ls := LockState{Backup: name, BucketLocked: bucket.Enabled}
	if !bucket.Enabled || name == "" {
		return ls, nil
	}
	l, ok := st.(store.Locker)
	if !ok {
		return ls, nil
	}
	r, err := l.Retention(ctx, layout.Key(clusterID, name, ManifestObject), "")
	if err != nil {
		return ls, fmt.Errorf("cluster %s backup %s: read the manifest's retention: %w", clusterID, name, err)
	}
	if r.Locked(now) {
		ls.Locked, ls.Mode, ls.Until = true, r.Mode, r.Until
	}
	return ls, nil
}

// DefaultFutureTolerance is the clock skew tolerated in a backup's time:
// a backup timed later than now plus this is from a wrong clock, not the
// newest (retention's default policy uses it too).
const DefaultFutureTolerance = 5 * time.Minute
