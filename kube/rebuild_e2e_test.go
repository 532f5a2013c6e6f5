package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"filippo.io/age"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/journal"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
)

// goneNS holds the cluster whose namespace is deleted and rebuilt.
const goneNS = "kubx-etcd-13"

// customerNS is the customer's namespace inside the customer master.
const customerNS = "shop"

// customerMaster is a real kube-apiserver playing a customer's master:
// it stores into the EtcdCluster through the NodePort, with the files it
// was given from the cluster's client-TLS secret, which it keeps.
type customerMaster struct {
	opts testenv.KubeOptions
	k    *testenv.KubeAPIServer
}

// startCustomerMaster writes the client-TLS secret's files (the files a
// customer master keeps) and starts the API server on the NodePort.
func startCustomerMaster(t *testing.T, ctx context.Context, admin kubernetes.Interface, ns, cluster, nodeAddr string) *customerMaster {
	t.Helper()
	s, err := admin.CoreV1().Secrets(ns).Get(ctx, cluster+"-client-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{}
	for _, k := range []string{kube.ClientCAKey, kube.ClientCertKey, kube.ClientKeyKey} {
		files[k] = filepath.Join(dir, k)
		if err := os.WriteFile(files[k], s.Data[k], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cm := &customerMaster{opts: testenv.KubeOptions{EtcdServers: []string{"https://" + nodeAddr}, ExtraArgs: []string{
		"--etcd-cafile=" + files[kube.ClientCAKey], "--etcd-certfile=" + files[kube.ClientCertKey], "--etcd-keyfile=" + files[kube.ClientKeyKey]}}}
	cm.start(t)
	return cm
}

// start starts the API server with the same files and URL.
func (c *customerMaster) start(t *testing.T) {
	t.Helper()
	c.k = testenv.StartKubeAPIServerWith(t, c.opts)
}

// objState is what the customer sees of one object.
type objState struct{ UID, ResourceVersion, Data string }

// customerState is every object of the customer's namespace: configmaps,
// secrets, services and deployments, with uid, resourceVersion and data
// (or spec).
func customerState(t *testing.T, ctx context.Context, cs kubernetes.Interface) map[string]objState {
	t.Helper()
	out := map[string]objState{}
	add := func(kind string, md metav1.ObjectMeta, data any) {
		b, err := json.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		out[kind+"/"+md.Name] = objState{UID: string(md.UID), ResourceVersion: md.ResourceVersion, Data: string(b)}
	}
	cms, err := cs.CoreV1().ConfigMaps(customerNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range cms.Items {
		add("ConfigMap", o.ObjectMeta, o.Data)
	}
	ss, err := cs.CoreV1().Secrets(customerNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ss.Items {
		add("Secret", o.ObjectMeta, o.Data)
	}
	svcs, err := cs.CoreV1().Services(customerNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range svcs.Items {
		add("Service", o.ObjectMeta, o.Spec)
	}
	ds, err := cs.AppsV1().Deployments(customerNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ds.Items {
		add("Deployment", o.ObjectMeta, o.Spec)
	}
	return out
}

// fillCustomer creates n configmaps, n secrets, a deployment and a
// service in the customer's namespace.
func fillCustomer(t *testing.T, ctx context.Context, cs kubernetes.Interface, n int) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: customerNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := cs.CoreV1().ConfigMaps(customerNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)},
			Data: map[string]string{"i": fmt.Sprint(i), "v": strings.Repeat("x", 64+i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Secrets(customerNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%03d", i)},
			Data: map[string][]byte{"token": fmt.Appendf(nil, "secret-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"app": "web"}
	one := int32(2)
	if _, err := cs.AppsV1().Deployments(customerNS).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Services(customerNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// ageIdentityFile writes a new age identity to a file and returns its
// path and recipient.
func ageIdentityFile(t *testing.T) (string, string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "identity.txt")
	if err := os.WriteFile(f, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f, id.Recipient().String()
}

// testRebuildFromStore: the namespace is gone, and a rebuild from the
// store alone brings the cluster back, as far as a customer master can
// tell the same. A 3-member TLS etcd (AddEtcdCluster: its EtcdCluster,
// three TLS secrets, three Services) is reached by a real kube-apiserver,
// the customer master, through the NodePort (kubetest.NodePort plays
// kube-proxy on a loopback "node" IP the server certificate is valid
// for), with the client-TLS secret's files. The customer creates ~100
// objects; an encrypted backup escrows the namespace's objects; the
// master is stopped; everything of the namespace is deleted and the
// members killed with their data dirs. In the namespace recreated with
// only cos-credentials and the RBAC, the toolkit's account runs restore
// --via etcd-operator --rebuild (the CLI): first the refusals (dry run
// creates nothing; a wrong identity, a tampered escrow and a differing
// secret fail before anything is created, each named), then the real
// one. The master started again with its original files and URL serves
// every object identical (uid, resourceVersion, data).
func testRebuildFromStore(t *testing.T, k *testenv.KubeAPIServer, a *kubetest.Applier, admin kubernetes.Interface) {
	ctx := testfix.Context(t, 8*time.Minute)
	dynAdmin := k.Dynamic(t, "")
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	prefix := testenv.Prefix(t)
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}
	kubetest.CreateCOSSecret(t, admin, goneNS, m)
	op := kubetest.StartRestoreOperator(t, kubetest.RestoreOperatorOptions{Namespace: goneNS, Client: admin, Dynamic: dynAdmin, RunningDelay: time.Second})

	const name, clusterIP, nodeIP = "etcd-gone", "127.0.5.50", "127.0.5.51"
	pki := testenv.NewPKI(t, net.ParseIP(clusterIP), net.ParseIP(nodeIP))
	fc := kubetest.AddEtcdCluster(t, admin, dynAdmin, goneNS, name, testenv.EtcdOptions{IP: clusterIP, Members: 3, PKI: pki})
	np := kubetest.StartNodePort(t, admin, goneNS, name+"-client-service-np", nodeIP)

	// The customer master, through the NodePort.
	start := time.Now()
	cust := startCustomerMaster(t, ctx, admin, goneNS, name, np.Addr())
	ccs := cust.k.Clientset(t, "")
	fillCustomer(t, ctx, ccs, 45)
	want := customerState(t, ctx, ccs)
	if len(want) < 90 || np.Conns() == 0 {
		t.Fatalf("customer state: %d objects, %d connections through the NodePort", len(want), np.Conns())
	}
	t.Logf("customer master on the NodePort %s: %d objects in %v", np.Addr(), len(want), time.Since(start).Round(time.Millisecond))

	// The backup, encrypted, with its escrow: backup --all, as the
	// CronJob runs it.
	idFile, recipient := ageIdentityFile(t)
	kubetest.PerClusterAccess(t, a, goneNS, name)
	man := escrowedBackup(t, ctx, k, admin, m, st, bucket, layout, name, recipient)
	if !man.Escrow.Usable() {
		t.Fatalf("the backup's escrow is not usable: %+v", man.Escrow)
	}
	escrowKey := layout.EscrowKey(name, man.Escrow.Address)
	noPlaintextKeys(t, ctx, st, layout.RootPrefix())

	// The journal, from the backup; a good change, the time T, a bad
	// change. A restore --to-time T has the good one and not the bad one.
	stopJournal := startJournal(t, ctx, m, bucket, prefix, name, fc, recipient)
	if _, err := ccs.CoreV1().ConfigMaps(customerNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "good-change"},
		Data: map[string]string{"after": "the backup"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantAtT := customerState(t, ctx, ccs)
	// T is after the journal received the good change: the journal maps
	// a time to the revisions it had received by then (a busy machine
	// starts its watch late, and T would fall before its first event).
	waitJournal(t, ctx, st, layout, name, currentRevision(t, ctx, fc))
	time.Sleep(500 * time.Millisecond)
	atT := time.Now()
	time.Sleep(500 * time.Millisecond)
	if err := ccs.CoreV1().ConfigMaps(customerNS).Delete(ctx, "cm-000", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sec, err := ccs.CoreV1().Secrets(customerNS).Get(ctx, "s-001", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Data["token"] = []byte("bad")
	if _, err := ccs.CoreV1().Secrets(customerNS).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rev := currentRevision(t, ctx, fc)
	waitJournal(t, ctx, st, layout, name, rev)
	stopJournal()
	cust.k.Stop()

	// The namespace is gone: every object, every member and its data.
	kubetest.WipeNamespace(t, ctx, admin, dynAdmin, goneNS)
	for _, mb := range fc.Etcd.Members {
		mb.Kill()
		if err := os.RemoveAll(mb.DataDir); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := net.DialTimeout("tcp", np.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("the NodePort still answers without its Service")
	}
	// An SRE recreates it with cos-credentials and the toolkit's RBAC.
	kubetest.CreateCOSSecret(t, admin, goneNS, m)
	a.ApplyFile(t, kubetest.DeployPath(t, "10-rbac.yaml"), goneNS)
	kubetest.RebuildAccess(t, a, goneNS, name)
	kc := k.Kubeconfig(t, kubetest.SAToken(t, admin, goneNS, "etcd-recovery-toolkit"), goneNS)
	tool := testfix.Tool(t)
	run := func(id string, args ...string) (string, string, int) {
		t.Helper()
		return testfix.RunTool(t, ctx, tool, nil, append([]string{"restore", "--via", "etcd-operator", "--rebuild", "--cluster", name,
			"--kubeconfig", kc, "--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix,
			"--identity-file", id, "--dial-timeout", "2s", "--probe-timeout", "2s", "--wait-timeout", "2m"}, args...)...)
	}
	nothingCreated := func(what string) {
		t.Helper()
		if got := kubetest.NamespaceObjects(t, ctx, admin, dynAdmin, goneNS, name); len(got) != 0 {
			t.Fatalf("%s created %v", what, got)
		}
	}

	// The dry run lists every object, creates nothing.
	out, errOut, code := run(idFile, "--dry-run", "-o", "json")
	var dry kube.RebuildRestoreReport
	if code != 0 || json.Unmarshal([]byte(out), &dry) != nil || dry.Rebuild == nil || len(dry.Rebuild.Objects) != 7 || dry.Backup != man.Name || dry.EscrowKey != escrowKey {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, testfix.LastLines(errOut, 20))
	}
	for _, o := range dry.Rebuild.Objects {
		if o.Action != kube.RebuildCreate || o.Done {
			t.Errorf("dry run: %s %s: %s", o.Kind, o.Name, o.Action)
		}
	}
	nothingCreated("the dry run")

	// A wrong identity: refused, naming the escrow, before anything.
	wrongID, _ := ageIdentityFile(t)
	_, errOut, code = run(wrongID)
	if code == 0 || !strings.Contains(errOut, escrowKey) || !strings.Contains(errOut, "no identity matches") {
		t.Fatalf("wrong identity: exit %d, want an error naming %s and the identity\n%s", code, escrowKey, testfix.LastLines(errOut, 20))
	}
	nothingCreated("a wrong identity")

	// A tampered escrow: refused by name.
	orig := getObject(t, ctx, st, escrowKey)
	other := bytes.Clone(orig)
	other[len(other)/2] ^= 0x20
	putObject(t, ctx, st, escrowKey, other)
	_, errOut, code = run(idFile)
	if code == 0 || !strings.Contains(errOut, escrowKey) || !strings.Contains(errOut, "refused") {
		t.Fatalf("tampered escrow: exit %d, want a refusal naming %s\n%s", code, escrowKey, testfix.LastLines(errOut, 20))
	}
	nothingCreated("a tampered escrow")
	putObject(t, ctx, st, escrowKey, orig)

	// A differing secret in the way: refused, naming it, nothing created.
	if _, err := admin.CoreV1().Secrets(goneNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-peer-tls"},
		Data: map[string][]byte{"peer.crt": []byte("not the escrowed one")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = run(idFile)
	if code == 0 || !strings.Contains(errOut, "Secret "+name+"-peer-tls (") || !strings.Contains(errOut, "--replace") {
		t.Fatalf("differing secret: exit %d\n%s", code, testfix.LastLines(errOut, 20))
	}
	if got := kubetest.NamespaceObjects(t, ctx, admin, dynAdmin, goneNS, name); !slices.Equal(got, []string{"Secret/" + name + "-peer-tls"}) {
		t.Fatalf("a refused rebuild created %v", got)
	}
	if err := admin.CoreV1().Secrets(goneNS).Delete(ctx, name+"-peer-tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The rebuild and restore, from the store alone.
	start = time.Now()
	out, errOut, code = run(idFile, "-o", "json")
	var rep kube.RebuildRestoreReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("rebuild: exit %d\n%s\n%s", code, out, testfix.LastLines(errOut, 40))
	}
	t.Logf("rebuild and restore in %v: steps %+v", time.Since(start).Round(time.Millisecond), rep.Steps)
	if rep.Restore == nil || rep.Restore.Verify == nil || rep.Backup != man.Name {
		t.Fatalf("report: %s", out)
	}
	for _, o := range rep.Rebuild.Objects {
		if o.Action != kube.RebuildCreate || !o.Done {
			t.Errorf("%s %s: %s (done %v)", o.Kind, o.Name, o.Action, o.Done)
		}
	}
	recs := op.Records()
	if len(recs) != 1 || recs[0].Err != nil || len(recs[0].Members) != 3 {
		t.Fatalf("the stand-in's restores: %+v", recs)
	}
	ec, err := dynAdmin.Resource(kube.EtcdClusterGVR).Namespace(goneNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if paused, _, _ := unstructured.NestedBool(ec.Object, "spec", "paused"); paused {
		t.Error("the restored EtcdCluster is paused")
	}
	rebuildAudit(t, k, goneNS, name)

	// The customer master, started again with its original files and URL.
	before := np.Conns()
	cust.start(t)
	got := customerState(t, ctx, cust.k.Clientset(t, ""))
	if np.Conns() == before {
		t.Fatal("the customer master did not connect through the NodePort")
	}
	for key, w := range want {
		if g, ok := got[key]; !ok {
			t.Errorf("%s: gone after the rebuild", key)
		} else if g != w {
			t.Errorf("%s: %+v after the rebuild, want %+v", key, g, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d objects after the rebuild, want %d", len(got), len(want))
	}
	if t.Failed() {
		return
	}

	// Gone again; rebuilt to the time T before the bad change.
	cust.k.Stop()
	kubetest.WipeNamespace(t, ctx, admin, dynAdmin, goneNS)
	for _, mb := range recs[0].Members {
		mb.Kill()
	}
	kubetest.CreateCOSSecret(t, admin, goneNS, m)
	a.ApplyFile(t, kubetest.DeployPath(t, "10-rbac.yaml"), goneNS)
	kubetest.RebuildAccess(t, a, goneNS, name)
	kc = k.Kubeconfig(t, kubetest.SAToken(t, admin, goneNS, "etcd-recovery-toolkit"), goneNS)
	start = time.Now()
	out, errOut, code = run(idFile, "--to-time", atT.UTC().Format(time.RFC3339Nano), "-o", "json")
	var pitr kube.RebuildRestoreReport
	if code != 0 || json.Unmarshal([]byte(out), &pitr) != nil || pitr.Restore == nil || pitr.Restore.Verify == nil {
		t.Fatalf("rebuild --to-time: exit %d\n%s\n%s", code, out, testfix.LastLines(errOut, 40))
	}
	t.Logf("rebuild and restore --to-time in %v (backup %s)", time.Since(start).Round(time.Millisecond), pitr.Backup)
	cust.start(t)
	got = customerState(t, ctx, cust.k.Clientset(t, ""))
	if _, ok := got["ConfigMap/cm-000"]; !ok {
		t.Error("--to-time: the bad change (cm-000 deleted) is there")
	}
	for key, w := range wantAtT {
		if g, ok := got[key]; !ok || g != w {
			t.Errorf("--to-time: %s: %+v (there: %v), want %+v", key, g, ok, w)
		}
	}
	if len(got) != len(wantAtT) {
		t.Errorf("--to-time: %d objects, want %d", len(got), len(wantAtT))
	}
}

// startJournal runs the journal of the cluster (the tool, 1 s segments,
// encrypted to recipient) until the returned stop is called.
func startJournal(t *testing.T, ctx context.Context, m *testenv.MinIO, bucket, prefix, name string, fc kubetest.Cluster, recipient string) func() {
	t.Helper()
	jctx, cancel := context.WithCancel(ctx)
	args := []string{"journal", "--cluster-id", name, "--segment-interval", "1s", "--encrypt-to", recipient,
		"--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix,
		"--cacert", fc.Etcd.PKI.CAFile, "--cert", fc.Etcd.PKI.ClientCertFile, "--key", fc.Etcd.PKI.ClientKeyFile}
	for _, ep := range fc.Etcd.Endpoints() {
		args = append(args, "--endpoints", ep)
	}
	cmd := exec.CommandContext(jctx, testfix.Tool(t), args...)
	cmd.Env = append(testfix.ToolEnv(), "COS_ACCESS_KEY_ID="+m.AccessKey, "COS_SECRET_ACCESS_KEY="+m.SecretKey)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return func() {
		stop()
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Logf("journal: exit %d: %s", code, testfix.LastLines(errb.String(), 10))
		}
	}
}

// currentRevision is the cluster's revision now.
func currentRevision(t *testing.T, ctx context.Context, fc kubetest.Cluster) int64 {
	t.Helper()
	resp, err := fc.Etcd.Client(t).Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// waitJournal waits until the journal of id holds rev.
func waitJournal(t *testing.T, ctx context.Context, st store.Store, layout catalog.Layout, id string, rev int64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		segs, err := journal.ListSegments(ctx, st, layout, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		var last int64
		for _, s := range segs.All {
			last = max(last, s.LastRev)
		}
		if last >= rev {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the journal of %s reaches %d, not %d", id, last, rev)
		}
	}
}

// escrowedBackup runs backup --all as the backup jobs' account (the
// CronJob's), encrypted to recipient: each backup escrows its cluster.
// It returns the newest backup of cluster.
func escrowedBackup(t *testing.T, ctx context.Context, k *testenv.KubeAPIServer, admin kubernetes.Interface, m *testenv.MinIO,
	st store.Store, bucket string, layout catalog.Layout, cluster, recipient string) *catalog.Manifest {
	t.Helper()
	kc := k.Kubeconfig(t, kubetest.SAToken(t, admin, goneNS, "etcd-recovery"), goneNS)
	stdout, stderr, code := testfix.RunTool(t, ctx, testfix.Tool(t), []string{"KUBECONFIG=" + kc}, "backup", "--all", "--kind", "scheduled",
		"--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", layout.Prefix,
		"--dial-timeout", "2s", "--probe-timeout", "2s", "--encrypt-to", recipient)
	if code != 0 {
		t.Fatalf("backup --all: exit %d\n%s\n%s", code, testfix.LastLines(stdout, 20), testfix.LastLines(stderr, 20))
	}
	list, err := catalog.ListBackups(ctx, st, layout, cluster)
	if err != nil || len(list) == 0 || list[0].Manifest == nil {
		t.Fatalf("%s: backups %+v, %v", cluster, list, err)
	}
	return list[0].Manifest
}

// noPlaintextKeys fails when any stored object holds a PEM private key
// in plaintext (testfix.PlaintextPrivateKeys): the escrow's keys are
// sealed.
func noPlaintextKeys(t *testing.T, ctx context.Context, st store.Store, prefix string) {
	t.Helper()
	searched, sealed, found := testfix.PlaintextPrivateKeys(t, ctx, st, prefix)
	for _, key := range found {
		t.Errorf("stored object %s holds a PEM private key in plaintext", key)
	}
	if searched < 2 || sealed < 1 {
		t.Fatalf("only %d objects stored, %d sealed", searched, sealed)
	}
}

func getObject(t *testing.T, ctx context.Context, st store.Store, key string) []byte {
	t.Helper()
	rc, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func putObject(t *testing.T, ctx context.Context, st store.Store, key string, b []byte) {
	t.Helper()
	if _, err := st.Put(ctx, key, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
}

// rebuildAudit checks, in the API server's audit log, that the toolkit's
// account called on secrets, Services, EtcdClusters and EtcdRestores only
// what deploy/10-rbac.yaml's Roles bound to it and the break-glass grant
// rendered for cluster grant (the rules read from the YAML: verbs,
// resources, subresources and resourceNames), was never refused, and used
// every rule of the break-glass Role.
func rebuildAudit(t *testing.T, k *testenv.KubeAPIServer, ns, cluster string) {
	t.Helper()
	user := "system:serviceaccount:" + ns + ":etcd-recovery-toolkit"
	calls := auditCalls(t, k, func(c apiCall) bool { return c.user == user && c.namespace == ns }, func(cs []apiCall) bool {
		return slices.ContainsFunc(cs, func(c apiCall) bool { return c.verb == "create" && c.resource == "etcdrestores" })
	})
	type rule struct {
		rbacv1.PolicyRule
		breakGlass bool
	}
	var rules []rule
	add := func(objs []*unstructured.Unstructured, breakGlass bool, roles ...string) {
		for _, o := range objs {
			if o.GetKind() != "Role" || (roles != nil && !slices.Contains(roles, o.GetName())) {
				continue
			}
			var r rbacv1.Role
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				t.Fatal(err)
			}
			for _, pr := range r.Rules {
				rules = append(rules, rule{pr, breakGlass})
			}
		}
	}
	add(kubetest.DecodeManifests(t, kubetest.DeployPath(t, "10-rbac.yaml")), false, "etcd-recovery-backup", "etcd-recovery-restore", "etcd-recovery-identity")
	add(kubetest.RebuildAccessObjects(t, cluster), true)
	used := make([]bool, len(rules))
	watched := map[string]bool{"secrets": true, "services": true, "etcdclusters": true, "etcdrestores": true}
	for _, c := range calls {
		if c.code == 403 {
			t.Errorf("the rebuild was refused %s", c)
		}
		if !watched[c.resource] {
			continue
		}
		res := c.resource
		if c.subresource != "" {
			res += "/" + c.subresource
		}
		granted := false
		for i, r := range rules {
			if slices.Contains(r.APIGroups, c.group) && slices.Contains(r.Resources, res) && slices.Contains(r.Verbs, c.verb) &&
				(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, c.name)) {
				granted, used[i] = true, true
			}
		}
		if !granted {
			t.Errorf("the rebuild called %s, which the YAML does not grant the toolkit", c)
		}
	}
	for i, r := range rules {
		if r.breakGlass && !used[i] {
			t.Errorf("the break-glass Role grants %v %v %v (names %v), but the rebuild never called it", r.Verbs, r.APIGroups, r.Resources, r.ResourceNames)
		}
	}
}
