package retention

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
)

func TestLockPlan(t *testing.T) {
	p := DefaultPolicy()
	lp := LockPolicy{Mode: catalog.LockGovernanceMode}
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, tc := range []struct {
		name   string
		kind   catalog.Kind
		t      string
		anchor bool
		p      Policy
		until  string // "" not locked
		rule   string
	}{
		{"scheduled", catalog.KindScheduled, "2026-03-10T03:03:00Z", true, p, "2026-03-11T02:03:00Z", LockRuleRecent},
		{"scheduled not first of an anchor date", catalog.KindScheduled, "2026-03-15T11:03:00Z", false, p, "2026-03-16T10:03:00Z", LockRuleRecent},
		{"anchor on the 15th", catalog.KindScheduled, "2026-03-15T03:03:00Z", true, p, "2026-04-14T23:00:00Z", LockRuleAnchor},
		{"anchor on the 1st", catalog.KindScheduled, "2026-03-01T03:03:00Z", true, p, "2026-03-31T23:00:00Z", LockRuleAnchor},
		{"anchor on 31 Jan: not an anchor day", catalog.KindScheduled, "2026-01-31T03:03:00Z", true, p, "2026-02-01T02:03:00Z", LockRuleRecent},
		{"update", catalog.KindUpdate, "2026-03-10T14:00:00Z", false, p, "2026-03-10T23:00:00Z", LockRuleUpdate},
		{"update late in the day: within the margin", catalog.KindUpdate, "2026-03-10T23:30:00Z", false, p, "", LockRuleNone},
		{"update first of an anchor date", catalog.KindUpdate, "2026-03-01T00:10:00Z", true, p, "2026-03-31T23:00:00Z", LockRuleAnchor},
		{"manual", catalog.KindManual, "2026-03-10T14:00:00Z", false, p, "2026-03-31T23:00:00Z", LockRuleManual},
		{"pre-restore", catalog.KindPreRestore, "2026-03-20T14:00:00Z", false, p, "2026-04-14T23:00:00Z", LockRuleManual},
		{"recent 0", catalog.KindScheduled, "2026-03-10T03:03:00Z", false, Policy{Recent: 0, IncompleteAfter: time.Hour}, "", LockRuleNone},
		{"invalid policy", catalog.KindScheduled, "2026-03-10T03:03:00Z", false, Policy{}, "", LockRuleNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := LockPlan(tc.kind, at(tc.t), tc.anchor, tc.p, lp)
			if tc.until == "" {
				if got.Locked() {
					t.Fatalf("locked until %s (%s), want not locked", got.Until, got.Reason)
				}
			} else if !got.Until.Equal(at(tc.until)) {
				t.Fatalf("until %s (%s), want %s", got.Until.Format(time.RFC3339), got.Reason, tc.until)
			}
			if got.Rule != tc.rule || got.Reason == "" {
				t.Fatalf("rule %q reason %q, want rule %q", got.Rule, got.Reason, tc.rule)
			}
		})
	}
	if u := RelockUntil(at("2026-03-10T05:00:00Z"), p, lp); !u.Equal(at("2026-03-11T04:00:00Z")) {
		t.Errorf("RelockUntil = %s", u)
	}
}

// TestLockPlanSimulation runs the CronJob's schedule for 8 months (each
// run starting up to 50 minutes late, a fifth of them failing), with
// update and manual backups in between, and applies ApplyPolicy every 20
// minutes: no backup it deletes may still be locked by LockPlan (with the
// default 1h margin, which covers the start delay). The newest backup is
// re-locked at every failed run (RelockUntil): such a backup may stay
// locked after retention lets it go, by at most one scheduled lock
// period from its last re-lock (the documented exception).
func TestLockPlanSimulation(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		simulateLocks(t, seed)
	}
}

func simulateLocks(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	p, lp := DefaultPolicy(), LockPolicy{Mode: catalog.LockGovernanceMode}.WithDefaults()
	type backup struct {
		e        catalog.Entry
		until    time.Time
		relocked time.Time
	}
	var live []*backup
	entries := func() []catalog.Entry {
		out := make([]catalog.Entry, len(live))
		for i, b := range live {
			out[i] = b.e
		}
		return out
	}
	take := func(kind catalog.Kind, at time.Time) {
		es := entries()
		b := &backup{e: catalog.Entry{ClusterID: "c1", Name: catalog.NewBackupName(at, kind), Time: at, Kind: kind, Committed: true}}
		b.until = LockPlan(kind, at, AnchorCandidate(es, at), p, lp).Until
		live = append(live, b)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	end := start.AddDate(0, 8, 0)
	slots := map[int]bool{3: true, 11: true, 19: true}
	var pendingSlot time.Time
	deleted := 0
	for now := start; now.Before(end); now = now.Add(20 * time.Minute) {
		if now.Minute() == 0 && slots[now.Hour()] {
			// The run starts 3 minutes past (the schedule) plus up to 50
			// minutes late.
			pendingSlot = now.Add(3*time.Minute + time.Duration(rng.IntN(50))*time.Minute)
		}
		if !pendingSlot.IsZero() && !now.Before(pendingSlot) {
			at := pendingSlot
			pendingSlot = time.Time{}
			if rng.IntN(5) == 0 { // failed: re-lock the newest
				var newest *backup
				for _, b := range live {
					if newest == nil || b.e.Time.After(newest.e.Time) {
						newest = b
					}
				}
				if newest != nil {
					if u := RelockUntil(at, p, lp); u.After(newest.until) {
						newest.until, newest.relocked = u, at
					}
				}
			} else {
				take(catalog.KindScheduled, at)
			}
		}
		if rng.IntN(100) == 0 {
			take(catalog.KindUpdate, now)
		}
		if rng.IntN(1500) == 0 {
			take(catalog.KindManual, now)
		}
		plan := ApplyPolicy(entries(), now, p)
		gone := map[string]bool{}
		for _, d := range plan.Deleted() {
			gone[d.Entry.Name] = true
		}
		var keep []*backup
		for _, b := range live {
			if !gone[b.e.Name] {
				keep = append(keep, b)
				continue
			}
			deleted++
			if b.until.After(now) {
				if b.relocked.IsZero() || b.until.After(b.relocked.Add(time.Duration(p.Recent)*lp.Period)) {
					t.Fatalf("seed %d, %s: retention deletes %s (%s) but it is locked until %s", seed, now.Format(time.RFC3339),
						b.e.Name, b.e.Kind, b.until.Format(time.RFC3339))
				}
				keep = append(keep, b) // retained until its lock ends: prune deletes it then
				continue
			}
		}
		live = keep
	}
	if deleted < 500 {
		t.Fatalf("seed %d: only %d deletions: the simulation exercised little", seed, deleted)
	}
}
