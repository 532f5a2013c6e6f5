package fleet_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// testInspectAll: `inspect --all` and `inspect --cluster` with the backup
// CronJob's service account, over a namespace whose clusters are healthy,
// degraded (a member killed), down (its only member killed) and healthy
// without any backup.
func testInspectAll(t *testing.T, k *testenv.KubeAPIServer, a *kubetest.Applier, admin kubernetes.Interface) {
	ctx := testfix.Context(t, 5*time.Minute)
	dynAdmin := k.Dynamic(t, "")
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	prefix := testenv.Prefix(t)
	kubetest.CreateCOSSecret(t, admin, inspectNS, m)
	healthy := kubetest.AddEtcdCluster(t, admin, dynAdmin, inspectNS, "etcd-healthy", testenv.EtcdOptions{IP: "127.0.5.10", Members: 3})
	degraded := kubetest.AddEtcdCluster(t, admin, dynAdmin, inspectNS, "etcd-degraded", testenv.EtcdOptions{IP: "127.0.5.11", Members: 3})
	down := kubetest.AddEtcdCluster(t, admin, dynAdmin, inspectNS, "etcd-down", testenv.EtcdOptions{IP: "127.0.5.12", Members: 1})
	noBackup := kubetest.AddEtcdCluster(t, admin, dynAdmin, inspectNS, "etcd-nobackup", testenv.EtcdOptions{IP: "127.0.5.13", Members: 1})
	for _, fc := range []kubetest.Cluster{healthy, degraded, down, noBackup} {
		kubetest.PerClusterAccess(t, a, inspectNS, fc.Name)
		testenv.PutKeys(t, fc.Etcd.Client(t), "/registry/k", 100, 512)
	}

	// The CronJob's service account.
	token := kubetest.SAToken(t, admin, inspectNS, "etcd-recovery")
	sa, err := kube.New(kube.Config{Rest: k.RestConfig(token), Namespace: inspectNS})
	if err != nil {
		t.Fatal(err)
	}
	// Backups of all but etcd-nobackup, then the failures.
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}
	if _, err := fleet.BackupAll(ctx, fleet.BackupAllOptions{
		Kube: sa, Names: []string{healthy.Name, degraded.Name, down.Name}, NoEvents: true,
		Template:    backup.Options{Kind: catalog.KindScheduled, Store: st, Layout: layout, ProbeTimeout: 2 * time.Second},
		DialTimeout: 2 * time.Second,
	}); err != nil {
		t.Fatalf("backups: %v", err)
	}
	backupsAt := time.Now()
	// Drill records next to the real backups (drill.Run writes the
	// same): etcd-healthy's passed, etcd-degraded's failed the source
	// comparison; etcd-down's was never drilled.
	const failedCheck = "compare with source: HashKV at revision 212 differs: restored 0x1f2e3d4c, source 0x5a6b7c8d"
	putDrill := func(cluster string, passed bool, failed string) string {
		t.Helper()
		entries, err := catalog.Inventory(ctx, st, layout, cluster)
		if err != nil || len(entries) == 0 {
			t.Fatalf("backups of %s: %v %+v", cluster, err, entries)
		}
		r := &catalog.DrillRecord{ClusterID: cluster, Backup: entries[0].Name, Passed: passed, Failed: failed,
			StartedAt: time.Now().Add(-10 * time.Second).UTC(), FinishedAt: time.Now().UTC(), ToolVersion: "test",
			Comparison: catalog.DrillComparison{Mode: catalog.CompareSource}}
		if err := catalog.PutDrill(ctx, st, layout, r); err != nil {
			t.Fatal(err)
		}
		return entries[0].Name
	}
	healthyBackup := putDrill(healthy.Name, true, "")
	degradedBackup := putDrill(degraded.Name, false, failedCheck)
	leader := degraded.Etcd.Leader(t)
	var killed string
	for _, mem := range degraded.Etcd.Members {
		if mem != leader {
			mem.Kill()
			killed = mem.Name
			break
		}
	}
	down.Etcd.Members[0].Kill()

	tool := testfix.Tool(t)
	kc := k.Kubeconfig(t, token, "default") // --namespace picks the namespace
	common := []string{"--kubeconfig", kc, "--namespace", inspectNS, "--cos-endpoint", m.Endpoint, "--cos-region", m.Region,
		"--bucket", bucket, "--prefix", prefix, "--timeout", "2s", "--dial-timeout", "2s"}
	// args come last: they override common.
	runTool := func(args ...string) (int, string, string, time.Duration) {
		t.Helper()
		cmd := exec.CommandContext(ctx, tool, append(append([]string{"inspect"}, common...), args...)...)
		cmd.Env = testfix.ToolEnv() // COS credentials from the secret, through the API
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		elapsed := time.Since(start)
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, stdout.String(), stderr.String(), elapsed
	}

	t.Run("JSON", func(t *testing.T) {
		code, stdout, stderr, elapsed := runTool("--all", "-o", "json")
		if code != inspect.ExitUnreachable {
			t.Fatalf("exit %d, want %d (the worst: UNREACHABLE)\nstdout:\n%s\nstderr:\n%s", code, inspect.ExitUnreachable, stdout, stderr)
		}
		var rep fleet.InspectAllReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("json: %v\n%s", err, stdout)
		}
		t.Logf("inspect --all of %d clusters: %v (%d ms in the tool)", len(rep.Clusters), elapsed.Round(time.Millisecond), rep.ElapsedMS)
		if rep.Namespace != inspectNS || rep.ExitCode != inspect.ExitUnreachable || rep.Worst != inspect.VerdictUnreachable || len(rep.Clusters) != 4 {
			t.Fatalf("report: ns %s, exit %d, worst %s, %d rows", rep.Namespace, rep.ExitCode, rep.Worst, len(rep.Clusters))
		}
		type want struct {
			name, verdict, members, backup, next, drill string
			leader                                      bool
		}
		wants := []want{ // name order
			{degraded.Name, "DEGRADED", "2/3", "ok", "minority failure", "failed", true},
			{down.Name, "UNREACHABLE", "0/1", "ok", "no member answers", "never", false},
			{healthy.Name, "HEALTHY", "3/3", "ok", "none", "ok", true},
			{noBackup.Name, "HEALTHY", "1/1", "missing", "backup missing", "never", true},
		}
		for i, w := range wants {
			r := rep.Clusters[i]
			if r.Cluster != w.name || string(r.Verdict) != w.verdict || r.Members != w.members || r.Backup != w.backup ||
				r.NextStep != w.next || r.Drill != w.drill || (r.Leader != "") != w.leader || r.Error != "" || r.Report == nil {
				t.Errorf("row %d: %+v\nwant %+v", i, r, w)
				continue
			}
			if r.ExitCode != r.Report.ExitCode() || r.Report.Verdict != r.Verdict {
				t.Errorf("%s: row and report disagree: %d %s", r.Cluster, r.ExitCode, r.Report.Verdict)
			}
			if w.verdict != "UNREACHABLE" && r.DBSize <= 0 {
				t.Errorf("%s: DB size %d", r.Cluster, r.DBSize)
			}
			if w.backup == "ok" && (r.BackupName == "" || r.BackupAge == "") {
				t.Errorf("%s: newest backup %q age %q", r.Cluster, r.BackupName, r.BackupAge)
			}
		}
		if deg := rep.Clusters[0].Report; deg != nil && !strings.Contains(deg.NextStep.Action, killed) {
			t.Errorf("degraded: next step %q does not name the killed member %s", deg.NextStep.Action, killed)
		}
		// The drill values in the rows: the failed drill names its backup
		// and check; the passed one proves the healthy cluster's backup.
		if r := rep.Clusters[0]; r.DrillLastBackup != degradedBackup || r.DrillLastResult != "failed" || r.DrillLastFailed != failedCheck ||
			r.DrillLastMode != catalog.CompareSource || r.DrillLastTime.IsZero() || r.DrillProven != "" {
			t.Errorf("degraded, failed drill: %+v", r)
		}
		if r := rep.Clusters[2]; r.DrillProven != healthyBackup || r.DrillProvenTime.IsZero() || r.DrillProvenAge == "" ||
			r.DrillProvenAgeSeconds > 300 || r.DrillLastResult != "passed" {
			t.Errorf("healthy, passed drill: %+v", r)
		}
		if nb := rep.Clusters[3].Report; nb != nil {
			found := false
			for _, f := range nb.Flags {
				found = found || f.Kind == inspect.FlagBackupMissing
			}
			if !found {
				t.Errorf("no backup: flags %+v", nb.Flags)
			}
		}
		// Concurrent, each bounded: about one cluster's worst time (the
		// run is capped at twice --timeout per cluster), not the sum.
		if elapsed > 10*time.Second {
			t.Errorf("inspect --all took %v", elapsed)
		}
	})

	t.Run("Table", func(t *testing.T) {
		code, stdout, stderr, _ := runTool("--all", "--parallel", "2")
		if code != inspect.ExitUnreachable {
			t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, inspect.ExitUnreachable, stdout, stderr)
		}
		var rows [][]string
		for _, line := range strings.Split(stdout, "\n") {
			if !strings.HasPrefix(line, "│") {
				continue
			}
			var cells []string
			for _, c := range strings.Split(strings.Trim(line, "│"), "│") {
				cells = append(cells, strings.TrimSpace(c))
			}
			rows = append(rows, cells)
		}
		if len(rows) != 5 || strings.Join(rows[0], "|") != "CLUSTER|VERDICT|UP|DB SIZE|BACKUP AGE|DRILLED" {
			t.Fatalf("want a header and one row per cluster:\n%s", stdout)
		}
		for i, w := range [][]string{
			{degraded.Name, "DEGRADED", "2/3"}, {down.Name, "UNREACHABLE", "0/1"},
			{healthy.Name, "HEALTHY", "3/3"}, {noBackup.Name, "HEALTHY", "1/1"},
		} {
			if r := rows[i+1]; r[0] != w[0] || r[1] != w[1] || r[2] != w[2] {
				t.Errorf("row %d: %v, want %v", i, r, w)
			}
		}
		if r := rows[4]; r[4] != "MISSING" || !strings.Contains(stdout, "\n"+noBackup.Name+": backup missing\n") {
			t.Errorf("no-backup row: %v, and its next step on its own line:\n%s", r, stdout)
		}
		if r := rows[2]; r[3] != "-" {
			t.Errorf("down row: %v", r)
		}
		// DRILLED: the failed drill, never, the proven backup's age, never.
		for i, want := range []string{"FAILED", "NEVER", "", "NEVER"} {
			if r := rows[i+1]; want != "" && r[5] != want || want == "" && (r[5] == "" || strings.ContainsAny(r[5], "-ABCDEFGHIJKLMNOPQRSTUVWXYZ")) {
				t.Errorf("row %d DRILLED %q, want %q (an age when empty)", i, r[5], want)
			}
		}
		t.Logf("inspect --all:\n%s", stdout)
	})

	t.Run("OneCluster", func(t *testing.T) {
		code, stdout, stderr, _ := runTool("--cluster", healthy.Name)
		if code != inspect.ExitHealthy || !strings.Contains(stdout, "VERDICT: HEALTHY") || !strings.Contains(stdout, "BACKUP: newest") {
			t.Fatalf("inspect --cluster %s: exit %d\nstdout:\n%s\nstderr:\n%s", healthy.Name, code, stdout, stderr)
		}
		code, stdout, stderr, _ = runTool("--cluster", degraded.Name, "-o", "json")
		var rep inspect.Report
		if code != inspect.ExitDegraded || json.Unmarshal([]byte(stdout), &rep) != nil || rep.Verdict != inspect.VerdictDegraded ||
			rep.Backup == nil || rep.Backup.ClusterID != degraded.Name {
			t.Fatalf("inspect --cluster %s -o json: exit %d\nstdout:\n%s\nstderr:\n%s", degraded.Name, code, stdout, stderr)
		}
		code, _, stderr, _ = runTool("--cluster", "etcd-nope")
		if code != 4 || !strings.Contains(stderr, "etcd-nope not found") {
			t.Fatalf("unknown cluster: exit %d, stderr %s", code, stderr)
		}
	})

	t.Run("Stale", func(t *testing.T) {
		time.Sleep(time.Until(backupsAt.Add(1500 * time.Millisecond)))
		code, stdout, stderr, _ := runTool("--all", "--max-backup-age", "1s", "-o", "json")
		var rep fleet.InspectAllReport
		if code != inspect.ExitUnreachable || json.Unmarshal([]byte(stdout), &rep) != nil || len(rep.Clusters) != 4 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		for _, r := range rep.Clusters {
			want := "stale"
			if r.Cluster == noBackup.Name {
				want = "missing"
			}
			if r.Backup != want {
				t.Errorf("%s: backup %q, want %q", r.Cluster, r.Backup, want)
			}
		}
		if r := rep.Clusters[2]; r.Verdict != inspect.VerdictHealthy || r.NextStep != "backup stale" || !strings.HasSuffix(rep.Table().Rows[2][5], " STALE") {
			t.Errorf("healthy, stale backup: %+v", r)
		}
	})

	// A failed drill on a healthy cluster: HEALTHY (exit 0) with the
	// drill's warning; its row says FAILED and its next step is the drill
	// runbook's.
	t.Run("DrillFailed", func(t *testing.T) {
		putDrill(healthy.Name, false, failedCheck)
		code, stdout, stderr, _ := runTool("--all", "-o", "json")
		var rep fleet.InspectAllReport
		if code != inspect.ExitUnreachable || json.Unmarshal([]byte(stdout), &rep) != nil || len(rep.Clusters) != 4 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		r := rep.Clusters[2]
		if r.Cluster != healthy.Name || r.Verdict != inspect.VerdictHealthy || r.Drill != "failed" || r.NextStep != "restore drill failed" ||
			r.DrillLastFailed != failedCheck || r.DrillLastBackup != healthyBackup || rep.Table().Rows[2][6] != "FAILED" {
			t.Errorf("healthy, failed drill: %+v", r)
		}
		code, stdout, stderr, _ = runTool("--cluster", healthy.Name)
		if code != inspect.ExitHealthy || !strings.Contains(stdout, "VERDICT: HEALTHY") || !strings.Contains(stdout, "DRILL: NEVER") ||
			!strings.Contains(stdout, "newest drill FAILED") || !strings.Contains(strings.Join(strings.Fields(stdout), " "), inspect.RunbookDrill) {
			t.Errorf("inspect --cluster %s: exit %d\nstdout:\n%s\nstderr:\n%s", healthy.Name, code, stdout, stderr)
		}
	})

	// Hung members (frozen: connections are accepted, nothing answers):
	// each cluster is bounded by its own timeout and they are inspected
	// at once, so two hung clusters take about one cluster's cap (twice
	// --timeout), not the sum.
	t.Run("Hung", func(t *testing.T) {
		for _, mem := range append(append([]*testenv.EtcdMember{}, healthy.Etcd.Members...), noBackup.Etcd.Members...) {
			mem.Freeze()
		}
		code, stdout, stderr, elapsed := runTool("--all", "-o", "json", "--timeout", "1s", "--dial-timeout", "1s")
		var rep fleet.InspectAllReport
		if code != inspect.ExitUnreachable || json.Unmarshal([]byte(stdout), &rep) != nil || len(rep.Clusters) != 4 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		for _, i := range []int{2, 3} {
			if r := rep.Clusters[i]; r.Verdict != inspect.VerdictUnreachable {
				t.Errorf("%s frozen: %s", r.Cluster, r.Verdict)
			}
		}
		t.Logf("inspect --all with 2 hung clusters at --timeout 1s: %v", elapsed.Round(time.Millisecond))
		for _, r := range rep.Clusters {
			t.Logf("%s: %s in %d ms: %s", r.Cluster, r.Verdict, r.ElapsedMS, r.Error)
		}
		if elapsed >= 4*time.Second {
			t.Errorf("took %v: the hung clusters were not inspected concurrently, or not bounded", elapsed)
		}
	})
}
