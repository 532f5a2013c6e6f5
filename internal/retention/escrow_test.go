package retention_test

import (
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/retention"
)

// The escrow decision: an escrow goes only when no remaining backup names
// it, every remaining manifest was read, its write time is known and it
// is older than the grace (a backup in flight writes its escrow before
// its manifest).
func TestDecideEscrows(t *testing.T) {
	now := time.Date(2100, 1, 16, 9, 30, 0, 0, time.UTC)
	grace := retention.DefaultPolicy().EscrowGrace()
	if grace != retention.DefaultPolicy().IncompleteAfter || grace != 24*time.Hour {
		t.Fatalf("EscrowGrace = %s, want the incomplete-folder grace (24h)", grace)
	}
	old, young := now.Add(-25*time.Hour), now.Add(-10*time.Minute)
	for _, tc := range []struct {
		name       string
		obj        retention.EscrowObject
		named      map[string][]string
		unreadable []string
		inFlight   []string
		keep       bool
		rule       string
		reason     string
	}{
		{"named by a remaining backup", retention.EscrowObject{Address: "a", LastModified: old}, map[string][]string{"a": {"b3", "b2"}}, nil, nil,
			true, retention.EscrowRuleNamed, "named by 2 backup(s): b3, b2"},
		{"named, even with an unreadable manifest", retention.EscrowObject{Address: "a", LastModified: old}, map[string][]string{"a": {"b3"}}, []string{"c/b1"}, []string{"b9"},
			true, retention.EscrowRuleNamed, "named by 1 backup(s): b3"},
		{"named by none, old: deleted", retention.EscrowObject{Address: "a", LastModified: old}, map[string][]string{"b": {"b3"}}, nil, nil,
			false, retention.EscrowRuleUnnamed, "named by no remaining backup, written 25h ago (older than 24h)"},
		{"named by none, young: a backup in flight", retention.EscrowObject{Address: "a", LastModified: young}, nil, nil, nil,
			true, retention.EscrowRuleYoung, "written 10m ago, not older than 24h: a backup in flight may name it"},
		{"named by none, exactly the grace: kept", retention.EscrowObject{Address: "a", LastModified: now.Add(-grace)}, nil, nil, nil,
			true, retention.EscrowRuleYoung, "not older than 24h"},
		{"named by none, in the future: kept", retention.EscrowObject{Address: "a", LastModified: now.Add(time.Hour)}, nil, nil, nil,
			true, retention.EscrowRuleYoung, "written 0s ago"},
		{"an unreadable manifest: kept", retention.EscrowObject{Address: "a", LastModified: old}, nil, []string{"c/b1"}, nil,
			true, retention.EscrowRuleUnreadable, "the manifest of c/b1 could not be read"},
		{"old, a backup in flight: kept", retention.EscrowObject{Address: "a", LastModified: old}, nil, nil, []string{"b9"},
			true, retention.EscrowRuleInFlight, "backup b9 is in flight and may name it"},
		{"no write time: kept", retention.EscrowObject{Address: "a"}, nil, nil, nil,
			true, retention.EscrowRuleNoTime, "never deleted automatically"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := retention.DecideEscrows([]retention.EscrowObject{tc.obj}, tc.named, tc.unreadable, tc.inFlight, now, grace)
			if len(ds) != 1 {
				t.Fatalf("%d decisions, want 1", len(ds))
			}
			d := ds[0]
			if d.Address != tc.obj.Address || d.Keep != tc.keep || d.Rule != tc.rule || !strings.Contains(d.Reason, tc.reason) {
				t.Errorf("decision %+v; want keep %v, rule %s, reason containing %q", d, tc.keep, tc.rule, tc.reason)
			}
		})
	}
	// Many backups name it: the first three, and how many more.
	d := retention.DecideEscrows([]retention.EscrowObject{{Address: "a", LastModified: old}}, map[string][]string{"a": {"b5", "b4", "b3", "b2", "b1"}}, nil, nil, now, grace)
	if want := "named by 5 backup(s): b5, b4, b3, and 2 more"; d[0].Reason != want {
		t.Errorf("reason %q, want %q", d[0].Reason, want)
	}
}
