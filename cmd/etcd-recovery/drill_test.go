package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// The drill command through the built binary: a good backup drilled against
// its source exits 0 (-o json carries the record); drilled against another
// cluster's members it exits 1 naming the cluster, backup and check; a
// missing --cluster-id exits 4.
func TestCLIDrill(t *testing.T) {
	t.Parallel()
	tool := testfix.Tool(t)
	a := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	b := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: 1, TLS: true})
	testenv.PutKeys(t, a.Client(t), "/registry/pods/", 200, 32)
	testenv.PutKeys(t, b.Client(t), "/registry/secrets/", 200, 32)
	testenv.PutKeys(t, b.Client(t), "/registry/secrets/", 200, 32) // b's revision above a's
	cos := newCLIRig(t).cos
	binDir := t.TempDir()
	if err := os.Symlink(testenv.EtcdBin(t, testenv.V35), filepath.Join(binDir, "etcd-3.5")); err != nil {
		t.Fatal(err)
	}
	runTool := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(tool, args...)
		cmd.Env = append(os.Environ(), "ETCD_RECOVERY_ETCD_BIN_DIR="+binDir, "TMPDIR="+t.TempDir())
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errOut.String()
	}
	if code, _, errOut := runTool(concatArgs([]string{"backup", "--cluster-id", "cli-drill"}, clusterArgs(a), cos)...); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, errOut)
	}

	code, out, errOut := runTool(concatArgs([]string{"drill", "--cluster-id", "cli-drill", "-o", "json"}, clusterArgs(a), cos)...)
	if code != 0 {
		t.Fatalf("drill: exit %d: %s", code, errOut)
	}
	var rep fleet.DrillAllReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if len(rep.Clusters) != 1 || rep.Clusters[0].Result != fleet.DrillPassed || rep.Clusters[0].Record == nil ||
		rep.Clusters[0].Record.Comparison.Mode != "source" {
		t.Fatalf("json: %s", out)
	}
	backupName := rep.Clusters[0].Backup

	code, out, errOut = runTool(concatArgs([]string{"drill", "--cluster-id", "cli-drill", "--no-record"}, clusterArgs(b), cos)...)
	if code != 1 {
		t.Fatalf("drill against another cluster: exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"cli-drill", backupName, "source hash"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not name %q: %s", want, errOut)
		}
	}
	if !strings.Contains(out, "FAILED") || !strings.Contains(out, "CLUSTER") {
		t.Errorf("table: %s", out)
	}

	if code, _, errOut := runTool(concatArgs([]string{"drill"}, cos)...); code != 4 {
		t.Errorf("drill without --cluster-id: exit %d, want 4: %s", code, errOut)
	}
}
