package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// backupDrillJSON is backup --drill -o json.
type backupDrillJSON struct {
	catalog.Manifest
	Pruned *prune.PruneReport `json:"pruned"`
	Drill  *struct {
		Result     string               `json:"result"`
		Comparison string               `json:"comparison"`
		Error      string               `json:"error"`
		Record     *catalog.DrillRecord `json:"record"`
	} `json:"drill"`
}

// backup --drill against real etcd 3.5 (mutual TLS) and MinIO: the new
// backup is drilled before the prune, the restored keyspace equals the
// source's at the snapshot's revision, and drill.json is next to it. With a
// bin dir holding no etcd, the backup is still committed, the drill is
// reported as not run (no record), and the exit is 1 naming the cluster,
// the backup and the step.
func TestCLIBackupDrill(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/registry/pods/", 400, 256)
	testenv.PutKeys(t, c.Client(t), "/registry/secrets/", 50, 128)
	cr := newCLIRig(t)
	cos, st, layout := cr.cos, cr.Store, cr.Layout
	ctx := testfix.Context(t, 5*time.Minute)

	t.Run("Passes", func(t *testing.T) {
		start := time.Now()
		code, out, errOut := runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", "drill1", "--kind", "scheduled", "--drill", "--prune",
			"--etcd-bin-dir", testenv.DrillBinDir(t, testenv.V35), "--temp-dir", t.TempDir(), "-o", "json"}, clusterArgs(c), cos)...)
		t.Logf("backup --drill: exit %d in %v", code, time.Since(start).Round(time.Millisecond))
		if code != 0 {
			t.Fatalf("backup --drill: exit %d\n%s\n%s", code, out, lastLinesOf(errOut, 20))
		}
		var res backupDrillJSON
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("backup --drill -o json: %v\n%s", err, out)
		}
		d := res.Drill
		if res.Name == "" || d == nil || d.Result != "passed" || d.Comparison != catalog.CompareSource || d.Record == nil || res.Pruned == nil {
			t.Fatalf("backup --drill -o json: %s", out)
		}
		cmp := d.Record.Comparison
		if !d.Record.Passed || cmp.Equal == nil || !*cmp.Equal || cmp.SourceHash == nil || cmp.RestoredHash == nil || *cmp.SourceHash != *cmp.RestoredHash {
			t.Errorf("drill record: passed %v, comparison %+v", d.Record.Passed, cmp)
		}
		rec, err := catalog.LoadDrill(ctx, st, layout, "drill1", res.Name)
		if err != nil || rec == nil || !rec.Passed || rec.Backup != res.Name || rec.Comparison.Mode != catalog.CompareSource {
			t.Fatalf("drill.json of %s: %+v %v", res.Name, rec, err)
		}
		if !strings.Contains(errOut, "restore drill passed") || !strings.Contains(errOut, "cluster=drill1") {
			t.Errorf("no log line for the drill:\n%s", lastLinesOf(errOut, 10))
		}

		// The table: a DRILL column and the drill's line below it.
		code, out, errOut = runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", "drill1", "--drill",
			"--etcd-bin-dir", testenv.DrillBinDir(t, testenv.V35), "--temp-dir", t.TempDir()}, clusterArgs(c), cos)...)
		if code != 0 || !strings.Contains(out, "DRILL") || !strings.Contains(out, "passed (source)") || !strings.Contains(out, "drill: passed") {
			t.Errorf("backup --drill table: exit %d\n%s\n%s", code, out, lastLinesOf(errOut, 10))
		}
	})

	t.Run("NoEtcd", func(t *testing.T) {
		code, out, errOut := runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", "drill2", "--drill", "--prune",
			"--etcd-bin-dir", testenv.DrillBinDir(t), "--temp-dir", t.TempDir(), "-o", "json"}, clusterArgs(c), cos)...)
		if code != exitFailure {
			t.Fatalf("backup --drill without etcd: exit %d, want 1\n%s\n%s", code, out, lastLinesOf(errOut, 20))
		}
		var res backupDrillJSON
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("-o json: %v\n%s", err, out)
		}
		if res.Drill == nil || res.Drill.Result != "not run" || res.Drill.Record != nil || res.Pruned == nil {
			t.Fatalf("drill without etcd: %s", out)
		}
		// Committed, and no record of a drill that never ran.
		list, err := catalog.ListBackups(ctx, st, layout, "drill2")
		if err != nil || len(list) != 1 || list[0].Manifest == nil || list[0].Name != res.Name {
			t.Fatalf("backups of drill2: %+v %v", list, err)
		}
		if rec, err := catalog.LoadDrill(ctx, st, layout, "drill2", res.Name); err != nil || rec != nil {
			t.Errorf("drill.json of a drill that could not run: %+v %v", rec, err)
		}
		t.Logf("stderr: %s", lastLinesOf(errOut, 3))
		for _, want := range []string{"drill2", res.Name, "committed", `"find etcd"`} {
			if !strings.Contains(errOut, want) {
				t.Errorf("stderr does not say %q:\n%s", want, lastLinesOf(errOut, 5))
			}
		}
	})
}

// backup --drill flag errors are usage errors (exit 4), before anything is
// contacted.
func TestBackupDrillUsage(t *testing.T) {
	t.Parallel()
	assertUsageErrors(t, []string{"backup", "--kubeconfig", "/nonexistent/kubeconfig"}, []usageCase{
		{[]string{"--all", "--drill", "--drill-share", "0"}, "--drill-share 0"},
		{[]string{"--all", "--drill", "--drill-parallel", "0"}, "--drill-parallel 0"},
		{[]string{"--all", "--drill-share", "3"}, "--drill-share is for --drill"},
		{[]string{"--cluster-id", "a", "--drill", "--drill-share", "3"}, "are for --all/--cluster"},
		{[]string{"--cluster-id", "a", "--drill", "--etcd-bin-dir", "/nonexistent/bin"}, "--etcd-bin-dir /nonexistent/bin"},
		{[]string{"--cluster-id", "a", "--drill", "--temp-dir", "/nonexistent/scratch"}, "--temp-dir /nonexistent/scratch"},
	})
}

func lastLinesOf(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
