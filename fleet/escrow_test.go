package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/escrow"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// escrowNS holds the clusters of the escrow test.
const escrowNS = "kubx-etcd-35"

// testEscrow: backup --all, as the CronJob's account, escrows each
// cluster (the EtcdCluster, its three secrets, its Services) sealed to
// the backup's recipients, once while nothing changes; a rotated server
// secret is a mismatch naming it, a deleted peer secret a missing escrow
// naming it, and both backups still succeed; a plaintext backup has none,
// unless --escrow-recipient seals it to the break-glass key alone; and
// no object of the bucket holds a private key in plaintext.
func testEscrow(t *testing.T, w *kubetest.RBACWorld) {
	ctx := testfix.Context(t, 5*time.Minute)
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	prefix := testenv.Prefix(t)
	kubetest.CreateCOSSecret(t, w.Admin, escrowNS, m)
	var clusters []kubetest.Cluster
	for i := range 2 {
		name := []string{"etcd-es0", "etcd-es1"}[i]
		c := kubetest.AddEtcdCluster(t, w.Admin, w.Dyn, escrowNS, name, testenv.EtcdOptions{IP: []string{"127.0.35.10", "127.0.35.11"}[i], Members: 1})
		kubetest.PerClusterAccess(t, w.A, escrowNS, name)
		testenv.PutKeys(t, c.Etcd.Client(t), "/registry/k", 10, 64)
		clusters = append(clusters, c)
	}
	key, breakGlass := testfix.NewAgeKey(t), testfix.NewAgeKey(t)
	tool := testfix.Tool(t)
	kc := w.K.Kubeconfig(t, kubetest.SAToken(t, w.Admin, escrowNS, "etcd-recovery"), escrowNS)
	st := testfix.Store(t, m, bucket)
	backupAll := func(pfx string, args ...string) string {
		t.Helper()
		args = append([]string{"backup", "--kind", "scheduled", "--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket,
			"--prefix", pfx, "--dial-timeout", "2s", "--probe-timeout", "2s", "--no-events"}, args...)
		if !slices.Contains(args, "--cluster") {
			args = append(args, "--all")
		}
		start := time.Now()
		stdout, stderr, code := testfix.RunTool(t, ctx, tool, []string{"KUBECONFIG=" + kc}, args...)
		if code != 0 {
			t.Fatalf("etcd-recovery %s: exit %d\n%s\n%s", strings.Join(args, " "), code, testfix.LastLines(stdout, 20), testfix.LastLines(stderr, 20))
		}
		t.Logf("%s: %v", strings.Join(args[len(args)-3:], " "), time.Since(start).Round(time.Millisecond))
		return stdout
	}
	layout := catalog.Layout{Prefix: prefix}
	newest := func(l catalog.Layout, cluster string) *catalog.Manifest {
		t.Helper()
		list, err := catalog.ListBackups(ctx, st, l, cluster)
		if err != nil || len(list) == 0 || list[0].Manifest == nil {
			t.Fatalf("%s: backups %+v, %v", cluster, list, err)
		}
		return list[0].Manifest
	}
	escrows := func(l catalog.Layout) map[string]store.ObjectInfo {
		t.Helper()
		objs, err := st.List(ctx, l.EscrowPrefix(""))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]store.ObjectInfo{}
		for _, o := range objs {
			out[o.Key] = o
		}
		return out
	}

	// An encrypted backup --all: a present escrow for each cluster, the
	// API's objects as they are.
	backupAll(prefix, "--encrypt-to", key.Pub)
	first := map[string]*catalog.Manifest{}
	for _, c := range clusters {
		mf := newest(layout, c.Name)
		e := mf.Escrow
		if e == nil || e.State != catalog.EscrowPresent || e.BreakGlass || !slices.Equal(e.Recipients, []string{key.Pub}) || len(e.Problems) != 0 {
			t.Fatalf("%s: escrow %+v", c.Name, e)
		}
		first[c.Name] = mf
		list, err := escrow.Open(ctx, st, layout, c.Name, e, key.IDs)
		if err != nil {
			t.Fatal(err)
		}
		checkEscrowedAsAPI(t, ctx, w, c.Name, list)
		v, err := escrow.Versions(list)
		if err != nil || v.EtcdClusterAPI != kube.APIVersion || v.Storage == "" || len(v.Etcd) != 1 || !strings.HasPrefix(v.Etcd[mf.Source.Name], "3.5.") {
			t.Fatalf("%s: versions %+v, %v", c.Name, v, err)
		}
		served := 0
		for _, ce := range e.Certs {
			if ce.Served {
				served++
			}
		}
		if served != 1 || e.NearestExpiry().IsZero() {
			t.Fatalf("%s: certs %+v", c.Name, e.Certs)
		}
		// The manual fallback's plaintext holds the keys: the bucket
		// search below can fail.
		plain, _ := catalog.MarshalEscrow(list)
		if !testfix.HoldsPrivateKey(plain) {
			t.Fatalf("%s: the escrow's plaintext holds no private key: the search of the bucket would prove nothing", c.Name)
		}
	}
	before := escrows(layout)
	if len(before) != 2 {
		t.Fatalf("%d escrow objects after the first backup --all, want 2", len(before))
	}

	// Nothing changed: the same escrows, not written again (retention and
	// the orphan pass run over them).
	backupAll(prefix, "--prune", "--encrypt-to", key.Pub)
	for _, c := range clusters {
		if e := newest(layout, c.Name).Escrow; e.State != catalog.EscrowPresent || e.Address != first[c.Name].Escrow.Address ||
			e.StoredSHA256 != first[c.Name].Escrow.StoredSHA256 {
			t.Fatalf("%s: second backup's escrow %+v, first %+v", c.Name, e, first[c.Name].Escrow)
		}
	}
	if after := escrows(layout); len(after) != 2 || !equalInfos(before, after) {
		t.Fatalf("escrow objects rewritten by an unchanged second run:\n%v\n%v", before, after)
	}

	// The server secret rotated in the API (same CA); the member still
	// serves the old certificate: a mismatch, naming the secret.
	c0 := clusters[0]
	dir := t.TempDir()
	crt, k := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	c0.Etcd.PKI.IssueServer(t, crt, k)
	sec, err := w.Admin.CoreV1().Secrets(escrowNS).Get(ctx, c0.Name+"-server-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Data[escrow.ServerCertKey], sec.Data[escrow.ServerKeyKey] = readFile(t, crt), readFile(t, k)
	if _, err := w.Admin.CoreV1().Secrets(escrowNS).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The peer secret of the other cluster deleted: missing, naming it.
	c1 := clusters[1]
	if err := w.Admin.CoreV1().Secrets(escrowNS).Delete(ctx, c1.Name+"-peer-tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	out := backupAll(prefix, "-o", "json", "--encrypt-to", key.Pub) // exit 0: data first
	var rep fleet.BackupAllReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if len(rep.Clusters) != 2 || rep.Clusters[0].Escrow != catalog.EscrowMismatch || rep.Clusters[1].Escrow != catalog.EscrowMissing ||
		rep.Clusters[0].Result != fleet.ResultOK || rep.Clusters[1].Result != fleet.ResultOK {
		t.Fatalf("report: %+v", rep.Clusters)
	}
	if row := rep.Table().Rows[1]; row[7] != "missing" || !strings.Contains(row[8], "escrow: missing (secret "+clusters[1].Name+"-peer-tls not found") {
		t.Fatalf("report row %q", row)
	}
	e0 := newest(layout, c0.Name).Escrow
	if e0.State != catalog.EscrowMismatch || e0.Address == first[c0.Name].Escrow.Address || len(e0.Problems) != 1 ||
		!strings.Contains(e0.Problems[0], "not the escrowed server certificate of secret "+c0.Name+"-server-tls") {
		t.Fatalf("%s after the server secret's rotation: %+v", c0.Name, e0)
	}
	e1 := newest(layout, c1.Name).Escrow
	if e1.State != catalog.EscrowMissing || e1.Address != "" || !strings.Contains(strings.Join(e1.Problems, "; "), "secret "+c1.Name+"-peer-tls not found") {
		t.Fatalf("%s without its peer secret: %+v", c1.Name, e1)
	}
	t.Logf("mismatch: %s", e0.Problems[0])
	t.Logf("missing: %s", strings.Join(e1.Problems, "; "))

	// Plaintext backups: no escrow (none), nothing under _escrow/ ...
	plainLayout := catalog.Layout{Prefix: prefix + "-plain"}
	backupAll(plainLayout.Prefix, "--cluster", c0.Name)
	if e := newest(plainLayout, c0.Name).Escrow; e == nil || e.State != catalog.EscrowNone || e.Address != "" || len(e.Problems) == 0 {
		t.Fatalf("plaintext backup's escrow %+v", e)
	}
	if got := escrows(plainLayout); len(got) != 0 {
		t.Fatalf("a plaintext backup stored escrows %v", got)
	}
	// ... unless --escrow-recipient seals it, to that recipient alone.
	backupAll(plainLayout.Prefix, "--escrow-recipient", breakGlass.Pub, "--cluster", c0.Name)
	e := newest(plainLayout, c0.Name).Escrow
	if e == nil || e.State != catalog.EscrowMismatch || !e.BreakGlass || !slices.Equal(e.Recipients, []string{breakGlass.Pub}) {
		t.Fatalf("break-glass escrow %+v", e)
	}
	if _, err := escrow.Open(ctx, st, plainLayout, c0.Name, e, key.IDs); err == nil || !strings.Contains(err.Error(), "no identity matches") {
		t.Fatalf("break-glass escrow opened with the backup key: %v", err)
	}
	if _, err := escrow.Open(ctx, st, plainLayout, c0.Name, e, breakGlass.IDs); err != nil {
		t.Fatal(err)
	}

	// No object of the bucket holds a private key in plaintext: the
	// manifests, the zstd objects decompressed, age objects sealed.
	searched, sealed, found := testfix.PlaintextPrivateKeys(t, ctx, st, "")
	for _, k := range found {
		t.Errorf("%s holds a private key in plaintext", k)
	}
	if sealed < 5 || searched < 10 {
		t.Fatalf("searched %d objects, %d sealed: not the bucket of the runs above", searched, sealed)
	}
	t.Logf("searched %d objects (%d sealed) for private keys", searched, sealed)
}

// checkEscrowedAsAPI: the escrow holds the cluster's three secrets with
// the API's bytes, its NodePort Service with the API's nodePort and its
// EtcdCluster's spec.
func checkEscrowedAsAPI(t *testing.T, ctx context.Context, w *kubetest.RBACWorld, name string, list *catalog.EscrowList) {
	t.Helper()
	for _, s := range []string{name + "-client-tls", name + "-peer-tls", name + "-server-tls"} {
		sec, err := w.Admin.CoreV1().Secrets(escrowNS).Get(ctx, s, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, ok := escrow.SecretData(list, s)
		if !ok || len(got) != len(sec.Data) {
			t.Fatalf("%s: secret %s escrowed with %d keys, %d in the API", name, s, len(got), len(sec.Data))
		}
		for k, v := range sec.Data {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("%s: secret %s key %s differs from the API's", name, s, k)
			}
		}
	}
	np, err := w.Admin.CoreV1().Services(escrowNS).Get(ctx, name+"-client-service-np", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc := escrow.Item(list, "Service", name+"-client-service-np")
	ports := svc["spec"].(map[string]any)["ports"].([]any)
	if got := ports[0].(map[string]any)["nodePort"].(json.Number).String(); got != strings.TrimSpace(jsonOf(t, np.Spec.Ports[0].NodePort)) {
		t.Fatalf("%s: escrowed nodePort %s, the API's %d", name, got, np.Spec.Ports[0].NodePort)
	}
	ec, err := w.Dyn.Resource(kube.EtcdClusterGVR).Namespace(escrowNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := jsonOf(t, escrow.EtcdCluster(list)["spec"]), jsonOf(t, ec.Object["spec"]); got != want {
		t.Fatalf("%s: escrowed spec %s, the API's %s", name, got, want)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func equalInfos(a, b map[string]store.ObjectInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for k, o := range a {
		if p, ok := b[k]; !ok || p.Size != o.Size || !p.LastModified.Equal(o.LastModified) {
			return false
		}
	}
	return true
}
