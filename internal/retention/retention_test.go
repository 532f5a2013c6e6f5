package retention

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

const retentionCluster = "c1"

// specEntry builds an entry from "<RFC 3339 time> <kind> [incomplete]", e.g.
// "2026-11-22T03:03:00Z scheduled" or "2026-11-22T11:03:00Z update incomplete".
func specEntry(t testing.TB, spec string) catalog.Entry {
	t.Helper()
	f := strings.Fields(spec)
	if len(f) < 2 || len(f) > 3 || (len(f) == 3 && f[2] != "incomplete") {
		t.Fatalf("bad entry spec %q", spec)
	}
	ts, err := time.Parse(time.RFC3339Nano, f[0])
	if err != nil {
		t.Fatalf("bad entry spec %q: %v", spec, err)
	}
	kind, err := catalog.ParseKind(f[1])
	if err != nil {
		t.Fatalf("bad entry spec %q: %v", spec, err)
	}
	committed := len(f) == 2
	name := catalog.BackupName(ts, kind)
	l := catalog.Layout{Prefix: "etcd-backups"}
	e := catalog.Entry{ClusterID: retentionCluster, Name: name, Time: ts, Kind: kind, Committed: committed,
		Objects: []store.ObjectInfo{{Key: l.Key(retentionCluster, name, catalog.SnapshotObjectZstd), Size: 1 << 20, LastModified: ts}}}
	if committed {
		e.Objects = append(e.Objects, store.ObjectInfo{Key: l.Key(retentionCluster, name, catalog.ManifestObject), Size: 512, LastModified: ts})
	}
	return e
}

func specEntries(t testing.TB, specs []string) []catalog.Entry {
	t.Helper()
	out := make([]catalog.Entry, len(specs))
	for i, s := range specs {
		out[i] = specEntry(t, s)
	}
	return out
}

func specName(t testing.TB, spec string) string {
	t.Helper()
	return specEntry(t, spec).Name
}

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// runs returns the specs of every scheduled run (03:03, 11:03, 19:03 UTC)
// from the first run of day from ("2026-10-14") up to and including last.
func runs(t testing.TB, from, last string) []string {
	t.Helper()
	day, err := time.Parse(time.DateOnly, from)
	if err != nil {
		t.Fatal(err)
	}
	end := mustTime(t, last)
	var out []string
	for ; !day.After(end); day = day.AddDate(0, 0, 1) {
		for _, h := range []int{3, 11, 19} {
			if ts := day.Add(time.Duration(h)*time.Hour + 3*time.Minute); !ts.After(end) {
				out = append(out, ts.Format(time.RFC3339Nano)+" scheduled")
			}
		}
	}
	return out
}

// without returns specs minus drop (each of which must be present).
func without(t testing.TB, specs []string, drop ...string) []string {
	t.Helper()
	out := slices.Clone(specs)
	for _, d := range drop {
		i := slices.Index(out, d)
		if i < 0 {
			t.Fatalf("without: %q not in specs", d)
		}
		out = slices.Delete(out, i, i+1)
	}
	return out
}

func cat(lists ...[]string) []string { return slices.Concat(lists...) }

// checkPlan checks the invariants every plan must satisfy and returns the
// decisions by name.
func checkPlan(t testing.TB, in []catalog.Entry, plan Plan) map[string]Decision {
	t.Helper()
	if len(plan.Decisions) != len(in) {
		t.Fatalf("plan has %d decisions for %d entries", len(plan.Decisions), len(in))
	}
	byName := map[string]Decision{}
	for i, d := range plan.Decisions {
		if d.Reason == "" {
			t.Errorf("%s: empty reason", d.Entry.Name)
		}
		if d.Keep != (len(d.Rules) > 0) {
			t.Errorf("%s: keep=%v but rules %q", d.Entry.Name, d.Keep, d.Rules)
		}
		if i > 0 && catalog.CompareEntries(plan.Decisions[i-1].Entry, d.Entry) < 0 {
			t.Errorf("decisions not newest first: %s before %s", plan.Decisions[i-1].Entry.Name, d.Entry.Name)
		}
		byName[d.Entry.Name] = d
	}
	if k, del := len(plan.Kept()), len(plan.Deleted()); k+del != len(in) {
		t.Errorf("kept %d + deleted %d != %d entries", k, del, len(in))
	}
	return byName
}

func keptNames(plan Plan) []string {
	var out []string
	for _, d := range plan.Kept() {
		out = append(out, d.Entry.Name)
	}
	slices.Sort(out)
	return out
}

func TestRetentionApplyPolicy(t *testing.T) {
	type reasonCheck struct {
		spec  string
		rules []string // exact, when non-nil
		has   []string // substrings of the reason
	}
	leap := DefaultPolicy()
	leap.AnchorDays = []int{29, 31}
	noUpdates := DefaultPolicy()
	noUpdates.KeepTodayUpdates = false

	tests := []struct {
		name    string
		now     string
		policy  *Policy // nil: DefaultPolicy()
		entries []string
		keep    []string
		reasons []reasonCheck
	}{
		{
			name:    "steady state: 40 days of 3 runs a day keeps 3 recent and 2 anchors",
			now:     "2026-11-22T19:10:00Z",
			entries: runs(t, "2026-10-14", "2026-11-22T19:03:00Z"),
			keep: []string{
				"2026-11-22T19:03:00Z scheduled", "2026-11-22T11:03:00Z scheduled", "2026-11-22T03:03:00Z scheduled",
				"2026-11-15T03:03:00Z scheduled", "2026-11-01T03:03:00Z scheduled",
			},
			reasons: []reasonCheck{
				{spec: "2026-11-22T19:03:00Z scheduled", rules: []string{RuleNewest, RuleRecent}, has: []string{"newest; recent 1/3"}},
				{spec: "2026-11-22T03:03:00Z scheduled", rules: []string{RuleRecent}, has: []string{"recent 3/3"}},
				{spec: "2026-11-15T03:03:00Z scheduled", rules: []string{RuleAnchor}, has: []string{"anchor 2026-11-15"}},
				{spec: "2026-11-01T03:03:00Z scheduled", rules: []string{RuleAnchor}, has: []string{"anchor 2026-11-01"}},
				{spec: "2026-11-21T19:03:00Z scheduled", has: []string{"scheduled: not among the 3 newest scheduled, not an anchor"}},
				{spec: "2026-11-15T11:03:00Z scheduled", has: []string{"not among the 3 newest scheduled", "20261115T030300.000Z-scheduled is the earliest backup of 2026-11-15"}},
				{spec: "2026-10-15T03:03:00Z scheduled", has: []string{"2026-10-15 is not among the 2 most recent anchor dates"}},
			},
		},
		{
			name:    "steady state right after the first run on the 1st: one backup is newest, recent and anchor",
			now:     "2026-12-01T03:05:00Z",
			entries: runs(t, "2026-10-14", "2026-12-01T03:03:00Z"),
			keep: []string{
				"2026-12-01T03:03:00Z scheduled", "2026-11-30T19:03:00Z scheduled", "2026-11-30T11:03:00Z scheduled",
				"2026-11-15T03:03:00Z scheduled",
			},
			reasons: []reasonCheck{
				{spec: "2026-12-01T03:03:00Z scheduled", rules: []string{RuleNewest, RuleRecent, RuleAnchor}, has: []string{"newest; recent 1/3; anchor 2026-12-01"}},
			},
		},
		{
			name:    "month end: the 31st rolls over to the 1st",
			now:     "2026-11-01T11:05:00Z",
			entries: runs(t, "2026-10-10", "2026-11-01T11:03:00Z"),
			keep: []string{
				"2026-11-01T11:03:00Z scheduled", "2026-11-01T03:03:00Z scheduled", "2026-10-31T19:03:00Z scheduled",
				"2026-10-15T03:03:00Z scheduled",
			},
			reasons: []reasonCheck{
				{spec: "2026-11-01T03:03:00Z scheduled", rules: []string{RuleRecent, RuleAnchor}},
				{spec: "2026-10-31T11:03:00Z scheduled", has: []string{"not among the 3 newest"}},
			},
		},
		{
			name:    "February in a non-leap year: the 28th rolls over to March 1st",
			now:     "2027-03-01T03:04:00Z",
			entries: runs(t, "2027-02-10", "2027-03-01T03:03:00Z"),
			keep: []string{
				"2027-03-01T03:03:00Z scheduled", "2027-02-28T19:03:00Z scheduled", "2027-02-28T11:03:00Z scheduled",
				"2027-02-15T03:03:00Z scheduled",
			},
		},
		{
			name:    "February in a leap year: the 29th rolls over to March 1st",
			now:     "2028-03-01T03:04:00Z",
			entries: runs(t, "2028-02-10", "2028-03-01T03:03:00Z"),
			keep: []string{
				"2028-03-01T03:03:00Z scheduled", "2028-02-29T19:03:00Z scheduled", "2028-02-29T11:03:00Z scheduled",
				"2028-02-15T03:03:00Z scheduled",
			},
			reasons: []reasonCheck{
				{spec: "2028-02-29T03:03:00Z scheduled", has: []string{"not among the 3 newest scheduled, not an anchor"}},
			},
		},
		{
			name:    "anchor days 29 and 31 skip the months without them",
			now:     "2027-03-10T12:00:00Z",
			policy:  &leap,
			entries: runs(t, "2026-12-20", "2027-03-10T11:03:00Z"),
			keep: []string{
				"2027-03-10T11:03:00Z scheduled", "2027-03-10T03:03:00Z scheduled", "2027-03-09T19:03:00Z scheduled",
				"2027-01-31T03:03:00Z scheduled", "2027-01-29T03:03:00Z scheduled",
			},
		},
		{
			name: "a backup at 00:00:00.000 on the 1st is its anchor, one at 23:59:59.999 the day before is not",
			now:  "2026-11-03T03:05:00Z",
			entries: cat(runs(t, "2026-10-14", "2026-11-03T03:03:00Z"), []string{
				"2026-10-31T23:59:59.999Z update",
				"2026-11-01T00:00:00.000Z update",
				"2026-11-01T01:30:00+02:00 update", // 2026-10-31T23:30Z: a local date is not a UTC date
			}),
			keep: []string{
				"2026-11-03T03:03:00Z scheduled", "2026-11-02T19:03:00Z scheduled", "2026-11-02T11:03:00Z scheduled",
				"2026-11-01T00:00:00.000Z update", "2026-10-15T03:03:00Z scheduled",
			},
			reasons: []reasonCheck{
				{spec: "2026-11-01T00:00:00.000Z update", rules: []string{RuleAnchor}, has: []string{"anchor 2026-11-01"}},
				{spec: "2026-10-31T23:59:59.999Z update", has: []string{"update from 2026-10-31: only today's update backups are kept, not an anchor"}},
				{spec: "2026-11-01T01:30:00+02:00 update", has: []string{"update from 2026-10-31"}},
				{spec: "2026-11-01T03:03:00Z scheduled", has: []string{"20261101T000000.000Z-update is the earliest backup of 2026-11-01"}},
			},
		},
		{
			name: "every run failed on the 1st: the 15th before and the 1st before that are the anchors",
			now:  "2026-12-02T19:05:00Z",
			entries: cat(without(t, runs(t, "2026-10-10", "2026-12-02T19:03:00Z"),
				"2026-12-01T03:03:00Z scheduled", "2026-12-01T11:03:00Z scheduled", "2026-12-01T19:03:00Z scheduled",
				"2026-12-02T11:03:00Z scheduled",
			), []string{
				"2026-12-01T11:03:00Z scheduled incomplete", // failed runs leave no manifest
				"2026-12-02T11:03:00Z scheduled incomplete",
			}),
			keep: []string{
				"2026-12-02T19:03:00Z scheduled", "2026-12-02T03:03:00Z scheduled", "2026-11-30T19:03:00Z scheduled",
				"2026-11-15T03:03:00Z scheduled", "2026-11-01T03:03:00Z scheduled",
				"2026-12-02T11:03:00Z scheduled incomplete",
			},
			reasons: []reasonCheck{
				{spec: "2026-12-02T11:03:00Z scheduled incomplete", rules: []string{RuleIncompleteYoung}, has: []string{"last written 8h2m ago", "may be in flight"}},
				{spec: "2026-12-01T11:03:00Z scheduled incomplete", has: []string{"incomplete scheduled backup (no manifest), last written 32h2m ago, older than 24h: failed or abandoned"}},
			},
		},
		{
			name: "the first run on the 1st failed: the second run of the 1st is its anchor",
			now:  "2026-12-01T19:05:00Z",
			entries: without(t, runs(t, "2026-11-10", "2026-12-01T19:03:00Z"),
				"2026-12-01T03:03:00Z scheduled"),
			keep: []string{
				"2026-12-01T19:03:00Z scheduled", "2026-12-01T11:03:00Z scheduled", "2026-11-30T19:03:00Z scheduled",
				"2026-11-15T03:03:00Z scheduled",
			},
			reasons: []reasonCheck{
				{spec: "2026-12-01T11:03:00Z scheduled", rules: []string{RuleRecent, RuleAnchor}},
			},
		},
		{
			name: "only update backups: today's, the newest and the anchors",
			now:  "2026-11-22T12:00:00Z",
			entries: []string{
				"2026-11-22T10:00:00Z update", "2026-11-22T08:00:00Z update",
				"2026-11-21T23:00:00Z update", "2026-11-20T10:00:00Z update",
				"2026-11-15T14:00:00Z update", "2026-11-15T09:00:00Z update",
				"2026-11-10T09:00:00Z update", "2026-11-01T05:00:00Z update",
				"2026-10-15T05:00:00Z update", "2026-10-01T05:00:00Z update",
			},
			keep: []string{
				"2026-11-22T10:00:00Z update", "2026-11-22T08:00:00Z update",
				"2026-11-15T09:00:00Z update", "2026-11-01T05:00:00Z update",
			},
			reasons: []reasonCheck{
				{spec: "2026-11-22T10:00:00Z update", rules: []string{RuleNewest, RuleUpdateToday}, has: []string{"newest; update from today (2026-11-22)"}},
				{spec: "2026-11-21T23:00:00Z update", has: []string{"update from 2026-11-21: only today's update backups are kept"}},
				{spec: "2026-11-15T14:00:00Z update", has: []string{"20261115T090000.000Z-update is the earliest backup of 2026-11-15"}},
			},
		},
		{
			name: "only update backups, none today: the newest survives",
			now:  "2026-11-23T12:00:00Z",
			entries: []string{
				"2026-11-22T10:00:00Z update", "2026-11-22T08:00:00Z update",
				"2026-11-15T09:00:00Z update", "2026-11-01T05:00:00Z update", "2026-10-15T05:00:00Z update",
			},
			keep: []string{
				"2026-11-22T10:00:00Z update",
				"2026-11-15T09:00:00Z update", "2026-11-01T05:00:00Z update",
			},
			reasons: []reasonCheck{
				{spec: "2026-11-22T10:00:00Z update", rules: []string{RuleNewest}},
			},
		},
		{
			name:    "today's update backups are not kept when the policy says so",
			now:     "2026-11-22T12:00:00Z",
			policy:  &noUpdates,
			entries: cat(runs(t, "2026-11-18", "2026-11-22T11:03:00Z"), []string{"2026-11-22T11:30:00Z update", "2026-11-22T10:00:00Z update"}),
			keep: []string{
				"2026-11-22T11:30:00Z update",
				"2026-11-22T11:03:00Z scheduled", "2026-11-22T03:03:00Z scheduled", "2026-11-21T19:03:00Z scheduled",
			},
			reasons: []reasonCheck{
				{spec: "2026-11-22T10:00:00Z update", has: []string{"update backups are not kept by this policy"}},
			},
		},
		{
			name: "updates and scheduled runs on one day: 5 + today's updates",
			now:  "2026-11-22T19:05:00Z",
			entries: cat(runs(t, "2026-10-25", "2026-11-22T19:03:00Z"), []string{
				"2026-11-22T07:00:00Z update", "2026-11-22T14:00:00Z update", "2026-11-21T14:00:00Z update",
			}),
			keep: []string{
				"2026-11-22T19:03:00Z scheduled", "2026-11-22T11:03:00Z scheduled", "2026-11-22T03:03:00Z scheduled",
				"2026-11-15T03:03:00Z scheduled", "2026-11-01T03:03:00Z scheduled",
				"2026-11-22T07:00:00Z update", "2026-11-22T14:00:00Z update",
			},
		},
		{
			name:    "backups stopped weeks ago: the newest and the anchors survive",
			now:     "2026-11-22T12:00:00Z",
			entries: runs(t, "2026-08-01", "2026-09-20T19:03:00Z"),
			keep: []string{
				"2026-09-20T19:03:00Z scheduled", "2026-09-20T11:03:00Z scheduled", "2026-09-20T03:03:00Z scheduled",
				"2026-09-15T03:03:00Z scheduled", "2026-09-01T03:03:00Z scheduled",
			},
			reasons: []reasonCheck{
				{spec: "2026-09-20T19:03:00Z scheduled", rules: []string{RuleNewest, RuleRecent}},
			},
		},
		{
			name: "clock skew: a backup from the future is kept, newest, and not counted as recent",
			now:  "2026-11-22T12:00:00Z",
			entries: cat(runs(t, "2026-10-25", "2026-11-22T11:03:00Z"), []string{
				"2026-11-23T03:03:00Z scheduled",            // future
				"2026-11-22T12:04:00Z scheduled",            // within the tolerance: counts
				"2026-11-22T12:30:00Z update",               // future, not today's update
				"2026-11-22T12:40:00Z scheduled incomplete", // future, no manifest
			}),
			keep: []string{
				"2026-11-23T03:03:00Z scheduled", "2026-11-22T12:30:00Z update", "2026-11-22T12:40:00Z scheduled incomplete",
				"2026-11-22T12:04:00Z scheduled", "2026-11-22T11:03:00Z scheduled", "2026-11-22T03:03:00Z scheduled",
				"2026-11-15T03:03:00Z scheduled", "2026-11-01T03:03:00Z scheduled",
			},
			reasons: []reasonCheck{
				{spec: "2026-11-23T03:03:00Z scheduled", rules: []string{RuleNewest, RuleFuture}, has: []string{"is in the future", "2026-11-23T03:03:00Z"}},
				{spec: "2026-11-22T12:30:00Z update", rules: []string{RuleFuture}},
				{spec: "2026-11-22T12:40:00Z scheduled incomplete", rules: []string{RuleFuture}, has: []string{"incomplete scheduled backup (no manifest)"}},
				{spec: "2026-11-22T12:04:00Z scheduled", rules: []string{RuleRecent}, has: []string{"recent 1/3"}},
				{spec: "2026-11-21T19:03:00Z scheduled", has: []string{"not among the 3 newest"}},
			},
		},
		{
			name: "clock skew: a future backup on an anchor date is not an anchor",
			now:  "2026-11-14T23:00:00Z",
			entries: cat(runs(t, "2026-10-10", "2026-11-14T19:03:00Z"), []string{
				"2026-11-15T03:03:00Z scheduled",
			}),
			keep: []string{
				"2026-11-15T03:03:00Z scheduled",
				"2026-11-14T19:03:00Z scheduled", "2026-11-14T11:03:00Z scheduled", "2026-11-14T03:03:00Z scheduled",
				"2026-11-01T03:03:00Z scheduled", "2026-10-15T03:03:00Z scheduled",
			},
		},
		{
			name: "clock skew within the tolerance across midnight: an update of tomorrow counts as today's",
			now:  "2026-11-21T23:58:00Z",
			entries: cat(runs(t, "2026-11-19", "2026-11-21T19:03:00Z"), []string{
				"2026-11-22T00:01:00Z update", "2026-11-22T00:00:30Z update", "2026-11-21T20:00:00Z update",
			}),
			keep: []string{
				"2026-11-22T00:01:00Z update", "2026-11-22T00:00:30Z update", "2026-11-21T20:00:00Z update",
				"2026-11-21T19:03:00Z scheduled", "2026-11-21T11:03:00Z scheduled", "2026-11-21T03:03:00Z scheduled",
			},
			reasons: []reasonCheck{
				{spec: "2026-11-22T00:00:30Z update", rules: []string{RuleUpdateToday}, has: []string{"within the clock-skew tolerance"}},
			},
		},
		{
			name: "manual and pre-restore backups are never deleted, their incomplete folders are",
			now:  "2026-11-22T12:00:00Z",
			entries: cat(runs(t, "2026-10-25", "2026-11-22T11:03:00Z"), []string{
				"2025-01-05T10:00:00Z manual", "2025-06-07T10:00:00Z pre-restore",
				"2026-11-01T01:00:00Z manual", // earliest of the 1st: the anchor
				"2026-11-20T10:00:00Z manual incomplete", "2026-11-20T11:00:00Z pre-restore incomplete",
				"2026-11-22T10:00:00Z manual incomplete", // young: may be in flight
			}),
			keep: []string{
				"2026-11-22T11:03:00Z scheduled", "2026-11-22T03:03:00Z scheduled", "2026-11-21T19:03:00Z scheduled",
				"2026-11-15T03:03:00Z scheduled",
				"2025-01-05T10:00:00Z manual", "2025-06-07T10:00:00Z pre-restore", "2026-11-01T01:00:00Z manual",
				"2026-11-22T10:00:00Z manual incomplete",
			},
			reasons: []reasonCheck{
				{spec: "2025-01-05T10:00:00Z manual", rules: []string{RuleManual}, has: []string{"manual: never deleted automatically"}},
				{spec: "2025-06-07T10:00:00Z pre-restore", rules: []string{RulePreRestore}, has: []string{"pre-restore: never deleted automatically"}},
				{spec: "2026-11-01T01:00:00Z manual", rules: []string{RuleAnchor, RuleManual}, has: []string{"anchor 2026-11-01; manual"}},
				{spec: "2026-11-20T10:00:00Z manual incomplete", has: []string{"incomplete manual backup (no manifest), last written 2d2h ago, older than 24h: failed or abandoned"}},
				{spec: "2026-11-20T11:00:00Z pre-restore incomplete", has: []string{"incomplete pre-restore backup (no manifest)"}},
				{spec: "2026-11-22T10:00:00Z manual incomplete", rules: []string{RuleIncompleteYoung}, has: []string{"last written 2h ago"}},
				{spec: "2026-11-01T03:03:00Z scheduled", has: []string{"20261101T010000.000Z-manual is the earliest backup of 2026-11-01"}},
			},
		},
		{
			name: "a manual backup can be the newest",
			now:  "2026-11-22T12:00:00Z",
			entries: cat(runs(t, "2026-11-18", "2026-11-22T11:03:00Z"), []string{
				"2026-11-22T11:30:00Z manual",
			}),
			keep: []string{
				"2026-11-22T11:30:00Z manual",
				"2026-11-22T11:03:00Z scheduled", "2026-11-22T03:03:00Z scheduled", "2026-11-21T19:03:00Z scheduled",
			},
			reasons: []reasonCheck{
				{spec: "2026-11-22T11:30:00Z manual", rules: []string{RuleNewest, RuleManual}},
			},
		},
		{
			name: "incomplete backups younger than 24h are kept, older ones deleted",
			now:  "2026-11-22T12:00:00Z",
			entries: []string{
				"2026-11-22T11:03:00Z scheduled",
				"2026-11-22T03:03:00Z scheduled incomplete",
				"2026-11-21T12:00:00Z scheduled incomplete",     // exactly 24h: not older
				"2026-11-21T11:59:59.999Z update incomplete",    // just older
				"2026-11-20T19:03:00Z scheduled incomplete",     // older
				"2026-11-01T03:03:00Z scheduled incomplete",     // on an anchor date: still not a backup
				"2026-11-22T03:03:00.001Z scheduled incomplete", // young and the newest time, but not committed
			},
			keep: []string{
				"2026-11-22T11:03:00Z scheduled",
				"2026-11-22T03:03:00Z scheduled incomplete",
				"2026-11-21T12:00:00Z scheduled incomplete",
				"2026-11-22T03:03:00.001Z scheduled incomplete",
			},
			reasons: []reasonCheck{
				{spec: "2026-11-22T11:03:00Z scheduled", rules: []string{RuleNewest, RuleRecent}},
				{spec: "2026-11-21T12:00:00Z scheduled incomplete", rules: []string{RuleIncompleteYoung}, has: []string{"last written 24h ago, not older than 24h: may be in flight"}},
				{spec: "2026-11-21T11:59:59.999Z update incomplete", has: []string{"older than 24h: failed or abandoned"}},
			},
		},
		{
			name:    "a single backup is kept",
			now:     "2030-01-01T00:00:00Z",
			entries: []string{"2026-11-10T03:03:00Z scheduled"},
			keep:    []string{"2026-11-10T03:03:00Z scheduled"},
			reasons: []reasonCheck{{spec: "2026-11-10T03:03:00Z scheduled", rules: []string{RuleNewest, RuleRecent}}},
		},
		{
			name: "empty input",
			now:  "2026-11-22T12:00:00Z",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultPolicy()
			if tc.policy != nil {
				p = *tc.policy
			}
			now := mustTime(t, tc.now)
			in := specEntries(t, tc.entries)
			plan := ApplyPolicy(in, now, p)
			byName := checkPlan(t, in, plan)

			var want []string
			for _, s := range tc.keep {
				want = append(want, specName(t, s))
			}
			slices.Sort(want)
			if got := keptNames(plan); !slices.Equal(got, want) {
				for _, n := range got {
					if !slices.Contains(want, n) {
						t.Errorf("kept but should be deleted: %s (%s)", n, byName[n].Reason)
					}
				}
				for _, n := range want {
					if !slices.Contains(got, n) {
						t.Errorf("deleted but should be kept: %s (%s)", n, byName[n].Reason)
					}
				}
			}
			for _, rc := range tc.reasons {
				d, ok := byName[specName(t, rc.spec)]
				if !ok {
					t.Fatalf("reason check: %q not in the plan", rc.spec)
				}
				if rc.rules != nil && !slices.Equal(d.Rules, rc.rules) {
					t.Errorf("%s: rules %q, want %q (reason %q)", d.Entry.Name, d.Rules, rc.rules, d.Reason)
				}
				for _, s := range rc.has {
					if !strings.Contains(d.Reason, s) {
						t.Errorf("%s: reason %q does not contain %q", d.Entry.Name, d.Reason, s)
					}
				}
			}
			if testing.Verbose() && len(plan.Decisions) <= 12 {
				for _, d := range plan.Decisions {
					t.Logf("keep=%-5v %s: %s", d.Keep, d.Entry.Name, d.Reason)
				}
			}
		})
	}
}

func TestRetentionEmptyInput(t *testing.T) {
	for _, in := range [][]catalog.Entry{nil, {}} {
		plan := ApplyPolicy(in, time.Now(), DefaultPolicy())
		if len(plan.Decisions) != 0 || len(plan.Kept()) != 0 || len(plan.Deleted()) != 0 {
			t.Errorf("ApplyPolicy(%#v) = %+v, want an empty plan", in, plan)
		}
	}
}

// The plan depends neither on the input order nor on the time zone of now,
// and the input is not modified.
func TestRetentionDeterministicAndPure(t *testing.T) {
	specs := cat(runs(t, "2026-10-01", "2026-11-22T11:03:00Z"), []string{
		"2026-11-22T07:00:00Z update", "2026-11-20T07:00:00Z update", "2026-11-15T03:03:00Z update",
		"2026-11-01T03:03:00Z manual", "2026-11-22T10:00:00Z scheduled incomplete",
		"2026-11-15T03:03:00Z scheduled", // duplicate name
		"2026-11-22T11:03:00Z scheduled", // duplicate of the newest
	})
	in := specEntries(t, specs)
	in[len(in)-1].Objects = in[len(in)-1].Objects[:1] // same name, different content
	now := mustTime(t, "2026-11-22T12:00:00Z")
	orig := make([]catalog.Entry, len(in))
	for i, e := range in {
		orig[i] = e
		orig[i].Objects = slices.Clone(e.Objects)
	}
	want := ApplyPolicy(in, now, DefaultPolicy())
	checkPlan(t, in, want)
	if !reflect.DeepEqual(in, orig) {
		t.Fatal("ApplyPolicy modified its input")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	zone := time.FixedZone("UTC-11", -11*3600)
	for i := range 50 {
		shuffled := slices.Clone(in)
		rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		n := now
		if i%2 == 1 {
			n = now.In(zone)
		}
		if got := ApplyPolicy(shuffled, n, DefaultPolicy()); !reflect.DeepEqual(got, want) {
			t.Fatalf("shuffle %d: plan differs", i)
		}
	}
	// Duplicates are decided one by one: exactly one of the two copies of the
	// 2026-11-15T03:03 scheduled backup is the anchor.
	anchors := 0
	for _, d := range want.Decisions {
		if slices.Contains(d.Rules, RuleAnchor) && d.Entry.Name == "20261115T030300.000Z-scheduled" {
			anchors++
		}
	}
	if anchors != 1 {
		t.Errorf("%d copies of the duplicate are the anchor, want 1", anchors)
	}
}

// Entries of several clusters are decided per cluster.
func TestRetentionSeveralClusters(t *testing.T) {
	a := specEntries(t, runs(t, "2026-11-10", "2026-11-22T11:03:00Z"))
	b := specEntries(t, []string{"2026-09-01T03:03:00Z update", "2026-08-20T03:03:00Z update", "2026-08-15T03:03:00Z update"})
	for i := range b {
		b[i].ClusterID = "c2"
	}
	plan := ApplyPolicy(slices.Concat(a, b), mustTime(t, "2026-11-22T12:00:00Z"), DefaultPolicy())
	checkPlan(t, slices.Concat(a, b), plan)
	kept := map[string][]string{}
	for _, d := range plan.Kept() {
		kept[d.Entry.ClusterID] = append(kept[d.Entry.ClusterID], d.Entry.Name)
	}
	if len(kept["c1"]) != 4 {
		t.Errorf("c1 kept %q, want 3 recent and the 15th", kept["c1"])
	}
	if want := []string{"20260901T030300.000Z-update", "20260815T030300.000Z-update"}; !slices.Equal(kept["c2"], want) {
		t.Errorf("c2 kept %q, want %q", kept["c2"], want)
	}
}

func TestRetentionInvalidPolicyDeletesNothing(t *testing.T) {
	p := DefaultPolicy()
	p.Recent = -1
	in := specEntries(t, runs(t, "2026-10-01", "2026-11-22T11:03:00Z"))
	plan := ApplyPolicy(in, mustTime(t, "2026-11-22T12:00:00Z"), p)
	checkPlan(t, in, plan)
	if n := len(plan.Deleted()); n != 0 {
		t.Fatalf("invalid policy deleted %d backups", n)
	}
	if d := plan.Decisions[0]; !slices.Equal(d.Rules, []string{RuleInvalidPolicy}) || !strings.Contains(d.Reason, "recent count must not be negative") {
		t.Errorf("decision %+v", d)
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatalf("DefaultPolicy().Validate() = %v", err)
	}
	tests := []struct {
		name   string
		modify func(*Policy)
		want   []string // substrings of the error; nil: valid
	}{
		{"no recent, no anchors", func(p *Policy) { p.Recent, p.Anchors, p.AnchorDays = 0, 0, nil }, nil},
		{"day 31", func(p *Policy) { p.AnchorDays = []int{31} }, nil},
		{"no future tolerance", func(p *Policy) { p.FutureTolerance = 0 }, nil},
		{"negative recent", func(p *Policy) { p.Recent = -1 }, []string{"recent count must not be negative"}},
		{"negative anchors", func(p *Policy) { p.Anchors = -2 }, []string{"anchor count must not be negative"}},
		{"anchors without days", func(p *Policy) { p.AnchorDays = nil }, []string{"no anchor days"}},
		{"day 0", func(p *Policy) { p.AnchorDays = []int{0, 15} }, []string{"anchor day 0 is not a day of the month"}},
		{"day 32", func(p *Policy) { p.AnchorDays = []int{1, 32} }, []string{"anchor day 32"}},
		{"negative day", func(p *Policy) { p.AnchorDays = []int{-1} }, []string{"anchor day -1"}},
		{"duplicate day", func(p *Policy) { p.AnchorDays = []int{1, 15, 1} }, []string{"anchor day 1 is listed twice"}},
		{"zero incomplete-after", func(p *Policy) { p.IncompleteAfter = 0 }, []string{"incomplete-after must be positive"}},
		{"negative incomplete-after", func(p *Policy) { p.IncompleteAfter = -time.Hour }, []string{"incomplete-after must be positive"}},
		{"negative tolerance", func(p *Policy) { p.FutureTolerance = -time.Second }, []string{"future tolerance must not be negative"}},
		{"several problems", func(p *Policy) { p.Recent, p.AnchorDays = -1, []int{40} }, []string{"recent count", "anchor day 40"}},
		{"zero value", func(p *Policy) { *p = Policy{} }, []string{"incomplete-after"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultPolicy()
			tc.modify(&p)
			err := p.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error containing %q", tc.want)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Validate() = %q, want it to contain %q", err, s)
				}
			}
		})
	}
}

func TestStaleUploads(t *testing.T) {
	now := mustTime(t, "2026-11-22T12:00:00Z")
	up := func(key, id string, age time.Duration) store.Upload {
		return store.Upload{Key: key, UploadID: id, Initiated: now.Add(-age)}
	}
	uploads := []store.Upload{
		up("c1/b/snapshot.db.zst", "young", time.Hour),
		up("c1/a/snapshot.db.zst", "old2", 48*time.Hour),
		up("c1/c/snapshot.db.zst", "exactly", 24*time.Hour),
		up("c1/d/snapshot.db.zst", "old1", 72*time.Hour),
		up("c1/e/snapshot.db.zst", "just", 24*time.Hour+time.Millisecond),
		up("c1/f/snapshot.db.zst", "future", -time.Hour),
		{Key: "c1/g/snapshot.db.zst", UploadID: "unknown-time"},
		up("c1/a/snapshot.db.zst", "old2b", 48*time.Hour),
	}
	orig := slices.Clone(uploads)
	ids := func(us []store.Upload) []string {
		var out []string
		for _, u := range us {
			out = append(out, u.UploadID)
		}
		return out
	}
	tests := []struct {
		name   string
		maxAge time.Duration
		want   []string
	}{
		{"24h", 24 * time.Hour, []string{"old1", "old2", "old2b", "just"}},
		{"default", 0, []string{"old1", "old2", "old2b", "just"}},
		{"negative means default", -time.Hour, []string{"old1", "old2", "old2b", "just"}},
		{"30m", 30 * time.Minute, []string{"old1", "old2", "old2b", "just", "exactly", "young"}},
		{"1 week", 7 * 24 * time.Hour, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := StaleUploads(uploads, now, tc.maxAge)
			if !slices.Equal(ids(got), tc.want) {
				t.Errorf("StaleUploads(maxAge %v) = %q, want %q", tc.maxAge, ids(got), tc.want)
			}
			if !slices.Equal(uploads, orig) {
				t.Fatal("StaleUploads modified its input")
			}
		})
	}
	if got := StaleUploads(nil, now, 0); len(got) != 0 {
		t.Errorf("StaleUploads(nil) = %v", got)
	}
}

// An incomplete folder is aged by its last write, not by its name: a backup
// that started 30h ago but is still uploading is in flight.
func TestRetentionIncompleteAgedByLastWrite(t *testing.T) {
	now := mustTime(t, "2026-11-22T12:00:00Z")
	slow := specEntry(t, "2026-11-21T06:00:00Z scheduled incomplete")
	slow.Objects[0].LastModified = now.Add(-2 * time.Hour)
	stale := specEntry(t, "2026-11-21T07:00:00Z scheduled incomplete")
	stale.Objects[0].LastModified = now.Add(-25 * time.Hour)
	in := []catalog.Entry{slow, stale, specEntry(t, "2026-11-22T11:03:00Z scheduled")}
	plan := ApplyPolicy(in, now, DefaultPolicy())
	byName := checkPlan(t, in, plan)
	if d := byName[slow.Name]; !d.Keep || !slices.Equal(d.Rules, []string{RuleIncompleteYoung}) || !strings.Contains(d.Reason, "last written 2h ago") {
		t.Errorf("slow upload: %+v", d)
	}
	if d := byName[stale.Name]; d.Keep || !strings.Contains(d.Reason, "last written 25h ago") {
		t.Errorf("stale upload: %+v", d)
	}
}

func TestRetentionFmtDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                               "0s",
		1500 * time.Millisecond:         "2s",
		30 * time.Second:                "30s",
		5 * time.Minute:                 "5m",
		8*time.Hour + 2*time.Minute:     "8h2m",
		24 * time.Hour:                  "24h",
		47*time.Hour + 59*time.Minute:   "47h59m",
		512*time.Hour + 57*time.Minute:  "21d8h57m",
		72 * time.Hour:                  "3d",
		72*time.Hour + 30*time.Second:   "3d1m",
		24*time.Hour + time.Millisecond: "24h",
		90*time.Minute + 29*time.Second: "1h30m",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// damage marks the entries named by specs as damaged with why.
func damage(t testing.TB, in []catalog.Entry, why string, specs ...string) {
	t.Helper()
	for _, s := range specs {
		n := specName(t, s)
		i := slices.IndexFunc(in, func(e catalog.Entry) bool { return e.Name == n })
		if i < 0 || !in[i].Committed {
			t.Fatalf("damage: %q is not a committed entry", s)
		}
		in[i].Damaged = why
	}
}

// Damaged backups (the inventory's check found them unrestorable) never
// count for a rule, so they never push a good one out; they are kept while
// newer than the newest good backup or young, and deleted as damaged after.
func TestRetentionDamaged(t *testing.T) {
	type want struct {
		spec  string
		keep  bool
		rules []string
		has   string
	}
	cases := []struct {
		name    string
		now     string
		entries []string
		damaged map[string][]string // why -> specs
		want    []want
	}{
		{
			// The 3 newest corrupt (one with an unreadable
			// manifest), 3 good behind them.
			name:    "three newest damaged, three good behind",
			now:     "2026-11-22T19:10:00Z",
			entries: runs(t, "2026-11-20", "2026-11-22T19:03:00Z"),
			damaged: map[string][]string{
				"manifest unreadable: manifest: unexpected end of JSON input": {"2026-11-22T19:03:00Z scheduled"},
				"snapshot.db.zst size mismatch: 10 bytes stored, the manifest says 4096": {
					"2026-11-22T11:03:00Z scheduled", "2026-11-22T03:03:00Z scheduled"},
			},
			want: []want{
				{"2026-11-22T19:03:00Z scheduled", true, []string{RuleDamagedNewer, RuleDamagedYoung}, "damaged: manifest unreadable"},
				{"2026-11-22T11:03:00Z scheduled", true, []string{RuleDamagedNewer, RuleDamagedYoung}, "newer than the newest good backup 20261121T190300.000Z-scheduled"},
				{"2026-11-22T03:03:00Z scheduled", true, []string{RuleDamagedNewer, RuleDamagedYoung}, "damaged: snapshot.db.zst size mismatch"},
				{"2026-11-21T19:03:00Z scheduled", true, []string{RuleNewest, RuleRecent}, "newest; recent 1/3"},
				{"2026-11-21T11:03:00Z scheduled", true, []string{RuleRecent}, "recent 2/3"},
				{"2026-11-21T03:03:00Z scheduled", true, []string{RuleRecent}, "recent 3/3"},
				{"2026-11-20T19:03:00Z scheduled", false, nil, "not among the 3 newest"},
			},
		},
		{
			name:    "old damaged backups are deleted as damaged, young ones kept",
			now:     "2026-11-22T12:00:00Z",
			entries: runs(t, "2026-11-18", "2026-11-22T11:03:00Z"),
			damaged: map[string][]string{
				"snapshot.db.zst missing": {"2026-11-22T03:03:00Z scheduled", "2026-11-19T11:03:00Z scheduled"},
			},
			want: []want{
				{"2026-11-22T11:03:00Z scheduled", true, []string{RuleNewest, RuleRecent}, "recent 1/3"},
				{"2026-11-22T03:03:00Z scheduled", true, []string{RuleDamagedYoung}, "damaged: snapshot.db.zst missing; last written 8h57m ago, not older than 24h"},
				{"2026-11-21T19:03:00Z scheduled", true, []string{RuleRecent}, "recent 2/3"},
				{"2026-11-21T11:03:00Z scheduled", true, []string{RuleRecent}, "recent 3/3"},
				{"2026-11-19T11:03:00Z scheduled", false, nil, "damaged: snapshot.db.zst missing; older than the newest good backup 20261122T110300.000Z-scheduled"},
			},
		},
		{
			name:    "no good backup at all: every damaged one is kept",
			now:     "2026-11-25T12:00:00Z",
			entries: []string{"2026-11-22T11:03:00Z scheduled", "2026-11-21T11:03:00Z update", "2026-11-20T11:03:00Z scheduled incomplete"},
			damaged: map[string][]string{"manifest missing": {"2026-11-22T11:03:00Z scheduled", "2026-11-21T11:03:00Z update"}},
			want: []want{
				{"2026-11-22T11:03:00Z scheduled", true, []string{RuleDamagedNewer}, "no backup of the cluster checks out"},
				{"2026-11-21T11:03:00Z update", true, []string{RuleDamagedNewer}, "damaged: manifest missing"},
				{"2026-11-20T11:03:00Z scheduled incomplete", false, nil, "incomplete"},
			},
		},
		{
			name:    "a damaged first backup of an anchor date: the anchor is the date's first good one",
			now:     "2026-11-22T12:00:00Z",
			entries: cat(runs(t, "2026-11-14", "2026-11-22T11:03:00Z"), []string{"2026-11-10T10:00:00Z manual"}),
			damaged: map[string][]string{
				"snapshot.db.zst missing": {"2026-11-15T03:03:00Z scheduled", "2026-11-10T10:00:00Z manual"},
			},
			want: []want{
				{"2026-11-15T11:03:00Z scheduled", true, []string{RuleAnchor}, "anchor 2026-11-15"},
				{"2026-11-15T03:03:00Z scheduled", false, nil, "damaged: snapshot.db.zst missing"},
				{"2026-11-10T10:00:00Z manual", true, []string{RuleManual}, "manual: never deleted automatically; damaged: snapshot.db.zst missing"},
			},
		},
		{
			name:    "a damaged update of today is not kept as today's update once older than 24h and the newest good",
			now:     "2026-11-22T23:00:00Z",
			entries: cat(runs(t, "2026-11-21", "2026-11-22T19:03:00Z"), []string{"2026-11-22T00:30:00Z update"}),
			damaged: map[string][]string{"snapshot.db.zst missing": {"2026-11-22T00:30:00Z update"}},
			want: []want{
				{"2026-11-22T00:30:00Z update", true, []string{RuleDamagedYoung}, "damaged: snapshot.db.zst missing"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := specEntries(t, tc.entries)
			for why, specs := range tc.damaged {
				damage(t, in, why, specs...)
			}
			plan := ApplyPolicy(in, mustTime(t, tc.now), DefaultPolicy())
			byName := checkPlan(t, in, plan)
			for _, w := range tc.want {
				d := byName[specName(t, w.spec)]
				if d.Keep != w.keep || !slices.Equal(d.Rules, w.rules) || !strings.Contains(d.Reason, w.has) {
					t.Errorf("%s: keep %v rules %v reason %q; want keep %v rules %v reason containing %q",
						w.spec, d.Keep, d.Rules, d.Reason, w.keep, w.rules, w.has)
				}
			}
			// Whatever else: the newest good backup is kept, and no damaged
			// one is kept by a rule for good backups.
			for _, d := range plan.Decisions {
				if d.Entry.Good() {
					if !d.Keep || !slices.Contains(d.Rules, RuleNewest) {
						t.Errorf("the newest good backup %s: %+v", d.Entry.Name, d)
					}
					break
				}
			}
			for _, d := range plan.Decisions {
				if d.Entry.Damaged != "" && slices.ContainsFunc(d.Rules, func(r string) bool {
					return r == RuleNewest || r == RuleRecent || r == RuleAnchor || r == RuleUpdateToday
				}) {
					t.Errorf("damaged %s kept by %v", d.Entry.Name, d.Rules)
				}
			}
		})
	}
}

// A folder whose objects are old but into which a multipart upload was
// started recently is in flight: kept.
func TestRetentionIncompleteYoungUpload(t *testing.T) {
	now := mustTime(t, "2026-11-22T12:00:00Z")
	e := specEntry(t, "2026-11-20T06:00:00Z scheduled incomplete")
	e.Uploads = []store.Upload{{Key: e.Objects[0].Key, UploadID: "u1", Initiated: now.Add(-3 * time.Hour)}}
	in := []catalog.Entry{e, specEntry(t, "2026-11-22T11:03:00Z scheduled")}
	byName := checkPlan(t, in, ApplyPolicy(in, now, DefaultPolicy()))
	if d := byName[e.Name]; !d.Keep || !slices.Equal(d.Rules, []string{RuleIncompleteYoung}) || !strings.Contains(d.Reason, "last written 3h ago") {
		t.Errorf("folder with a young upload: %+v", d)
	}
	e.Uploads[0].Initiated = now.Add(-30 * time.Hour)
	in[0] = e
	if d := checkPlan(t, in, ApplyPolicy(in, now, DefaultPolicy()))[e.Name]; d.Keep {
		t.Errorf("folder with an old upload: %+v", d)
	}
}

// --incomplete-after below an hour would delete backups in flight.
func TestPolicyIncompleteAfterFloor(t *testing.T) {
	p := DefaultPolicy()
	p.IncompleteAfter = 59 * time.Minute
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "at least 1h") {
		t.Errorf("IncompleteAfter 59m: %v", err)
	}
	p.IncompleteAfter = MinIncompleteAfter
	if err := p.Validate(); err != nil {
		t.Errorf("IncompleteAfter %v: %v", MinIncompleteAfter, err)
	}
}
