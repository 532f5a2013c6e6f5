package runbooks

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/mdblocks"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/metrics"
)

const namespaceRestore = "namespace-restore.md"

// namespaceRestoreRunbook: a namespace of a real kube-apiserver (deploy/'s
// CRDs and RBAC, each cluster's client-TLS grant, cos-credentials) with
// three EtcdClusters backed by real etcd, each backed up to MinIO; two
// lose their only member (quorum lost), one stays healthy; etcd-operator's
// restore operator is kubetest's stand-in. The runbook's blocks run as the
// toolkit's service account: the plan (nothing changed: no EtcdRestore,
// the bucket's keys the same; two clusters planned, one healthy), the run
// (its -o json report saved as the runbook says: both restored with their
// backup, client URL and NodePort, the healthy one left alone and not
// replaced; every key of each backup back in the restored cluster; a done
// record per cluster under _restores/), then the same command again as
// "Resume a run" says (every cluster healthy now: nothing restored again,
// exit 0). The exporter, on the records restore-all wrote, shows the run
// ended with both planned clusters done.
func namespaceRestoreRunbook(t *testing.T, rb mdblocks.Set) {
	const ns = "kubx-etcd-17"
	w := kubetest.NewWorld(t, ns)
	k, admin, dyn := w.K, w.Admin, w.Dyn
	lostA := kubetest.AddEtcdCluster(t, admin, dyn, ns, "etcd-rb-nra", testenv.EtcdOptions{IP: "127.0.7.40", Members: 1})
	lostB := kubetest.AddEtcdCluster(t, admin, dyn, ns, "etcd-rb-nrb", testenv.EtcdOptions{IP: "127.0.7.41", Members: 1})
	healthy := kubetest.AddEtcdCluster(t, admin, dyn, ns, "etcd-rb-nrc", testenv.EtcdOptions{IP: "127.0.7.42", Members: 1})
	all := []kubetest.Cluster{lostA, lostB, healthy}
	f := mdblocks.NewFixture(t, lostA.Etcd.PKI, lostA.Etcd.Endpoints())
	f.ID, f.Vars["id"] = lostA.Name, lostA.Name
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	kubetest.CreateCOSSecret(t, admin, ns, f.MinIO)
	keys := map[string]map[string]string{}
	for i, fc := range all {
		kubetest.PerClusterAccess(t, w.Applier, ns, fc.Name)
		keys[fc.Name] = testenv.PutKeys(t, fc.Etcd.Client(t), "/registry/ns-restore-"+fc.Name+"/", 30+20*i, 128)
		if _, err := backup.Run(ctx, backup.Options{ClusterID: fc.Name, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(fc.Etcd), Store: f.Store, Layout: f.Layout}); err != nil {
			t.Fatal(err)
		}
	}
	grantClientNodePorts(t, admin, ns, all)
	// Down, and their pods not Ready (the kubelet's view): restore-all
	// restores only clusters Kubernetes says are down.
	kubetest.MemberDown(t, ctx, admin, ns, lostA.Name, lostA.Etcd.Members[0])
	kubetest.MemberDown(t, ctx, admin, ns, lostB.Name, lostB.Etcd.Members[0])
	op := kubetest.StartRestoreOperator(t, kubetest.RestoreOperatorOptions{Namespace: ns, Client: admin, Dynamic: dyn, RunningDelay: 500 * time.Millisecond})
	for _, fc := range all {
		op.Register(fc)
	}

	s := toolkitScenario(t, rb, k, admin, ns, f)
	before := testfix.Keys(t, f.Store, f.Layout.RootPrefix())
	rs := s.Run(namespaceRestore + "#plan-the-restore")
	plan := mdblocks.One(t, rs, "--dry-run", 0)
	mdblocks.MustContain(t, plan, lostA.Name, lostB.Name, healthy.Name, fleet.OutcomePlanned, fleet.OutcomeHealthy)
	if n := strings.Count(plan.Output, fleet.OutcomePlanned); n < 2 {
		t.Errorf("the plan names %d clusters %s, want both quorum-lost ones:\n%s", n, fleet.OutcomePlanned, plan.Output)
	}
	if ers := etcdRestores(t, ctx, dyn, ns); len(ers) != 0 {
		t.Fatalf("the dry run created %d EtcdRestore(s)", len(ers))
	}
	if after := testfix.Keys(t, f.Store, f.Layout.RootPrefix()); !slices.Equal(after, before) {
		t.Fatalf("the dry run changed the bucket:\nbefore %v\nafter  %v", before, after)
	}

	s.Run(namespaceRestore + "#run-the-restore")
	rep := readRestoreAllReport(t, filepath.Join(s.Dir, "restore-"+ns+".json"))
	rows := map[string]fleet.RestoreAllRow{}
	for _, r := range rep.Clusters {
		rows[r.Cluster] = r
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Resumed || len(rep.Failed) != 0 || len(rep.Clusters) != 3 {
		t.Fatalf("report: %+v", rep)
	}
	for _, fc := range []kubetest.Cluster{lostA, lostB} {
		r := rows[fc.Name]
		if r.Outcome != fleet.OutcomeRestored || r.Backup == "" || r.NodePort == 0 || r.ClientURL != "https://"+fc.Name+"-client."+ns+".svc:2379" {
			t.Errorf("%s in the report: %+v", fc.Name, r)
		}
		rec := op.Wait(t, fc.Name, time.Minute)
		if rec.Err != nil || rec.OldUID != fc.UID {
			t.Fatalf("%s: the operator's restore: %+v", fc.Name, rec)
		}
		mdblocks.CheckKeys(t, rec.Members[0].Client(t), keys[fc.Name])
		var done catalog.FleetRestoreDone
		if err := catalog.ReadFleetRestoreRecord(ctx, f.Store, f.Layout.FleetRestoreDoneKey(rep.Runs[0].Run, fc.Name), &done); err != nil || done.Backup != r.Backup {
			t.Errorf("%s: done record %+v: %v", fc.Name, done, err)
		}
	}
	if r := rows[healthy.Name]; r.Outcome != fleet.OutcomeHealthy {
		t.Errorf("%s in the report: %+v", healthy.Name, r)
	}
	if ec, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Get(ctx, healthy.Name, metav1.GetOptions{}); err != nil || ec.GetUID() != healthy.UID {
		t.Errorf("the healthy cluster was replaced: %v", err)
	}

	// The exporter reads the run restore-all recorded: both planned
	// clusters done, the attempt ended, nothing in progress.
	exp, err := metrics.New(metrics.Options{Store: f.Store, Layout: f.Layout, Deadline: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if r := exp.Snapshot().RestoreRun; r == nil || r.Run != rep.Runs[0].Run || r.Planned != 2 || r.Done != 2 || r.Failed != 0 ||
		r.Ended.IsZero() || r.InProgress(now) || r.Killed(now) || r.Expected <= 0 {
		t.Errorf("the exporter's view of run %s: %+v", rep.Runs[0].Run, r)
	}

	// The same command again: nothing left to do, nothing restored again.
	restores := len(etcdRestores(t, ctx, dyn, ns))
	s.Run(namespaceRestore + "#resume-a-run")
	again := readRestoreAllReport(t, filepath.Join(s.Dir, "restore-"+ns+"-2.json"))
	for _, r := range again.Clusters {
		if r.Outcome == fleet.OutcomeRestored || r.Outcome == fleet.OutcomeFailed {
			t.Errorf("the rerun: %s %s: %+v", r.Cluster, r.Outcome, r)
		}
	}
	if n := len(etcdRestores(t, ctx, dyn, ns)); n != restores {
		t.Errorf("the rerun created EtcdRestores: %d, then %d", restores, n)
	}
}

// readRestoreAllReport reads a restore-all -o json report the runbook saved.
func readRestoreAllReport(t *testing.T, path string) fleet.RestoreAllReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep fleet.RestoreAllReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	return rep
}

// grantClientNodePorts lets the toolkit's account get each cluster's
// <id>-client-service-np Service (the NodePort the report gives; deploy/'s
// per-cluster Role grants it to the backup's account only).
func grantClientNodePorts(t *testing.T, admin kubernetes.Interface, ns string, clusters []kubetest.Cluster) {
	t.Helper()
	var names []string
	for _, c := range clusters {
		names = append(names, c.Name+"-client-service-np")
	}
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "restore-all-nodeports"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, ResourceNames: names, Verbs: []string{"get"}}}}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "restore-all-nodeports"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "etcd-recovery-toolkit", Namespace: ns}}}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
