package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/retention"
)

// list with drill results still fits 120 columns; the drill's comparison
// mode is in -o wide and JSON, a failed check and an unreadable record's
// error go with the reason (below the table by default).
func TestListDrillWidths(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	passedAt, failedAt := now.Add(-3*time.Hour), now.Add(-26*time.Hour)
	v2 := 1234
	failed := "hashkv: the restored keyspace's HashKV 0x1a2b3c4d at revision 123456789 differs from the source member " + longMember + "'s 0x5e6f7a8b"
	rows := prune.ListRows{
		{Name: longBackup, Kind: catalog.KindScheduled, Time: now, Status: "committed", Revision: 123456789, RawSize: 8 << 30,
			StoredSize: 3 << 30, TotalSize: 3<<30 + 12345, V2Keys: &v2, Source: longMember,
			Drill:     &catalog.DrillResult{Passed: true, At: &passedAt, Mode: catalog.CompareSelf},
			Retention: prune.ListRetention{Keep: true, Rules: []string{"newest", "recent", "drilled"}, Reason: "newest; recent 1/3; drilled (passed 2026-11-22T03:20:00Z)"}},
		{Name: longBackup2, Kind: catalog.KindScheduled, Time: now, Status: "committed", Revision: 123456700, RawSize: 8 << 30,
			StoredSize: 3 << 30, TotalSize: 3<<30 + 12345, V2Keys: &v2, Source: longMember,
			Drill:     &catalog.DrillResult{At: &failedAt, Failed: failed, Mode: catalog.CompareSource},
			Retention: prune.ListRetention{Keep: true, Rules: []string{"recent"}, Reason: "recent 2/3"}},
		{Name: "20261120T031500.123Z-scheduled-0a1b2c3e", Kind: catalog.KindScheduled, Time: now, Status: "committed", Revision: 123450000,
			Drill:     &catalog.DrillResult{Error: "drill record: unexpected end of JSON input"},
			Retention: prune.ListRetention{Reason: "scheduled: not among the 3 newest scheduled, not an anchor"}},
		{Name: "20261119T031500.123Z-scheduled-0a1b2c3f", Kind: catalog.KindScheduled, Time: now, Status: "committed", Revision: 123440000,
			Retention: prune.ListRetention{Reason: "scheduled: not among the 3 newest scheduled, not an anchor"}},
	}
	checkWidth(t, "list with drills", func(f output.Format) string {
		return renderTo(func(w *bytes.Buffer) error { return output.Render(w, f, rows.Table(), rows) })
	}, []string{catalog.CompareSelf, catalog.CompareSource}, failed, "drill record: unexpected end of JSON input", "drilled (passed 2026-11-22T03:20:00Z)")
	def := renderTo(func(w *bytes.Buffer) error { return output.Render(w, output.FormatTable, rows.Table(), rows) })
	if !strings.Contains(def, "DRILL") || strings.Contains(def, "DRILL MODE") {
		t.Errorf("the default table should have DRILL, and DRILL MODE only with -o wide:\n%s", def)
	}
	flat := strings.Join(strings.Fields(def), " ")
	for _, want := range []string{"passed 3h ago", "FAILED 26h ago", "unreadable", "never", "drill FAILED: hashkv",
		"drill record unreadable: drill record: unexpected end of JSON input"} {
		if !strings.Contains(flat, want) {
			t.Errorf("the default table lacks %q:\n%s", want, def)
		}
	}
	js := renderTo(func(w *bytes.Buffer) error { return output.Render(w, output.FormatJSON, rows.Table(), rows) })
	for _, want := range []string{`"drill": {
      "passed": true,
      "at": "` + passedAt.Format(time.RFC3339Nano) + `",
      "mode": "self-consistency"
    }`, `"drill": null`, `"error": "drill record: unexpected end of JSON input"`} {
		if !strings.Contains(js, want) {
			t.Errorf("list -o json lacks %s:\n%s", want, js)
		}
	}
}

// list and prune --dry-run against a real bucket with drill records: the
// DRILL column and the JSON drill object for each backup, the drilled
// rule in the retention reason and rules, in both commands; then the
// prune keeps the proven backup. On the old code there was no DRILL
// column and the proven backup was deleted.
func TestListAndPruneShowDrills(t *testing.T) {
	t.Parallel()
	r := newPruneRig(t)
	const id = "cli-drill"
	now := time.Now().UTC()
	var names []string
	for i := range 9 {
		names = append(names, r.put(t, id, now.Add(-time.Hour-time.Duration(i)*8*time.Hour), catalog.KindScheduled, true))
	}
	ctx := context.Background()
	rec := func(name string, passed bool, at time.Time) {
		d := &catalog.DrillRecord{ClusterID: id, Backup: name, Passed: passed, StartedAt: at.Add(-time.Minute), FinishedAt: at,
			SourceVersion: "3.5.35", EtcdVersion: "3.5.35", ToolVersion: "test", Revision: 7,
			Comparison: catalog.DrillComparison{Mode: catalog.CompareSource}}
		if !passed {
			d.Failed = "hashkv: restored 0x1 != source 0x2"
		}
		if err := catalog.PutDrill(ctx, r.store, r.layout, d); err != nil {
			t.Fatal(err)
		}
	}
	proven := names[5] // 41h old: no other rule keeps it unless it is an anchor
	rec(proven, true, now.Add(-40*time.Hour))
	rec(names[1], false, now.Add(-8*time.Hour))
	if _, err := r.store.Put(ctx, r.layout.Key(id, names[2], catalog.DrillObject), strings.NewReader(`{"format":`)); err != nil {
		t.Fatal(err)
	}

	code, js, errOut := r.run(t, "list", "--cluster-id", id, "-o", "json")
	if code != 0 {
		t.Fatalf("list -o json: exit %d: %s", code, errOut)
	}
	var rows []struct {
		Name      string               `json:"name"`
		Drill     *catalog.DrillResult `json:"drill"`
		Retention struct {
			Keep   bool     `json:"keep"`
			Rules  []string `json:"rules"`
			Reason string   `json:"reason"`
		} `json:"retention"`
	}
	if err := json.Unmarshal([]byte(js), &rows); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, js)
	}
	byName := map[string]int{}
	for i, row := range rows {
		byName[row.Name] = i
	}
	if row := rows[byName[proven]]; row.Drill == nil || !row.Drill.Passed || row.Drill.Mode != catalog.CompareSource ||
		!row.Retention.Keep || !slices.Contains(row.Retention.Rules, retention.RuleDrilled) || !strings.Contains(row.Retention.Reason, "drilled (passed ") {
		t.Errorf("list: the proven backup %s: %+v", proven, row)
	}
	if d := rows[byName[names[1]]].Drill; d == nil || d.Passed || d.Failed != "hashkv: restored 0x1 != source 0x2" || d.At == nil {
		t.Errorf("list: the failed drill of %s: %+v", names[1], d)
	}
	if d := rows[byName[names[2]]].Drill; d == nil || d.Passed || !strings.Contains(d.Error, "drill record") {
		t.Errorf("list: the unreadable drill record of %s: %+v", names[2], d)
	}
	if d := rows[byName[names[0]]].Drill; d != nil {
		t.Errorf("list: %s was never drilled, got %+v", names[0], d)
	}

	code, table, errOut := r.run(t, "list", "--cluster-id", id)
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, errOut)
	}
	cells := pruneTable(t, table)
	col := slices.Index(cells[0], "DRILL")
	if col < 0 {
		t.Fatalf("no DRILL column:\n%s", table)
	}
	want := map[string]string{proven: "passed 40h ago", names[1]: "FAILED 8h ago", names[2]: "unreadable", names[0]: "never"}
	for _, row := range cells[1:] {
		if w, ok := want[row[0]]; ok && row[col] != w {
			t.Errorf("list: %s DRILL %q, want %q", row[0], row[col], w)
		}
		delete(want, row[0])
	}
	if len(want) > 0 {
		t.Errorf("list: rows missing from the table: %v\n%s", want, table)
	}

	code, out, errOut := r.run(t, "prune", "--cluster-id", id, "--dry-run", "-o", "json")
	if code != 0 {
		t.Fatalf("prune --dry-run -o json: exit %d: %s", code, errOut)
	}
	var pj struct {
		Clusters []struct {
			Backups []struct {
				Name   string               `json:"name"`
				Keep   bool                 `json:"keep"`
				Rules  []string             `json:"rules"`
				Reason string               `json:"reason"`
				Drill  *catalog.DrillResult `json:"drill"`
			} `json:"backups"`
		} `json:"clusters"`
	}
	if err := json.Unmarshal([]byte(out), &pj); err != nil || len(pj.Clusters) != 1 {
		t.Fatalf("prune -o json: %v\n%s", err, out)
	}
	found := false
	for _, b := range pj.Clusters[0].Backups {
		if b.Name == proven {
			found = true
			if !b.Keep || !slices.Contains(b.Rules, retention.RuleDrilled) || b.Drill == nil || !b.Drill.Passed {
				t.Errorf("prune --dry-run: the proven backup: %+v", b)
			}
		}
	}
	if !found {
		t.Errorf("prune --dry-run lacks %s", proven)
	}
	code, table, errOut = r.run(t, "prune", "--cluster-id", id, "--dry-run")
	if code != 0 || !strings.Contains(strings.Join(strings.Fields(table), " "), "drilled (passed") {
		t.Errorf("prune --dry-run table: exit %d, no drilled rule: %s\n%s", code, errOut, table)
	}
	if code, _, errOut := r.run(t, "prune", "--cluster-id", id); code != 0 {
		t.Fatalf("prune: exit %d: %s", code, errOut)
	}
	listed, err := catalog.ListBackups(ctx, r.store, r.layout, id)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(listed, func(l catalog.Listed) bool { return l.Name == proven && l.Drill.Proven() }) {
		t.Errorf("prune deleted the proven backup %s", proven)
	}
}
