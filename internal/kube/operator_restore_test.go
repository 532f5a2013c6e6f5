package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/kube"
	"github.com/armada/etcd-recovery/internal/testenv"
	"github.com/armada/etcd-recovery/internal/testfix"
)

// restoreNS holds the cluster of the restore --via etcd-operator test.
const restoreNS = "kubx-etcd-09"

// TestOperatorRestore runs restore --via etcd-operator against a real
// kube-apiserver with the deploy/ CRDs and RBAC, a real 3-member TLS etcd
// and MinIO. No etcd-operator runs here: the test plays its restore
// operator, as etcd-operator's restore-operator does it (prepareSeed):
// it reads the EtcdCluster named by the EtcdRestore as the template,
// downloads the snapshot from spec.s3.path, deletes the EtcdCluster and
// its pods, restores data dirs with etcdutl, starts the members, and
// recreates the EtcdCluster (same name and spec) and its pods; as
// etcd-operator, it then reports the members ready in the status.
func TestOperatorRestore(t *testing.T) {
	k := testenv.StartKubeAPIServer(t)
	admin := k.Clientset(t, "")
	dynAdmin := k.Dynamic(t, "")
	createNS(t, admin, restoreNS)
	installCRDs(t, k)
	a := newApplier(t, k)
	ctx := ctxT(t, 8*time.Minute)
	for _, o := range decodeManifests(t, filepath.Join(testenv.RepoRoot(t), "deploy", "10-rbac.yaml")) {
		if err := a.apply(ctx, o, restoreNS, false); err != nil {
			t.Fatal(err)
		}
	}
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	prefix := testenv.Prefix(t)
	if _, err := admin.CoreV1().Secrets(restoreNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: kube.COSSecretName},
		Data:       map[string][]byte{"access_key_id": []byte(m.AccessKey), "secret_access_key": []byte(m.SecretKey)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	st := testfix.Store(t, m, bucket)
	layout := backup.Layout{Prefix: prefix}

	const name = "etcd-r1"
	fc := addEtcdClusterIn(t, admin, dynAdmin, restoreNS, name, "127.0.5.10", 3)
	perClusterAccessIn(t, a, restoreNS, name)
	if !fc.etcd.PKI.ServerValidFor(net.ParseIP("127.0.0.1")) {
		t.Fatal("the cluster's server certificate is not valid for 127.0.0.1, where the restored members listen")
	}
	cli := fc.etcd.Client(t)
	testenv.PutKeys(t, cli, "/registry/pods/", 400, 128)
	// A compressed scheduled backup in COS; then more writes that only the
	// members have.
	br, err := backup.Run(ctx, backup.Options{ClusterID: name, Kind: backup.KindScheduled, Etcd: testfix.EtcdConfig(fc.etcd), Store: st, Layout: layout})
	if err != nil {
		t.Fatal(err)
	}
	if br.Manifest.Snapshot.Compression == backup.CompressNone {
		t.Fatal("want a compressed backup: the operator can't read those, staging is what makes it work")
	}
	testenv.PutKeys(t, cli, "/registry/configmaps/", 150, 64)

	toolkit := saToken(t, admin, restoreNS, "etcd-recovery-toolkit")
	sa, err := kube.New(kube.Config{Rest: k.RestConfig(toolkit), Namespace: restoreNS})
	if err != nil {
		t.Fatal(err)
	}
	kc := k.Kubeconfig(t, toolkit, restoreNS)
	tool := testfix.Tool(t)
	runTool := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, tool, append([]string{"restore", "--via", "etcd-operator", "--cluster", name, "--kubeconfig", kc,
			"--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix,
			"--dial-timeout", "2s", "--probe-timeout", "2s"}, args...)...)
		cmd.Env = toolEnv() // COS credentials come from the secret, through the API
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
	}

	t.Run("DryRunChangesNothing", func(t *testing.T) {
		before := apiState(t, ctx, dynAdmin, admin, name)
		keysBefore := testfix.Keys(t, st, layout.RootPrefix())
		code, stdout, stderr := runTool("--dry-run", "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		var rep kube.OperatorRestoreReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("json: %v\n%s", err, stdout)
		}
		if !rep.DryRun || rep.Plan == nil || rep.Plan.Survivor == nil || !rep.Plan.Survivor.Planned || rep.StagedSHA256 != "" {
			t.Fatalf("dry run report: %+v", rep)
		}
		var verbs []string
		for _, ac := range rep.Actions {
			verbs = append(verbs, ac.Verb)
		}
		if strings.Join(verbs, ",") != "stage,create,replace" || rep.Actions[1].Object["kind"] != "EtcdRestore" || rep.OldUID != fc.uid {
			t.Fatalf("actions %v, old uid %s", verbs, rep.OldUID)
		}
		if after := apiState(t, ctx, dynAdmin, admin, name); after != before {
			t.Fatalf("the dry run changed API objects:\nbefore %s\nafter  %s", before, after)
		}
		if keysAfter := testfix.Keys(t, st, layout.RootPrefix()); !slices.Equal(keysAfter, keysBefore) {
			t.Fatalf("the dry run changed the bucket: %v -> %v", keysBefore, keysAfter)
		}
		// The table form prints the objects as YAML.
		code, stdout, stderr = runTool("--dry-run", "--no-live")
		if code != 0 || !strings.Contains(stdout, "Would create: EtcdRestore "+restoreNS+"/"+name) || !strings.Contains(stdout, "kind: EtcdRestore") ||
			!strings.Contains(stdout, "forcePathStyle: true") || !strings.Contains(stdout, "operatorSecret: "+name+"-client-tls") {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		t.Logf("dry run (table):\n%s", stdout)

		// RBAC: the backup service account may not; an unknown cluster.
		bsa, err := kube.New(kube.Config{Rest: k.RestConfig(saToken(t, admin, restoreNS, "etcd-recovery")), Namespace: restoreNS})
		if err != nil {
			t.Fatal(err)
		}
		opts := kube.OperatorRestoreOptions{Kube: bsa, Cluster: name, Store: st, Layout: layout, Bucket: bucket, Endpoint: m.Endpoint, DryRun: true, NoLive: true}
		if _, err := kube.OperatorRestore(ctx, opts); err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Fatalf("with the backup service account: %v, want forbidden", err)
		}
		opts.Kube, opts.Cluster = sa, "etcd-nope"
		var nf *kube.NotFoundError
		if _, err := kube.OperatorRestore(ctx, opts); !errors.As(err, &nf) {
			t.Fatalf("unknown cluster: %v", err)
		}
	})

	t.Run("TimeoutWithoutOperator", func(t *testing.T) {
		start := time.Now()
		code, stdout, stderr := runTool("--no-live", "--timeout", "3s")
		if code != 1 {
			t.Fatalf("exit %d, want 1\n%s\n%s", code, stdout, stderr)
		}
		want := fmt.Sprintf(`restore of etcdcluster %s/%s via etcd-operator failed at step %q: etcd-operator did not bring etcdcluster %s/%s back with all members ready within 3s; last seen: the old etcdcluster (uid %s`,
			restoreNS, name, kube.OpStepWait, restoreNS, name, fc.uid)
		if !strings.Contains(stderr, want) {
			t.Fatalf("stderr does not name the cluster, the step and what was seen:\n%s\nwant %s", lastLines(stderr, 5), want)
		}
		if d := time.Since(start); d > time.Minute {
			t.Errorf("took %v", d)
		}
		// A second run refuses while that EtcdRestore exists.
		code, _, stderr = runTool("--no-live", "--timeout", "3s")
		if code != 1 || !strings.Contains(stderr, "an EtcdRestore "+name+" already exists") {
			t.Fatalf("second run: exit %d\n%s", code, lastLines(stderr, 3))
		}
		// The EtcdRestore stays for the operator; clean up as an admin.
		if err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(restoreNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Restore", func(t *testing.T) {
		// Quorum lost: two of three members die. The third still answers,
		// so a survivor snapshot is taken (it has the writes after the
		// COS backup) and restored.
		fc.etcd.Members[1].Kill()
		fc.etcd.Members[2].Kill()
		wantKeys := 400 + 150

		type result struct {
			rep *kube.OperatorRestoreReport
			err error
		}
		done := make(chan result, 1)
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		start := time.Now()
		go func() {
			rep, err := kube.OperatorRestore(rctx, kube.OperatorRestoreOptions{
				Kube: sa, Cluster: name, Store: st, Layout: layout, Bucket: bucket, Endpoint: m.Endpoint, ForcePathStyle: true,
				ProbeTimeout: 2 * time.Second, DialTimeout: 2 * time.Second, Timeout: 3 * time.Minute, PollInterval: 200 * time.Millisecond,
			})
			done <- result{rep, err}
		}()

		// The restore operator.
		var er *unstructured.Unstructured
		for er == nil {
			select {
			case r := <-done:
				t.Fatalf("returned before the operator acted: %+v %v", r.rep, r.err)
			case <-time.After(100 * time.Millisecond):
			}
			got, err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(restoreNS).Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				er = got
			} else if !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		// The reference EtcdCluster is still there: the operator reads it.
		ref, err := dynAdmin.Resource(kube.EtcdClusterGVR).Namespace(restoreNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil || ref.GetUID() != fc.uid {
			t.Fatalf("the EtcdCluster must still exist when the EtcdRestore is created (the operator's template): %v", err)
		}
		spec := er.Object["spec"].(map[string]any)
		s3 := spec["s3"].(map[string]any)
		if spec["backupStorageType"] != "S3" || spec["etcdCluster"].(map[string]any)["name"] != name ||
			s3["awsSecret"] != kube.COSSecretName || s3["endpoint"] != m.Endpoint || s3["forcePathStyle"] != true {
			t.Fatalf("etcdrestore spec: %v", spec)
		}
		ann := er.GetAnnotations()
		var savedSpec map[string]any
		if err := json.Unmarshal([]byte(ann[kube.AnnotationClusterSpec]), &savedSpec); err != nil || !equalJSON(savedSpec, ref.Object["spec"]) ||
			ann[kube.AnnotationClusterUID] != string(fc.uid) {
			t.Fatalf("annotations %v: %v", ann, err)
		}
		// The staged snapshot: under restore/, uncompressed, the survivor's.
		s3path := s3["path"].(string)
		key, ok := strings.CutPrefix(s3path, bucket+"/")
		if !ok {
			t.Fatalf("s3.path %q is not <bucket>/<key>", s3path)
		}
		list, err := backup.ListBackups(ctx, st, layout, name)
		if err != nil || len(list) != 2 || list[0].Manifest == nil || list[0].Manifest.Kind != backup.KindPreRestore {
			t.Fatalf("want the pre-restore backup newest: %+v %v", list, err)
		}
		man := list[0].Manifest
		if key != kube.StagedKey(layout, name, man.Name) || !strings.HasPrefix(key, layout.RootPrefix()+"restore/"+name+"/") ||
			ann[kube.AnnotationBackup] != man.Name {
			t.Fatalf("staged at %q, want %q (backup annotation %q)", key, kube.StagedKey(layout, name, man.Name), ann[kube.AnnotationBackup])
		}
		raw := testfix.ReadObject(t, st, key)
		if int64(len(raw)) != man.Snapshot.RawSize+32 || testfix.SHA256(raw[:len(raw)-32]) != man.Snapshot.RawSHA256 ||
			testfix.SHA256(raw) != ann[kube.AnnotationStagedSHA256] {
			t.Fatalf("staged snapshot: %d bytes, db sha %s; manifest %d, %s", len(raw), testfix.SHA256(raw[:len(raw)-32]), man.Snapshot.RawSize, man.Snapshot.RawSHA256)
		}
		playRestoreOperator(t, ctx, admin, dynAdmin, ref, fc, raw)

		r := <-done
		if r.err != nil {
			t.Fatalf("operator restore: %v\nreport %+v", r.err, r.rep)
		}
		rep := r.rep
		t.Logf("restore via etcd-operator: %v in all, waited %v for the operator", time.Since(start).Round(time.Millisecond), rep.Waited.Round(time.Millisecond))
		if rep.Backup != man.Name || rep.StagedKey != key || rep.OldUID != fc.uid || rep.NewUID == "" || rep.NewUID == fc.uid {
			t.Fatalf("report: %+v", rep)
		}
		if rep.Verify == nil || !rep.Verify.Verified || rep.Verify.Keys != int64(wantKeys) || len(rep.Verify.Members) != 3 ||
			rep.Verify.Revision < rep.Plan.Snapshot.Revision {
			t.Fatalf("verification: %+v", rep.Verify)
		}
		for _, ep := range rep.Endpoints {
			if !strings.HasPrefix(ep, "https://127.0.0.1:") {
				t.Fatalf("verified %v, not the restored members", rep.Endpoints)
			}
		}
	})
}

// playRestoreOperator does what etcd-operator's restore operator does with
// an EtcdRestore, given the snapshot it downloaded.
func playRestoreOperator(t *testing.T, ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, ref *unstructured.Unstructured, fc fakeCluster, snap []byte) {
	t.Helper()
	ns, name := ref.GetNamespace(), ref.GetName()
	dir := t.TempDir()
	snapFile := filepath.Join(dir, "backup.db")
	if err := os.WriteFile(snapFile, snap, 0o600); err != nil {
		t.Fatal(err)
	}
	// Delete the reference EtcdCluster and its pods; the old members go.
	if err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)},
		metav1.ListOptions{LabelSelector: kube.LabelCluster + "=" + name}); err != nil {
		t.Fatal(err)
	}
	for _, mb := range fc.etcd.Members {
		mb.Kill()
	}
	// Restore data dirs with etcdutl (which checks the snapshot's hash) and
	// start the members with the cluster's PKI.
	const size = 3
	type member struct{ name, client, peer, dataDir string }
	var members []member
	var ic []string
	for i := range size {
		mb := member{name: fmt.Sprintf("%s-%04d", name, 100+i),
			client: fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(t)), peer: fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(t)),
			dataDir: filepath.Join(dir, fmt.Sprintf("m%d.etcd", i))}
		members = append(members, mb)
		ic = append(ic, mb.name+"="+mb.peer)
	}
	token := name + "-restored"
	for _, mb := range members {
		out, err := exec.CommandContext(ctx, testenv.EtcdutlBin(t, testenv.V35), "snapshot", "restore", snapFile, "--name", mb.name,
			"--initial-cluster", strings.Join(ic, ","), "--initial-cluster-token", token, "--initial-advertise-peer-urls", mb.peer,
			"--data-dir", mb.dataDir).CombinedOutput()
		if err != nil {
			t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
		}
	}
	var started []*testenv.EtcdMember
	for _, mb := range members {
		started = append(started, testenv.StartEtcdMember(t, testenv.MemberSpec{Version: testenv.V35, Name: mb.name, DataDir: mb.dataDir,
			ClientURL: mb.client, PeerURL: mb.peer, InitialCluster: strings.Join(ic, ","), InitialClusterToken: token, PKI: fc.etcd.PKI}))
	}
	for _, sm := range started {
		sm.WaitReady(t)
	}
	// The restored EtcdCluster, same name and spec, then its pods and status.
	ec := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kube.APIVersion, "kind": kube.KindEtcdCluster,
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": ref.GetLabels()},
		"spec":     ref.Object["spec"],
	}}
	created, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Create(ctx, ec, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ready []any
	for _, mb := range members {
		var port int32
		fmt.Sscan(strings.TrimPrefix(mb.client, "https://127.0.0.1:"), &port)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: mb.name, Labels: map[string]string{kube.LabelApp: "etcd", kube.LabelCluster: name}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "etcd", Image: "quay.io/coreos/etcd:v3.5.35",
				Ports: []corev1.ContainerPort{{Name: "client", ContainerPort: port}, {Name: "peer", ContainerPort: 2380}}}}},
		}
		p, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}}}
		if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		ready = append(ready, mb.name)
	}
	// Creating, one member ready, then all: the tool must wait for all.
	setStatus := func(phase string, ready []any) {
		t.Helper()
		cur, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Object["status"] = map[string]any{"phase": phase, "size": int64(len(ready)), "members": map[string]any{"ready": ready}}
		if _, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setStatus("Creating", ready[:1])
	time.Sleep(time.Second)
	setStatus("Running", ready)
	t.Logf("restore operator played: etcdcluster %s recreated (uid %s) with %d members", name, created.GetUID(), len(ready))
}

// apiState is what a dry run must not change: the EtcdCluster (uid and
// resourceVersion), the EtcdRestores, the cluster's pods.
func apiState(t *testing.T, ctx context.Context, dyn dynamic.Interface, cs kubernetes.Interface, name string) string {
	t.Helper()
	ec, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(restoreNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ers, err := dyn.Resource(kube.EtcdRestoreGVR).Namespace(restoreNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods(restoreNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "etcdcluster %s@%s; %d etcdrestores; pods:", ec.GetUID(), ec.GetResourceVersion(), len(ers.Items))
	for _, p := range pods.Items {
		fmt.Fprintf(&b, " %s@%s", p.Name, p.ResourceVersion)
	}
	return b.String()
}

func equalJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
