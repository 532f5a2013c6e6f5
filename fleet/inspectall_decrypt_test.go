package fleet_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/inspect"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/output"
	"github.com/armada/etcd-recovery/internal/prune"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// ageIdentity is a new age identity as an identity file would hold it,
// its recipient, and the path of such a file (0600).
func ageIdentity(t *testing.T) (*seal.Identities, seal.Recipients, string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	ids, err := seal.ParseIdentities(strings.NewReader(id.String()+"\n"), "identity.txt")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := seal.ParseRecipients([]string{id.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "identity.txt")
	if err := os.WriteFile(path, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return ids, rs, path
}

// TestInspectAllDecrypts: inspect --all against a real kube-apiserver,
// real etcd and MinIO, with the toolkit's identity: a cluster whose newest
// backup is encrypted to it shows "opens"; one whose newest backup is
// encrypted to another key only (the identity never reached the
// namespace's secret) shows NO IDENTITY OPENS IT, naming that key, in
// the table and -o json; a plaintext cluster shows "-". With the secret
// not mounted (no identity), every encrypted one is NO IDENTITY OPENS IT
// ("no identity mounted"); without the check there is no column. The
// verdicts are untouched.
func TestInspectAllDecrypts(t *testing.T) {
	t.Parallel()
	const nsDec = "kubx-etcd-23"
	ctx := testfix.Context(t, 5*time.Minute)
	k, admin, dyn, a, m := namespaceWorld(t, nsDec)
	bucket := m.NewBucket(t)
	st, layout := testfix.Store(t, m, bucket), catalog.Layout{Prefix: testenv.Prefix(t)}
	toolkit, toolkitRS, toolkitFile := ageIdentity(t)
	_, strangerRS, _ := ageIdentity(t)
	clusters := map[string]struct {
		ip string
		rs seal.Recipients
	}{
		"etcd-opens":     {"127.0.23.10", toolkitRS},
		"etcd-stranger":  {"127.0.23.11", strangerRS},
		"etcd-plaintext": {"127.0.23.12", seal.Recipients{}},
	}
	token := kubetest.SAToken(t, admin, nsDec, "etcd-recovery")
	sa, err := kube.New(kube.Config{Rest: k.RestConfig(token), Namespace: nsDec})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range clusters {
		fc := kubetest.AddEtcdCluster(t, admin, dyn, nsDec, name, testenv.EtcdOptions{IP: c.ip})
		kubetest.PerClusterAccess(t, a, nsDec, fc.Name)
		testenv.PutKeys(t, fc.Etcd.Client(t), "/registry/k", 50, 256)
		if _, err := fleet.BackupAll(ctx, fleet.BackupAllOptions{Kube: sa, Names: []string{name}, NoEvents: true,
			Template:    backup.Options{Kind: catalog.KindScheduled, Store: st, Layout: layout, ProbeTimeout: 2 * time.Second, Recipients: c.rs},
			DialTimeout: 2 * time.Second}); err != nil {
			t.Fatalf("backup of %s: %v", name, err)
		}
	}

	inspectAll := func(ids *seal.Identities) *fleet.InspectAllReport {
		t.Helper()
		start := time.Now()
		rep, err := fleet.InspectAll(ctx, fleet.InspectAllOptions{Kube: sa, Identities: ids, DialTimeout: 2 * time.Second,
			Template: inspect.Options{Store: st, Layout: layout, Timeout: 2 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("inspect --all of %d clusters (identities %v): %v", len(rep.Clusters), ids, time.Since(start).Round(time.Millisecond))
		if rep.ExitCode != inspect.ExitHealthy || len(rep.Clusters) != 3 {
			t.Fatalf("exit %d, %d rows; want 0 (HEALTHY) and 3: the header check never changes the verdict", rep.ExitCode, len(rep.Clusters))
		}
		return rep
	}

	rep := inspectAll(toolkit)
	if d := inspectRow(t, rep, "etcd-opens").Decrypt; d == nil || d.State != prune.DecryptOpens {
		t.Errorf("etcd-opens (encrypted to the toolkit's identity): %+v; want opens", d)
	}
	if d := inspectRow(t, rep, "etcd-plaintext").Decrypt; d != nil {
		t.Errorf("etcd-plaintext: %+v; want none", d)
	}
	stranger := inspectRow(t, rep, "etcd-stranger")
	if d := stranger.Decrypt; d == nil || d.State != prune.DecryptNoIdentity || !strings.Contains(d.Error, strangerRS.String()) {
		t.Fatalf("etcd-stranger (encrypted to another key): %+v; want %q naming %s", d, prune.DecryptNoIdentity, strangerRS)
	}
	var sb strings.Builder
	if err := output.Render(&sb, output.FormatTable, rep.Table(), rep); err != nil {
		t.Fatal(err)
	}
	table := sb.String()
	for _, want := range []string{"DECRYPTS", "NO IDENTITY OPENS IT", "cluster etcd-stranger: newest encrypted backup " + stranger.DecryptBackup, strangerRS.String()} {
		if !strings.Contains(table, want) {
			t.Errorf("table does not show %q:\n%s", want, table)
		}
	}
	sb.Reset()
	if err := output.Render(&sb, output.FormatJSON, rep.Table(), rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), `"state": "no identity opens it"`) {
		t.Errorf("-o json has no decrypt state:\n%s", sb.String())
	}

	// The secret is not mounted: nothing opens.
	rep = inspectAll(&seal.Identities{})
	for _, name := range []string{"etcd-opens", "etcd-stranger"} {
		if d := inspectRow(t, rep, name).Decrypt; d == nil || d.State != prune.DecryptNoIdentity || !strings.Contains(d.Error, "no identity mounted") {
			t.Errorf("%s with no identity mounted: %+v", name, d)
		}
	}
	// The CLI in the toolkit: ETCD_RECOVERY_IDENTITY_FILE names the
	// mounted identity, and inspect --all --bucket makes the check.
	out, errb, code := testfix.RunTool(t, ctx, testfix.Tool(t), []string{"KUBECONFIG=" + k.Kubeconfig(t, token, nsDec), seal.EnvIdentityFile + "=" + toolkitFile},
		"inspect", "--all", "-o", "json", "--cos-endpoint", m.Endpoint, "--cos-region", m.Region,
		"--cos-ca-file", m.CAFile, "--bucket", bucket, "--prefix", layout.Prefix, "--probe-timeout", "2s")
	if code != 0 {
		t.Fatalf("etcd-recovery inspect --all with %s: exit %d\n%s\n%s", seal.EnvIdentityFile, code, out, errb)
	}
	var cliRep fleet.InspectAllReport
	if err := json.Unmarshal([]byte(out), &cliRep); err != nil {
		t.Fatalf("inspect --all -o json: %v\n%s", err, out)
	}
	if d := inspectRow(t, &cliRep, "etcd-opens").Decrypt; d == nil || d.State != prune.DecryptOpens {
		t.Errorf("CLI: etcd-opens: %+v; want opens", d)
	}
	if d := inspectRow(t, &cliRep, "etcd-stranger").Decrypt; d == nil || d.State != prune.DecryptNoIdentity {
		t.Errorf("CLI: etcd-stranger: %+v; want %q", d, prune.DecryptNoIdentity)
	}

	// Not asked: no check, no column.
	rep = inspectAll(nil)
	for _, r := range rep.Clusters {
		if r.Decrypt != nil {
			t.Errorf("%s checked without identities: %+v", r.Cluster, r.Decrypt)
		}
	}
	if tb := rep.Table(); strings.Contains(strings.Join(tb.Header, " "), "DECRYPTS") {
		t.Errorf("DECRYPTS column without a check: %v", tb.Header)
	}
}

// inspectRow is rep's row of cluster name; it fails t when there is none.
func inspectRow(t *testing.T, rep *fleet.InspectAllReport, name string) fleet.InspectRow {
	t.Helper()
	for _, r := range rep.Clusters {
		if r.Cluster == name {
			return r
		}
	}
	t.Fatalf("no row %s", name)
	return fleet.InspectRow{}
}

// namespaceWorld is a kube-apiserver with the CRDs, namespace ns with
// deploy/'s RBAC (and the applier that applied it) and the COS secret
// of the shared MinIO: what an inspect --all test starts from.
func namespaceWorld(t *testing.T, ns string) (*testenv.KubeAPIServer, kubernetes.Interface, dynamic.Interface, *kubetest.Applier, *testenv.MinIO) {
	t.Helper()
	w := kubetest.StartRBACWorld(t, ns)
	m := testenv.SharedMinIO(t)
	kubetest.CreateCOSSecret(t, w.Admin, ns, m)
	return w.K, w.Admin, w.Dyn, w.A, m
}
