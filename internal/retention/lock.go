package retention

import (
	"fmt"
	"slices"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
)

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
	Mode catalog.LockMode
	// Period is the time between two scheduled backups (the CronJob's
	// period); default DefaultLockPeriod.
	Period time.Duration
	// Margin is subtracted from every lock's end; default
	// DefaultLockMargin.
	Margin time.Duration
}

// Enabled reports whether backups are locked.
func (lp LockPolicy) Enabled() bool { return lp.Mode != catalog.LockOff }

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
	if _, err := catalog.ParseLockMode(string(lp.Mode)); err != nil {
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
func LockPlan(kind catalog.Kind, t time.Time, anchorCandidate bool, p Policy, lp LockPolicy) LockTerm {
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
	case catalog.KindScheduled:
		if p.Recent > 0 {
			consider(t.Add(time.Duration(p.Recent)*lp.Period), LockRuleRecent,
				fmt.Sprintf("scheduled: among the %d newest for %d periods of %s", p.Recent, p.Recent, FormatDuration(lp.Period)))
		}
	case catalog.KindUpdate:
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
	return LockTerm{Until: until, Rule: rule, Reason: reason + ", less a margin of " + FormatDuration(lp.Margin)}
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
func AnchorCandidate(entries []catalog.Entry, t time.Time) bool {
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
	return LockPlan(catalog.KindScheduled, now, false, p, lp).Until
}

// SegmentLockUntil is the retain-until time of a journal segment written
// at written (its upload's start) with the journal locked (lp's mode
// explicit): written + retention (--journal-retention) - lp.Margin, the
// earliest time journal retention could delete it (a segment's time for
// retention is its object's stored time, at or after written) less the
// margin every backup lock takes (LockPlan): a lock never outlasts
// retention, so a prune never meets a segment it must delete still
// locked, except one a later base made unnecessary early (then it is
// retained until its lock ends). Zero (not locked) when lp locks nothing
// explicitly or the margin is not shorter than retention.
func SegmentLockUntil(written time.Time, keep time.Duration, lp LockPolicy) time.Time {
	if !lp.Mode.Explicit() {
		return time.Time{}
	}
	lp = lp.WithDefaults()
	if keep <= 0 {
		keep = DefaultJournalRetention
	}
	if keep <= lp.Margin {
		return time.Time{}
	}
	return written.Add(keep - lp.Margin).UTC()
}
