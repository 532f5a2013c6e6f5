package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func ageRecipient(tb testing.TB) string {
	tb.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		tb.Fatal(err)
	}
	return id.Recipient().String()
}

// --require-encryption without any recipient, and a malformed recipient or
// recipients file, are exit 4 before anything is contacted (the endpoints
// and the store here do not exist), for one cluster and for --all.
func TestCLIBackupRequireEncryption(t *testing.T) {
	t.Parallel()
	if v := os.Getenv(seal.EnvEncryptTo) + os.Getenv(seal.EnvRecipientsFile); v != "" {
		t.Skip("recipients set in the test's environment")
	}
	nowhere := []string{"--endpoints", "http://127.0.0.1:1", "--cos-endpoint", "http://127.0.0.1:1", "--bucket", "b"}
	empty := filepath.Join(t.TempDir(), "recipients")
	if err := os.WriteFile(empty, []byte("# no key yet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"required-none", []string{"backup", "--cluster-id", "a", "--require-encryption"}, "--require-encryption"},
		{"required-none-all", []string{"backup", "--all", "--require-encryption"}, "--require-encryption"},
		{"bad-recipient", []string{"backup", "--cluster-id", "a", "--encrypt-to", "age1nope"}, "age1nope"},
		{"secret-key-as-recipient", []string{"backup", "--cluster-id", "a", "--encrypt-to", "AGE-SECRET-KEY-1QQQQ"}, "secret"},
		{"empty-recipients-file", []string{"backup", "--cluster-id", "a", "--recipients-file", empty}, empty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCtx(t, context.Background(), concatArgs(tc.args, nowhere)...)
			if code != 4 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, want 4 naming %q:\n%s%s", code, tc.want, out, errOut)
			}
			if strings.Contains(errOut, "AGE-SECRET-KEY-1QQQQ") {
				t.Errorf("a secret key given by mistake was echoed:\n%s", errOut)
			}
		})
	}
	// With a recipient, --require-encryption passes validation (and fails
	// later, at the store that does not exist: not exit 4).
	code, _, errOut := runCtx(t, context.Background(), concatArgs([]string{"backup", "--cluster-id", "a", "--require-encryption",
		"--encrypt-to", ageRecipient(t), "--cos-max-retries", "0", "--cos-credentials-dir", credsDir(t, "k", "s")}, nowhere)...)
	if code == 4 || code == 0 {
		t.Fatalf("with a recipient: exit %d:\n%s", code, errOut)
	}
}

// backup --drill of an encrypted backup with no identity anywhere: the
// drill runs on the plaintext the backup streamed and passes, compared
// with the source; --temp-dir is empty afterwards; list shows the
// recipients. A SIGINT during the drill exits 130 and leaves --temp-dir
// empty too.
func TestCLIBackupEncryptedDrill(t *testing.T) {
	t.Parallel()
	if os.Getenv(seal.EnvIdentityFile) != "" {
		t.Skip("an identity is set in the test's environment")
	}
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, TLS: true})
	testenv.PutKeys(t, c.Client(t), "/registry/secrets/", 300, 256)
	cr := newCLIRig(t)
	cos, st, layout := cr.cos, cr.Store, cr.Layout
	ctx := testfix.Context(t, 5*time.Minute)
	r1, r2 := ageRecipient(t), ageRecipient(t)

	tmp := t.TempDir()
	code, out, errOut := runCtx(t, ctx, concatArgs([]string{"backup", "--cluster-id", "sealed", "--kind", "scheduled", "--drill",
		"--encrypt-to", r1, "--encrypt-to", r2, "--require-encryption",
		"--etcd-bin-dir", testenv.DrillBinDir(t, testenv.V35), "--temp-dir", tmp, "-o", "json"}, clusterArgs(c), cos)...)
	if code != 0 {
		t.Fatalf("backup --drill --encrypt-to: exit %d\n%s\n%s", code, out, lastLinesOf(errOut, 20))
	}
	var res backupDrillJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if !res.Encrypted() || len(res.Recipients()) != 2 || !strings.HasSuffix(res.Snapshot.Object, seal.Suffix) {
		t.Fatalf("backup not encrypted to both recipients: %+v, object %s", res.Encryption, res.Snapshot.Object)
	}
	// A cluster given by --endpoints has no EtcdCluster to escrow.
	if e := res.Escrow; e == nil || e.State != catalog.EscrowMissing || len(e.Problems) != 1 || e.Problems[0] != backup.NoKubeClient {
		t.Fatalf("escrow of a backup by --endpoints: %+v", e)
	}
	if d := res.Drill; d == nil || d.Result != "passed" || d.Comparison != catalog.CompareSource || d.Record == nil || !d.Record.Passed {
		t.Fatalf("drill of the encrypted backup: %+v\n%s", res.Drill, lastLinesOf(errOut, 20))
	}
	if rec, err := catalog.LoadDrill(ctx, st, layout, "sealed", res.Name); err != nil || rec == nil || !rec.Passed {
		t.Fatalf("drill.json: %+v %v", rec, err)
	}
	assertEmptyDir(t, tmp)

	// list: -o wide shows the recipients, shortened; JSON the full keys.
	code, out, errOut = runCtx(t, ctx, concatArgs([]string{"list", "--cluster-id", "sealed", "-o", "wide"}, cos)...)
	if code != 0 || !strings.Contains(out, "ENCRYPTED TO") || !strings.Contains(out, r1[:prune.RecipientShortLen]) ||
		!strings.Contains(out, r2[:prune.RecipientShortLen]) {
		t.Fatalf("list -o wide: exit %d, want ENCRYPTED TO with both recipients\n%s%s", code, out, errOut)
	}
	code, out, _ = runCtx(t, ctx, concatArgs([]string{"list", "--cluster-id", "sealed", "-o", "json"}, cos)...)
	if code != 0 || !strings.Contains(out, r1) || !strings.Contains(out, r2) {
		t.Fatalf("list -o json: exit %d, want both full recipients\n%s", code, out)
	}

	// Cancelled during the drill: exit 130, no plaintext left.
	tmp2 := t.TempDir()
	run := startTool(t, concatArgs([]string{"backup", "--cluster-id", "sealed", "--drill", "--encrypt-to", r1,
		"--etcd-bin-dir", testenv.DrillBinDir(t, testenv.V35), "--temp-dir", tmp2}, clusterArgs(c), cos)...)
	if !run.waitLine("restore drill of the new backup", 2*time.Minute) {
		t.Fatalf("the drill did not start:\n%s", run.output())
	}
	if err := run.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := run.wait(2 * time.Minute); code != exitCanceled {
		t.Fatalf("exit %d after SIGINT during the drill, want %d:\n%s", code, exitCanceled, run.output())
	}
	assertEmptyDir(t, tmp2)
}

func assertEmptyDir(tb testing.TB, dir string) {
	tb.Helper()
	left, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	if len(left) != 0 {
		tb.Fatalf("%s is not empty after the run: %s (plaintext left behind?)", dir, left[0].Name())
	}
}
