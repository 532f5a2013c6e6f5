package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// These tests run the command as main would (run with argv), against real
// etcd clusters and a real MinIO. They start their own MinIO (not the shared
// one) so this package needs no TestMain.

func runInspectCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), append([]string{"etcd-recovery"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func inspectEtcdArgs(c *testenv.EtcdCluster) []string {
	return []string{"--endpoints", strings.Join(c.Endpoints(), ","),
		"--cacert", c.PKI.CAFile, "--cert", c.PKI.ClientCertFile, "--key", c.PKI.ClientKeyFile}
}

// inspectRow is one member row of the table output.
type inspectRow struct{ name, id, endpoint, health, role string }

// parseInspectTable reads the member rows of the table output and its VERDICT line.
func parseInspectTable(t *testing.T, out string) (rows []inspectRow, verdict string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "VERDICT: "); ok {
			verdict = v
		}
		if !strings.HasPrefix(line, "│") {
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "│"), "│") {
			cells = append(cells, strings.TrimSpace(c))
		}
		if len(cells) < 6 {
			t.Fatalf("table row %q", line)
		}
		if cells[0] == "NAME" {
			continue
		}
		rows = append(rows, inspectRow{cells[0], cells[1], cells[2], cells[4], cells[5]})
	}
	return rows, verdict
}

// inspectBoth runs inspect with -o wide and -o json, checks both exit with
// wantCode and print nothing on stderr, and that they show the same members
// and verdict. It returns the JSON report.
func inspectBoth(t *testing.T, wantCode int, args ...string) *inspect.Report {
	t.Helper()
	code, table, stderr := runInspectCLI(t, append([]string{"inspect", "-o", "wide"}, args...)...)
	t.Logf("inspect (exit %d):\n%s", code, table)
	if code != wantCode || stderr != "" {
		t.Fatalf("table: exit %d (want %d), stderr %q", code, wantCode, stderr)
	}
	code, js, stderr := runInspectCLI(t, append([]string{"inspect", "-o", "json"}, args...)...)
	if code != wantCode || stderr != "" {
		t.Fatalf("json: exit %d (want %d), stderr %q", code, wantCode, stderr)
	}
	var rep inspect.Report
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("json output does not parse: %v\n%s", err, js)
	}
	rows, verdict := parseInspectTable(t, table)
	if !strings.HasPrefix(verdict, string(rep.Verdict)+" (") {
		t.Errorf("table verdict %q, json verdict %s", verdict, rep.Verdict)
	}
	if len(rows) != len(rep.Members) {
		t.Fatalf("table has %d members, json %d", len(rows), len(rep.Members))
	}
	for i, m := range rep.Members {
		r := rows[i]
		id := m.ID
		if id == "" {
			id = "-"
		}
		if r.name != m.Label() || r.id != id || r.endpoint != m.ClientURL || r.health != string(m.Health) {
			t.Errorf("member %d: table %+v, json %s %s %s %s", i, r, m.Label(), m.ID, m.ClientURL, m.Health)
		}
	}
	if !strings.Contains(table, "NEXT STEP: "+rep.NextStep.Action) {
		t.Errorf("table next step differs from json %q", rep.NextStep.Action)
	}
	return &rep
}

// Every etcd generation: HEALTHY, exit 0, leader named, table = json.
func TestInspectCLIHealthy(t *testing.T) {
	t.Parallel()
	for _, v := range testenv.AllVersions {
		t.Run(string(v), func(t *testing.T) {
			t.Parallel()
			c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: v, TLS: true})
			leader := c.Leader(t)
			rep := inspectBoth(t, 0, inspectEtcdArgs(c)...)
			if rep.Verdict != inspect.VerdictHealthy || rep.Leader != leader.Name || len(rep.Members) != 3 || rep.Tolerates != 1 {
				t.Errorf("%s leader %q members %d tolerates %d", rep.Verdict, rep.Leader, len(rep.Members), rep.Tolerates)
			}
			for _, m := range rep.Members {
				if m.Health != inspect.HealthHealthy || !strings.HasPrefix(m.Version, string(v)+".") {
					t.Errorf("%+v", m)
				}
			}
		})
	}
}

// The verdict exit codes, members dying one by one; no extra error line.
func TestInspectCLIExitCodes(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true})
	leader := c.Leader(t)
	var fs []*testenv.EtcdMember
	for _, m := range c.Members {
		if m != leader {
			fs = append(fs, m)
		}
	}
	args := append(inspectEtcdArgs(c), "--probe-timeout", "2s")

	fs[0].Kill()
	rep := inspectBoth(t, inspect.ExitDegraded, args...)
	if rep.Verdict != inspect.VerdictDegraded || rep.Tolerates != 0 {
		t.Errorf("%s tolerates %d", rep.Verdict, rep.Tolerates)
	}
	fs[1].Kill()
	rep = inspectBoth(t, inspect.ExitQuorumLost, args...)
	if rep.Verdict != inspect.VerdictQuorumLost || !strings.Contains(rep.NextStep.Action, "survivor snapshot of "+leader.Name) {
		t.Errorf("%s %+v", rep.Verdict, rep.NextStep)
	}
	leader.Kill()
	rep = inspectBoth(t, inspect.ExitUnreachable, args...)
	if rep.Verdict != inspect.VerdictUnreachable {
		t.Errorf("%s", rep.Verdict)
	}
}

// Bad flags and configuration: exit 4 with a message, before any network.
func TestInspectCLIUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "xml"}, "unknown output format"},
		{[]string{"--probe-timeout", "0s"}, "--probe-timeout"},
		{[]string{"--probe-timeout", "-1s"}, "--probe-timeout"},
		{[]string{"--max-backup-age", "0s"}, "--max-backup-age"},
		{[]string{"--max-drill-age", "0s"}, "--max-drill-age"},
		{[]string{"--max-drill-age", "-1h"}, "--max-drill-age"},
		{[]string{"--quota-backend-bytes", "0"}, "--quota-backend-bytes"},
		{[]string{"--cert", "/x.pem"}, "--cert and --key"},
		{[]string{"--bucket", "b", "--cos-endpoint", "http://127.0.0.1:1"}, "--cluster-id"},
		{[]string{"--bucket", "b", "--cluster-id", "../x", "--cos-endpoint", "http://127.0.0.1:1"}, "invalid cluster id"},
		{[]string{"--bucket", "b", "--cluster-id", "x", "--cos-endpoint", "http://127.0.0.1:1", "--cos-credentials-dir", filepath.Join(dir, "none")}, "credentials"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
	} {
		code, stdout, stderr := runInspectCLI(t, append([]string{"inspect"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("%v: exit %d stderr %q stdout %q; want exit 4 and %q", tc.args, code, stderr, stdout, tc.want)
		}
	}
}

// Backup freshness through the CLI, on a real MinIO: missing, then a real
// backup taken by the backup command, then the store down (a warning, exit
// 0 all along).
func TestInspectCLIBackup(t *testing.T) {
	t.Parallel()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	m := testenv.StartMinIO(t)
	bucket := m.NewBucket(t)
	creds := t.TempDir()
	for name, val := range map[string]string{"access_key_id": m.AccessKey, "secret_access_key": m.SecretKey} {
		if err := os.WriteFile(filepath.Join(creds, name), []byte(val+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	inspectCOSArgs := func(endpoint string) []string {
		return []string{"--cos-endpoint", endpoint, "--cos-region", m.Region, "--bucket", bucket,
			"--prefix", "etcd-backups", "--cos-credentials-dir", creds, "--cos-max-retries", "1", "--cluster-id", "cli-check"}
	}
	args := append(inspectEtcdArgs(c), inspectCOSArgs(m.Endpoint)...)

	rep := inspectBoth(t, 0, args...)
	if rep.Backup == nil || rep.Backup.State != inspect.BackupMissing {
		t.Fatalf("no backup yet: %+v", rep.Backup)
	}

	code, out, stderr := runInspectCLI(t, append([]string{"backup", "--kind", "scheduled", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("backup: exit %d: %s\n%s", code, stderr, out)
	}
	var man struct {
		Name           string `json:"name"`
		RevisionBefore int64  `json:"revisionBefore"`
	}
	if err := json.Unmarshal([]byte(out), &man); err != nil {
		t.Fatal(err)
	}
	rep = inspectBoth(t, 0, args...)
	b := rep.Backup
	if b == nil || b.State != inspect.BackupOK || b.Newest == nil || b.Newest.Name != man.Name || b.Newest.Revision != man.RevisionBefore || b.AgeSeconds > 60 {
		t.Fatalf("after a backup: %+v (want %s)", b, man.Name)
	}
	// Never drilled: a warning pointing to the drill runbook, exit 0.
	code, table, _ := runInspectCLI(t, append([]string{"inspect", "-o", "wide"}, args...)...)
	if code != 0 || !strings.Contains(table, "BACKUP: newest "+man.Name+" (scheduled, revision "+strconv.FormatInt(man.RevisionBefore, 10)) ||
		!strings.Contains(table, "DRILL: NEVER") || !strings.Contains(table, "NEXT STEP: never drilled") || !strings.Contains(table, inspect.RunbookDrill) {
		t.Errorf("table:\n%s", table)
	}
	// Its drill passed (a record as drill.Run writes it): nothing to
	// do; with --max-drill-age 1ms the proven backup is too old.
	st := testfix.Store(t, m, bucket)
	if err := catalog.PutDrill(context.Background(), st, catalog.Layout{Prefix: "etcd-backups"}, &catalog.DrillRecord{ClusterID: "cli-check",
		Backup: man.Name, Passed: true, StartedAt: time.Now().Add(-time.Second), FinishedAt: time.Now(), ToolVersion: "test",
		Comparison: catalog.DrillComparison{Mode: catalog.CompareSource}}); err != nil {
		t.Fatal(err)
	}
	code, table, _ = runInspectCLI(t, append([]string{"inspect", "-o", "wide"}, args...)...)
	if code != 0 || !strings.Contains(table, "DRILL: newest proven restorable "+man.Name) || !strings.Contains(table, "NEXT STEP: none") {
		t.Errorf("drilled, table:\n%s", table)
	}
	rep = inspectBoth(t, 0, append(args, "--max-drill-age", "1ms")...)
	if d := rep.Backup.Drill; d == nil || d.State != inspect.DrillOld || d.Proven == nil || d.Proven.Name != man.Name || d.MaxAgeText != "1ms" ||
		rep.NextStep.Runbooks[0] != inspect.RunbookDrill {
		t.Errorf("--max-drill-age 1ms: %+v %+v", rep.Backup.Drill, rep.NextStep)
	}

	// The store is down: a warning, the etcd verdict and exit code unchanged.
	// Nothing listens there: a port reserved below the ephemeral range,
	// never bound (no outgoing connection can hold it as its source port).
	dead := "http://127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	start := time.Now()
	rep = inspectBoth(t, 0, append(inspectEtcdArgs(c), append(inspectCOSArgs(dead), "--probe-timeout", "1s")...)...)
	if rep.Backup == nil || rep.Backup.State != inspect.BackupUnknown || !strings.Contains(rep.Backup.Error, "connection refused") || rep.Verdict != inspect.VerdictHealthy {
		t.Errorf("store down: %s %+v", rep.Verdict, rep.Backup)
	}
	t.Logf("two runs with the store down took %v", time.Since(start))
}
