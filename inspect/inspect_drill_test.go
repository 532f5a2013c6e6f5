package inspect_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// putDrill records a drill of a committed backup, as drill.Run would.
func putDrill(t *testing.T, st store.Store, layout catalog.Layout, id, name string, at time.Time, passed bool, failed string) {
	t.Helper()
	r := &catalog.DrillRecord{ClusterID: id, Backup: name, Passed: passed, Failed: failed,
		StartedAt: at.Add(-20 * time.Second).UTC(), FinishedAt: at.UTC(), SourceVersion: "3.5.35", EtcdVersion: "3.5.35", ToolVersion: "test",
		Comparison: catalog.DrillComparison{Mode: catalog.CompareSource}}
	if err := catalog.PutDrill(context.Background(), st, layout, r); err != nil {
		t.Fatalf("record drill of %s/%s: %v", id, name, err)
	}
}

// lineOf is the report's line that starts with prefix.
func lineOf(t *testing.T, rep *inspect.Report, prefix string) string {
	t.Helper()
	for _, l := range rep.Lines() {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no %q line in %q", prefix, rep.Lines())
	return ""
}

// The restore-drill proof against real etcd and MinIO, with drill records
// written next to real committed backups: never drilled, a passed drill,
// a failed newest drill with an older proven backup past --max-drill-age,
// and a passed drill of a backup that no longer checks out. Each warns
// with the drill runbook as NEXT STEP and leaves the verdict HEALTHY.
func TestInspectDrill(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/registry/pods/", 20, 100)
	const id = "drill-check"
	o, st, layout := storeOptions(t, c, id)
	healthy := func(t *testing.T, rep *inspect.Report) {
		t.Helper()
		if rep.Verdict != inspect.VerdictHealthy || rep.ExitCode() != 0 {
			t.Errorf("the drill changed the verdict: %s (exit %d)", rep.Verdict, rep.ExitCode())
		}
	}
	drillOf := func(t *testing.T, rep *inspect.Report) *inspect.DrillStatus {
		t.Helper()
		if rep.Backup == nil || rep.Backup.Drill == nil {
			t.Fatalf("no drill status: %+v", rep.Backup)
		}
		return rep.Backup.Drill
	}

	res, err := backup.Run(context.Background(), backup.Options{ClusterID: id, Kind: catalog.KindScheduled,
		Etcd: testfix.EtcdConfig(c), Store: st, Layout: layout, ProbeTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	newest := res.Manifest.Name

	t.Run("never drilled", func(t *testing.T) {
		rep, _ := run(t, o)
		healthy(t, rep)
		d := drillOf(t, rep)
		if d.State != inspect.DrillNever || d.Proven != nil || d.Last != nil || !hasFlag(rep, inspect.FlagDrillMissing, "never drilled") {
			t.Errorf("drill %+v flags %+v", d, rep.Flags)
		}
		if len(rep.NextStep.Runbooks) != 1 || rep.NextStep.Runbooks[0] != inspect.RunbookDrill ||
			!strings.Contains(rep.NextStep.Action, "etcd-recovery drill --cluster-id "+id) {
			t.Errorf("next step %+v, want %s", rep.NextStep, inspect.RunbookDrill)
		}
		if l := lineOf(t, rep, "DRILL: "); !strings.Contains(l, "NEVER") {
			t.Errorf("%s", l)
		}
	})
	t.Run("passed", func(t *testing.T) {
		drilledAt := time.Now()
		putDrill(t, st, layout, id, newest, drilledAt, true, "")
		rep, _ := run(t, o)
		healthy(t, rep)
		d := drillOf(t, rep)
		if d.State != inspect.DrillOK || d.Proven == nil || d.Proven.Name != newest || d.Proven.Mode != catalog.CompareSource ||
			d.Proven.DrilledAt.Sub(drilledAt).Abs() > time.Millisecond {
			t.Errorf("drill %+v proven %+v", d, d.Proven)
		}
		if d.Age > time.Minute || d.Last == nil || d.Last.Result != inspect.DrillPassed || d.Last.Backup != newest {
			t.Errorf("age %v last %+v", d.Age, d.Last)
		}
		// Its backups have no escrow (no recipient): that warning only.
		if len(rep.Flags) != 1 || rep.Flags[0].Kind != inspect.FlagEscrowUnusable || rep.NextStep.Action != "none" {
			t.Errorf("flags %+v next %+v", rep.Flags, rep.NextStep)
		}
		if l := lineOf(t, rep, "DRILL: "); !strings.Contains(l, "newest proven restorable "+newest) || !strings.Contains(l, "OK (max 26h0m0s)") {
			t.Errorf("%s", l)
		}
	})

	var older string
	const check = "compare with source: HashKV at revision 1234 differs: restored 0x1f2e3d4c, source 0x5a6b7c8d"
	t.Run("newest drill failed, proven backup old", func(t *testing.T) {
		// An older backup drilled and passed 30 h ago; the newest backup's
		// drill, just now, failed the source comparison.
		older = writeBackup(t, st, layout, id, time.Now().Add(-30*time.Hour), 1234)
		putDrill(t, st, layout, id, older, time.Now().Add(-29*time.Hour), true, "")
		putDrill(t, st, layout, id, newest, time.Now().Add(-10*time.Second), false, check)
		rep, _ := run(t, o)
		healthy(t, rep)
		d := drillOf(t, rep)
		if d.State != inspect.DrillFailed || d.Proven == nil || d.Proven.Name != older || d.Last == nil ||
			d.Last.Backup != newest || d.Last.Result != inspect.DrillFailedResult || d.Last.Failed != check || d.Last.Mode != catalog.CompareSource {
			t.Fatalf("drill %+v proven %+v last %+v", d, d.Proven, d.Last)
		}
		if d.Age < 30*time.Hour || d.Age > 31*time.Hour || !strings.HasPrefix(d.AgeText, "30h") || d.AgeSeconds < 30*3600 {
			t.Errorf("proven age %v (%q, %ds), want 30h", d.Age, d.AgeText, d.AgeSeconds)
		}
		if !hasFlag(rep, inspect.FlagDrillFailed, newest) || !hasFlag(rep, inspect.FlagDrillFailed, check) || !hasFlag(rep, inspect.FlagDrillStale, older) {
			t.Errorf("flags %+v", rep.Flags)
		}
		ns := rep.NextStep
		if len(ns.Runbooks) != 1 || ns.Runbooks[0] != inspect.RunbookDrill || !strings.Contains(ns.Action, newest) ||
			!strings.Contains(ns.Action, check) || !strings.Contains(ns.Action, "--kind manual --drill") {
			t.Errorf("next step %+v", ns)
		}
		// The JSON report carries the values.
		var buf bytes.Buffer
		if err := inspect.Render(&buf, output.FormatJSON, rep); err != nil {
			t.Fatal(err)
		}
		var js struct {
			Backup struct {
				Drill struct {
					State  string `json:"state"`
					Proven struct {
						Name string    `json:"name"`
						Time time.Time `json:"time"`
					} `json:"proven"`
					AgeSeconds int64  `json:"ageSeconds"`
					MaxAge     string `json:"maxAge"`
					Last       struct {
						Backup, Result, Failed, Mode string
						At                           time.Time
					} `json:"last"`
				} `json:"drill"`
			} `json:"backup"`
		}
		if err := json.Unmarshal(buf.Bytes(), &js); err != nil {
			t.Fatal(err)
		}
		jd := js.Backup.Drill
		if jd.State != "failed" || jd.Proven.Name != older || jd.Proven.Time.IsZero() || jd.AgeSeconds < 30*3600 || jd.MaxAge != "26h0m0s" ||
			jd.Last.Backup != newest || jd.Last.Result != "failed" || jd.Last.Failed != check || jd.Last.Mode != "source" || jd.Last.At.IsZero() {
			t.Errorf("JSON drill %+v:\n%s", jd, buf.String())
		}

		// --max-drill-age 40h: the proven backup is young enough; the
		// failed drill still warns.
		o2 := o
		o2.MaxDrillAge = 40 * time.Hour
		rep, _ = run(t, o2)
		if d := drillOf(t, rep); d.State != inspect.DrillFailed || hasFlag(rep, inspect.FlagDrillStale, "") || !hasFlag(rep, inspect.FlagDrillFailed, check) {
			t.Errorf("--max-drill-age 40h: drill %+v flags %+v", d, rep.Flags)
		}
	})
	t.Run("proven backup damaged", func(t *testing.T) {
		// A drill proves nothing about a backup that no longer checks out.
		if err := st.Delete(context.Background(), []string{layout.Key(id, older, catalog.SnapshotObjectRaw)}); err != nil {
			t.Fatal(err)
		}
		rep, _ := run(t, o)
		healthy(t, rep)
		if d := drillOf(t, rep); d.State != inspect.DrillFailed || d.Proven != nil || !hasFlag(rep, inspect.FlagDrillMissing, "") {
			t.Errorf("drill %+v flags %+v", d, rep.Flags)
		}
		// Drilled again, passing: the newest drill passed, the newest
		// backup is proven, nothing to warn about.
		putDrill(t, st, layout, id, newest, time.Now(), true, "")
		rep, _ = run(t, o)
		if d := drillOf(t, rep); d.State != inspect.DrillOK || d.Proven == nil || d.Proven.Name != newest || hasFlag(rep, inspect.FlagDrillFailed, "") {
			t.Errorf("drill %+v flags %+v", d, rep.Flags)
		}
	})
}
