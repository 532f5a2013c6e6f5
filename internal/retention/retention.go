package retention

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
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
		FutureTolerance:  catalog.DefaultFutureTolerance,
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
			FormatDuration(MinIncompleteAfter), p.IncompleteAfter))
	}
	if p.FutureTolerance < 0 {
		errs = append(errs, fmt.Errorf("retention: future tolerance must not be negative, got %v", p.FutureTolerance))
	}
	return errors.Join(errs...)
}

// Decision is what retention does with one backup folder.
type Decision struct {
	Entry  catalog.Entry
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
func ApplyPolicy(entries []catalog.Entry, now time.Time, p Policy) Plan {
	order := make([]int, len(entries))
	for i := range order {
		order[i] = i
	}
	// Newest first.
	slices.SortStableFunc(order, func(a, b int) int { return catalog.CompareEntries(entries[b], entries[a]) })

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
// cluster, newest first): it places the cluster's backups once (the
// newest, the drilled one, the recent ranks, the anchors: newClusterView),
// then decides each backup by the rules, in the order they are recorded
// in Decision.Rules (clusterView.decide).
func decideCluster(entries []catalog.Entry, idx []int, now time.Time, p Policy, decisions []Decision) {
	v := newClusterView(entries, idx, now, p)
	for k, i := range idx {
		decisions[i] = v.decide(k, i)
	}
}

// clusterView is what the rules need to know about a cluster's backups
// as a whole, worked out before any backup is decided.
type clusterView struct {
	entries   []catalog.Entry
	idx       []int // the cluster's entries, newest first
	p         Policy
	now       time.Time // UTC
	today     civilDate
	futureCut time.Time

	// newest is the first good entry, future or not; newestPos its
	// position in idx (len(idx) and -1 when there is none).
	newest, newestPos int
	// drilled is the newest good entry whose drill passed, or -1.
	drilled int
	// recentRank: entry -> its rank among the p.Recent newest placed
	// scheduled backups.
	recentRank map[int]int
	// firstOfDate: anchor-day date -> its earliest placed entry;
	// anchorOf: entry -> the anchor date it keeps (the p.Anchors most
	// recent of them).
	firstOfDate map[civilDate]int
	anchorOf    map[int]civilDate
}

func newClusterView(entries []catalog.Entry, idx []int, now time.Time, p Policy) *clusterView {
	now = now.UTC()
	v := &clusterView{entries: entries, idx: idx, p: p, now: now, today: dateOf(now), futureCut: now.Add(p.FutureTolerance)}
	v.findNewest()
	v.findDrilled()
	v.rankRecent()
	v.pickAnchors()
	return v
}

func (v *clusterView) isFuture(e catalog.Entry) bool { return e.Time.After(v.futureCut) }

// placed: committed, checked out (not damaged) and not in the future, so
// it can count for recent, anchors and today's updates. A damaged backup
// never counts for a rule and so never pushes a good one out.
func (v *clusterView) placed(e catalog.Entry) bool { return e.Good() && !v.isFuture(e) }

// findNewest: the first good entry, future or not.
func (v *clusterView) findNewest() {
	v.newest, v.newestPos = -1, len(v.idx)
	for k, i := range v.idx {
		if v.entries[i].Good() {
			v.newest, v.newestPos = i, k
			return
		}
	}
}

// findDrilled: the newest good entry whose drill passed (Drill.Proven()),
// future or not, like newest: there is always one proven restore point. A
// failed drill, or a record that could not be read, is no proof and counts
// for nothing.
func (v *clusterView) findDrilled() {
	v.drilled = -1
	for _, i := range v.idx {
		if e := v.entries[i]; e.Good() && e.Drill.Proven() {
			v.drilled = i
			return
		}
	}
}

// rankRecent: the p.Recent newest placed scheduled backups.
func (v *clusterView) rankRecent() {
	v.recentRank = map[int]int{}
	for _, i := range v.idx {
		if len(v.recentRank) == v.p.Recent {
			break
		}
		if e := v.entries[i]; v.placed(e) && e.Kind == catalog.KindScheduled {
			v.recentRank[i] = len(v.recentRank) + 1
		}
	}
}

// pickAnchors: the earliest placed backup of each anchor date up to
// today; the p.Anchors most recent such dates are kept.
func (v *clusterView) pickAnchors() {
	anchorDay := map[int]bool{}
	for _, d := range v.p.AnchorDays {
		anchorDay[d] = true
	}
	v.firstOfDate = map[civilDate]int{}
	var anchorDates []civilDate            // sorted newest first below
	for k := len(v.idx) - 1; k >= 0; k-- { // oldest first
		i := v.idx[k]
		e := v.entries[i]
		if !v.placed(e) {
			continue
		}
		d := dateOf(e.Time)
		if !anchorDay[d.d] || d.compare(v.today) > 0 {
			continue
		}
		if _, ok := v.firstOfDate[d]; !ok {
			v.firstOfDate[d] = i
			anchorDates = append(anchorDates, d)
		}
	}
	slices.SortFunc(anchorDates, func(a, b civilDate) int { return b.compare(a) })
	v.anchorOf = map[int]civilDate{}
	for k, d := range anchorDates {
		if k == v.p.Anchors {
			break
		}
		v.anchorOf[v.firstOfDate[d]] = d
	}
}

// keeps collects the rules that keep one backup and their reasons.
type keeps struct{ rules, reasons []string }

func (ks *keeps) add(rule, reason string) {
	ks.rules = append(ks.rules, rule)
	ks.reasons = append(ks.reasons, reason)
}

// decide applies every rule to entries[i], at position k of idx.
func (v *clusterView) decide(k, i int) Decision {
	e := v.entries[i]
	var ks keeps
	v.keepPlaced(i, e, &ks)
	keepKind(e, &ks)
	incompleteAge := v.keepIncomplete(e, &ks)
	damagedAge := v.keepDamaged(k, e, &ks)
	v.keepFuture(e, &ks)
	v.annotate(e, &ks)

	d := Decision{Entry: e, Keep: len(ks.rules) > 0, Rules: ks.rules}
	switch {
	case d.Keep:
		d.Reason = strings.Join(ks.reasons, "; ")
	case e.Committed && e.Damaged != "":
		d.Reason = fmt.Sprintf("damaged: %s; older than the newest good backup %s and last written %s ago, older than %s: cannot restore",
			e.Damaged, v.entries[v.newest].Name, fmtAge(damagedAge, v.p.IncompleteAfter), FormatDuration(v.p.IncompleteAfter))
	default:
		d.Reason = deleteReason(i, e, dateOf(e.Time), incompleteAge, v.p, v.firstOfDate, v.entries) + drillNote(e, v.drilled, v.entries)
	}
	return d
}

// keepPlaced: the rules that keep a backup by its place among the
// cluster's: newest, recent, anchor, today's update, drilled.
func (v *clusterView) keepPlaced(i int, e catalog.Entry, ks *keeps) {
	if i == v.newest {
		ks.add(RuleNewest, "newest")
	}
	if r, ok := v.recentRank[i]; ok {
		ks.add(RuleRecent, fmt.Sprintf("recent %d/%d", r, v.p.Recent))
	}
	if d, ok := v.anchorOf[i]; ok {
		ks.add(RuleAnchor, "anchor "+d.String())
	}
	// An update "from tomorrow" within the clock-skew tolerance counts as today's.
	date := dateOf(e.Time)
	if v.p.KeepTodayUpdates && e.Kind == catalog.KindUpdate && v.placed(e) && date.compare(v.today) >= 0 {
		if date == v.today {
			ks.add(RuleUpdateToday, fmt.Sprintf("update from today (%s)", v.today))
		} else {
			ks.add(RuleUpdateToday, fmt.Sprintf("update from %s (counted as today's, %s, within the clock-skew tolerance)", date, v.today))
		}
	}
	if i == v.drilled {
		ks.add(RuleDrilled, "drilled (passed "+fmtDrillTime(e.Drill.At)+")")
	}
}

// keepKind: manual and pre-restore backups are never deleted
// automatically, nor are those of an unknown kind; a folder without a
// manifest is not a backup and falls to the incomplete rule whatever its
// kind.
func keepKind(e catalog.Entry, ks *keeps) {
	switch e.Kind {
	case catalog.KindScheduled, catalog.KindUpdate:
	case catalog.KindManual:
		if e.Committed {
			ks.add(RuleManual, "manual: never deleted automatically")
		}
	case catalog.KindPreRestore:
		if e.Committed {
			ks.add(RulePreRestore, "pre-restore: never deleted automatically")
		}
	default:
		ks.add(RuleUnknownKind, fmt.Sprintf("unknown kind %q: never deleted automatically", e.Kind))
	}
}

// keepIncomplete: a folder without a manifest last written within
// p.IncompleteAfter may be a backup in flight. It returns the folder's
// age (0 for a committed or future one).
func (v *clusterView) keepIncomplete(e catalog.Entry, ks *keeps) time.Duration {
	if e.Committed || v.isFuture(e) {
		return 0
	}
	age := v.now.Sub(lastWritten(e))
	if age <= v.p.IncompleteAfter {
		ks.add(RuleIncompleteYoung, fmt.Sprintf("incomplete %s backup (no manifest), last written %s ago, not older than %s: may be in flight",
			e.Kind, fmtAge(max(age, 0), v.p.IncompleteAfter), FormatDuration(v.p.IncompleteAfter)))
	}
	return age
}

// keepDamaged: a damaged backup newer than the newest good one, or last
// written within p.IncompleteAfter, is kept for investigation. It returns
// the backup's age (0 for one not damaged or in the future).
func (v *clusterView) keepDamaged(k int, e catalog.Entry, ks *keeps) time.Duration {
	if !e.Committed || e.Damaged == "" || v.isFuture(e) {
		return 0
	}
	age := v.now.Sub(lastWritten(e))
	if k < v.newestPos {
		if v.newest < 0 {
			ks.add(RuleDamagedNewer, "no backup of the cluster checks out: kept for investigation")
		} else {
			ks.add(RuleDamagedNewer, fmt.Sprintf("newer than the newest good backup %s: kept for investigation", v.entries[v.newest].Name))
		}
	}
	if age <= v.p.IncompleteAfter {
		ks.add(RuleDamagedYoung, fmt.Sprintf("last written %s ago, not older than %s: kept",
			fmtAge(max(age, 0), v.p.IncompleteAfter), FormatDuration(v.p.IncompleteAfter)))
	}
	return age
}

// keepFuture: a backup from the future (beyond p.FutureTolerance) cannot
// be placed in time, so it is kept.
func (v *clusterView) keepFuture(e catalog.Entry, ks *keeps) {
	if v.isFuture(e) {
		ks.add(RuleFuture, fmt.Sprintf("time %s is in the future (now %s, tolerance %s): cannot place it in time",
			e.Time.UTC().Format(time.RFC3339Nano), v.now.Format(time.RFC3339), FormatDuration(v.p.FutureTolerance)))
	}
}

// annotate adds to a kept backup's reasons that it is incomplete or
// damaged (first when that is why it is kept).
func (v *clusterView) annotate(e catalog.Entry, ks *keeps) {
	if len(ks.rules) == 0 {
		return
	}
	if !e.Committed && !slices.Contains(ks.rules, RuleIncompleteYoung) {
		ks.reasons = append(ks.reasons, fmt.Sprintf("incomplete %s backup (no manifest)", e.Kind))
	}
	if e.Committed && e.Damaged != "" {
		if slices.Contains(ks.rules, RuleDamagedNewer) || slices.Contains(ks.rules, RuleDamagedYoung) {
			ks.reasons = append([]string{"damaged: " + e.Damaged}, ks.reasons...)
		} else {
			ks.reasons = append(ks.reasons, "damaged: "+e.Damaged)
		}
	}
}

// deleteReason explains why e (not kept by any rule) is deleted.
func deleteReason(i int, e catalog.Entry, date civilDate, incompleteAge time.Duration, p Policy, firstOfDate map[civilDate]int, entries []catalog.Entry) string {
	if !e.Committed {
		return fmt.Sprintf("incomplete %s backup (no manifest), last written %s ago, older than %s: failed or abandoned",
			e.Kind, fmtAge(incompleteAge, p.IncompleteAfter), FormatDuration(p.IncompleteAfter))
	}
	var why string
	switch e.Kind {
	case catalog.KindScheduled:
		if p.Recent == 0 {
			why = "scheduled: recent scheduled backups are not kept (recent count is 0)"
		} else {
			why = fmt.Sprintf("scheduled: not among the %d newest scheduled", p.Recent)
		}
	case catalog.KindUpdate:
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
func drillNote(e catalog.Entry, drilled int, entries []catalog.Entry) string {
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
func lastWritten(e catalog.Entry) time.Time {
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

// FormatDuration prints durations for people: 24h, 8h2m, 21d8h57m, 30s.
// Durations of a minute or more are rounded to the minute.
func FormatDuration(d time.Duration) string {
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
	if s := FormatDuration(age); s != FormatDuration(limit) || age == limit {
		return s
	}
	return age.String()
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

// GuardPlan is a last guard against a policy bug: the newest backup that
// checks out is kept, so is the newest one that checks out and whose drill
// passed, and a cluster that has a committed backup keeps at least one.
func GuardPlan(p Plan) error {
	var committed, kept, good, proven bool
	for _, d := range p.Decisions {
		if d.Entry.Committed {
			committed = true
			kept = kept || d.Keep
		}
		if d.Entry.Good() && d.Entry.Drill.Proven() && !proven {
			proven = true
			if !d.Keep {
				return fmt.Errorf("the plan would delete %s, the newest backup whose restore drill passed: refusing", d.Entry.Name)
			}
		}
		if d.Entry.Good() && !good {
			good = true
			if !d.Keep {
				return fmt.Errorf("the plan would delete %s, the newest backup that checks out: refusing", d.Entry.Name)
			}
		}
	}
	if committed && !kept {
		return errors.New("the plan would delete every committed backup: refusing")
	}
	return nil
}
