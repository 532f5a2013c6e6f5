package kube_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/armada/etcd-recovery/kube"
)

// Client-TLS keys go to ETCD_RECOVERY_SECRETS_DIR (the pods' memory /tmp),
// not to TMPDIR (the toolkit's disk-backed scratch volume).
func TestPrivateDirPrefersSecretsDir(t *testing.T) {
	secrets, scratch := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", scratch)
	t.Setenv(kube.SecretsDirEnv, secrets)
	d, err := kube.PrivateDir("tls-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(d)
	if filepath.Dir(d) != secrets {
		t.Fatalf("private dir %s is not under %s=%s (TMPDIR=%s)", d, kube.SecretsDirEnv, secrets, scratch)
	}
	if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("private dir mode: %v %v", fi, err)
	}
	t.Setenv(kube.SecretsDirEnv, "")
	d2, err := kube.PrivateDir("tls-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(d2)
	if filepath.Dir(d2) != scratch {
		t.Fatalf("without %s, private dir %s is not under TMPDIR %s", kube.SecretsDirEnv, d2, scratch)
	}
}
