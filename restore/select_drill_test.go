package restore

import (
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
)

// listedBackup is a committed backup at revision rev, with a drill result:
// "" never, "passed", "failed", "unreadable".
func listedBackup(t *testing.T, at string, rev int64, drill string) catalog.Listed {
	t.Helper()
	ts, err := time.Parse(time.RFC3339, at)
	if err != nil {
		t.Fatal(err)
	}
	name := catalog.BackupName(ts, catalog.KindScheduled)
	m := &catalog.Manifest{Format: catalog.ManifestFormat, ClusterID: "c1", Name: name, Kind: catalog.KindScheduled, StartedAt: ts,
		RevisionBefore: rev, RevisionAfter: rev, ServerVersion: "3.5.35"}
	l := catalog.Listed{Entry: catalog.Entry{ClusterID: "c1", Name: name, Time: ts, Kind: catalog.KindScheduled, Committed: true}, Manifest: m}
	drilled := ts.Add(time.Hour)
	switch drill {
	case "":
	case "passed":
		l.Drill = &catalog.DrillSummary{Passed: true, At: drilled, Mode: catalog.CompareSource}
	case "failed":
		l.Drill = &catalog.DrillSummary{At: drilled, Failed: "hashkv: restored 0x1 != source 0x2", Mode: catalog.CompareSource}
	case "unreadable":
		l.Drill = &catalog.DrillSummary{Passed: true, Err: "drill record: unexpected end of JSON input"}
	default:
		t.Fatalf("drill %q", drill)
	}
	return l
}

func names(cands []Candidate) []string {
	var out []string
	for _, c := range cands {
		out = append(out, c.Name)
	}
	return out
}

// Ranking with drills: the revision first; among equal revisions a
// drilled backup before a newer undrilled one (and the reason says so); a
// failed drill is set aside with its check; an unreadable record is no
// proof but no failure. On the old code the newer undrilled backup won
// and the failed one was chosen.
func TestRankCandidatesDrills(t *testing.T) {
	a := listedBackup(t, "2026-11-22T03:03:00Z", 500, "passed")
	b := listedBackup(t, "2026-11-22T11:03:00Z", 500, "")
	c := listedBackup(t, "2026-11-22T19:03:00Z", 500, "failed")
	d := listedBackup(t, "2026-11-21T19:03:00Z", 400, "passed")
	e := listedBackup(t, "2026-11-22T07:00:00Z", 500, "unreadable")
	cands, ignored := rankCandidates([]catalog.Listed{c, b, e, a, d})
	if got, want := strings.Join(names(cands), " "), strings.Join([]string{a.Name, b.Name, e.Name, d.Name}, " "); got != want {
		t.Fatalf("ranked %s\nwant   %s", got, want)
	}
	if len(ignored) != 1 || ignored[0].Name != c.Name ||
		!strings.Contains(ignored[0].Reason, "restore drill FAILED 2026-11-22T20:03:00Z: hashkv: restored 0x1 != source 0x2") ||
		!strings.Contains(ignored[0].Reason, "only when named with --backup") {
		t.Fatalf("ignored %+v", ignored)
	}
	if cands[0].Drill == nil || !cands[0].Drill.Passed || cands[2].Drill == nil || cands[2].Drill.Passed || cands[1].Drill != nil {
		t.Errorf("drill summaries: %+v / %+v / %+v", cands[0].Drill, cands[1].Drill, cands[2].Drill)
	}
	r := chooseReason(cands, 0, false, &Survivor{Skipped: "--no-live"})
	for _, want := range []string{"highest revision (500)", "ties with " + b.Name + ", and was drilled", "drilled 2026-11-22T04:03:00Z: proven restorable"} {
		if !strings.Contains(r, want) {
			t.Errorf("reason %q lacks %q", r, want)
		}
	}
	// A higher revision beats a drill.
	f := listedBackup(t, "2026-11-22T20:03:00Z", 600, "")
	if cands, _ := rankCandidates([]catalog.Listed{a, f}); cands[0].Name != f.Name {
		t.Errorf("a drilled backup at a lower revision beat a higher revision: %v", names(cands))
	}
	// The survivor's snapshot stays first among equal revisions.
	planned := Candidate{Name: "survivor", Revision: 500, Planned: true, Time: time.Date(2026, 11, 22, 21, 0, 0, 0, time.UTC)}
	cands = append([]Candidate{planned}, cands...)
	sortCandidates(cands)
	if cands[0].Name != "survivor" {
		t.Errorf("the survivor's planned snapshot is not first: %v", names(cands))
	}
}

// selectCandidate: without --backup the best candidate; --backup of a
// failed-drill backup uses it with a warning; every backup failed: an
// error that names them and says to pass --backup; the survivor's taken
// snapshot first among equal revisions.
func TestSelectCandidateDrills(t *testing.T) {
	a := listedBackup(t, "2026-11-22T03:03:00Z", 500, "passed")
	c := listedBackup(t, "2026-11-22T19:03:00Z", 500, "failed")
	listed := []catalog.Listed{c, a}
	cands, ignored := rankCandidates(listed)

	got, i, err := selectCandidate("c1", "p/c1/", listed, cands, ignored, "", &Survivor{Skipped: "--no-live"})
	if err != nil || got[i].Name != a.Name {
		t.Fatalf("no --backup: chose %v, %v", i, err)
	}

	got, i, err = selectCandidate("c1", "p/c1/", listed, cands, ignored, c.Name, &Survivor{Skipped: "--no-live"})
	if err != nil || i < 0 || got[i].Name != c.Name {
		t.Fatalf("--backup %s: %d %v", c.Name, i, err)
	}
	if !strings.Contains(got[i].Detail, "WARNING: restore drill FAILED 2026-11-22T20:03:00Z: hashkv") {
		t.Errorf("forced failed candidate's detail %q", got[i].Detail)
	}
	r := chooseReason(got, i, true, &Survivor{Skipped: "--no-live"})
	for _, want := range []string{"forced with --backup (revision 500)", "WARNING: its restore drill FAILED 2026-11-22T20:03:00Z: hashkv: restored 0x1 != source 0x2",
		"the newest candidate would have been " + a.Name} {
		if !strings.Contains(r, want) {
			t.Errorf("forced reason %q lacks %q", r, want)
		}
	}

	// Every committed backup failed its drill.
	d := listedBackup(t, "2026-11-21T03:03:00Z", 400, "failed")
	allFailed := []catalog.Listed{c, d}
	cands, ignored = rankCandidates(allFailed)
	_, _, err = selectCandidate("c1", "p/c1/", allFailed, cands, ignored, "", &Survivor{Skipped: "--no-live"})
	if err == nil {
		t.Fatal("every backup failed its drill: no error")
	}
	for _, want := range []string{"every committed backup of cluster c1 failed its restore drill", c.Name, d.Name, "hashkv", "pass --backup NAME"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// Nothing at all: today's error.
	_, _, err = selectCandidate("c1", "p/c1/", nil, nil, nil, "", &Survivor{Skipped: "--no-live"})
	if err == nil || !strings.Contains(err.Error(), "no committed backup of cluster c1 under p/c1/, and no surviving member to snapshot (--no-live)") {
		t.Errorf("no backups: %v", err)
	}
	// An unknown --backup: today's error.
	cands, ignored = rankCandidates(listed)
	if _, _, err = selectCandidate("c1", "p/c1/", listed, cands, ignored, "nope", nil); err == nil || !strings.Contains(err.Error(), "--backup nope: not found") {
		t.Errorf("unknown --backup: %v", err)
	}

	// The survivor's snapshot just taken, at the revision of a drilled
	// backup, is still chosen first.
	s := listedBackup(t, "2026-11-22T21:00:00Z", 500, "")
	s.Kind, s.Manifest.Kind = catalog.KindPreRestore, catalog.KindPreRestore
	withSurvivor := []catalog.Listed{s, a}
	cands, ignored = rankCandidates(withSurvivor)
	if cands[0].Name != a.Name {
		t.Fatalf("before selectCandidate, the drilled backup ranks first: %v", names(cands))
	}
	got, i, err = selectCandidate("c1", "p/c1/", withSurvivor, cands, ignored, "", &Survivor{Member: "m0", Backup: s.Name})
	if err != nil || got[i].Name != s.Name {
		t.Errorf("the survivor's snapshot was not chosen: %v %v", names(got), err)
	}
}
