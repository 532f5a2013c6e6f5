package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
)

// TestRestoreAllToTimeResumeHint: a relative --to-time is resolved once;
// the report prints the absolute time and the --to-time that resumes the
// run, and that time gives the same request (fingerprint) as the run's,
// while the relative form given again a minute later does not.
func TestRestoreAllToTimeResumeHint(t *testing.T) {
	at := time.Date(2026, 11, 29, 15, 45, 7, 0, time.FixedZone("CET", 3600))
	opts := RestoreAllOptions{ToTime: at, Parallel: 2, Order: OrderSmallest}
	r := newRestoreAll(opts)
	r.rep.Failed = []string{"kubx-etcd-01/etcd-a"}
	want := "--to-time 2026-11-29T14:45:07Z"
	if got := ToTimeFlag(r.rep.ToTime); got != want {
		t.Fatalf("ToTimeFlag %q, want %q", got, want)
	}
	tables := r.rep.Tables()
	head := strings.Join(tables[0].Lines, "\n")
	if !strings.Contains(head, "Point in time: 2026-11-29T14:45:07Z") || !strings.Contains(head, "rerun with "+want) {
		t.Errorf("the report's head does not give the absolute time and the resume flag:\n%s", head)
	}
	notes := strings.Join(tables[1].Notes, "\n")
	if !strings.Contains(notes, "A rerun of the same command with "+want+" resumes this run") {
		t.Errorf("the failure note does not give the resume flag:\n%s", notes)
	}
	// The printed time parsed again is the run's request.
	back, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(want, "--to-time "))
	if err != nil {
		t.Fatal(err)
	}
	again := RestoreAllOptions{ToTime: back}
	if catalog.FleetRestoreFingerprint(again.request()) != catalog.FleetRestoreFingerprint(opts.request()) {
		t.Error("the printed --to-time does not give the run's fingerprint: a rerun with it would not resume")
	}
	later := RestoreAllOptions{ToTime: at.Add(time.Minute)}
	if catalog.FleetRestoreFingerprint(later.request()) == catalog.FleetRestoreFingerprint(opts.request()) {
		t.Error("a different time gives the same fingerprint")
	}
	// Without a point in time, nothing about it is printed.
	plain := newRestoreAll(RestoreAllOptions{Parallel: 1})
	if h := strings.Join(plain.rep.Tables()[0].Lines, "\n"); strings.Contains(h, "Point in time") {
		t.Errorf("a report without --to-time: %s", h)
	}
}
