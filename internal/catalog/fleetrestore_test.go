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
		{l.FleetRestoreBeatKey(run, now, now.Add(61*time.Second)), "beat", "", now},
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
		l.RestoresPrefix() + run + "/attempts/yesterday.beat-1764385506.json",
		l.RestoresPrefix() + run + "/attempts/" + now.Format(TimeLayout) + ".beat-.json",
		l.RestoresPrefix() + run + "/attempts/" + now.Format(TimeLayout) + ".beat-12x.json",
		l.RestoresPrefix() + run + "/attempts/" + now.Format(TimeLayout) + ".beat--5.json",
		l.RestoresPrefix() + run + "/attempts/" + now.Format(TimeLayout) + ".beat-1764385506",
	} {
		if _, ok := l.ParseFleetRestoreKey(bad); ok {
			t.Errorf("%s parsed", bad)
		}
		if ki := l.Classify(bad); ki.Kind != KeyUnknown {
			t.Errorf("%s classified %v, want unknown", bad, ki.Kind)
		}
	}
	// The beat's time, whole seconds, is in the key: no read needed.
	if k, _ := l.ParseFleetRestoreKey(l.FleetRestoreBeatKey(run, now, now.Add(61*time.Second))); !k.Beat.Equal(now.Add(61 * time.Second).Truncate(time.Second)) {
		t.Errorf("beat time %v, want %v", k.Beat, now.Add(61*time.Second).Truncate(time.Second))
	}

	// In progress: no end record, the newest beat (or the start) younger
	// than the grace. Past the deadline a live attempt still holds its run
	// (a rerun beside it would restore the same clusters twice).
	a := FleetRestoreAttempt{Started: now, Deadline: now.Add(time.Hour)}
	g := FleetRestoreHeartbeatGrace
	for _, c := range []struct {
		name     string
		at, beat time.Duration // since the start; beat < 0: none
		want     bool
	}{
		{"just started, no beat yet", time.Minute, -1, true},
		{"no beat within the grace of the start", g, -1, false},
		{"beating", 30 * time.Minute, 29 * time.Minute, true},
		{"beat just under the grace ago", 30 * time.Minute, 30*time.Minute - g + time.Second, true},
		{"beats stopped a grace ago", 30 * time.Minute, 30*time.Minute - g, false},
		{"beats stopped long ago", 50 * time.Minute, 10 * time.Minute, false},
		{"beating, past the deadline: still running", 2 * time.Hour, 2*time.Hour - time.Second, true},
		{"past the deadline, beats stopped", 2 * time.Hour, time.Hour, false},
	} {
		beat := time.Time{}
		if c.beat >= 0 {
			beat = now.Add(c.beat)
		}
		if got := a.InProgress(now.Add(c.at), beat); got != c.want {
			t.Errorf("%s: InProgress %t, want %t", c.name, got, c.want)
		}
	}
	a.Ended = now.Add(time.Minute)
	if a.InProgress(now.Add(2*time.Minute), now.Add(2*time.Minute)) {
		t.Error("InProgress: an ended attempt is not in progress")
	}
}
