package retention

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
)

// seg is a segment of revisions first-last received at t.
func seg(first, last int64, t time.Time) JournalSegment {
	return JournalSegment{Key: fmt.Sprintf("%d-%d", first, last), FirstRev: first, LastRev: last, Received: t}
}

// kept renders a plan as "first-last" of kept segments, "|", the extra
// kept bases.
func keptOf(p JournalPlan) string {
	var ks []string
	for _, d := range p.Segments {
		if d.Keep {
			ks = append(ks, d.Segment.Key)
		}
	}
	var bs []string
	for b := range p.KeepBases {
		bs = append(bs, b)
	}
	slices.Sort(bs)
	return strings.Join(ks, ",") + " | " + strings.Join(bs, ",")
}

func TestJournalRetentionTable(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	// Every backup of a date: only the first after the window's base is
	// a daily base (its own case below).
	jb := func(name string, rev int64, keep bool) JournalBackup {
		return JournalBackup{Name: name, Rev: rev, Time: now.Add(-time.Duration(1000-rev) * time.Second), Keep: keep}
	}
	day := 24 * time.Hour
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	for _, tc := range []struct {
		name    string
		backups []JournalBackup
		segs    []JournalSegment
		ret     time.Duration
		want    string
	}{
		{"no segments", []JournalBackup{jb("b1", 10, true)}, nil, day, " | "},
		{"all within retention",
			[]JournalBackup{jb("b1", 10, true)},
			[]JournalSegment{seg(11, 20, ago(time.Hour)), seg(21, 30, ago(time.Minute))}, day,
			"11-20,21-30 | "},
		{"old segments before a kept base go",
			[]JournalBackup{jb("b1", 10, true), jb("b2", 30, true)},
			[]JournalSegment{seg(11, 20, ago(3*day)), seg(21, 30, ago(2*day)), seg(31, 40, ago(time.Hour))}, day,
			"31-40 | "},
		{"base the rule deletes is kept while its segments are needed",
			[]JournalBackup{jb("b1", 10, false), jb("b2", 50, true)},
			[]JournalSegment{seg(11, 20, ago(3*day)), seg(21, 30, ago(2*time.Hour)), seg(31, 50, ago(time.Hour)), seg(51, 60, ago(time.Minute))}, day,
			"11-20,21-30,31-50,51-60 | b1"},
		{"newest base at or before E, kept though an older anchor is",
			[]JournalBackup{jb("b1", 10, true), jb("b2", 20, false), jb("b3", 50, true)},
			[]JournalSegment{seg(11, 20, ago(3*day)), seg(21, 30, ago(2*time.Hour)), seg(31, 60, ago(time.Minute))}, day,
			"21-30,31-60 | b2"},
		{"base inside a segment: the segment holding its revision+1 is kept",
			[]JournalBackup{jb("b1", 10, false), jb("b2", 15, true)},
			[]JournalSegment{seg(1, 9, ago(5*day)), seg(10, 20, ago(3*day)), seg(21, 30, ago(time.Hour))}, day,
			"10-20,21-30 | "},
		{"old chain entirely past retention goes, newest chain kept",
			[]JournalBackup{jb("b1", 10, true), jb("b2", 100, true)},
			[]JournalSegment{seg(11, 20, ago(9*day)), seg(21, 30, ago(8*day)), seg(101, 110, ago(time.Hour))}, day,
			"101-110 | "},
		{"older chain still within retention is kept (a hole in the window)",
			[]JournalBackup{jb("b1", 10, true), jb("b2", 100, true)},
			[]JournalSegment{seg(11, 20, ago(3*time.Hour)), seg(101, 110, ago(time.Hour))}, day,
			"11-20,101-110 | "},
		{"newest chain kept though all of it is past retention (journal stopped)",
			[]JournalBackup{jb("b1", 10, false), jb("b2", 20, true), jb("b3", 200, true)},
			[]JournalSegment{seg(11, 20, ago(10*day)), seg(21, 30, ago(9*day)), seg(31, 40, ago(9*day))}, day,
			"21-30,31-40 | "},
		{"newest chain past retention: its newest base, not the newest backup",
			[]JournalBackup{jb("b1", 10, true), jb("b2", 30, false), jb("b3", 200, true)},
			[]JournalSegment{seg(11, 20, ago(10*day)), seg(21, 30, ago(9*day)), seg(31, 40, ago(9*day))}, day,
			"31-40 | b2"},
		{"newest chain past retention whose only bases the rule deletes",
			[]JournalBackup{jb("b1", 10, false), jb("b3", 200, true)},
			[]JournalSegment{seg(11, 20, ago(10*day)), seg(21, 30, ago(9*day))}, day,
			"11-20,21-30 | b1"},
		{"chain without a base goes once past retention",
			[]JournalBackup{jb("b3", 200, true)},
			[]JournalSegment{seg(11, 20, ago(2*day)), seg(201, 210, ago(time.Minute))}, day,
			"201-210 | "},
		{"chain without a base within retention is kept for investigation",
			[]JournalBackup{jb("b3", 200, true)},
			[]JournalSegment{seg(11, 20, ago(2*day)), seg(21, 30, ago(time.Hour)), seg(201, 210, ago(time.Minute))}, day,
			"11-20,21-30,201-210 | "},
		{"newest chain without a base, past retention, goes",
			[]JournalBackup{jb("b3", 200, true)},
			[]JournalSegment{seg(11, 20, ago(2*day))}, day,
			" | "},
		{"no base at or before E: the oldest base later in the chain",
			[]JournalBackup{jb("b2", 25, true)},
			[]JournalSegment{seg(11, 20, ago(2*time.Hour)), seg(21, 30, ago(time.Hour)), seg(31, 40, ago(time.Minute))}, day,
			"21-30,31-40 | "},
		{"daily bases: the first backup of each date after the base",
			[]JournalBackup{
				{Name: "b1", Rev: 10, Time: time.Date(2026, 11, 17, 8, 0, 0, 0, time.UTC)},
				{Name: "b2", Rev: 20, Time: time.Date(2026, 11, 18, 8, 0, 0, 0, time.UTC)},
				{Name: "b3", Rev: 30, Time: time.Date(2026, 11, 19, 0, 30, 0, 0, time.UTC)},
				{Name: "b4", Rev: 40, Time: time.Date(2026, 11, 19, 8, 0, 0, 0, time.UTC)},
				{Name: "b5", Rev: 50, Time: time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC), Keep: true},
			},
			[]JournalSegment{seg(11, 20, time.Date(2026, 11, 18, 7, 59, 0, 0, time.UTC)), seg(21, 30, time.Date(2026, 11, 19, 0, 29, 0, 0, time.UTC)),
				seg(31, 40, time.Date(2026, 11, 19, 7, 59, 0, 0, time.UTC)), seg(41, 50, time.Date(2026, 11, 20, 7, 59, 0, 0, time.UTC)),
				seg(51, 60, time.Date(2026, 11, 20, 11, 59, 0, 0, time.UTC))}, 2 * day,
			"21-30,31-40,41-50,51-60 | b2,b3"},
		{"default retention when zero: 7 days",
			[]JournalBackup{jb("b1", 10, false), jb("b2", 30, true)},
			[]JournalSegment{seg(11, 20, ago(8*day)), seg(21, 30, ago(6*day)), seg(31, 40, ago(time.Hour))}, 0,
			"11-20,21-30,31-40 | b1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := ApplyJournalRetention(tc.backups, tc.segs, now, tc.ret)
			if got := keptOf(p); got != tc.want {
				t.Errorf("kept %q, want %q", got, tc.want)
			}
			if len(p.Segments) != len(tc.segs) {
				t.Fatalf("%d decisions for %d segments", len(p.Segments), len(tc.segs))
			}
			for _, d := range p.Segments {
				if d.Reason == "" {
					t.Errorf("segment %s: no reason", d.Segment.Key)
				}
				if d.Keep && d.Base == "" && !strings.Contains(d.Reason, "for investigation") {
					t.Errorf("segment %s kept without a base: %s", d.Segment.Key, d.Reason)
				}
			}
			for name, why := range p.KeepBases {
				if !strings.HasPrefix(why, "base of the journal window") {
					t.Errorf("base %s kept for %q", name, why)
				}
			}
		})
	}
}

// TestJournalRetentionSimulation runs 8-hourly backups and a journal
// (a segment every 30 minutes here, with random gaps that start a new
// chain from the next backup) for months, pruning every 8 hours with the
// carrier's rule and a 7-day journal retention, and checks after every
// prune: no kept segment without a kept base starting its chain, no base
// deleted whose segments are kept, no hole inside a chain's kept part,
// and the window reaching back at least the retention whenever the
// journal has data that old.
func TestJournalRetentionSimulation(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(25, 7))
	start := time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC)
	const ret = DefaultJournalRetention
	policy := DefaultPolicy()
	type bk struct {
		name string
		rev  int64
		at   time.Time
	}
	var backups []bk
	var segs []JournalSegment
	rev := int64(1)
	step := 30 * time.Minute
	journalFrom := int64(-1) // next revision the journal writes; -1: needs a backup to start
	// Bounded: the window starts at the newest backup before the
	// retention's start, at most a day and a backup interval before it
	// (the first backup of each date is kept as a base).
	const slack = 24*time.Hour + 8*time.Hour
	var maxKept, maxBackups int
	for now := start; now.Before(start.AddDate(0, 4, 0)); now = now.Add(step) {
		rev += 1 + rng.Int64N(50)
		if journalFrom > 0 {
			if rng.IntN(500) == 0 {
				journalFrom = -1 // a gap: the journal restarts from the next backup
			} else {
				segs = append(segs, seg(journalFrom, rev, now))
				journalFrom = rev + 1
			}
		}
		if now.Sub(start)%(8*time.Hour) != 0 {
			continue
		}
		rev++
		backups = append(backups, bk{catalog.NewBackupName(now, catalog.KindScheduled), rev, now})
		if journalFrom < 0 {
			journalFrom = rev + 1
		}
		// Prune.
		var entries []catalog.Entry
		for _, b := range backups {
			entries = append(entries, catalog.Entry{ClusterID: "c", Name: b.name, Time: b.at, Kind: catalog.KindScheduled, Committed: true})
		}
		keep := map[string]bool{}
		for _, d := range ApplyPolicy(entries, now, policy).Decisions {
			keep[d.Entry.Name] = d.Keep
		}
		var jbs []JournalBackup
		for _, b := range backups {
			jbs = append(jbs, JournalBackup{Name: b.name, Rev: b.rev, Time: b.at, Keep: keep[b.name]})
		}
		plan := ApplyJournalRetention(jbs, segs, now, ret)
		for name := range plan.KeepBases {
			if keep[name] {
				t.Fatalf("%s: %s kept as a journal base, but the rule keeps it already", now, name)
			}
			keep[name] = true
		}
		revOf := map[string]int64{}
		for _, b := range backups {
			revOf[b.name] = b.rev
		}
		var kept []JournalSegment
		for _, d := range plan.Segments {
			if !d.Keep {
				continue
			}
			if !keep[d.Base] {
				t.Fatalf("%s: segment %s kept, its base %s deleted", now, d.Segment.Key, d.Base)
			}
			kept = append(kept, d.Segment)
		}
		// Every kept segment is reached from a kept backup through kept
		// segments only (no hole, no segment without base).
		for i, s := range kept {
			reached := false
			for name, r := range revOf {
				if keep[name] && s.FirstRev <= r+1 && r+1 <= s.LastRev {
					reached = true
				}
			}
			if !reached && (i == 0 || kept[i-1].LastRev+1 != s.FirstRev) {
				t.Fatalf("%s: kept segment %s is reached from no kept backup", now, s.Key)
			}
		}
		// The window reaches back the retention: every kept segment
		// received since now - ret is restorable whole: a kept backup at
		// or before its first revision starts the run of contiguous kept
		// segments it is in.
		cutoff := now.Add(-ret)
		for i, s := range kept {
			if s.Received.Before(cutoff) {
				continue
			}
			j := i
			for j > 0 && kept[j-1].LastRev+1 == kept[j].FirstRev {
				j--
			}
			whole := false
			for name, r := range revOf {
				if keep[name] && r <= s.FirstRev && kept[j].FirstRev <= r+1 {
					whole = true
				}
			}
			if !whole {
				t.Fatalf("%s: segment %s (received within the retention) is not restorable whole from a kept backup", now, s.Key)
			}
		}
		// Apply the plan.
		keepKey := map[string]bool{}
		for _, d := range plan.Segments {
			keepKey[d.Segment.Key] = d.Keep
		}
		segs = slices.DeleteFunc(segs, func(s JournalSegment) bool { return !keepKey[s.Key] })
		backups = slices.DeleteFunc(backups, func(b bk) bool { return !keep[b.name] })
		maxKept, maxBackups = max(maxKept, len(segs)), max(maxBackups, len(backups))
		// Nothing within the retention is ever deleted.
		for k, v := range keepKey {
			if v {
				continue
			}
			for _, d := range plan.Segments {
				if d.Segment.Key == k && !d.Segment.Received.Before(now.Add(-ret)) {
					t.Fatalf("%s: segment %s received within the retention deleted: %s", now, k, d.Reason)
				}
			}
		}
	}
	t.Logf("at most %d segments (%s of journal) and %d backups kept at once", maxKept, time.Duration(maxKept)*step, maxBackups)
	if len(segs) == 0 || len(backups) == 0 {
		t.Fatal("the simulation kept nothing")
	}
	if maxKept > int((ret+slack)/step)+1 {
		t.Errorf("%d segments kept at once, more than the retention plus a day and a backup interval hold", maxKept)
	}
}
