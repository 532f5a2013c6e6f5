package faultmatrix

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"filippo.io/age"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/seal"
)

// TestFaultMatrixEncrypted runs the backup and restore rows of the matrix
// (the store frozen and killed, etcd members killed and frozen mid-stream,
// a full disk, SIGINT/SIGTERM at every step) with encryption on (issue
// #15): every run gets the age recipient (ETCD_RECOVERY_ENCRYPT_TO) and
// the identity (ETCD_RECOVERY_IDENTITY_FILE) in its environment, as the
// CronJob and the toolkit do, so every backup, the fixtures included, is
// written as .age objects and every restore decrypts. The rows' promises
// are the same; in addition no plaintext scratch directory
// (seal.ScratchPattern) is left in the runs' TMPDIR once every row is done.
func TestFaultMatrixEncrypted(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	idFile := filepath.Join(dir, "identity.txt")
	if err := os.WriteFile(idFile, []byte("# fault matrix\n"+id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, []string{
		seal.EnvEncryptTo + "=" + id.Recipient().String(),
		seal.EnvIdentityFile + "=" + idFile,
		"TMPDIR=" + tmp,
	})
	// The fixtures are encrypted: .age objects, the manifest naming the
	// recipient, no plaintext snapshot object.
	for i := range w.fixNames {
		keys := listKeys(t, w.minio.S3(t), w.bucket, catalog.Layout{Prefix: w.fixPrefix}.BackupPrefix(clusterID, w.fixNames[i]))
		if _, ok := keys[w.fixKey(i, seal.ObjectKey(catalog.SnapshotObjectZstd))]; !ok {
			t.Fatalf("fixture backup %s is not encrypted: objects %v", w.fixNames[i], keys)
		}
		if _, ok := keys[w.fixKey(i, catalog.SnapshotObjectZstd)]; ok {
			t.Fatalf("fixture backup %s has a plaintext snapshot object: %v", w.fixNames[i], keys)
		}
		var man catalog.Manifest
		if err := json.Unmarshal(getObject(t, w.minio.S3(t), w.bucket, w.fixKey(i, catalog.ManifestObject)), &man); err != nil {
			t.Fatal(err)
		}
		if !man.Encryption.Encrypted() || len(man.Encryption.Recipients) != 1 || man.Encryption.Recipients[0] != id.Recipient().String() {
			t.Fatalf("fixture backup %s: manifest encryption %+v, want age to %s", w.fixNames[i], man.Encryption, id.Recipient())
		}
	}
	t.Cleanup(func() {
		left, _ := filepath.Glob(filepath.Join(tmp, seal.ScratchPattern))
		if len(left) > 0 {
			t.Errorf("plaintext scratch left in TMPDIR after the encrypted rows: %v", left)
		}
	})
	// Parallel subtests run after this function returns, before its
	// Cleanup: the scratch check above sees every row finished.
	runRows(t, w, storeRows(), memberRows(), fullDiskRows(), signalRows())
}
