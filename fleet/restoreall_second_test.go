package fleet_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/replicate"
)

// TestRestoreAllFromTheSecondSite: `restore-all --site second` (the CLI,
// as the toolkit's service account) restores a namespace from the second
// site alone. A small fleet world (one namespace, two single-member
// EtcdClusters with TLS, one encrypted, escrowed backup each on the
// primary); the real copier (replicate.Once) fills a second site on a
// MinIO server of its own, under the namespace's prefix; then the
// primary's credential deletes everything on the primary, and every
// cluster loses quorum. restore-all --site second (the second site's
// store URL and credential; etcd-operator's --aws-secret holding the
// second site's credential) restores both, each verified by HashKV
// against its backup read from the second site; its run records are on
// the second site, and nothing at all was written to the primary.
func TestRestoreAllFromTheSecondSite(t *testing.T) {
	t.Parallel()
	ctx := testfix.Context(t, 4*time.Minute)
	w := kubetest.StartFleetWorld(t, kubetest.FleetWorldOptions{Namespaces: []string{"kubx-etcd-16"}, Clusters: 2, Subnet: 58,
		ThreeMember: -1, Customers: -1, Keys: 20, ValueSize: 128})
	n := w.Namespaces[0]

	// The second site, filled by the copier.
	sm := testenv.StartMinIO(t)
	sb := sm.NewBucket(t)
	second := testfix.Store(t, sm, sb)
	p, err := replicate.Once(ctx, replicate.Options{Primary: w.Store, PrimaryLayout: n.Layout, Second: second, SecondLayout: n.Layout,
		Copier: t.Name(), Log: testfix.Logger(t)})
	if err != nil {
		t.Fatalf("the copier's pass: %v\n%+v", err, p)
	}
	for _, c := range n.Clusters {
		if _, err := second.Get(ctx, n.Layout.Key(c.Name, c.Backup.Name, catalog.ManifestObject)); err != nil {
			t.Fatalf("%s's backup is not on the second site: %v", c.Name, err)
		}
	}
	// The primary is lost to its own credential.
	objs, err := w.Store.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	if err := w.Store.Delete(ctx, keys); err != nil {
		t.Fatal(err)
	}
	n.LoseQuorum(t)

	// etcd-operator reads the staged copies from the second site with a
	// secret of its credential, which the toolkit may read by name.
	const awsSecret = "cos-credentials-second"
	if _, err := w.Admin.CoreV1().Secrets(n.Name).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: awsSecret},
		Data: kubetest.AWSSecretData(sm.AccessKey, sm.SecretKey, sm.Region)}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	credDir := t.TempDir()
	for name, v := range map[string]string{"access_key_id": sm.AccessKey, "secret_access_key": sm.SecretKey} {
		if err := os.WriteFile(filepath.Join(credDir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	secondURL := fmt.Sprintf("s3://%s/%s?endpoint=%s&region=%s", sb, n.Layout.Prefix, url.QueryEscape(sm.Endpoint), sm.Region)
	args := append([]string{"--log-level", "warn", "restore-all", "--namespace", n.Name, "--kubeconfig", w.ToolkitKubeconfig(t, n.Name),
		"--identity-file", w.IdentityFile, "--dial-timeout", "2s", "--probe-timeout", "2s", "-o", "json", "--prefix", n.Layout.Prefix,
		"--site", "second", "--second-store", secondURL, "--second-credentials-dir", credDir, "--aws-secret", awsSecret}, w.StoreArgs()...)
	cmd := exec.CommandContext(ctx, testfix.Tool(t), args...)
	cmd.Env = append(testfix.ToolEnv(), w.StoreEnv()...)
	var stdout, stderr testfix.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("restore-all --site second: %v\n%s\n%s", err, stdout.String(), testfix.LastLines(stderr.String(), 30))
	}
	t.Logf("restore-all --site second of %d clusters: %v", len(n.Clusters), time.Since(start).Round(time.Millisecond))
	var rep fleet.RestoreAllReport
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	got := rows(t, rep.Clusters)
	// The checks read each backup where it now is: the second site (the
	// same keys under the same prefix).
	w.Store = second
	for _, c := range n.Clusters {
		if r := got[c.Name]; r.Outcome != fleet.OutcomeRestored || r.Backup != c.Backup.Name {
			t.Errorf("%s: %+v, want restored from %s", c.Name, r, c.Backup.Name)
			continue
		}
		chk := w.CheckRestored(t, ctx, c)
		t.Logf("%s: restored from the second site's %s, HashKV %08x at revision %d", c.Name, c.Backup.Name, chk.Hash, chk.Revision)
	}
	// The run's records are on the second site, and nothing was written
	// to the primary.
	recs := restoreRecords(t, ctx, w, n)
	if len(recs) == 0 {
		t.Errorf("no run record under the second site's %s", n.Layout.RestoresPrefix())
	}
	primary := testfix.Store(t, w.MinIO, w.Bucket)
	if left, err := primary.List(ctx, ""); err != nil || len(left) != 0 {
		var ks []string
		for _, o := range left {
			ks = append(ks, o.Key)
		}
		t.Errorf("restore-all --site second wrote to the primary: %v %v", ks, err)
	}
	t.Logf("run records on the second site: %s", strings.Join(recs, ", "))
}
