package fleet_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

func TestMain(m *testing.M) { testfix.Main(m) }

const (
	ns      = "kubx-etcd-01"
	otherNS = "kubx-etcd-02"
	// inspectNS holds the clusters of the inspect --all test.
	inspectNS = "kubx-etcd-03"
)

// TestKube runs everything against one real kube-apiserver (starting one
// is the expensive part): the manifests, RBAC, discovery, and backup --all
// of 20 EtcdClusters backed by real etcd members.
// TestFleet runs backup --all and inspect --all against one real
// kube-apiserver (starting one is the expensive part), with the
// deployment's RBAC: backup --all of 20 EtcdClusters backed by real etcd
// members, one of them down, and the namespace's DR posture.
func TestFleet(t *testing.T) {
	w := kubetest.StartRBACWorld(t, ns, otherNS, inspectNS, escrowNS)
	t.Run("BackupAll", func(t *testing.T) { testBackupAll(t, w.K, w.A, w.Admin) })
	t.Run("InspectAll", func(t *testing.T) { testInspectAll(t, w.K, w.A, w.Admin) })
	t.Run("Escrow", func(t *testing.T) { testEscrow(t, w) })
}

func testBackupAll(t *testing.T, k *testenv.KubeAPIServer, a *kubetest.Applier, admin kubernetes.Interface) {
	ctx := testfix.Context(t, 10*time.Minute)
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	prefix := testenv.Prefix(t)
	const n = 20
	clusters, token, sa := kubetest.AddSAFleet(t, k, a, admin, m, ns, []string{otherNS}, n)

	t.Run("BackupAllOneDown", func(t *testing.T) {
		down := clusters[7]
		down.Etcd.Members[0].Kill()
		tool := testfix.Tool(t)
		kc := k.Kubeconfig(t, token, ns)
		// No COS credentials in the environment (ToolEnv): they come from
		// the secret.
		start := time.Now()
		stdout, stderr, code := testfix.RunTool(t, ctx, tool, nil, "backup", "--all", "--prune", "--kind", "scheduled", "--parallel", "4",
			"--kubeconfig", kc, "--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix,
			"--dial-timeout", "2s", "--probe-timeout", "2s", "-o", "json")
		elapsed := time.Since(start)
		if code != 1 {
			t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if !strings.Contains(stderr, "backup failed for 1 etcdcluster(s) in "+ns+": "+down.Name) {
			t.Errorf("stderr does not name the failed cluster:\n%s", testfix.LastLines(stderr, 5))
		}
		var rep fleet.BackupAllReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("json: %v\n%s", err, stdout)
		}
		if len(rep.Clusters) != n || len(rep.Failed) != 1 || rep.Failed[0] != down.Name {
			t.Fatalf("report: %d clusters, failed %v", len(rep.Clusters), rep.Failed)
		}
		st := testfix.Store(t, m, bucket)
		layout := catalog.Layout{Prefix: prefix}
		for i, r := range rep.Clusters {
			fc := clusters[i]
			if fc.Name == down.Name {
				if r.Result != fleet.ResultFailed || !strings.Contains(r.Error, down.Name) {
					t.Errorf("down cluster: %+v", r)
				}
				continue
			}
			if r.Result != fleet.ResultOK || r.Revision == 0 || r.Size == 0 || r.Prune == nil {
				t.Errorf("%s: %+v", fc.Name, r)
				continue
			}
			list, err := catalog.ListBackups(ctx, st, layout, fc.Name)
			if err != nil || len(list) != 1 || list[0].Manifest == nil || list[0].Manifest.Kind != catalog.KindScheduled {
				t.Errorf("%s: backups in COS: %+v %v", fc.Name, list, err)
			}
		}
		t.Logf("backup --all of %d clusters (1 down) at --parallel 4: %v", n, elapsed.Round(time.Millisecond))

		// Events on the EtcdClusters, as kubectl describe shows them.
		kadmin, err := kube.New(kube.Config{Rest: k.RestConfig(""), Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		for _, fc := range clusters {
			evs, err := kadmin.Events(ctx, kube.Cluster{Namespace: ns, Name: fc.Name})
			if err != nil {
				t.Fatal(err)
			}
			wantReason, wantType := kube.ReasonBackupSucceeded, corev1.EventTypeNormal
			if fc.Name == down.Name {
				wantReason, wantType = kube.ReasonBackupFailed, corev1.EventTypeWarning
			}
			if len(evs) != 1 || evs[0].Reason != wantReason || evs[0].Type != wantType || evs[0].InvolvedObject.UID != fc.UID ||
				evs[0].Source.Component != kube.EventComponent {
				t.Errorf("%s: events %+v", fc.Name, evs)
				continue
			}
			if fc.Name == down.Name {
				t.Logf("event on %s: %s %s: %s", fc.Name, evs[0].Type, evs[0].Reason, evs[0].Message)
			}
		}

		// In-process, the package function: the survivors again, named.
		rep2, err := fleet.BackupAll(ctx, fleet.BackupAllOptions{
			Kube: sa, Names: []string{"etcd-c00", "etcd-c01"}, Parallel: 2,
			Template:    backup.Options{Kind: catalog.KindManual, Store: st, Layout: layout, ProbeTimeout: 2 * time.Second},
			DialTimeout: 2 * time.Second,
		})
		if err != nil || len(rep2.Clusters) != 2 || rep2.Clusters[0].Result != fleet.ResultOK {
			t.Fatalf("BackupAll named: %+v %v", rep2, err)
		}
		tab := rep2.Table()
		// ESCROW: none, the backups being plaintext (the escrow test,
		// below, has the other states).
		if strings.Join(tab.Header, " ") != "CLUSTER RESULT BACKUP REVISION STORED DURATION PRUNED ESCROW ERROR" || len(tab.Rows) != 2 ||
			tab.Rows[0][0] != "etcd-c00" || tab.Rows[0][1] != fleet.ResultOK || tab.Rows[0][6] != "-" || tab.Rows[0][7] != string(catalog.EscrowNone) {
			t.Fatalf("summary table: %v %v", tab.Header, tab.Rows)
		}
	})
}
