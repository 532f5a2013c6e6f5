package catalog

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
)

// Retention follows the carrier's rule: backups run three times a day
// (CronJob "3 3,11,19 * * *"), a single backup is kept on the 1st and the
// 15th, and a master update adds one backup that day; at most
// 5 + (master updates that day) backups are stored.
//
// ApplyPolicy turns that rule into a keep/delete decision for every backup
// folder of a cluster. It is a pure function of its arguments (no I/O, no
// clock), so the caller decides what "now" is and what to do with the plan.
// All dates are UTC.

// Rule names recorded in Decision.Rules: why a backup is kept.
const (
	RuleNewest          = "newest"           // the newest committed backup
	RuleRecent          = "recent"           // among the Policy.Recent newest scheduled backups
	RuleAnchor          = "anchor"           // the earliest backup of one of the Policy.Anchors anchor dates
	RuleUpdateToday     = "update-today"     // an update backup taken today
	RuleDrilled         = "drilled"          // the newest backup that checks out and whose restore drill passed
	RuleManual          = "manual"           // committed manual backups are never deleted automatically
	RulePreRestore      = "pre-restore"      // committed pre-restore backups are never deleted automatically
	RuleUnknownKind     = "unknown-kind"     // a kind retention does not know is never deleted
	RuleIncompleteYoung = "incomplete-young" // no manifest yet, but may still be in flight
	RuleFuture          = "future"           // its time is in the future: cannot place it in time
	RuleInvalidPolicy   = "invalid-policy"   // the policy is invalid: nothing is deleted
	// A damaged backup (Entry.Damaged) counts for no rule above but is kept
	// while it may still be worth an SRE's look:
	RuleDamagedNewer = "damaged-newer" // newer than the newest backup that checks out (or there is none)
	RuleDamagedYoung = "damaged-young" // last written within IncompleteAfter
)

// MinIncompleteAfter is the smallest Policy.IncompleteAfter: a folder
// without a manifest may be a backup in flight for at least that long, and
// deleting its objects would break it.
const MinIncompleteAfter = time.Hour

// DefaultUploadMaxAge is the age after which a multipart upload is
// considered abandoned by StaleUploads.
const DefaultUploadMaxAge = 24 * time.Hour

// Policy says which backups to keep. The zero value is invalid; start from
// DefaultPolicy.
type Policy struct {
	// Recent is how many of the newest committed scheduled backups to keep
	// (3: one day of 8-hourly runs).
	Recent int
	// Anchors is how many anchor dates to keep a backup for: the most recent
	// dates (up to today) whose day of month is in AnchorDays and that have a
	// committed backup. The earliest committed backup of each such date, of
	// any kind, is kept. Dates without a backup are skipped.
	Anchors int
	// AnchorDays are days of the month (1..31). A month without that day
	// (the 31st of April) simply has no anchor date for it.
	AnchorDays []int
	// KeepTodayUpdates keeps every committed update backup taken today.
	KeepTodayUpdates bool
	// IncompleteAfter is the age after which a folder without a manifest is
	// deleted, counted from its last write (the newest of its objects and of
	// its multipart uploads). Younger ones may still be being written and are
	// kept. At least MinIncompleteAfter. Damaged backups younger than this
	// are kept too.
	IncompleteAfter time.Duration
	// FutureTolerance is the clock skew tolerated: a backup whose time is
	// later than now+FutureTolerance is kept and not counted as recent or
	// as an anchor.
	FutureTolerance time.Duration
}

// DefaultPolicy is the carrier's rule: 3 recent scheduled backups, the 1st
// and the 15th, today's update backups.
func DefaultPolicy() Policy {
	return Policy{
		Recent:           3,
		Anchors:          2,
		AnchorDays:       []int{1, 15},
		KeepTodayUpdates: true,
		IncompleteAfter:  24 * time.Hour,
		FutureTolerance:  5 * time.Minute,
	}
}

// Validate reports every problem with the policy.
func (p Policy) Validate() error {
	var errs []error
	if p.Recent < 0 {
		errs = append(errs, fmt.Errorf("retention: recent count must not be negative, got %d", p.Recent))
	}
	if p.Anchors < 0 {
		errs = append(errs, fmt.Errorf("retention: anchor count must not be negative, got %d", p.Anchors))
	}
	if p.Anchors > 0 && len(p.AnchorDays) == 0 {
		errs = append(errs, fmt.Errorf("retention: %d anchors requested but no anchor days given", p.Anchors))
	}
	seen := map[int]bool{}
	for _, d := range p.AnchorDays {
		switch {
		case d < 1 || d > 31:
			errs = append(errs, fmt.Errorf("retention: anchor day %d is not a day of the month (1..31)", d))
		case seen[d]:
			errs = append(errs, fmt.Errorf("retention: anchor day %d is listed twice", d))
		}
		seen[d] = true
	}
	if p.IncompleteAfter <= 0 {
		errs = append(errs, fmt.Errorf("retention: incomplete-after must be positive (backups in flight would be deleted), got %v", p.IncompleteAfter))
	} else if p.IncompleteAfter < MinIncompleteAfter {
		errs = append(errs, fmt.Errorf("retention: incomplete-after must be at least %s (a backup in flight would be deleted), got %v",
			fmtDuration(MinIncompleteAfter), p.IncompleteAfter))
	}
	if p.FutureTolerance < 0 {
		errs = append(errs, fmt.Errorf("retention: future tolerance must not be negative, got %v", p.FutureTolerance))
	}
	return errors.Join(errs...)
}

// Decision is what retention does with one backup folder.
type Decision struct {
	Entry  Entry
	Keep   bool
	Rules  []string // machine names of every rule that keeps it (Rule*); empty when deleted
	Reason string   // human-readable, never empty
}

// Plan is the decision for every entry, newest first.
type Plan struct {
	Decisions []Decision
}

// Kept returns the decisions that keep their backup, newest first.
func (p Plan) Kept() []Decision { return p.filter(true) }

// Deleted returns the decisions that delete their backup, newest first.
func (p Plan) Deleted() []Decision { return p.filter(false) }

func (p Plan) filter(keep bool) []Decision {
	var out []Decision
	for _, d := range p.Decisions {
		if d.Keep == keep {
			out = append(out, d)
		}
	}
	return out
}

// ApplyPolicy decides which entries to keep at time now. Entries are those of
// one cluster (entries of several clusters are decided per cluster). The
// input may be in any order and is not modified; the plan is deterministic
// (ties in time are broken by name, then by the rest of the entry) and lists
// every entry exactly once, newest first. An invalid policy deletes nothing.
func ApplyPolicy(entries []Entry, now time.Time, p Policy) Plan {
	order := make([]int, len(entries))
	for i := range order {
		order[i] = i
	}
	// Newest first.
	slices.SortStableFunc(order, func(a, b int) int { return compareEntries(entries[b], entries[a]) })

	decisions := make([]Decision, len(entries)) // indexed like entries
	if err := p.Validate(); err != nil {
		msg := "policy is invalid, nothing is deleted: " + strings.ReplaceAll(err.Error(), "\n", "; ")
		for i, e := range entries {
			decisions[i] = Decision{Entry: e, Keep: true, Rules: []string{RuleInvalidPolicy}, Reason: msg}
		}
	} else {
		byCluster := map[string][]int{}
		var clusters []string
		for _, i := range order {
			id := entries[i].ClusterID
			if _, ok := byCluster[id]; !ok {
				clusters = append(clusters, id)
			}
			byCluster[id] = append(byCluster[id], i)
		}
		for _, id := range clusters {
			decideCluster(entries, byCluster[id], now, p, decisions)
		}
	}
	plan := Plan{Decisions: make([]Decision, 0, len(entries))}
	for _, i := range order {
		plan.Decisions = append(plan.Decisions, decisions[i])
	}
	return plan
}

// civilDate is a UTC calendar date.
type civilDate struct {
	y int
	m time.Month
	d int
}

func dateOf(t time.Time) civilDate {
	y, m, d := t.UTC().Date()
	return civilDate{y, m, d}
}

func (c civilDate) compare(o civilDate) int {
	return cmp.Or(cmp.Compare(c.y, o.y), cmp.Compare(c.m, o.m), cmp.Compare(c.d, o.d))
}

func (c civilDate) String() string { return fmt.Sprintf("%04d-%02d-%02d", c.y, int(c.m), c.d) }

// decideCluster fills decisions[i] for every i in idx (entries of one
// cluster, newest first).
func decideCluster(entries []Entry, idx []int, now time.Time, p Policy, decisions []Decision) {
	now = now.UTC()
	today := dateOf(now)
	futureCut := now.Add(p.FutureTolerance)
	isFuture := func(e Entry) bool { return e.Time.After(futureCut) }

	// placed: committed, checked out (not damaged) and not in the future,
	// so it can count for recent, anchors and today's updates. A damaged
	// backup never counts for a rule and so never pushes a good one out.
	placed := func(e Entry) bool { return e.Good() && !isFuture(e) }

	// newest: the first good entry, future or not. newestPos is its
	// position in idx (len(idx) when there is none).
	newest, newestPos := -1, len(idx)
	for k, i := range idx {
		if entries[i].Good() {
			newest, newestPos = i, k
			break
		}
	}

	// drilled: the newest good entry whose drill passed (Drill.Proven()),
	// future or not, like newest: there is always one proven restore
	// point. A failed drill, or a record that could not be read, is no
	// proof and counts for nothing.
	drilled := -1
	for _, i := range idx {
		if e := entries[i]; e.Good() && e.Drill.Proven() {
			drilled = i
			break
		}
	}

	// recent: the p.Recent newest placed scheduled backups.
	recentRank := map[int]int{}
	for _, i := range idx {
		if len(recentRank) == p.Recent {
			break
		}
		if e := entries[i]; placed(e) && e.Kind == KindScheduled {
			recentRank[i] = len(recentRank) + 1
		}
	}

	// anchors: earliest placed backup of each anchor date up to today; keep
	// the p.Anchors most recent such dates.
	anchorDay := map[int]bool{}
	for _, d := range p.AnchorDays {
		anchorDay[d] = true
	}
	firstOfDate := map[civilDate]int{}   // anchor-day date -> earliest placed entry
	var anchorDates []civilDate          // sorted newest first below
	for k := len(idx) - 1; k >= 0; k-- { // oldest first
		i := idx[k]
		e := entries[i]
		if !placed(e) {
			continue
		}
		d := dateOf(e.Time)
		if !anchorDay[d.d] || d.compare(today) > 0 {
			continue
		}
		if _, ok := firstOfDate[d]; !ok {
			firstOfDate[d] = i
			anchorDates = append(anchorDates, d)
		}
	}
	slices.SortFunc(anchorDates, func(a, b civilDate) int { return b.compare(a) })
	anchorOf := map[int]civilDate{} // entry -> the anchor date it keeps
	for k, d := range anchorDates {
		if k == p.Anchors {
			break
		}
		anchorOf[firstOfDate[d]] = d
	}

	for k, i := range idx {
		e := entries[i]
		var rules, reasons []string
		keep := func(rule, reason string) {
			rules = append(rules, rule)
			reasons = append(reasons, reason)
		}
		future := isFuture(e)
		date := dateOf(e.Time)

		if i == newest {
			keep(RuleNewest, "newest")
		}
		if r, ok := recentRank[i]; ok {
			keep(RuleRecent, fmt.Sprintf("recent %d/%d", r, p.Recent))
		}
		if d, ok := anchorOf[i]; ok {
			keep(RuleAnchor, "anchor "+d.String())
		}
		// An update "from tomorrow" within the clock-skew tolerance counts as today's.
		updateToday := p.KeepTodayUpdates && e.Kind == KindUpdate && placed(e) && date.compare(today) >= 0
		if updateToday {
			if date == today {
				keep(RuleUpdateToday, fmt.Sprintf("update from today (%s)", today))
			} else {
				keep(RuleUpdateToday, fmt.Sprintf("update from %s (counted as today's, %s, within the clock-skew tolerance)", date, today))
			}
		}
		if i == drilled {
			keep(RuleDrilled, "drilled (passed "+fmtDrillTime(e.Drill.At)+")")
		}
		// Manual and pre-restore backups are never deleted automatically; a
		// folder without a manifest is not a backup and falls to the
		// incomplete rule whatever its kind.
		switch e.Kind {
		case KindScheduled, KindUpdate:
		case KindManual:
			if e.Committed {
				keep(RuleManual, "manual: never deleted automatically")
			}
		case KindPreRestore:
			if e.Committed {
				keep(RulePreRestore, "pre-restore: never deleted automatically")
			}
		default:
			keep(RuleUnknownKind, fmt.Sprintf("unknown kind %q: never deleted automatically", e.Kind))
		}
		var incompleteAge time.Duration
		if !e.Committed && !future {
			incompleteAge = now.Sub(lastWritten(e))
			if incompleteAge <= p.IncompleteAfter {
				keep(RuleIncompleteYoung, fmt.Sprintf("incomplete %s backup (no manifest), last written %s ago, not older than %s: may be in flight",
					e.Kind, fmtAge(max(incompleteAge, 0), p.IncompleteAfter), fmtDuration(p.IncompleteAfter)))
			}
		}
		damaged := e.Committed && e.Damaged != ""
		var damagedAge time.Duration
		if damaged && !future {
			damagedAge = now.Sub(lastWritten(e))
			if k < newestPos {
				if newest < 0 {
					keep(RuleDamagedNewer, "no backup of the cluster checks out: kept for investigation")
				} else {
					keep(RuleDamagedNewer, fmt.Sprintf("newer than the newest good backup %s: kept for investigation", entries[newest].Name))
				}
			}
			if damagedAge <= p.IncompleteAfter {
				keep(RuleDamagedYoung, fmt.Sprintf("last written %s ago, not older than %s: kept",
					fmtAge(max(damagedAge, 0), p.IncompleteAfter), fmtDuration(p.IncompleteAfter)))
			}
		}
		if future {
			keep(RuleFuture, fmt.Sprintf("time %s is in the future (now %s, tolerance %s): cannot place it in time",
				e.Time.UTC().Format(time.RFC3339Nano), now.Format(time.RFC3339), fmtDuration(p.FutureTolerance)))
		}
		if !e.Committed && len(rules) > 0 && !slices.Contains(rules, RuleIncompleteYoung) {
			reasons = append(reasons, fmt.Sprintf("incomplete %s backup (no manifest)", e.Kind))
		}
		if damaged && len(rules) > 0 {
			if slices.Contains(rules, RuleDamagedNewer) || slices.Contains(rules, RuleDamagedYoung) {
				reasons = append([]string{"damaged: " + e.Damaged}, reasons...)
			} else {
				reasons = append(reasons, "damaged: "+e.Damaged)
			}
		}

		d := Decision{Entry: e, Keep: len(rules) > 0, Rules: rules}
		if d.Keep {
			d.Reason = strings.Join(reasons, "; ")
		} else {
			d.Reason = deleteReason(i, e, date, incompleteAge, p, firstOfDate, entries) + drillNote(e, drilled, entries)
			if damaged {
				d.Reason = fmt.Sprintf("damaged: %s; older than the newest good backup %s and last written %s ago, older than %s: cannot restore",
					e.Damaged, entries[newest].Name, fmtAge(damagedAge, p.IncompleteAfter), fmtDuration(p.IncompleteAfter))
			}
		}
		decisions[i] = d
	}
}

// deleteReason explains why e (not kept by any rule) is deleted.
func deleteReason(i int, e Entry, date civilDate, incompleteAge time.Duration, p Policy, firstOfDate map[civilDate]int, entries []Entry) string {
	if !e.Committed {
		return fmt.Sprintf("incomplete %s backup (no manifest), last written %s ago, older than %s: failed or abandoned",
			e.Kind, fmtAge(incompleteAge, p.IncompleteAfter), fmtDuration(p.IncompleteAfter))
	}
	var why string
	switch e.Kind {
	case KindScheduled:
		if p.Recent == 0 {
			why = "scheduled: recent scheduled backups are not kept (recent count is 0)"
		} else {
			why = fmt.Sprintf("scheduled: not among the %d newest scheduled", p.Recent)
		}
	case KindUpdate:
		if !p.KeepTodayUpdates {
			why = fmt.Sprintf("update from %s: update backups are not kept by this policy", date)
		} else {
			why = fmt.Sprintf("update from %s: only today's update backups are kept", date)
		}
	default: // not reached: other kinds are always kept
		why = string(e.Kind)
	}
	if first, ok := firstOfDate[date]; ok && first != i {
		return why + fmt.Sprintf(", not an anchor (%s is the earliest backup of %s)", entries[first].Name, date)
	} else if ok {
		return why + fmt.Sprintf(", not an anchor (%s is not among the %d most recent anchor dates)", date, p.Anchors)
	}
	return why + ", not an anchor"
}

// drillNote says, for a backup retention deletes, why its drill record
// (if any) does not keep it: "" when it has none.
func drillNote(e Entry, drilled int, entries []Entry) string {
	s := e.Drill
	switch {
	case s == nil || !e.Committed:
		return ""
	case s.Err != "":
		return "; drill record unreadable, no proof: " + s.Err
	case !s.Passed:
		return "; drill FAILED " + fmtDrillTime(s.At) + ", no proof: " + s.Failed
	case !e.Good():
		return "; drilled (passed " + fmtDrillTime(s.At) + "), but damaged now"
	case drilled >= 0:
		return "; drilled (passed " + fmtDrillTime(s.At) + "), but " + entries[drilled].Name + " is the newest drilled backup"
	}
	return ""
}

// fmtDrillTime prints a drill's time in UTC, to the second.
func fmtDrillTime(t time.Time) string {
	if t.IsZero() {
		return "at an unknown time"
	}
	return t.UTC().Format(time.RFC3339)
}

// lastWritten is the latest of the backup's time and its objects' times: a
// folder still being written to is young whatever its name says.
func lastWritten(e Entry) time.Time {
	t := e.Time
	for _, o := range e.Objects {
		if o.LastModified.After(t) {
			t = o.LastModified
		}
	}
	for _, u := range e.Uploads {
		if u.Initiated.After(t) {
			t = u.Initiated
		}
	}
	return t
}

// fmtDuration prints durations for people: 24h, 8h2m, 21d8h57m, 30s.
// Durations of a minute or more are rounded to the minute.
func fmtDuration(d time.Duration) string {
	if d < time.Minute {
		if d >= time.Second {
			d = d.Round(time.Second)
		}
		return d.String()
	}
	d = d.Round(time.Minute)
	var b strings.Builder
	if d >= 48*time.Hour {
		fmt.Fprintf(&b, "%dd", d/(24*time.Hour))
		d %= 24 * time.Hour
	}
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dh", h)
	}
	if m := (d % time.Hour) / time.Minute; m > 0 || b.Len() == 0 {
		fmt.Fprintf(&b, "%dm", m)
	}
	return b.String()
}

// fmtAge prints age, precisely when rounding would make it look equal to limit.
func fmtAge(age, limit time.Duration) string {
	if s := fmtDuration(age); s != fmtDuration(limit) || age == limit {
		return s
	}
	return age.String()
}

// compareEntries orders entries oldest first: by time, then name, then the
// rest of the entry, so that sorting is deterministic even for duplicates.
func compareEntries(a, b Entry) int {
	if c := cmp.Or(
		a.Time.Compare(b.Time),
		strings.Compare(a.Name, b.Name),
		strings.Compare(a.ClusterID, b.ClusterID),
		strings.Compare(string(a.Kind), string(b.Kind)),
		compareBool(a.Committed, b.Committed),
		strings.Compare(a.Damaged, b.Damaged),
		cmp.Compare(len(a.Objects), len(b.Objects)),
		cmp.Compare(len(a.Uploads), len(b.Uploads)),
	); c != 0 {
		return c
	}
	for i := range a.Objects {
		x, y := a.Objects[i], b.Objects[i]
		if c := cmp.Or(strings.Compare(x.Key, y.Key), cmp.Compare(x.Size, y.Size), x.LastModified.Compare(y.LastModified)); c != 0 {
			return c
		}
	}
	for i := range a.Uploads {
		x, y := a.Uploads[i], b.Uploads[i]
		if c := cmp.Or(strings.Compare(x.Key, y.Key), strings.Compare(x.UploadID, y.UploadID), x.Initiated.Compare(y.Initiated)); c != 0 {
			return c
		}
	}
	return 0
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// StaleUploads returns the multipart uploads initiated more than maxAge
// before now (DefaultUploadMaxAge when maxAge <= 0), oldest first. Younger
// uploads may be in flight; an upload without an initiation time cannot be
// placed in time and is never stale. The input is not modified.
func StaleUploads(uploads []store.Upload, now time.Time, maxAge time.Duration) []store.Upload {
	if maxAge <= 0 {
		maxAge = DefaultUploadMaxAge
	}
	var out []store.Upload
	for _, u := range uploads {
		if !u.Initiated.IsZero() && now.Sub(u.Initiated) > maxAge {
			out = append(out, u)
		}
	}
	slices.SortStableFunc(out, func(a, b store.Upload) int {
		return cmp.Or(a.Initiated.Compare(b.Initiated), strings.Compare(a.Key, b.Key), strings.Compare(a.UploadID, b.UploadID))
	})
	return out
}
