package backup

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
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
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d, %d days (rerun with RETENTION_SIM_SEED=%d)", seed, days, seed)
			simulateRetention(t, seed, days)
		})
	}
}

type simEvent struct {
	at   time.Time
	kind Kind
	// cronDown: the scheduled run fails (an outage of the CronJob).
	cronDown bool
}

type simStats struct {
	prunes, failed, incomplete, updates, manual, deleted, maxKept int
	damaged, damagedKeptNewer, damagedDeleted                     int
	midnightUpdates                                               int // prunes where the newest is an update of the previous day
	anchorOnUpdate, anchorAfterFailure                            int
}

func simulateRetention(t *testing.T, seed uint64, days int) {
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

	bucket := map[string]Entry{} // what the store holds
	var taken []Entry            // every good committed backup ever taken, in commit order
	var damagedAll []Entry       // every damaged committed backup ever taken
	type incompleteRec struct {
		name string
		last time.Time // when its last object was written
	}
	var incompletes []incompleteRec
	var st simStats
	clock := day0

	for dayN := range days {
		day := day0.AddDate(0, 0, dayN)
		var events []simEvent
		down := day.Equal(forcedFirst) || (!day.Before(longOutage) && day.Before(longOutage.AddDate(0, 0, 12))) ||
			rng.Float64() < 0.01
		for _, h := range []int{3, 11, 19} {
			// The CronJob starts at :03; the backup is named when it starts.
			at := day.Add(time.Duration(h)*time.Hour + 3*time.Minute + time.Duration(rng.IntN(20_000))*time.Millisecond)
			events = append(events, simEvent{at: at, kind: KindScheduled, cronDown: down})
		}
		if rng.Float64() < updateDays {
			for range 1 + rng.IntN(3) {
				at := day.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))).Truncate(time.Millisecond))
				events = append(events, simEvent{at: at, kind: KindUpdate})
			}
		}
		if rng.Float64() < 0.01 {
			at := day.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))).Truncate(time.Millisecond))
			events = append(events, simEvent{at: at, kind: KindManual})
		}
		if rng.Float64() < 0.003 {
			at := day.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))).Truncate(time.Millisecond))
			events = append(events, simEvent{at: at, kind: KindPreRestore})
		}
		slices.SortFunc(events, func(a, b simEvent) int { return a.at.Compare(b.at) })

		for _, ev := range events {
			name := BackupName(ev.at, ev.kind)
			if _, dup := bucket[name]; dup {
				continue // same millisecond and kind: cannot happen in practice
			}
			clock = maxTime(clock, ev.at)
			duration := time.Duration(1+rng.IntN(15)) * time.Minute // how long the backup takes
			snapshot := ObjectInfo{Key: "c1/" + name + "/" + SnapshotObjectZstd, Size: 1 << 20, LastModified: ev.at.Add(duration)}
			if ev.cronDown || rng.Float64() < failRate {
				st.failed++
				clock = clock.Add(duration)
				if rng.IntN(2) == 0 { // the snapshot was written, the manifest was not
					st.incomplete++
					bucket[name] = Entry{ClusterID: "c1", Name: name, Time: ev.at, Kind: ev.kind, Objects: []ObjectInfo{snapshot}}
					incompletes = append(incompletes, incompleteRec{name, snapshot.LastModified})
				}
				continue // deletion never follows a failure
			}
			e := Entry{ClusterID: "c1", Name: name, Time: ev.at, Kind: ev.kind, Committed: true, Objects: []ObjectInfo{
				snapshot, {Key: "c1/" + name + "/" + ManifestObject, Size: 300, LastModified: ev.at.Add(duration)},
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
			case KindUpdate:
				st.updates++
			case KindManual, KindPreRestore:
				st.manual++
				continue // only the scheduled and the pre-update jobs prune
			}

			// Prune, right after the run committed.
			now := clock
			in := make([]Entry, 0, len(bucket))
			for _, e := range bucket {
				in = append(in, e)
			}
			rng.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
			plan := ApplyPolicy(in, now, policy)
			st.prunes++
			checkPlan(t, in, plan)
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
			var newest Entry            // the newest good backup
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
				if taken[i].Kind == KindScheduled {
					want[taken[i].Name] = "recent"
					nRecent++
				}
			}
			firstOfDate := map[time.Time]Entry{}
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
				if b.Kind == KindUpdate && dateOfT(b.Time).Equal(today) {
					want[b.Name] = "update today"
					todayUpdates++
				}
			}

			fail := func(format string, args ...any) {
				t.Helper()
				t.Errorf("prune at %s (seed %d): %s", now.Format(time.RFC3339), seed, fmt.Sprintf(format, args...))
				for _, d := range plan.Decisions {
					t.Logf("  keep=%-5v %s: %s", d.Keep, d.Entry.Name, d.Reason)
				}
				t.FailNow()
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
					if r == RuleNewest || r == RuleRecent || r == RuleAnchor || r == RuleUpdateToday {
						fail("damaged %s (%s) is kept by rule %s", d.Entry.Name, d.Entry.Damaged, r)
					}
				}
			}
			for _, b := range damagedAll {
				_, present := bucket[b.Name]
				newer := newest.Name == "" || b.Time.After(newest.Time)
				young := now.Sub(b.Objects[0].LastModified) <= maxAge
				keep := newer || young || b.Kind == KindManual || b.Kind == KindPreRestore
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
				if b.Kind == KindManual || b.Kind == KindPreRestore {
					if _, ok := bucket[b.Name]; !ok {
						fail("%s backup %s was deleted", b.Kind, b.Name)
					}
				}
			}
			// Nothing else is kept, and the carrier's bound holds.
			count := 0
			for n, e := range bucket {
				if !e.Committed || e.Damaged != "" || e.Kind == KindManual || e.Kind == KindPreRestore {
					continue
				}
				count++
				if _, ok := want[n]; !ok {
					fail("%s is kept but justified by no rule (reason %q)", n, decisionOf(plan, n).Reason)
				}
			}
			limit := 5 + todayUpdates
			if newest.Kind == KindUpdate && !dateOfT(newest.Time).Equal(today) {
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
				if a := firstOfDate[d]; a.Kind == KindUpdate {
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
