package podrun

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestHostCommand: the CronJob's container as a host process: its args,
// the volumes' files under the directory with their modes, the env paths
// into them rewritten, the service account as a kubeconfig, nothing of
// the test's own environment.
func TestHostCommand(t *testing.T) {
	t.Parallel()
	w, err := ParseWorkload(deployFile(t, "30-cronjob.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Translate(w, "", "p", testCluster(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd, err := s.HostCommand(context.Background(), "/bin/true", dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cmd.Args[1:], s.Args) {
		t.Errorf("args %q, want the spec's %q", cmd.Args[1:], s.Args)
	}
	env := map[string]string{}
	for _, kv := range cmd.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if want := filepath.Join(dir, "cos-credentials"); env["COS_CREDENTIALS_DIR"] != want {
		t.Errorf("COS_CREDENTIALS_DIR %q, want %q", env["COS_CREDENTIALS_DIR"], want)
	}
	fi, err := os.Stat(filepath.Join(env["COS_CREDENTIALS_DIR"], "credentials"))
	if err != nil || fi.Mode().Perm() != 0o400 {
		t.Errorf("the secret's file: %v %v, want mode 0400", fi, err)
	}
	if tmp := env["ETCD_RECOVERY_SECRETS_DIR"]; !strings.HasPrefix(tmp, dir+"/") {
		t.Errorf("ETCD_RECOVERY_SECRETS_DIR %q: not under %s", tmp, dir)
	}
	kc, err := os.ReadFile(env["KUBECONFIG"])
	if err != nil || !strings.Contains(string(kc), `server: "https://127.0.0.1:6443"`) || !strings.Contains(string(kc), `namespace: "kubx-etcd-01"`) {
		t.Errorf("kubeconfig %q: %s %v", env["KUBECONFIG"], kc, err)
	}
	if tok, err := os.ReadFile(filepath.Join(dir, "kube-api-access", "token")); err != nil || string(tok) != "token-of-etcd-recovery" {
		t.Errorf("token: %q %v", tok, err)
	}
	// PATH, HOME, the spec's and KUBECONFIG: nothing of the test's.
	if len(cmd.Env) != len(s.Env)+3 || env["HOME"] != dir {
		t.Errorf("env %q: want PATH, HOME (%s), the spec's %d variables and KUBECONFIG only", cmd.Env, dir, len(s.Env))
	}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
}
