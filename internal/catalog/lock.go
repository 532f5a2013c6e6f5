package catalog

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
)

// Object lock and retention: how long a backup written to a bucket with
// object lock is locked, so that a locked backup is never one that
// retention (ApplyPolicy) wants gone sooner.
//
// The lock of a backup taken at t ends at the earliest time ApplyPolicy
// could delete it, less LockPolicy.Margin, computed from the rule alone
// (LockPlan is pure):
//
//   - scheduled: kept while among the Policy.Recent newest scheduled
//     backups. The CronJob takes one every LockPolicy.Period (8h for
//     "3 3,11,19 * * *"), so Recent newer ones exist at t + Recent*Period
//     at the earliest: locked until t + Recent*Period - Margin (23h with
//     the defaults: 3*8h - 1h).
//   - anchor candidate (the first backup, of any kind, of a date whose day
//     is in Policy.AnchorDays): kept while its date is among the
//     Policy.Anchors most recent anchor dates that have a backup, so at
//     least until the start (00:00 UTC) of the Anchors-th anchor date
//     after its own: the 1st is locked until the 1st of the next month,
//     the 15th until the 15th of the next month (less Margin). A month
//     without a backup on an anchor date keeps it longer, never shorter.
//   - update: kept on its own day (KeepTodayUpdates): locked until the end
//     of its UTC day, less Margin.
//   - manual and pre-restore: never deleted automatically, so any lock is
//     safe; they are locked as long as an anchor of their date would be
//     (about a month with the defaults), so that an SRE can still delete
//     one after that.
//
// A backup several rules keep is locked for the longest of them (it is
// deleted only when every rule lets it go). Margin absorbs the clock skew
// between the writer, the prune and the store, and the spread of a
// scheduled run's start (startingDeadlineSeconds, a fleet run's order):
// a backup whose run started late by up to Margin relative to the
// backups that push it out is still unlocked when retention deletes it.
//
// The newest backup is always kept (RuleNewest), so its lock may be
// extended while it is the newest: RelockUntil. That is the one exception
// to the rule above: a backup that was the newest when it was re-locked
// may stay locked up to one scheduled lock period after retention lets
// it go; prune reports it as retained until then, and deletes it after.

// LockMode is how a backup locks its objects (backup --lock-mode).
type LockMode string

const (
	// LockOff: no retention is asked for (a bucket default retention still
	// applies).
	LockOff LockMode = ""
	// LockGovernanceMode and LockComplianceMode write every object with
	// an explicit retention of that mode (s3:PutObjectRetention).
	LockGovernanceMode LockMode = "governance"
	LockComplianceMode LockMode = "compliance"
	// LockBucketDefault relies on the bucket's default retention: nothing
	// is asked for per object (no s3:PutObjectRetention needed), but the
	// bucket must have object lock and a default retention.
	LockBucketDefault LockMode = "bucket-default"
)

// LockModes are the values of --lock-mode.
var LockModes = []string{"off", string(LockGovernanceMode), string(LockComplianceMode), string(LockBucketDefault)}

// ParseLockMode parses --lock-mode ("" and "off" are LockOff).
func ParseLockMode(s string) (LockMode, error) {
	switch m := LockMode(strings.ToLower(strings.TrimSpace(s))); m {
	case "", "off":
		return LockOff, nil
	case LockGovernanceMode, LockComplianceMode, LockBucketDefault:
		return m, nil
	}
	return "", fmt.Errorf("unknown lock mode %q (want one of %s)", s, strings.Join(LockModes, ", "))
}

// StoreMode is the store's retention mode of an explicit lock mode ("" for
// LockOff and LockBucketDefault).
func (m LockMode) StoreMode() store.LockMode {
	switch m {
	case LockGovernanceMode:
		return store.LockGovernance
	case LockComplianceMode:
		return store.LockCompliance
	}
	return ""
}

// Explicit reports whether objects are written with their own retention.
func (m LockMode) Explicit() bool { return m.StoreMode() != "" }

// ManifestLock is the lock a backup was written with (Manifest.Lock).
type ManifestLock struct {
	// Mode is governance, compliance or bucket-default.
	Mode LockMode `json:"mode"`
	// Until is the retain-until time asked for (for bucket-default: the
	// bucket's default period from the backup's start).
	Until time.Time `json:"until"`
}

// LockConfigOf returns the bucket's object-lock configuration: LockInfo{}
// for a store without Locker.
func LockConfigOf(ctx context.Context, st store.Store) (store.LockInfo, error) {
	lk, ok := st.(store.Locker)
	if !ok {
		return store.LockInfo{}, nil
	}
	return lk.LockConfig(ctx)
}

// BucketName is the store's bucket name when it tells it ("the bucket"
// otherwise), for messages.
func BucketName(st store.Store) string {
	if b, ok := st.(interface{ Bucket() string }); ok && b.Bucket() != "" {
		return "bucket " + b.Bucket()
	}
	return "the bucket"
}

// EntryLock returns the latest retention among e's objects that is still
// locked at now (store.Retention{} when none is): a backup with a locked
// object cannot be deleted, only hidden under delete markers.
func EntryLock(ctx context.Context, st store.Store, e Entry, now time.Time) (store.Retention, error) {
	lk, ok := st.(store.Locker)
	if !ok {
		return store.Retention{}, nil
	}
	var out store.Retention
	for _, o := range e.Objects {
		r, err := lk.Retention(ctx, o.Key, "")
		if err != nil {
			if store.IsNotFound(err) {
				continue // gone meanwhile: nothing to keep
			}
			return store.Retention{}, err
		}
		if r.Locked(now) && r.Until.After(out.Until) {
			out = r
		}
	}
	return out, nil
}

// NewestCommitted returns the newest committed entry (entries of one
// cluster, any order), and false when there is none.
func NewestCommitted(entries []Entry) (Entry, bool) {
	var out Entry
	found := false
	for _, e := range entries {
		if e.Committed && e.Damaged == "" && (!found || CompareEntries(e, out) > 0) {
			out, found = e, true
		}
	}
	return out, found
}
