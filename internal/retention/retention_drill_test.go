package retention

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
)

// drillSpec sets a drill summary on the entry of spec: "passed", "failed",
// "unreadable" (a record that could not be read, even one that said
// passed), at the given time.
type drillSpec struct {
	spec   string
	result string
	at     string
}

func withDrills(t testing.TB, in []catalog.Entry, drills []drillSpec) []catalog.Entry {
	t.Helper()
	for _, d := range drills {
		name := specName(t, d.spec)
		i := slices.IndexFunc(in, func(e catalog.Entry) bool { return e.Name == name })
		if i < 0 {
			t.Fatalf("withDrills: %q not in the entries", d.spec)
		}
		at := mustTime(t, d.at)
		var s *catalog.DrillSummary
		switch d.result {
		case "passed":
			s = &catalog.DrillSummary{Passed: true, At: at, Mode: catalog.CompareSource}
		case "failed":
			s = &catalog.DrillSummary{At: at, Failed: "hashkv: restored 0x1234 != source 0x5678", Mode: catalog.CompareSource}
		case "unreadable":
			// Passed as read before the record turned out bad: still no proof.
			s = &catalog.DrillSummary{Passed: true, At: at, Err: "drill record: unexpected end of JSON input"}
		default:
			t.Fatalf("withDrills: result %q", d.result)
		}
		in[i].Drill = s
		in[i].Objects = append(slices.Clone(in[i].Objects), store.ObjectInfo{Key: strings.TrimSuffix(in[i].Objects[0].Key, catalog.SnapshotObjectZstd) + catalog.DrillObject, Size: 900, LastModified: at})
	}
	return in
}

// The drilled rule keeps the newest good backup whose drill passed, even
// when no other rule would; a failed drill, an unreadable record, a
// damaged or incomplete backup never counts as proof. On the old code
// (no drilled rule) every case that expects a backup kept by drilled
// alone fails.
func TestRetentionDrilled(t *testing.T) {
	steady := runs(t, "2026-10-14", "2026-11-22T19:03:00Z")
	carrier := []string{ // what the carrier's rule keeps of steady at now
		"2026-11-22T19:03:00Z scheduled", "2026-11-22T11:03:00Z scheduled", "2026-11-22T03:03:00Z scheduled",
		"2026-11-15T03:03:00Z scheduled", "2026-11-01T03:03:00Z scheduled",
	}
	const now = "2026-11-22T19:10:00Z"
	type reasonCheck struct {
		spec  string
		rules []string // exact, when non-nil
		has   []string
	}
	tests := []struct {
		name     string
		entries  []string
		drills   []drillSpec
		damage   map[string]string // spec -> Damaged
		keep     []string          // on top of carrier
		drilled  string            // the one kept by the drilled rule ("" none)
		reasons  []reasonCheck
		policy   *Policy
		keepOnly []string // exact kept set, replaces carrier+keep when set
	}{
		{
			name:    "a proven backup three days old is kept by drilled alone; newer failed drills are no proof",
			entries: steady,
			drills: []drillSpec{
				{"2026-11-19T03:03:00Z scheduled", "passed", "2026-11-19T04:10:00Z"},
				{"2026-11-20T03:03:00Z scheduled", "failed", "2026-11-20T04:10:00Z"},
				{"2026-11-21T03:03:00Z scheduled", "failed", "2026-11-21T04:10:00Z"},
				{"2026-11-22T03:03:00Z scheduled", "failed", "2026-11-22T04:10:00Z"},
			},
			keep:    []string{"2026-11-19T03:03:00Z scheduled"},
			drilled: "2026-11-19T03:03:00Z scheduled",
			reasons: []reasonCheck{
				{spec: "2026-11-19T03:03:00Z scheduled", rules: []string{RuleDrilled}, has: []string{"drilled (passed 2026-11-19T04:10:00Z)"}},
				{spec: "2026-11-21T03:03:00Z scheduled", has: []string{"not among the 3 newest scheduled", "drill FAILED 2026-11-21T04:10:00Z, no proof: hashkv: restored"}},
				{spec: "2026-11-22T03:03:00Z scheduled", rules: []string{RuleRecent}, has: []string{"recent 3/3"}},
			},
		},
		{
			name:    "the newest backup proven: drilled adds to newest, older proven backups go",
			entries: steady,
			drills: []drillSpec{
				{"2026-11-20T03:03:00Z scheduled", "passed", "2026-11-20T04:10:00Z"},
				{"2026-11-22T19:03:00Z scheduled", "passed", "2026-11-22T19:08:00Z"},
			},
			drilled: "2026-11-22T19:03:00Z scheduled",
			reasons: []reasonCheck{
				{spec: "2026-11-22T19:03:00Z scheduled", rules: []string{RuleNewest, RuleRecent, RuleDrilled}, has: []string{"newest; recent 1/3; drilled (passed 2026-11-22T19:08:00Z)"}},
				{spec: "2026-11-20T03:03:00Z scheduled", has: []string{"drilled (passed 2026-11-20T04:10:00Z), but 20261122T190300.000Z-scheduled is the newest drilled backup"}},
			},
		},
		{
			name:    "a proven anchor is kept by both rules",
			entries: steady,
			drills:  []drillSpec{{"2026-11-15T03:03:00Z scheduled", "passed", "2026-11-15T04:10:00Z"}},
			drilled: "2026-11-15T03:03:00Z scheduled",
			reasons: []reasonCheck{
				{spec: "2026-11-15T03:03:00Z scheduled", rules: []string{RuleAnchor, RuleDrilled}, has: []string{"anchor 2026-11-15; drilled (passed 2026-11-15T04:10:00Z)"}},
			},
		},
		{
			name:    "an unreadable record is no proof, even one that said passed: the older proven backup is kept",
			entries: steady,
			drills: []drillSpec{
				{"2026-11-18T11:03:00Z scheduled", "passed", "2026-11-18T12:00:00Z"},
				{"2026-11-21T11:03:00Z scheduled", "unreadable", "2026-11-21T12:00:00Z"},
			},
			keep:    []string{"2026-11-18T11:03:00Z scheduled"},
			drilled: "2026-11-18T11:03:00Z scheduled",
			reasons: []reasonCheck{
				{spec: "2026-11-21T11:03:00Z scheduled", has: []string{"drill record unreadable, no proof: drill record: unexpected end of JSON input"}},
			},
		},
		{
			name:    "a proven backup damaged since is no proof: the older proven one is kept",
			entries: steady,
			drills: []drillSpec{
				{"2026-11-17T03:03:00Z scheduled", "passed", "2026-11-17T04:00:00Z"},
				{"2026-11-20T19:03:00Z scheduled", "passed", "2026-11-20T20:00:00Z"},
			},
			damage:  map[string]string{"2026-11-20T19:03:00Z scheduled": "snapshot.db.zst missing"},
			keep:    []string{"2026-11-17T03:03:00Z scheduled"},
			drilled: "2026-11-17T03:03:00Z scheduled",
			reasons: []reasonCheck{
				{spec: "2026-11-20T19:03:00Z scheduled", has: []string{"damaged: snapshot.db.zst missing"}},
			},
		},
		{
			name: "an incomplete folder with a drill record is no backup",
			entries: cat(without(t, steady, "2026-11-21T03:03:00Z scheduled"), []string{
				"2026-11-21T03:03:00Z scheduled incomplete",
			}),
			drills: []drillSpec{{"2026-11-21T03:03:00Z scheduled incomplete", "passed", "2026-11-21T04:00:00Z"}},
		},
		{
			name:    "only failed drills: the carrier's rule alone",
			entries: steady,
			drills: []drillSpec{
				{"2026-11-19T03:03:00Z scheduled", "failed", "2026-11-19T04:00:00Z"},
				{"2026-11-22T19:03:00Z scheduled", "failed", "2026-11-22T19:08:00Z"},
			},
			reasons: []reasonCheck{
				{spec: "2026-11-22T19:03:00Z scheduled", rules: []string{RuleNewest, RuleRecent}},
			},
		},
		{
			name:    "a proven update backup of last week is kept, though updates are only kept on their day",
			entries: cat(steady, []string{"2026-11-16T09:00:00Z update"}),
			drills:  []drillSpec{{"2026-11-16T09:00:00Z update", "passed", "2026-11-16T10:00:00Z"}},
			keep:    []string{"2026-11-16T09:00:00Z update"},
			drilled: "2026-11-16T09:00:00Z update",
			reasons: []reasonCheck{
				{spec: "2026-11-16T09:00:00Z update", rules: []string{RuleDrilled}},
			},
		},
		{
			name:     "recent 0 and no anchors: newest and drilled are what is left",
			entries:  steady,
			policy:   &Policy{Recent: 0, Anchors: 0, IncompleteAfter: 24 * time.Hour, FutureTolerance: 5 * time.Minute},
			drills:   []drillSpec{{"2026-10-20T03:03:00Z scheduled", "passed", "2026-10-20T04:00:00Z"}},
			drilled:  "2026-10-20T03:03:00Z scheduled",
			keepOnly: []string{"2026-11-22T19:03:00Z scheduled", "2026-10-20T03:03:00Z scheduled"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := withDrills(t, specEntries(t, tc.entries), tc.drills)
			for spec, why := range tc.damage {
				n := specName(t, spec)
				for i := range in {
					if in[i].Name == n {
						in[i].Damaged = why
					}
				}
			}
			p := DefaultPolicy()
			if tc.policy != nil {
				p = *tc.policy
			}
			plan := ApplyPolicy(in, mustTime(t, now), p)
			byName := checkPlan(t, in, plan)
			if err := GuardPlan(plan); err != nil {
				t.Errorf("guardPlan: %v", err)
			}
			want := cat(carrier, tc.keep)
			if tc.keepOnly != nil {
				want = tc.keepOnly
			}
			var wantNames []string
			for _, s := range want {
				wantNames = append(wantNames, specName(t, s))
			}
			slices.Sort(wantNames)
			if got := keptNames(plan); !slices.Equal(got, wantNames) {
				t.Errorf("kept %q\nwant %q", got, wantNames)
				for _, d := range plan.Decisions {
					t.Logf("  keep=%-5v %s %v: %s", d.Keep, d.Entry.Name, d.Rules, d.Reason)
				}
			}
			var drilled []string
			for _, d := range plan.Decisions {
				if slices.Contains(d.Rules, RuleDrilled) {
					drilled = append(drilled, d.Entry.Name)
					if !d.Entry.Drill.Proven() || !d.Entry.Good() {
						t.Errorf("%s kept by drilled without proof: %+v", d.Entry.Name, d.Entry.Drill)
					}
				}
			}
			var wantDrilled []string
			if tc.drilled != "" {
				wantDrilled = []string{specName(t, tc.drilled)}
			}
			if !slices.Equal(drilled, wantDrilled) {
				t.Errorf("kept by drilled: %q, want %q", drilled, wantDrilled)
			}
			for _, rc := range tc.reasons {
				d := byName[specName(t, rc.spec)]
				if rc.rules != nil && !slices.Equal(d.Rules, rc.rules) {
					t.Errorf("%s: rules %q, want %q (reason %q)", rc.spec, d.Rules, rc.rules, d.Reason)
				}
				for _, h := range rc.has {
					if !strings.Contains(d.Reason, h) {
						t.Errorf("%s: reason %q lacks %q", rc.spec, d.Reason, h)
					}
				}
			}
		})
	}
}

// Drills in several clusters: each cluster keeps its own proven backup.
func TestRetentionDrilledPerCluster(t *testing.T) {
	a := withDrills(t, specEntries(t, runs(t, "2026-11-10", "2026-11-22T11:03:00Z")),
		[]drillSpec{{"2026-11-12T03:03:00Z scheduled", "passed", "2026-11-12T04:00:00Z"}})
	b := specEntries(t, runs(t, "2026-11-10", "2026-11-22T11:03:00Z"))
	for i := range b {
		b[i].ClusterID = "c2"
	}
	b[5].Drill = &catalog.DrillSummary{Passed: true, At: b[5].Time.Add(time.Hour)}
	plan := ApplyPolicy(slices.Concat(a, b), mustTime(t, "2026-11-22T12:00:00Z"), DefaultPolicy())
	checkPlan(t, slices.Concat(a, b), plan)
	got := map[string]string{}
	for _, d := range plan.Decisions {
		if slices.Contains(d.Rules, RuleDrilled) {
			if _, dup := got[d.Entry.ClusterID]; dup {
				t.Errorf("cluster %s: two backups kept by drilled", d.Entry.ClusterID)
			}
			got[d.Entry.ClusterID] = d.Entry.Name
		}
	}
	if got["c1"] != "20261112T030300.000Z-scheduled" || got["c2"] != b[5].Name {
		t.Errorf("kept by drilled: %v, want c1 20261112T030300.000Z-scheduled and c2 %s", got, b[5].Name)
	}
}

// guardPlan refuses a plan that deletes the newest proven backup (a last
// guard against a policy bug, as for the newest backup).
func TestPruneGuardKeepsNewestProven(t *testing.T) {
	in := withDrills(t, specEntries(t, runs(t, "2026-11-10", "2026-11-22T11:03:00Z")),
		[]drillSpec{{"2026-11-12T03:03:00Z scheduled", "passed", "2026-11-12T04:00:00Z"}})
	plan := ApplyPolicy(in, mustTime(t, "2026-11-22T12:00:00Z"), DefaultPolicy())
	if err := GuardPlan(plan); err != nil {
		t.Fatal(err)
	}
	for i, d := range plan.Decisions {
		if slices.Contains(d.Rules, RuleDrilled) {
			plan.Decisions[i].Keep, plan.Decisions[i].Rules = false, nil
		}
	}
	if err := GuardPlan(plan); err == nil || !strings.Contains(err.Error(), "20261112T030300.000Z-scheduled, the newest backup whose restore drill passed") {
		t.Errorf("guardPlan = %v, want a refusal naming the newest proven backup", err)
	}
}
