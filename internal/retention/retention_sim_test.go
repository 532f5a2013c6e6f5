package retention

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// TestRetentionSimulation runs the backup schedule for 400 days against an
// in-memory bucket and checks the carrier's rule after every prune. Some
// committed backups are damaged (their manifest unreadable, their snapshot
// missing or truncated, as CheckEntries would find them): they must never
// count for a rule, and are kept only while newer than the newest good
// backup or younger than the incomplete limit. The
// expectations are computed here from the history of every backup ever
// taken, independently of the policy code.
//
// Every run uses a seeded source and logs its seed; rerun one with
// RETENTION_SIM_SEED=<seed> (RETENTION_SIM_DAYS changes the length).
func TestRetentionSimulation(t *testing.T) {
	simulateSeeds(t, false)
}

// TestRetentionSimulationDrills is the same 400 days with a restore drill
// of the newest backup once a day (05:xx UTC), failing at random and in
// bursts, some records unreadable, and the invariants of the drilled rule
// checked after every prune: once a drill has passed, the newest proven
// backup is kept; no proven backup newer than it was deleted; a failed or
// unreadable drill keeps nothing by drilled; and everything
// TestRetentionSimulation checks still holds, with one more backup
// allowed for the drilled rule. Rerun a seed with RETENTION_SIM_SEED.
func TestRetentionSimulationDrills(t *testing.T) {
	simulateSeeds(t, true)
}

// simulateSeeds runs simulateRetention for each seed over the days the
// environment asks for (RETENTION_SIM_DAYS, default 400; RETENTION_SIM_SEED,
// default a few fixed seeds and one from the clock), with or without drills.
func simulateSeeds(t *testing.T, drills bool) {
	t.Helper()
	days := 400
	if s := os.Getenv("RETENTION_SIM_DAYS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("RETENTION_SIM_DAYS=%q: want a positive number of days", s)
		}
		days = n
	}
	seeds := []uint64{1, 2, 3, 20261122, uint64(time.Now().UnixNano())}
	if s := os.Getenv("RETENTION_SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("RETENTION_SIM_SEED=%q: %v", s, err)
		}
		seeds = []uint64{seed}
	}
	with := ""
	if drills {
		with = " with daily drills"
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d, %d days%s (rerun with RETENTION_SIM_SEED=%d)", seed, days, with, seed)
			simulateRetention(t, seed, days, drills)
		})
	}
}

type simEvent struct {
	at   time.Time
	kind catalog.Kind
	// cronDown: the scheduled run fails (an outage of the CronJob).
	cronDown bool
	// drill: a restore drill of the newest committed backup.
	drill bool
}

type simStats struct {
	prunes, failed, incomplete, updates, manual, deleted, maxKept int
	damaged, damagedKeptNewer, damagedDeleted                     int
	midnightUpdates                                               int // prunes where the newest is an update of the previous day
	anchorOnUpdate, anchorAfterFailure                            int
	drills, drillsPassed, drillsFailed, drillsUnreadable          int
	keptByDrilledOnly, maxProvenAge                               int // checks where only drilled kept it; the oldest proven kept, in hours
}

func simulateRetention(t *testing.T, seed uint64, days int, drills bool) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	policy := DefaultPolicy()
	const (
		recentN    = 3
		anchorsN   = 2
		maxAge     = 24 * time.Hour
		failRate   = 0.10
		damageRate = 0.06
		updateDays = 0.15
	)
	damages := []string{"manifest unreadable: manifest: unexpected end of JSON input", "manifest missing",
		"snapshot.db.zst missing", "snapshot.db.zst size mismatch: 1000 bytes stored, the manifest says 1048576"}
	isAnchorDay := func(d int) bool { return d == 1 || d == 15 }
	day0 := time.Date(2027, 9, 1, 0, 0, 0, 0, time.UTC) // covers 2028-02-29

	// Forced outages of the CronJob: every scheduled run of one 1st fails,
	// and the cron is down for 12 days once (backups "stopped").
	forcedFirst := time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC)
	longOutage := day0.AddDate(0, 0, 30+rng.IntN(max(days-60, 1)))

	bucket := map[string]catalog.Entry{} // what the store holds
	var taken []catalog.Entry            // every good committed backup ever taken, in commit order
	var damagedAll []catalog.Entry       // every damaged committed backup ever taken
	type incompleteRec struct {
		name string
		last time.Time // when its last object was written
	}
	var incompletes []incompleteRec
	var st simStats
	clock := day0
	// drillOf is the current drill record of every backup ever drilled:
	// the ground truth of the drilled rule.
	drillOf := map[string]*catalog.DrillSummary{}
	lastDrillFailed := false

	for dayN := range days {
		day := day0.AddDate(0, 0, dayN)
		var events []simEvent
		down := day.Equal(forcedFirst) || (!day.Before(longOutage) && day.Before(longOutage.AddDate(0, 0, 12))) ||
			rng.Float64() < 0.01
		for _, h := range []int{3, 11, 19} {
			// The CronJob starts at :03; the backup is named when it starts.
			at := day.Add(time.Duration(h)*time.Hour + 3*time.Minute + time.Duration(rng.IntN(20_000))*time.Millisecond)
			events = append(events, simEvent{at: at, kind: catalog.KindScheduled, cronDown: down})
		}
		if rng.Float64() < updateDays {
			for range 1 + rng.IntN(3) {
				at := day.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))).Truncate(time.Millisecond))
				events = append(events, simEvent{at: at, kind: catalog.KindUpdate})
			}
		}
		if rng.Float64() < 0.01 {
			at := day.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))).Truncate(time.Millisecond))
			events = append(events, simEvent{at: at, kind: catalog.KindManual})
		}
		if rng.Float64() < 0.003 {
			at := day.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))).Truncate(time.Millisecond))
			events = append(events, simEvent{at: at, kind: catalog.KindPreRestore})
		}
		if drills && rng.Float64() >= 0.03 { // the drill job itself is sometimes down
			at := day.Add(5*time.Hour + time.Duration(rng.IntN(3600_000))*time.Millisecond)
			events = append(events, simEvent{at: at, drill: true})
		}
		slices.SortFunc(events, func(a, b simEvent) int { return a.at.Compare(b.at) })

		for _, ev := range events {
			if ev.drill {
				clock = maxTime(clock, ev.at)
				// Drill the newest committed backup in the bucket.
				var newest catalog.Entry
				for _, e := range bucket {
					if e.Committed && catalog.CompareEntries(e, newest) > 0 {
						newest = e
					}
				}
				if newest.Name == "" {
					continue
				}
				st.drills++
				at := clock.Add(time.Duration(2+rng.IntN(20)) * time.Minute)
				failRate := 0.3
				if lastDrillFailed {
					failRate = 0.7 // failures come in bursts: a broken image, a bad etcd
				}
				var s *catalog.DrillSummary
				switch r := rng.Float64(); {
				case newest.Damaged != "":
					s = &catalog.DrillSummary{At: at, Failed: "verify: " + newest.Damaged, Mode: catalog.CompareSelf}
				case r < 0.05:
					// A record that cannot be read, whatever it said.
					s = &catalog.DrillSummary{Passed: rng.IntN(2) == 0, At: at, Err: "drill record: unexpected end of JSON input"}
				case r < 0.05+failRate:
					s = &catalog.DrillSummary{At: at, Failed: "hashkv: restored keyspace differs from the source", Mode: catalog.CompareSource}
				default:
					s = &catalog.DrillSummary{Passed: true, At: at, Mode: catalog.CompareSource}
				}
				switch {
				case s.Err != "":
					st.drillsUnreadable++
				case s.Passed:
					st.drillsPassed++
				default:
					st.drillsFailed++
				}
				lastDrillFailed = !s.Proven()
				newest.Drill = s
				if !newest.HasDrill() {
					newest.Objects = append(slices.Clone(newest.Objects), store.ObjectInfo{Key: "c1/" + newest.Name + "/" + catalog.DrillObject, Size: 900, LastModified: at})
				}
				bucket[newest.Name] = newest
				drillOf[newest.Name] = s
				continue
			}
			name := catalog.BackupName(ev.at, ev.kind)
			if _, dup := bucket[name]; dup {
				continue // same millisecond and kind: cannot happen in practice
			}
			clock = maxTime(clock, ev.at)
			duration := time.Duration(1+rng.IntN(15)) * time.Minute // how long the backup takes
			snapshot := store.ObjectInfo{Key: "c1/" + name + "/" + catalog.SnapshotObjectZstd, Size: 1 << 20, LastModified: ev.at.Add(duration)}
			if ev.cronDown || rng.Float64() < failRate {
				st.failed++
				clock = clock.Add(duration)
				if rng.IntN(2) == 0 { // the snapshot was written, the manifest was not
					st.incomplete++
					bucket[name] = catalog.Entry{ClusterID: "c1", Name: name, Time: ev.at, Kind: ev.kind, Objects: []store.ObjectInfo{snapshot}}
					incompletes = append(incompletes, incompleteRec{name, snapshot.LastModified})
				}
				continue // deletion never follows a failure
			}
			e := catalog.Entry{ClusterID: "c1", Name: name, Time: ev.at, Kind: ev.kind, Committed: true, Objects: []store.ObjectInfo{
				snapshot, {Key: "c1/" + name + "/" + catalog.ManifestObject, Size: 300, LastModified: ev.at.Add(duration)},
			}}
			// Damage comes in bursts too: after a damaged run, the next one
			// is damaged more often (a store losing objects for a while).
			rate := damageRate
			if len(damagedAll) > 0 && damagedAll[len(damagedAll)-1].Time.After(ev.at.Add(-24*time.Hour)) {
				rate = 0.5
			}
			if rng.Float64() < rate {
				e.Damaged = damages[rng.IntN(len(damages))]
				damagedAll = append(damagedAll, e)
				st.damaged++
			} else {
				taken = append(taken, e)
			}
			bucket[name] = e
			clock = clock.Add(duration)
			switch ev.kind {
			case catalog.KindUpdate:
				st.updates++
			case catalog.KindManual, catalog.KindPreRestore:
				st.manual++
				continue // only the scheduled and the pre-update jobs prune
			}

			// Prune, right after the run committed.
			now := clock
			in := make([]catalog.Entry, 0, len(bucket))
			for _, e := range bucket {
				in = append(in, e)
			}
			rng.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
			plan := ApplyPolicy(in, now, policy)
			st.prunes++
			checkPlan(t, in, plan)
			if err := GuardPlan(plan); err != nil {
				t.Fatalf("prune at %s (seed %d): %v", now.Format(time.RFC3339), seed, err)
			}
			for _, d := range plan.Deleted() {
				delete(bucket, d.Entry.Name)
				st.deleted++
				if d.Entry.Damaged != "" {
					st.damagedDeleted++
					if !strings.HasPrefix(d.Reason, "damaged: "+d.Entry.Damaged) {
						t.Fatalf("damaged %s deleted with reason %q", d.Entry.Name, d.Reason)
					}
				}
			}

			// Ground truth from the history.
			y, m, dd := now.Date()
			today := time.Date(y, m, dd, 0, 0, 0, 0, time.UTC)
			dateOfT := func(x time.Time) time.Time {
				y, m, d := x.UTC().Date()
				return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
			}
			want := map[string]string{} // good committed scheduled/update backups that must be kept -> why
			var newest catalog.Entry    // the newest good backup
			for _, b := range taken {
				if b.Time.After(newest.Time) {
					newest = b
				}
			}
			if newest.Name != "" {
				want[newest.Name] = "newest"
			}
			nRecent := 0
			for i := len(taken) - 1; i >= 0 && nRecent < recentN; i-- { // taken is in time order
				if taken[i].Kind == catalog.KindScheduled {
					want[taken[i].Name] = "recent"
					nRecent++
				}
			}
			firstOfDate := map[time.Time]catalog.Entry{}
			var anchorDates []time.Time
			for _, b := range taken {
				d := dateOfT(b.Time)
				if !isAnchorDay(d.Day()) || d.After(today) {
					continue
				}
				if f, ok := firstOfDate[d]; !ok {
					firstOfDate[d] = b
					anchorDates = append(anchorDates, d)
				} else if b.Time.Before(f.Time) {
					firstOfDate[d] = b
				}
			}
			slices.SortFunc(anchorDates, func(a, b time.Time) int { return b.Compare(a) })
			anchorDates = anchorDates[:min(anchorsN, len(anchorDates))]
			for _, d := range anchorDates {
				want[firstOfDate[d].Name] = "anchor " + d.Format(time.DateOnly)
			}
			todayUpdates := 0
			for _, b := range taken {
				if b.Kind == catalog.KindUpdate && dateOfT(b.Time).Equal(today) {
					want[b.Name] = "update today"
					todayUpdates++
				}
			}
			// The newest good backup ever taken whose current drill record
			// passed: once one exists, it must be kept.
			var proven catalog.Entry
			for _, b := range taken {
				if drillOf[b.Name].Proven() && b.Time.After(proven.Time) {
					proven = b
				}
			}
			extraDrilled := false
			if proven.Name != "" {
				if _, other := want[proven.Name]; !other && proven.Kind != catalog.KindManual && proven.Kind != catalog.KindPreRestore {
					extraDrilled = true
					st.keptByDrilledOnly++
				}
				want[proven.Name] = "drilled"
			}

			fail := func(format string, args ...any) {
				t.Helper()
				t.Errorf("prune at %s (seed %d): %s", now.Format(time.RFC3339), seed, fmt.Sprintf(format, args...))
				for _, d := range plan.Decisions {
					t.Logf("  keep=%-5v %s: %s", d.Keep, d.Entry.Name, d.Reason)
				}
				t.FailNow()
			}

			// The drilled rule: once any drill has passed, the newest proven
			// backup is kept; no proven backup newer than it was deleted;
			// only a proven good backup is kept by drilled, and only one.
			if proven.Name != "" {
				if _, ok := bucket[proven.Name]; !ok {
					fail("the newest proven backup %s (drill passed %s) was deleted", proven.Name, drillOf[proven.Name].At.Format(time.RFC3339))
				}
				st.maxProvenAge = max(st.maxProvenAge, int(now.Sub(proven.Time)/time.Hour))
			}
			var keptProven catalog.Entry // the newest proven backup still stored
			for _, e := range bucket {
				if e.Good() && e.Drill.Proven() && e.Time.After(keptProven.Time) {
					keptProven = e
				}
			}
			for _, b := range taken {
				if _, present := bucket[b.Name]; !present && drillOf[b.Name].Proven() && b.Time.After(keptProven.Time) {
					fail("proven backup %s, newer than the newest proven one kept (%q), was deleted", b.Name, keptProven.Name)
				}
			}
			byDrilled := 0
			for _, d := range plan.Decisions {
				if !slices.Contains(d.Rules, RuleDrilled) {
					continue
				}
				byDrilled++
				if !d.Entry.Good() || !d.Entry.Drill.Proven() {
					fail("%s is kept by drilled without proof (drill %+v, damaged %q)", d.Entry.Name, d.Entry.Drill, d.Entry.Damaged)
				}
				if d.Entry.Name != proven.Name {
					fail("%s is kept by drilled, but the newest proven backup is %q", d.Entry.Name, proven.Name)
				}
			}
			if want := min(1, len(proven.Name)); byDrilled != want {
				fail("%d backups kept by drilled, want %d", byDrilled, want)
			}

			// Everything that must be kept is there.
			for n, why := range want {
				if _, ok := bucket[n]; !ok {
					fail("%s (%s) was deleted", n, why)
				}
			}
			if _, ok := bucket[newest.Name]; !ok && newest.Name != "" {
				fail("the newest good backup %s is gone", newest.Name)
			}
			// No damaged backup counts for a rule; each is kept exactly while
			// it is newer than the newest good backup or younger than 24h
			// (manual and pre-restore ones are never deleted).
			for _, d := range plan.Decisions {
				if d.Entry.Damaged == "" {
					continue
				}
				for _, r := range d.Rules {
					if r == RuleNewest || r == RuleRecent || r == RuleAnchor || r == RuleUpdateToday || r == RuleDrilled {
						fail("damaged %s (%s) is kept by rule %s", d.Entry.Name, d.Entry.Damaged, r)
					}
				}
			}
			for _, b := range damagedAll {
				_, present := bucket[b.Name]
				newer := newest.Name == "" || b.Time.After(newest.Time)
				// Its last write: the backup's, or a drill record's since.
				last := b.Objects[0].LastModified
				if cur, ok := bucket[b.Name]; ok {
					for _, o := range cur.Objects {
						last = maxTime(last, o.LastModified)
					}
				}
				young := now.Sub(last) <= maxAge
				keep := newer || young || b.Kind == catalog.KindManual || b.Kind == catalog.KindPreRestore
				if present != keep {
					fail("damaged %s (%s): present %v, want %v (newer than the newest good %v, young %v)", b.Name, b.Damaged, present, keep, newer, young)
				}
				if present && newer {
					st.damagedKeptNewer++
				}
			}
			for _, d := range anchorDates {
				if _, ok := bucket[firstOfDate[d].Name]; !ok {
					fail("the earliest backup of anchor date %s, %s, is gone", d.Format(time.DateOnly), firstOfDate[d].Name)
				}
			}
			// Manual and pre-restore backups are never deleted.
			for _, b := range taken {
				if b.Kind == catalog.KindManual || b.Kind == catalog.KindPreRestore {
					if _, ok := bucket[b.Name]; !ok {
						fail("%s backup %s was deleted", b.Kind, b.Name)
					}
				}
			}
			// Nothing else is kept, and the carrier's bound holds.
			count := 0
			for n, e := range bucket {
				if !e.Committed || e.Damaged != "" || e.Kind == catalog.KindManual || e.Kind == catalog.KindPreRestore {
					continue
				}
				count++
				if _, ok := want[n]; !ok {
					fail("%s is kept but justified by no rule (reason %q)", n, decisionOf(plan, n).Reason)
				}
			}
			limit := 5 + todayUpdates
			if extraDrilled {
				limit++ // the drilled rule keeps one more than the carrier's count
			}
			if newest.Kind == catalog.KindUpdate && !dateOfT(newest.Time).Equal(today) {
				// An update run that finished after midnight: the newest rule
				// keeps yesterday's update on top of the carrier's count.
				limit++
				st.midnightUpdates++
			}
			if count > limit {
				fail("%d backups stored, more than %d (5 + %d updates today)", count, limit, todayUpdates)
			}
			st.maxKept = max(st.maxKept, count)
			for _, d := range anchorDates {
				if a := firstOfDate[d]; a.Kind == catalog.KindUpdate {
					st.anchorOnUpdate++
				} else if a.Time.Sub(dateOfT(a.Time)) > 4*time.Hour {
					st.anchorAfterFailure++ // the 03:03 run of that date failed
				}
			}
			// Incomplete folders: gone once older than 24h, kept while younger.
			for _, ic := range incompletes {
				_, present := bucket[ic.name]
				switch old := now.Sub(ic.last) > maxAge; {
				case old && present:
					fail("incomplete %s last written %v ago is still there", ic.name, now.Sub(ic.last))
				case !old && !present:
					fail("incomplete %s last written %v ago was deleted: it may be in flight", ic.name, now.Sub(ic.last))
				}
			}
			incompletes = slices.DeleteFunc(incompletes, func(ic incompleteRec) bool { return now.Sub(ic.last) > maxAge })
		}
	}
	if st.prunes < days*2 {
		t.Errorf("only %d prunes in %d days", st.prunes, days)
	}
	if days >= 100 && (st.damaged == 0 || st.damagedDeleted == 0 || st.damagedKeptNewer == 0) {
		t.Errorf("the damage paths were not exercised: %d damaged, %d deleted, %d kept as newer than the newest good", st.damaged, st.damagedDeleted, st.damagedKeptNewer)
	}
	if drills {
		if days >= 100 && (st.drillsPassed == 0 || st.drillsFailed == 0 || st.drillsUnreadable == 0 || st.keptByDrilledOnly == 0) {
			t.Errorf("the drill paths were not exercised: %d passed, %d failed, %d unreadable, kept by drilled alone in %d checks",
				st.drillsPassed, st.drillsFailed, st.drillsUnreadable, st.keptByDrilledOnly)
		}
		t.Logf("%d drills: %d passed, %d failed, %d unreadable; the newest proven backup was kept by drilled alone in %d checks, "+
			"the oldest one kept was %dh old", st.drills, st.drillsPassed, st.drillsFailed, st.drillsUnreadable, st.keptByDrilledOnly, st.maxProvenAge)
	}
	t.Logf("%d damaged backups (%d deleted as damaged; kept as newer than the newest good in %d checks)", st.damaged, st.damagedDeleted, st.damagedKeptNewer)
	t.Logf("%d prunes, %d backups deleted, %d failed runs (%d left incomplete folders), %d updates, %d manual/pre-restore; "+
		"at most %d stored; %d prunes with yesterday's update newest; anchor checks on an update %d, on a later run %d; %d objects left",
		st.prunes, st.deleted, st.failed, st.incomplete, st.updates, st.manual, st.maxKept, st.midnightUpdates,
		st.anchorOnUpdate, st.anchorAfterFailure, len(bucket))
}

func decisionOf(p Plan, name string) Decision {
	for _, d := range p.Decisions {
		if d.Entry.Name == name {
			return d
		}
	}
	return Decision{}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
