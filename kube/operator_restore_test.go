package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/testing/kubetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
	"github.com/armada/etcd-recovery/kube"
	"github.com/armada/etcd-recovery/restore"
)

// restoreNS holds the cluster of the restore --via etcd-operator test.
const restoreNS = "kubx-etcd-09"

// testOperatorRestore runs restore --via etcd-operator against TestKube's
// kube-apiserver with the deploy/ CRDs and RBAC, a real 3-member TLS etcd
// and MinIO, and etcd-operator's restore operator played by
// kubetest.StartRestoreOperator: it reads the EtcdRestore, fetches
// spec.s3.path from spec.s3.endpoint with the credentials of
// spec.s3.awsSecret in etcd-operator's format (the namespace's
// cos-credentials, in the carrier's format), replaces the EtcdCluster with
// real members restored from that snapshot, and reports it Running after a
// delay.
func testOperatorRestore(t *testing.T, k *testenv.KubeAPIServer, a *kubetest.Applier, admin kubernetes.Interface) {
	dynAdmin := k.Dynamic(t, "")
	ctx := testfix.Context(t, 8*time.Minute)
	m := testenv.SharedMinIO(t)
	bucket := m.NewBucket(t)
	prefix := testenv.Prefix(t)
	kubetest.CreateCOSSecret(t, admin, restoreNS, m)
	st := testfix.Store(t, m, bucket)
	layout := catalog.Layout{Prefix: prefix}

	const name = "etcd-r1"
	fc := kubetest.AddEtcdCluster(t, admin, dynAdmin, restoreNS, name, testenv.EtcdOptions{IP: "127.0.5.20", Members: 3})
	kubetest.PerClusterAccess(t, a, restoreNS, name)
	if !fc.Etcd.PKI.ServerValidFor(net.ParseIP("127.0.0.1")) {
		t.Fatal("the cluster's server certificate is not valid for 127.0.0.1, where the restored members listen")
	}
	cli := fc.Etcd.Client(t)
	want := testenv.PutKeys(t, cli, "/registry/pods/", 400, 128)
	// A compressed scheduled backup in COS; then more writes that only the
	// members have.
	br, err := backup.Run(ctx, backup.Options{ClusterID: name, Kind: catalog.KindScheduled, Etcd: testfix.EtcdConfig(fc.Etcd), Store: st, Layout: layout})
	if err != nil {
		t.Fatal(err)
	}
	if br.Manifest.Snapshot.Compression == objectio.CompressNone {
		t.Fatal("want a compressed backup: the operator can't read those, staging is what makes it work")
	}
	maps.Copy(want, testenv.PutKeys(t, cli, "/registry/configmaps/", 150, 64))

	toolkit := kubetest.SAToken(t, admin, restoreNS, "etcd-recovery-toolkit")
	sa, err := kube.New(kube.Config{Rest: k.RestConfig(toolkit), Namespace: restoreNS})
	if err != nil {
		t.Fatal(err)
	}
	kc := k.Kubeconfig(t, toolkit, restoreNS)
	tool := testfix.Tool(t)
	runTool := func(args ...string) (int, string, string) {
		t.Helper()
		// No COS credentials in the environment (ToolEnv): they come from
		// the secret, through the API.
		stdout, stderr, code := testfix.RunTool(t, ctx, tool, nil, append([]string{"restore", "--via", "etcd-operator", "--cluster", name, "--kubeconfig", kc,
			"--cos-endpoint", m.Endpoint, "--cos-region", m.Region, "--bucket", bucket, "--prefix", prefix,
			"--dial-timeout", "2s", "--probe-timeout", "2s"}, args...)...)
		return code, stdout, stderr
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
		if strings.Join(verbs, ",") != "stage,create,replace" || rep.Actions[1].Object["kind"] != "EtcdRestore" || rep.OldUID != fc.UID {
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
		bsa, err := kube.New(kube.Config{Rest: k.RestConfig(kubetest.SAToken(t, admin, restoreNS, "etcd-recovery")), Namespace: restoreNS})
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

	t.Run("AWSSecret", func(t *testing.T) {
		// etcd-operator reads only keys credentials and config (AWS shared
		// files). cos-credentials in another format the tool itself reads
		// (access_key_id/secret_access_key files) fails the restore at once,
		// before anything is staged or created; then without a region.
		secrets := admin.CoreV1().Secrets(restoreNS)
		good, err := secrets.Get(ctx, kube.COSSecretName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		setData := func(data map[string][]byte) {
			t.Helper()
			cur, err := secrets.Get(ctx, kube.COSSecretName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cur.Data = data
			if _, err := secrets.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { setData(good.Data) })
		keysBefore := testfix.Keys(t, st, layout.RootPrefix())
		for _, tc := range []struct {
			data    map[string][]byte
			missing string
		}{
			{map[string][]byte{"access_key_id": []byte(m.AccessKey), "secret_access_key": []byte(m.SecretKey)},
				`missing: key "credentials"; key "config" (the secret has keys access_key_id, secret_access_key)`},
			{map[string][]byte{"credentials": kubetest.AWSSecretData(m.AccessKey, m.SecretKey, m.Region)["credentials"],
				"config": []byte("[default]\noutput = json\n")},
				`missing: region in [default] of "config" (the secret has keys config, credentials)`},
		} {
			setData(tc.data)
			start := time.Now()
			code, stdout, stderr := runTool("--no-live", "--wait-timeout", "5s") // on a miss, no 10-minute wait
			want := fmt.Sprintf(`restore of etcdcluster %s/%s via etcd-operator failed at step %q: etcd-operator cannot read secret %s/%s (spec.s3.awsSecret, --aws-secret): it needs key "credentials"`,
				restoreNS, name, kube.OpStepAWSSecret, restoreNS, kube.COSSecretName)
			if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, tc.missing) || !strings.Contains(stderr, "--from-file=credentials=FILE") {
				t.Fatalf("exit %d, want 1 and\n%s\n%s\nstderr:\n%s\nstdout:\n%s", code, want, tc.missing, testfix.LastLines(stderr, 5), stdout)
			}
			if strings.Contains(stderr+stdout, m.SecretKey) || strings.Contains(stderr+stdout, m.AccessKey) {
				t.Fatal("the output shows the secret's values")
			}
			t.Logf("failed in %v: %s", time.Since(start).Round(time.Millisecond), testfix.LastLines(stderr, 1))
		}
		ers, err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(restoreNS).List(ctx, metav1.ListOptions{})
		if err != nil || len(ers.Items) != 0 {
			t.Fatalf("etcdrestores after the refusals: %d, %v; want none", len(ers.Items), err)
		}
		if keysAfter := testfix.Keys(t, st, layout.RootPrefix()); !slices.Equal(keysAfter, keysBefore) {
			t.Fatalf("the refused restore changed the bucket: %v -> %v", keysBefore, keysAfter)
		}
		// A secret the toolkit may not read: a warning, and on.
		setData(good.Data)
		code, stdout, stderr := runTool("--dry-run", "--no-live", "-o", "json", "--aws-secret", "etcd-operator-s3")
		var rep kube.OperatorRestoreReport
		if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil || len(rep.Warnings) != 1 ||
			!strings.Contains(stderr, "cannot read secret "+restoreNS+"/etcd-operator-s3 to check that etcd-operator can use it (Forbidden)") {
			t.Fatalf("unreadable --aws-secret: exit %d, warnings %q\nstderr:\n%s", code, rep.Warnings, testfix.LastLines(stderr, 5))
		}
	})

	t.Run("NotOurEtcdRestore", func(t *testing.T) {
		// An EtcdRestore of that name the tool did not create: refused,
		// never deleted.
		other, err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(restoreNS).Create(ctx, kubetest.EtcdRestoreObj(name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runTool("--dry-run", "--no-live")
		if code != 1 || !strings.Contains(stderr, "an EtcdRestore "+name+" already exists") || !strings.Contains(stderr, "it was not created by etcd-recovery") {
			t.Fatalf("exit %d\n%s", code, testfix.LastLines(stderr, 3))
		}
		if cur, err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(restoreNS).Get(ctx, name, metav1.GetOptions{}); err != nil || cur.GetUID() != other.GetUID() {
			t.Fatalf("the other EtcdRestore: %v", err)
		}
		if err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(restoreNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("TimeoutWithoutOperator", func(t *testing.T) {
		start := time.Now()
		code, stdout, stderr := runTool("--no-live", "--wait-timeout", "3s")
		if code != 1 {
			t.Fatalf("exit %d, want 1\n%s\n%s", code, stdout, stderr)
		}
		want := fmt.Sprintf(`restore of etcdcluster %s/%s via etcd-operator failed at step %q: etcd-operator did not bring etcdcluster %s/%s back with all members ready within 3s; last seen: the old etcdcluster (uid %s`,
			restoreNS, name, kube.OpStepWait, restoreNS, name, fc.UID)
		if !strings.Contains(stderr, want) {
			t.Fatalf("stderr does not name the cluster, the step and what was seen:\n%s\nwant %s", testfix.LastLines(stderr, 5), want)
		}
		if d := time.Since(start); d > time.Minute {
			t.Errorf("took %v", d)
		}
		// The wait failed after the EtcdRestore was created: the staged
		// copy is kept (etcd-operator may still fetch it), said so in the
		// log; prune removes it after an hour (here the test does).
		keys := testfix.Keys(t, st, layout.StagedPrefix(name))
		if len(keys) != 1 || !strings.Contains(stderr, "staged plaintext snapshot kept") || !strings.Contains(stderr, keys[0]) {
			t.Fatalf("the failed wait: staged %v, want the copy kept and logged\n%s", keys, testfix.LastLines(stderr, 8))
		}
		if err := st.Delete(ctx, keys); err != nil {
			t.Fatal(err)
		}
		// A second run refuses while that EtcdRestore exists.
		code, _, stderr = runTool("--no-live", "--wait-timeout", "3s")
		if code != 1 || !strings.Contains(stderr, "an EtcdRestore "+name+" already exists") || !strings.Contains(stderr, "etcd-operator has not acted on it yet") {
			t.Fatalf("second run: exit %d\n%s", code, testfix.LastLines(stderr, 3))
		}
		// The EtcdRestore stays for the operator; clean up as an admin.
		if err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(restoreNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("CancelledBeforeEtcdRestoreRemovesStaged", func(t *testing.T) {
		// Cancelled once the copy is staged, as the EtcdRestore is about
		// to be created: nothing will fetch it, so it is deleted with a
		// fresh context, and reported; no EtcdRestore is left.
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		rep, err := kube.OperatorRestore(rctx, kube.OperatorRestoreOptions{
			Kube: sa, Cluster: name, Store: st, Layout: layout, Bucket: bucket, Endpoint: m.Endpoint, ForcePathStyle: true, NoLive: true,
			ProbeTimeout: 2 * time.Second, DialTimeout: 2 * time.Second, Timeout: 3 * time.Minute, PollInterval: 200 * time.Millisecond,
			TempDir: t.TempDir(), OnStep: func(step string) {
				if step == kube.OpStepRequest {
					cancel()
				}
			}})
		if !errors.Is(err, context.Canceled) || rep == nil || rep.StagedKey == "" || !rep.StagedRemoved || rep.StagedKept != "" {
			t.Fatalf("cancelled restore: %v, report %+v", err, rep)
		}
		if keys := testfix.Keys(t, st, layout.StagedPrefix(name)); len(keys) > 0 {
			t.Fatalf("the cancelled restore left its staged plaintext snapshot: %v", keys)
		}
		if ers, err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(restoreNS).List(ctx, metav1.ListOptions{}); err != nil || len(ers.Items) != 0 {
			t.Fatalf("etcdrestores after the cancel before creating one: %d, %v", len(ers.Items), err)
		}
	})

	t.Run("Restore", func(t *testing.T) {
		// Quorum lost: two of three members die. The third still answers,
		// so a survivor snapshot is taken (it has the writes after the
		// COS backup) and restored.
		fc.Etcd.Members[1].Kill()
		fc.Etcd.Members[2].Kill()
		wantKeys := len(want)
		const runningDelay = 3 * time.Second
		// As the real etcd-operator: the reference EtcdCluster is deleted
		// before the seed member fetches the snapshot.
		op := kubetest.StartRestoreOperator(t, kubetest.RestoreOperatorOptions{Namespace: restoreNS, Client: admin, Dynamic: dynAdmin, RunningDelay: runningDelay,
			FetchAfterDelete: true, FetchDelay: time.Second})
		op.Register(fc)

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

		// The EtcdRestore the stand-in acts on, as the tool wrote it.
		rec := op.Wait(t, name, 3*time.Minute)
		if rec.Err != nil {
			t.Fatalf("the restore operator failed: %v", rec.Err)
		}
		er, err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(restoreNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rec.OldUID != fc.UID {
			t.Fatalf("the operator's reference EtcdCluster had uid %s, want the original %s (it must exist when the EtcdRestore is created)", rec.OldUID, fc.UID)
		}
		spec := er.Object["spec"].(map[string]any)
		s3 := spec["s3"].(map[string]any)
		if spec["backupStorageType"] != "S3" || spec["etcdCluster"].(map[string]any)["name"] != name ||
			s3["awsSecret"] != kube.COSSecretName || s3["endpoint"] != m.Endpoint || s3["forcePathStyle"] != true {
			t.Fatalf("etcdrestore spec: %v", spec)
		}
		ann := er.GetAnnotations()
		var savedSpec map[string]any
		if err := json.Unmarshal([]byte(ann[kube.AnnotationClusterSpec]), &savedSpec); err != nil || savedSpec["size"] != float64(3) ||
			ann[kube.AnnotationClusterUID] != string(fc.UID) {
			t.Fatalf("annotations %v: %v", ann, err)
		}
		// The staged snapshot: under _staged/, uncompressed, the survivor's;
		// what the operator fetched is what the tool staged.
		s3path := s3["path"].(string)
		key, ok := strings.CutPrefix(s3path, bucket+"/")
		if !ok || rec.S3Path != s3path {
			t.Fatalf("s3.path %q is not <bucket>/<key> (operator fetched %q)", s3path, rec.S3Path)
		}
		list, err := catalog.ListBackups(ctx, st, layout, name)
		if err != nil || len(list) != 2 || list[0].Manifest == nil || list[0].Manifest.Kind != catalog.KindPreRestore {
			t.Fatalf("want the pre-restore backup newest: %+v %v", list, err)
		}
		man := list[0].Manifest
		if key != kube.StagedKey(layout, name, man.Name) || !strings.HasPrefix(key, layout.RootPrefix()+"_staged/"+name+"/") ||
			ann[kube.AnnotationBackup] != man.Name {
			t.Fatalf("staged at %q, want %q (backup annotation %q)", key, kube.StagedKey(layout, name, man.Name), ann[kube.AnnotationBackup])
		}
		// The staged copy is the backup bumped (its size whole pages plus
		// etcd's 32-byte trailer), as etcdutl's restore checks it.
		if rec.Size < man.Snapshot.RawSize || rec.Size%512 != 32 || rec.SHA256 != ann[kube.AnnotationStagedSHA256] {
			t.Fatalf("operator fetched %d bytes, sha256 %s; manifest %d, staged sha256 %s", rec.Size, rec.SHA256, man.Snapshot.RawSize, ann[kube.AnnotationStagedSHA256])
		}
		r := <-done
		returned := time.Now()
		if r.err != nil {
			t.Fatalf("operator restore: %v\nreport %+v", r.err, r.rep)
		}
		rep := r.rep
		t.Logf("restore via etcd-operator: %v in all, waited %v for the operator", time.Since(start).Round(time.Millisecond), rep.Waited.Round(time.Millisecond))
		if rep.Backup != man.Name || rep.StagedKey != key || rep.OldUID != fc.UID || rep.NewUID == "" || rep.NewUID == fc.UID {
			t.Fatalf("report: %+v", rep)
		}
		if !rep.StagedRemoved || len(testfix.Keys(t, st, layout.StagedPrefix(name))) > 0 {
			t.Fatalf("the staged plaintext snapshot is still there after the verified restore (removed %t, error %q)", rep.StagedRemoved, rep.StagedRemoveError)
		}
		if rep.Verify == nil || !rep.Verify.Verified || rep.Verify.Keys != int64(wantKeys) || len(rep.Verify.Members) != 3 ||
			rep.Verify.Revision < rep.Plan.Snapshot.Revision+restore.DefaultBumpRevision {
			t.Fatalf("verification: %+v, want the revision past the snapshot's %d plus the bump (every restore path bumps)", rep.Verify, rep.Plan.Snapshot.Revision)
		}
		for _, ep := range rep.Endpoints {
			if !strings.HasPrefix(ep, "https://127.0.0.1:") {
				t.Fatalf("verified %v, not the restored members", rep.Endpoints)
			}
		}
		// The tool waited for Running: the members were up and listed ready
		// for runningDelay before that, and a verification then would have
		// passed too.
		if rep.NewUID != rec.NewUID || returned.Before(rec.RunningAt) {
			t.Fatalf("the tool returned at %v, before the restored cluster was Running at %v (new uid %s, operator's %s)",
				returned.Format(time.StampMilli), rec.RunningAt.Format(time.StampMilli), rep.NewUID, rec.NewUID)
		}
		if !strings.Contains(rep.LastSeen, `phase "Running"`) {
			t.Errorf("last seen before verifying: %q, want the Running phase", rep.LastSeen)
		}
		// Every key and value written before the survivor snapshot is back,
		// and nothing else.
		got := map[string]string{}
		rcli := rec.Members[0].Client(t)
		resp, err := rcli.Get(ctx, "/registry/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			got[string(kv.Key)] = string(kv.Value)
		}
		if len(got) != len(want) {
			t.Errorf("restored cluster has %d keys, want %d", len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("restored %s = %.20q, want %.20q", k, got[k], v)
				break
			}
		}
		t.Logf("restored cluster: %d keys, values equal to what was written; the tool returned %v after Running", len(got), returned.Sub(rec.RunningAt).Round(time.Millisecond))
	})

	t.Run("CancelledAfterEtcdRestoreKeepsStaged", func(t *testing.T) {
		// Cancelled (SIGTERM) right after the EtcdRestore is created: the
		// stand-in, as the real etcd-operator, deletes the reference
		// EtcdCluster and fetches the snapshot a second later. The staged
		// copy must still be there for it; the rerun's adoption waits for
		// the restored cluster, verifies it and only then deletes the copy.
		// The Restore subtest's EtcdRestore is done with; a new stand-in
		// would act on it again.
		if err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(restoreNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		op := kubetest.StartRestoreOperator(t, kubetest.RestoreOperatorOptions{Namespace: restoreNS, Client: admin, Dynamic: dynAdmin,
			FetchAfterDelete: true, FetchDelay: time.Second})
		op.Register(fc) // the PKI of the cluster (its restored members serve it too)
		const runKey = "etcd-recovery.armada.ibm.com/test-run"
		opts := kube.OperatorRestoreOptions{
			Kube: sa, Cluster: name, Store: st, Layout: layout, Bucket: bucket, Endpoint: m.Endpoint, ForcePathStyle: true, NoLive: true,
			ProbeTimeout: 2 * time.Second, DialTimeout: 2 * time.Second, Timeout: 3 * time.Minute, PollInterval: 200 * time.Millisecond,
			TempDir: t.TempDir(), Annotations: map[string]string{runKey: "keep-staged"}}
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			for rctx.Err() == nil {
				if er, err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(restoreNS).Get(rctx, name, metav1.GetOptions{}); err == nil &&
					er.GetAnnotations()[runKey] == "keep-staged" {
					cancel()
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		var logs bytes.Buffer
		opts.Log = slog.New(slog.NewTextHandler(&logs, nil))
		rep, err := kube.OperatorRestore(rctx, opts)
		if !errors.Is(err, context.Canceled) || rep == nil || rep.StagedKey == "" || rep.StagedRemoved || rep.StagedKept == "" {
			t.Fatalf("cancelled restore: %v, report %+v", err, rep)
		}
		if keys := testfix.Keys(t, st, layout.StagedPrefix(name)); !slices.Equal(keys, []string{rep.StagedKey}) {
			t.Fatalf("after the cancel: staged %v, want %s kept for etcd-operator", keys, rep.StagedKey)
		}
		if !strings.Contains(logs.String(), "staged plaintext snapshot kept") || !strings.Contains(logs.String(), rep.StagedKey) {
			t.Fatalf("the log does not say the copy was kept and where:\n%s", logs.String())
		}
		t.Logf("kept: %s", rep.StagedKept)

		// The rerun adopts the EtcdRestore.
		opts.Log = nil
		start := time.Now()
		arep, adopted, err := kube.AdoptOperatorRestore(ctx, opts)
		if err != nil || !adopted {
			t.Fatalf("adoption: adopted %t, %v (report %+v)", adopted, err, arep)
		}
		if arep.Verify == nil || !arep.Verify.Verified || arep.NewUID == "" || !arep.StagedRemoved || arep.StagedKey != rep.StagedKey {
			t.Fatalf("adoption report: %+v", arep)
		}
		if keys := testfix.Keys(t, st, layout.StagedPrefix(name)); len(keys) > 0 {
			t.Fatalf("after the adoption the staged plaintext snapshot is still there: %v", keys)
		}
		er, err := dynAdmin.Resource(kube.EtcdRestoreGVR).Namespace(restoreNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rec := op.WaitUID(t, er.GetUID(), time.Minute); rec.Err != nil || rec.SHA256 != rep.StagedSHA256 {
			t.Fatalf("the restore operator: %v (fetched sha256 %s, staged %s)", rec.Err, rec.SHA256, rep.StagedSHA256)
		}
		t.Logf("adopted and verified in %v; staged copy deleted after that", time.Since(start).Round(time.Millisecond))
	})
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
