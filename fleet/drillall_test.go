package fleet_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/drill"
	"github.com/armada/etcd-recovery/fleet"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// drillAllNS holds the clusters of the drill --all (Kubernetes form) test.
const drillAllNS = "kubx-etcd-14"

// drill --all in the Kubernetes form, through the CLI, against a real
// kube-apiserver with the backup CronJob's service account (deploy/
// 10-rbac.yaml) and COS credentials from the namespace's secret. Four
// EtcdClusters: etcd-k1 (etcd 3.5) and etcd-k2 (etcd 3.6) with good
// backups, etcd-k3 (etcd 3.5) whose newest backup is forged (etcd-k1's
// snapshot committed under etcd-k3's manifest, its hashes matching), and
// etcd-k4 with no backup. Every drill compares with its source, found
// through the API (member pods, client TLS secret): k1 and k2 pass with the
// source's HashKV equal, k3 fails the comparison, k4 is not drilled; the
// exit is 1 naming k3, its backup and the check. The records are written,
// and each drilled EtcdCluster gets its Event (DrillPassed, DrillFailed),
// recorded with the service account's own rights.
func TestDrillAllKube(t *testing.T) {
	t.Parallel()
	k, admin, dyn, a, m := namespaceWorld(t, drillAllNS)
	bucket, prefix := m.NewBucket(t), testenv.Prefix(t)
	ctx := testfix.Context(t, 4*time.Minute)
	st, layout := testfix.Store(t, m, bucket), catalog.Layout{Prefix: prefix}

	versions := map[string]testenv.Version{"etcd-k1": testenv.V35, "etcd-k2": testenv.V36, "etcd-k3": testenv.V35}
	clusters := map[string]kubetest.Cluster{}
	for i, name := range []string{"etcd-k1", "etcd-k2", "etcd-k3"} {
		c := kubetest.AddEtcdCluster(t, admin, dyn, drillAllNS, name, testenv.EtcdOptions{IP: fmt.Sprintf("127.0.14.%d", 10+i), Members: 1, Version: versions[name]})
		kubetest.PerClusterAccess(t, a, drillAllNS, name)
		cli := c.Etcd.Client(t)
		// Same history length, different data (each cluster's own value).
		if _, err := cli.Put(ctx, "/registry/secrets/kube-system/token", name); err != nil {
			t.Fatal(err)
		}
		testenv.PutKeys(t, cli, "/registry/pods/", 200, 128)
		clusters[name] = c
	}
	// etcd-k4: an EtcdCluster without a backup (and without members).
	if _, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(drillAllNS).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kube.APIVersion, "kind": kube.KindEtcdCluster,
		"metadata": map[string]any{"name": "etcd-k4", "namespace": drillAllNS},
		"spec":     map[string]any{"size": int64(1), "version": "3.5.35"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	takeBackup := func(name string) *catalog.Manifest {
		t.Helper()
		res, err := backup.Run(ctx, backup.Options{ClusterID: name, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(clusters[name].Etcd),
			Store: st, Layout: layout, ProbeTimeout: 3 * time.Second})
		if err != nil {
			t.Fatalf("backup of %s: %v", name, err)
		}
		return res.Manifest
	}
	names := map[string]string{}
	m1 := takeBackup("etcd-k1")
	names["etcd-k1"] = m1.Name
	names["etcd-k2"] = takeBackup("etcd-k2").Name
	// etcd-k3's backup: etcd-k1's snapshot under a manifest of etcd-k3,
	// internally consistent (its hashes are the object's).
	forged := *m1
	forged.ClusterID, forged.Name = "etcd-k3", catalog.NewBackupName(time.Now(), catalog.KindScheduled)
	forged.V2, forged.V2Skipped = nil, "not exported"
	snap := testfix.ReadObject(t, st, layout.Key("etcd-k1", m1.Name, m1.Snapshot.Object))
	if _, err := st.Put(ctx, layout.Key("etcd-k3", forged.Name, forged.Snapshot.Object), bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	mb, err := catalog.MarshalManifest(&forged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, layout.Key("etcd-k3", forged.Name, catalog.ManifestObject), bytes.NewReader(mb)); err != nil {
		t.Fatal(err)
	}
	names["etcd-k3"] = forged.Name
	// etcd-k3 moves past the forged snapshot's revision (HashKV there
	// answers, and differs).
	testenv.PutKeys(t, clusters["etcd-k3"].Etcd.Client(t), "/registry/events/", 20, 32)

	binDir := testenv.DrillBinDir(t, testenv.V35, testenv.V36)
	token := kubetest.SAToken(t, admin, drillAllNS, "etcd-recovery")
	scratch := t.TempDir()
	cmd := exec.CommandContext(ctx, testfix.Tool(t), "drill", "--all", "--namespace", drillAllNS, "--parallel", "2",
		"--etcd-bin-dir", binDir, "--temp-dir", scratch,
		"--kubeconfig", k.Kubeconfig(t, token, drillAllNS), "--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix,
		"--dial-timeout", "2s", "--probe-timeout", "5s", "-o", "json")
	cmd.Env = testfix.ToolEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	t.Logf("drill --all --namespace %s --parallel 2 of 3 clusters: %v", drillAllNS, time.Since(start).Round(time.Millisecond))
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want 1 (etcd-k3's backup is forged)\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), testfix.LastLines(stderr.String(), 30))
	}
	last := testfix.LastLines(stderr.String(), 1)
	for _, want := range []string{"drill of 1 cluster(s) failed", "cluster etcd-k3", names["etcd-k3"], drill.CheckCompare} {
		if !strings.Contains(last, want) {
			t.Errorf("the error does not name %q: %s", want, last)
		}
	}
	var rep fleet.DrillAllReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("json: %v\n%s", err, stdout.String())
	}
	if rep.Namespace != drillAllNS || rep.Parallel != 2 || len(rep.Clusters) != 4 ||
		strings.Join(rep.Failed, ",") != "etcd-k3" || strings.Join(rep.NoBackup, ",") != "etcd-k4" {
		t.Fatalf("report: namespace %q parallel %d failed %v noBackup %v, %d clusters\n%s", rep.Namespace, rep.Parallel, rep.Failed, rep.NoBackup, len(rep.Clusters), stdout.String())
	}
	kadmin, err := kube.New(kube.Config{Rest: k.RestConfig(""), Namespace: drillAllNS})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rep.Clusters {
		if want := fmt.Sprintf("etcd-k%d", i+1); r.Cluster != want {
			t.Errorf("cluster %d is %s, want %s", i, r.Cluster, want)
		}
		if r.EventError != "" {
			t.Errorf("%s: the service account could not record the Event: %s", r.Cluster, r.EventError)
		}
		evs, err := kadmin.Events(ctx, kube.Cluster{Namespace: drillAllNS, Name: r.Cluster})
		if err != nil {
			t.Fatal(err)
		}
		byReason := map[string][]corev1.Event{}
		for _, e := range evs {
			byReason[e.Reason] = append(byReason[e.Reason], e)
		}
		var rec *catalog.DrillRecord
		if r.Cluster != "etcd-k4" {
			if rec, err = catalog.LoadDrill(ctx, st, layout, r.Cluster, names[r.Cluster]); err != nil || rec == nil {
				t.Errorf("%s: drill.json of %s: %v %v", r.Cluster, names[r.Cluster], rec, err)
			}
		}
		switch r.Cluster {
		case "etcd-k1", "etcd-k2":
			c := r.Record
			if r.Result != fleet.DrillPassed || r.Backup != names[r.Cluster] || r.Comparison != catalog.CompareSource || c == nil ||
				c.Comparison.Equal == nil || !*c.Comparison.Equal || c.Comparison.SourceHash == nil {
				t.Errorf("%s: %+v, want passed, equal to the source", r.Cluster, r)
			}
			if want := string(versions[r.Cluster]); c != nil && !strings.HasPrefix(c.EtcdVersion, want) {
				t.Errorf("%s: drilled with etcd %s, want %s", r.Cluster, c.EtcdVersion, want)
			}
			if rec != nil && (!rec.Passed || rec.Comparison.Mode != catalog.CompareSource) {
				t.Errorf("%s: drill.json passed=%v mode %s", r.Cluster, rec.Passed, rec.Comparison.Mode)
			}
			if e := byReason[kube.ReasonDrillPassed]; len(e) != 1 || e[0].Type != corev1.EventTypeNormal ||
				!strings.Contains(e[0].Message, names[r.Cluster]) || !strings.Contains(e[0].Message, "equals the source") {
				t.Errorf("%s: events %+v, want one Normal %s naming the backup and the comparison", r.Cluster, evs, kube.ReasonDrillPassed)
			} else if r.Cluster == "etcd-k1" {
				t.Logf("event on %s: %s %s: %s", r.Cluster, e[0].Type, e[0].Reason, e[0].Message)
			}
		case "etcd-k3":
			if r.Result != fleet.DrillFailed || r.Backup != names["etcd-k3"] || r.Comparison != catalog.CompareSource ||
				!strings.HasPrefix(r.Failed, drill.CheckCompare+":") || r.Step != drill.StepCompare {
				t.Errorf("etcd-k3: %+v, want failed at the source comparison", r)
			}
			if rec != nil && (rec.Passed || !strings.HasPrefix(rec.Failed, drill.CheckCompare)) {
				t.Errorf("etcd-k3: drill.json passed=%v failed %q", rec.Passed, rec.Failed)
			}
			if e := byReason[kube.ReasonDrillFailed]; len(e) != 1 || e[0].Type != corev1.EventTypeWarning ||
				!strings.Contains(e[0].Message, names["etcd-k3"]) || !strings.Contains(e[0].Message, drill.CheckCompare) {
				t.Errorf("etcd-k3: events %+v, want one Warning %s naming the backup and the check", evs, kube.ReasonDrillFailed)
			} else {
				t.Logf("event on etcd-k3: %s %s: %s", e[0].Type, e[0].Reason, e[0].Message)
			}
			if len(byReason[kube.ReasonDrillPassed]) > 0 {
				t.Errorf("etcd-k3: a %s event", kube.ReasonDrillPassed)
			}
		case "etcd-k4":
			if r.Result != fleet.DrillNoBackup || r.Record != nil || !strings.Contains(r.Reason, "no committed backup") {
				t.Errorf("etcd-k4: %+v, want not drilled for want of a backup", r)
			}
			if len(evs) > 0 {
				t.Errorf("etcd-k4 (not drilled): events %+v", evs)
			}
		}
	}
	ents, err := os.ReadDir(scratch)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left in the scratch dir: %s", e.Name())
	}
}
