package deploy

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/podrun"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// encNS is the namespace of TestCronJobEncrypted.
const encNS = "kubx-etcd-16"

// TestCronJobEncrypted runs the CronJob's pod spec of deploy/ in the image
// `make image` built with encryption turned on the way docs/encryption.md says:
// the recipient (a public key) and ETCD_RECOVERY_REQUIRE_ENCRYPTION=true
// in the ConfigMap, no identity anywhere in the pod. Every cluster's new
// backup must be age objects only (no plaintext snapshot or v2 export,
// none of the keyspace's known values in the raw objects), its manifest
// naming the recipient, and its drill (every cluster: --drill-share 1)
// passed, compared with the source: the drill ran on the plaintext the
// backup streamed, since the pod cannot decrypt.
func TestCronJobEncrypted(t *testing.T) {
	start := time.Now()
	image := testenv.Image(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ew := kubetest.NewEncryptedWorld(t, ctx, encNS)
	admin, dyn, a, m, bucket, prefix, recipient := ew.Admin, ew.Dyn, ew.Applier, ew.MinIO, ew.Bucket, ew.Prefix, ew.Recipient
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}

	// Two small clusters; the values hold a marker that must never be
	// readable in the bucket.
	const marker = "age-must-hide-this-3f9c1e"
	clusters := []string{"etcd-enc-a", "etcd-enc-b"}
	for i, name := range clusters {
		c := kubetest.AddEtcdCluster(t, admin, dyn, encNS, name, testenv.EtcdOptions{IP: []string{"127.0.16.10", "127.0.16.11"}[i], Members: 1})
		kubetest.PerClusterAccess(t, a, encNS, name)
		testenv.PutKeys(t, c.Etcd.Client(t), "/registry/secrets/"+marker+"/", 200, 256)
	}

	w := kubetest.Workload(t, "30-cronjob.yaml")
	spec, err := podrun.Translate(w, "", "etcd-recovery-backup-29000001-encry", ew.PodCluster(t))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := spec.EnvValue(seal.EnvIdentityFile); ok {
		t.Fatalf("the CronJob's pod has %s=%q: backup jobs never hold the identity", seal.EnvIdentityFile, v)
	}
	if v, _ := spec.EnvValue(seal.EnvEncryptTo); v != recipient {
		t.Fatalf("the CronJob's pod has %s=%q, want the ConfigMap's %s", seal.EnvEncryptTo, v, recipient)
	}
	share := slices.Index(spec.Args, "--drill-share")
	if !slices.Contains(spec.Args, "--drill") || share < 0 || share+1 >= len(spec.Args) {
		t.Fatalf("the CronJob does not run backup --drill --drill-share N: %q", spec.Args)
	}
	spec.Args[share+1] = "1"
	runner := &podrun.Runner{Podman: testenv.PodmanGlobalArgs, RunArgs: testenv.PodmanRunArgs, Image: image, WorkDir: t.TempDir()}
	res, u, err := runner.Run(ctx, spec)
	logPod(t, "CronJob (encrypted)", spec, res, u)
	if err != nil {
		t.Fatal(err)
	}
	checkPod(t, "CronJob (encrypted)", spec, res, u)

	for _, c := range clusters {
		man := newest(t, ctx, st, layout, c, catalog.KindScheduled, start)
		if !man.Encryption.Encrypted() || !slices.Equal(man.Encryption.Recipients, []string{recipient}) {
			t.Errorf("%s: %s: manifest encryption %+v, want age to %s", c, man.Name, man.Encryption, recipient)
		}
		keys := testfix.Keys(t, st, layout.BackupPrefix(c, man.Name))
		var sealed int
		for _, key := range keys {
			switch base := key[strings.LastIndex(key, "/")+1:]; {
			case seal.IsSealedKey(key):
				sealed++
			case base == catalog.SnapshotObjectZstd || base == catalog.SnapshotObjectRaw || strings.HasPrefix(base, "v2.json"):
				t.Errorf("%s: %s: plaintext data object %s", c, man.Name, key)
			}
			if raw := testfix.ReadObject(t, st, key); bytes.Contains(raw, []byte(marker)) {
				t.Errorf("%s: %s: object %s holds the keyspace's text", c, man.Name, key)
			}
		}
		if sealed == 0 {
			t.Errorf("%s: %s: no .age object among %v", c, man.Name, keys)
		}
		rec, err := catalog.LoadDrill(ctx, st, layout, c, man.Name)
		if err != nil || rec == nil {
			t.Errorf("%s: no drill record for %s: %v", c, man.Name, err)
			continue
		}
		if cmp := rec.Comparison; !rec.Passed || cmp.Mode != catalog.CompareSource || cmp.Equal == nil || !*cmp.Equal {
			t.Errorf("%s: drill of encrypted %s without an identity: passed %v (%s), comparison %+v", c, man.Name, rec.Passed, rec.Failed, cmp)
		}
	}
	// The drills ran in the pod's scratch volume (the streamed plaintext and
	// the restored data dir), not in the memory /tmp.
	if tmpdir, _ := spec.EnvValue("TMPDIR"); tmpdir != "" && u.EmptyDirPeak[tmpdir] == 0 {
		t.Errorf("the drills did not use the scratch volume %s", tmpdir)
	}
}
