package catalog

import (
	"testing"
	"time"
)

func TestFleetRestoreKeys(t *testing.T) {
	l := Layout{Prefix: "kubx-etcd-01/"}
	now := time.Date(2026, 11, 29, 3, 4, 5, 678e6, time.UTC)
	run := NewFleetRestoreRunID(now)
	if err := ValidateFleetRestoreRunID(run); err != nil {
		t.Fatal(err)
	}
	if ValidateFleetRestoreRunID("../x") == nil || ValidateFleetRestoreRunID("20261129T030405.678Z-XYZ") == nil {
		t.Fatal("a malformed run id was accepted")
	}
	cases := []struct {
		key    string
		record string
		c      string
		start  time.Time
	}{
		{l.FleetRestorePlanKey(run), "plan", "", time.Time{}},
		{l.FleetRestoreDoneKey(run, "c1a2b3"), "done", "c1a2b3", time.Time{}},
		{l.FleetRestoreAttemptKey(run, now, false), "start", "", now},
		{l.FleetRestoreAttemptKey(run, now, true), "end", "", now},
	}
	for _, c := range cases {
		k, ok := l.ParseFleetRestoreKey(c.key)
		if !ok || k.Run != run || k.Record != c.record || k.Cluster != c.c || !k.Started.Equal(c.start) {
			t.Errorf("%s: parsed %+v %v", c.key, k, ok)
		}
		if ki := l.Classify(c.key); ki.Kind != KeyFleetRestore || ki.Name != run {
			t.Errorf("%s: classified %+v", c.key, ki)
		}
	}
	for _, bad := range []string{
		l.RestoresPrefix() + run + "/other.json",
		l.RestoresPrefix() + "notarun/plan.json",
		l.RestoresPrefix() + run + "/done/_bad.json",
		l.RestoresPrefix() + run + "/attempts/yesterday.start.json",
	} {
		if _, ok := l.ParseFleetRestoreKey(bad); ok {
			t.Errorf("%s parsed", bad)
		}
		if ki := l.Classify(bad); ki.Kind != KeyUnknown {
			t.Errorf("%s classified %v, want unknown", bad, ki.Kind)
		}
	}
	a := FleetRestoreAttempt{Started: now, Deadline: now.Add(time.Hour)}
	if !a.InProgress(now.Add(time.Minute)) || a.InProgress(now.Add(2*time.Hour)) {
		t.Error("InProgress: an attempt is in progress until its deadline")
	}
	a.Ended = now.Add(time.Minute)
	if a.InProgress(now.Add(2 * time.Minute)) {
		t.Error("InProgress: an ended attempt is not in progress")
	}
}
