package catalog

import (
	"context"
	"fmt"
	"slices"
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

// Default lock periods.
const (
	// DefaultLockPeriod is the CronJob's period: "3 3,11,19 * * *".
	DefaultLockPeriod = 8 * time.Hour
	// DefaultLockMargin: the CronJob's startingDeadlineSeconds (1h), and
	// clock skew.
	DefaultLockMargin = time.Hour
)

// LockPolicy is how backups are locked.
type LockPolicy struct {
	Mode LockMode
	// Period is the time between two scheduled backups (the CronJob's
	// period); default DefaultLockPeriod.
	Period time.Duration
	// Margin is subtracted from every lock's end; default
	// DefaultLockMargin.
	Margin time.Duration
}

// Enabled reports whether backups are locked.
func (lp LockPolicy) Enabled() bool { return lp.Mode != LockOff }

// WithDefaults fills the zero Period and Margin.
func (lp LockPolicy) WithDefaults() LockPolicy {
	if lp.Period <= 0 {
		lp.Period = DefaultLockPeriod
	}
	if lp.Margin <= 0 {
		lp.Margin = DefaultLockMargin
	}
	return lp
}

// Validate checks the lock policy's values.
func (lp LockPolicy) Validate() error {
	if _, err := ParseLockMode(string(lp.Mode)); err != nil {
		return err
	}
	if lp.Period < 0 || lp.Margin < 0 {
		return fmt.Errorf("lock period and margin must not be negative, got %v and %v", lp.Period, lp.Margin)
	}
	return nil
}

// Lock rules: why a backup is locked as long as it is (LockTerm.Rule).
const (
	LockRuleRecent = "recent" // scheduled: while among the Recent newest
	LockRuleAnchor = "anchor" // the first backup of an anchor date
	LockRuleUpdate = "update" // an update backup: its own day
	LockRuleManual = "manual" // manual / pre-restore: as long as an anchor
	LockRuleNone   = "none"   // retention may delete it at once: not locked
)

// LockTerm is how long one backup is locked, and why.
type LockTerm struct {
	// Until is the retain-until time; zero: not locked.
	Until  time.Time
	Rule   string // the LockRule* that gives Until
	Reason string
}

// Locked reports whether the term locks anything.
func (t LockTerm) Locked() bool { return !t.Until.IsZero() }

// LockPlan returns the lock of a backup of kind taken at t (its name's
// time): the earliest time p could delete it, less lp.Margin (see the
// comment at the top of lock.go). anchorCandidate says it is the first
// backup of its date (no earlier committed backup of the cluster that
// date); it matters only on an anchor date. An invalid policy locks
// nothing.
func LockPlan(kind Kind, t time.Time, anchorCandidate bool, p Policy, lp LockPolicy) LockTerm {
	lp = lp.WithDefaults()
	if p.Validate() != nil {
		return LockTerm{Rule: LockRuleNone, Reason: "invalid retention policy: not locked"}
	}
	t = t.UTC()
	var end time.Time
	rule, reason := LockRuleNone, "retention may delete it at once"
	consider := func(e time.Time, r, why string) {
		if e.After(end) {
			end, rule, reason = e, r, why
		}
	}
	anchorEnd, isAnchor := anchorExpiry(t, p)
	switch kind {
	case KindScheduled:
		if p.Recent > 0 {
			consider(t.Add(time.Duration(p.Recent)*lp.Period), LockRuleRecent,
				fmt.Sprintf("scheduled: among the %d newest for %d periods of %s", p.Recent, p.Recent, fmtDuration(lp.Period)))
		}
	case KindUpdate:
		if p.KeepTodayUpdates {
			d := dateOf(t)
			consider(time.Date(d.y, d.m, d.d+1, 0, 0, 0, 0, time.UTC), LockRuleUpdate, "update: kept on its day, "+d.String())
		}
	default: // manual, pre-restore, unknown kinds: never deleted automatically
		horizon := t.Add(time.Duration(p.Recent) * lp.Period)
		if e, ok := nextAnchors(t, p); ok && e.After(horizon) {
			horizon = e
		}
		consider(horizon, LockRuleManual, fmt.Sprintf("%s: never deleted automatically, locked as long as an anchor", kind))
	}
	if isAnchor && anchorCandidate {
		consider(anchorEnd, LockRuleAnchor, "anchor "+dateOf(t).String()+": kept until its date leaves the "+fmt.Sprint(p.Anchors)+" most recent anchor dates")
	}
	until := end.Add(-lp.Margin)
	if end.IsZero() || !until.After(t) {
		return LockTerm{Rule: LockRuleNone, Reason: reason + ": not locked"}
	}
	return LockTerm{Until: until, Rule: rule, Reason: reason + ", less a margin of " + fmtDuration(lp.Margin)}
}

// anchorExpiry: when t's date is an anchor date, the start of the
// p.Anchors-th anchor date after it.
func anchorExpiry(t time.Time, p Policy) (time.Time, bool) {
	if p.Anchors == 0 || !slices.Contains(p.AnchorDays, dateOf(t).d) {
		return time.Time{}, false
	}
	return nextAnchors(t, p)
}

// nextAnchors: the start of the p.Anchors-th anchor date after t's date.
func nextAnchors(t time.Time, p Policy) (time.Time, bool) {
	if p.Anchors == 0 || len(p.AnchorDays) == 0 {
		return time.Time{}, false
	}
	d := dateOf(t)
	day := time.Date(d.y, d.m, d.d, 0, 0, 0, 0, time.UTC)
	found := 0
	for i := 1; i <= 366*4; i++ { // every valid policy finds its dates well within this
		c := day.AddDate(0, 0, i)
		if slices.Contains(p.AnchorDays, c.Day()) {
			if found++; found == p.Anchors {
				return c, true
			}
		}
	}
	return time.Time{}, false
}

// AnchorCandidate reports whether a backup taken at t would be the first
// of its date among entries (one cluster's): no earlier backup folder that
// date, committed or not. A folder still being written may commit after
// this backup and become the anchor; should it fail instead, this backup
// is the anchor but locked only for its kind's term: shorter than
// retention keeps it, the safe side.
func AnchorCandidate(entries []Entry, t time.Time) bool {
	d := dateOf(t)
	for _, e := range entries {
		if dateOf(e.Time) == d && e.Time.Before(t) {
			return false
		}
	}
	return true
}

// RelockUntil is the lock the newest backup gets at now (after a backup,
// and in prune): at least now plus a fresh scheduled backup's lock, so an
// idle cluster (or one whose CronJob keeps failing) keeps one locked
// backup. Zero when the policy locks scheduled backups for nothing.
func RelockUntil(now time.Time, p Policy, lp LockPolicy) time.Time {
	return LockPlan(KindScheduled, now, false, p, lp).Until
}

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

// Relock extends the retention of every object of e to at least until
// (mode for an object without one; an object keeps its own mode), so
// that the newest backup of an idle cluster stays locked. It returns how
// many objects it extended.
func Relock(ctx context.Context, st store.Store, e Entry, mode store.LockMode, until time.Time) (int, error) {
	lk, ok := st.(store.Locker)
	if !ok || until.IsZero() {
		return 0, nil
	}
	n := 0
	for _, o := range e.Objects {
		r, err := lk.Retention(ctx, o.Key, "")
		if err != nil {
			if store.IsNotFound(err) {
				continue
			}
			return n, err
		}
		if !r.Until.Before(until) {
			continue
		}
		if r.Mode == "" {
			r.Mode = mode
		}
		if err := lk.SetRetention(ctx, o.Key, "", store.Retention{Mode: r.Mode, Until: until}); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// NewestCommitted returns the newest committed entry (entries of one
// cluster, any order), and false when there is none.
func NewestCommitted(entries []Entry) (Entry, bool) {
	var out Entry
	found := false
	for _, e := range entries {
		if e.Committed && e.Damaged == "" && (!found || compareEntries(e, out) > 0) {
			out, found = e, true
		}
	}
	return out, found
}
