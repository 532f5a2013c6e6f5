package kubetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/aws/session"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/armada/etcd-recovery/internal/escrow"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/kube"
)

// etcd-operator's keys of an awsSecret (api.AWSSecretCredentialsFileName,
// api.AWSSecretConfigFileName): AWS shared-credentials and shared-config
// files, written to a temp dir and given to the AWS SDK as its shared
// config files (pkg/util/awsutil/s3factory: setupAWSConfig). Nothing else
// in the secret is read.
const (
	AWSSecretCredentialsKey = kube.AWSSecretCredentialsKey // "credentials"
	AWSSecretConfigKey      = kube.AWSSecretConfigKey      // "config"
)

// AWSSecretData is a secret's data in etcd-operator's awsSecret format, for
// HMAC keys and a region. The carrier's cos-credentials secret has these two
// keys (seed 000: "cos-credentials  Opaque  2"), as etcd-operator's backup
// operator reads it.
func AWSSecretData(accessKey, secretKey, region string) map[string][]byte {
	return map[string][]byte{
		AWSSecretCredentialsKey: fmt.Appendf(nil, "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", accessKey, secretKey),
		AWSSecretConfigKey:      fmt.Appendf(nil, "[default]\nregion = %s\n", region),
	}
}

// RestoreOperatorOptions configure StartRestoreOperator.
type RestoreOperatorOptions struct {
	Namespace string
	// Admin clients (the operator's own service account is not modelled).
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// RunningDelay is how long the restored EtcdCluster stays in phase
	// Creating, with every member already up and listed ready, before
	// Running: a tool that does not wait for Running verifies too early,
	// and RestoreRecord.RunningAt shows it. Default 2s.
	RunningDelay time.Duration
	// HTTPClient fetches the snapshot (default: a plain client; the
	// operator trusts the system roots).
	HTTPClient *http.Client
	// Concurrent acts on each new EtcdRestore in its own goroutine, as
	// etcd-operator's restores overlap: its restore operator's one worker
	// only makes the API calls (the seed EtcdCluster), and each seed
	// member fetches the snapshot and starts on its own. Without it the
	// stand-in does one whole restore (fetch, etcdutl, members, Running)
	// after the other, which would make a namespace-wide restore's
	// parallelism the stand-in's, not the tool's.
	Concurrent bool
	// FetchAfterDelete deletes the reference EtcdCluster (and its pods and
	// members) before fetching the snapshot, after FetchDelay, as the real
	// etcd-operator does (its restore operator deletes the reference and
	// the new seed member fetches the snapshot later): a tool that deletes
	// the staged copy once the EtcdRestore exists fails the restore.
	// Without it the stand-in fetches first, which hides that.
	FetchAfterDelete bool
	FetchDelay       time.Duration
}

// RestoreRecord is what the stand-in did with one EtcdRestore.
type RestoreRecord struct {
	Restore string // the EtcdRestore's name
	Cluster string // spec.etcdCluster.name
	S3Path  string // spec.s3.path, "<bucket>/<key>"
	// SHA256 and Size of the object fetched from spec.s3.endpoint.
	SHA256 string
	Size   int64
	OldUID types.UID // the reference EtcdCluster's
	NewUID types.UID // the restored EtcdCluster's
	// Members of the restored cluster (real etcd processes, the reference
	// cluster's PKI, on 127.0.0.1).
	Members []*testenv.EtcdMember
	// CreatingAt is when the restored EtcdCluster was created (phase
	// Creating); RunningAt when its phase became Running.
	CreatingAt, RunningAt time.Time
	// Err is why the restore failed (also status.reason of the EtcdRestore,
	// with status.succeeded false).
	Err error
}

// RestoreOperator plays etcd-operator's restore operator and the part of
// etcd-operator that brings the restored cluster up, in one namespace.
type RestoreOperator struct {
	opts     RestoreOperatorOptions
	tb       testing.TB
	mu       sync.Mutex
	clusters map[string]Cluster
	done     map[types.UID]*RestoreRecord
	changed  chan struct{}
	running  sync.WaitGroup // the restores in flight (Concurrent)
}

// StartRestoreOperator starts the stand-in: until the test ends, it polls
// the namespace's EtcdRestores (every 100 ms) and acts once on each new
// one as etcd-operator's restore operator does:
//
//  1. reads spec.etcdCluster.name and gets that EtcdCluster, the reference
//     of the restored one (it must exist: "failed to get reference
//     EtcdCluster");
//  2. needs spec.backupStorageType S3 and reads spec.s3: path
//     "<bucket>/<key>", endpoint, forcePathStyle, awsSecret;
//  3. reads the secret spec.s3.awsSecret in etcd-operator's format only:
//     keys "credentials" and "config" (AWS shared files; see
//     AWSSecretData), loaded by the AWS SDK as shared config files with the
//     default profile; other keys are ignored, so a secret in another
//     format fails here, as it would with etcd-operator;
//  4. fetches the object from the endpoint with those credentials and
//     region (virtual-hosted style unless forcePathStyle);
//  5. deletes the reference EtcdCluster and its member pods, and kills the
//     old members registered with Register (with FetchAfterDelete, step 4
//     comes after this one, as with the real etcd-operator);
//  6. restores spec.size data dirs from the snapshot with etcdutl (which
//     checks the snapshot's integrity hash) and starts new real members
//     with the reference cluster's PKI on 127.0.0.1;
//  7. creates the EtcdCluster again (same name, labels and spec), one pod
//     per member (status.podIP 127.0.0.1 and the member's client port, as
//     AddEtcdCluster does), status phase Creating with all members ready,
//     then, after RunningDelay, phase Running; and sets the EtcdRestore's
//     status.succeeded true.
//
// Any failure is recorded (RestoreRecord.Err) and reported as etcd-operator
// does, on the EtcdRestore: status {succeeded: false, reason}. The real
// operator seeds one member from the snapshot and adds the others; the
// stand-in restores every member from it (the same data either way).
func StartRestoreOperator(tb testing.TB, opts RestoreOperatorOptions) *RestoreOperator {
	tb.Helper()
	if opts.Namespace == "" || opts.Client == nil || opts.Dynamic == nil {
		tb.Fatal("kubetest: StartRestoreOperator needs the namespace and admin clients")
	}
	if opts.RunningDelay == 0 {
		opts.RunningDelay = 2 * time.Second
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 5 * time.Minute}
	}
	op := &RestoreOperator{opts: opts, tb: tb, clusters: map[string]Cluster{}, done: map[types.UID]*RestoreRecord{}, changed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	tb.Cleanup(func() { cancel(); <-stopped; op.running.Wait() })
	go func() {
		defer close(stopped)
		for {
			op.poll(ctx)
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return op
}

// Register tells the stand-in which real etcd runs an EtcdCluster: its
// members are killed when the cluster is replaced, and its PKI serves the
// restored members. A restore of an unregistered cluster fails.
func (op *RestoreOperator) Register(c Cluster) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.clusters[c.Name] = c
}

// Records are the EtcdRestores acted on so far, in no particular order.
func (op *RestoreOperator) Records() []RestoreRecord {
	op.mu.Lock()
	defer op.mu.Unlock()
	var out []RestoreRecord
	for _, r := range op.done {
		out = append(out, *r)
	}
	return out
}

// Wait waits up to timeout for the stand-in to finish with an EtcdRestore
// of that name (Running, or failed) and returns its record. When several
// EtcdRestores of that name were acted on, any finished one may be
// returned: WaitUID waits for one of them.
func (op *RestoreOperator) Wait(tb testing.TB, restore string, timeout time.Duration) RestoreRecord {
	tb.Helper()
	return op.wait(tb, "EtcdRestore "+op.opts.Namespace+"/"+restore, timeout, func(_ types.UID, r *RestoreRecord) bool { return r.Restore == restore })
}

// WaitUID is Wait for the EtcdRestore with that uid (a name is reused when
// an EtcdRestore is deleted and created again).
func (op *RestoreOperator) WaitUID(tb testing.TB, uid types.UID, timeout time.Duration) RestoreRecord {
	tb.Helper()
	return op.wait(tb, "EtcdRestore uid "+string(uid), timeout, func(u types.UID, _ *RestoreRecord) bool { return u == uid })
}

func (op *RestoreOperator) wait(tb testing.TB, what string, timeout time.Duration, match func(types.UID, *RestoreRecord) bool) RestoreRecord {
	tb.Helper()
	deadline := time.After(timeout)
	for {
		op.mu.Lock()
		ch := op.changed
		for uid, r := range op.done {
			if match(uid, r) && (r.Err != nil || !r.RunningAt.IsZero()) {
				rec := *r
				op.mu.Unlock()
				return rec
			}
		}
		op.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			tb.Fatalf("kubetest: the restore operator did not finish %s within %v", what, timeout)
		}
	}
}

func (op *RestoreOperator) notify() {
	op.mu.Lock()
	close(op.changed)
	op.changed = make(chan struct{})
	op.mu.Unlock()
}

func (op *RestoreOperator) poll(ctx context.Context) {
	list, err := op.opts.Dynamic.Resource(kube.EtcdRestoreGVR).Namespace(op.opts.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return // the API server may blip; the next poll retries
	}
	for i := range list.Items {
		er := &list.Items[i]
		op.mu.Lock()
		_, seen := op.done[er.GetUID()]
		if !seen {
			op.done[er.GetUID()] = &RestoreRecord{Restore: er.GetName()}
		}
		op.mu.Unlock()
		if seen {
			continue
		}
		act := func() {
			rec := op.restore(ctx, er)
			op.mu.Lock()
			*op.done[er.GetUID()] = rec
			op.mu.Unlock()
			op.notify()
		}
		if op.opts.Concurrent {
			op.running.Go(act)
			continue
		}
		act()
	}
}

// restore acts on one EtcdRestore and reports the outcome on it.
func (op *RestoreOperator) restore(ctx context.Context, er *unstructured.Unstructured) RestoreRecord {
	rec := RestoreRecord{Restore: er.GetName()}
	rec.Err = op.run(ctx, er, &rec)
	status := map[string]any{"succeeded": rec.Err == nil}
	if rec.Err != nil {
		status["reason"] = rec.Err.Error()
		op.tb.Logf("restore operator stand-in: EtcdRestore %s/%s failed: %v", op.opts.Namespace, er.GetName(), rec.Err)
	}
	if cur, err := op.opts.Dynamic.Resource(kube.EtcdRestoreGVR).Namespace(op.opts.Namespace).Get(ctx, er.GetName(), metav1.GetOptions{}); err == nil {
		cur.Object["status"] = status
		_, _ = op.opts.Dynamic.Resource(kube.EtcdRestoreGVR).Namespace(op.opts.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	}
	return rec
}

func (op *RestoreOperator) run(ctx context.Context, er *unstructured.Unstructured, rec *RestoreRecord) error {
	ns := op.opts.Namespace
	cs, dyn := op.opts.Client, op.opts.Dynamic
	name, _, _ := unstructured.NestedString(er.Object, "spec", "etcdCluster", "name")
	rec.Cluster = name
	ref, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("failed to get reference EtcdCluster: %w", err)
	}
	rec.OldUID = ref.GetUID()
	if st, _, _ := unstructured.NestedString(er.Object, "spec", "backupStorageType"); st != "S3" {
		return fmt.Errorf("unknown backup storage type %q", st)
	}
	s3spec, _, _ := unstructured.NestedMap(er.Object, "spec", "s3")
	rec.S3Path, _ = s3spec["path"].(string)
	endpoint, _ := s3spec["endpoint"].(string)
	secret, _ := s3spec["awsSecret"].(string)
	pathStyle, _ := s3spec["forcePathStyle"].(bool)
	bucket, key, ok := strings.Cut(rec.S3Path, "/")
	if !ok || bucket == "" || key == "" {
		return fmt.Errorf("invalid s3 path %q: want <bucket>/<key>", rec.S3Path)
	}
	op.mu.Lock()
	old, registered := op.clusters[name]
	op.mu.Unlock()

	dir, err := os.MkdirTemp("", "restore-operator-")
	if err != nil {
		return err
	}
	op.tb.Cleanup(func() { os.RemoveAll(dir) })
	pki := (*testenv.PKI)(nil)
	if registered {
		pki = old.Etcd.PKI
	} else {
		// Not started by this test (the namespace was rebuilt): the
		// members serve the PKI of the namespace's TLS secrets, as
		// etcd-operator mounts them.
		if pki, err = op.secretPKI(ctx, ref, filepath.Join(dir, "tls")); err != nil {
			return err
		}
	}
	snap := filepath.Join(dir, "backup.db")
	fetch := func() error {
		rec.SHA256, rec.Size, err = op.fetch(ctx, secret, endpoint, pathStyle, bucket, key, dir, snap)
		return err
	}
	if !op.opts.FetchAfterDelete {
		if err := fetch(); err != nil {
			return err
		}
	}

	// Replace the cluster: the reference goes, with its pods and members.
	if err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting the reference EtcdCluster: %w", err)
	}
	if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)},
		metav1.ListOptions{LabelSelector: kube.LabelCluster + "=" + name}); err != nil {
		return fmt.Errorf("deleting the member pods: %w", err)
	}
	if registered {
		for _, m := range old.Etcd.Members {
			m.Kill()
		}
	}
	if op.opts.FetchAfterDelete {
		// The seed member fetches the snapshot, now.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(op.opts.FetchDelay):
		}
		if err := fetch(); err != nil {
			return err
		}
	}

	size, _, _ := unstructured.NestedInt64(ref.Object, "spec", "size")
	if size <= 0 {
		return fmt.Errorf("reference EtcdCluster has spec.size %d", size)
	}
	type member struct{ name, client, peer, dataDir string }
	var members []member
	var ic []string
	for i := range int(size) {
		m := member{name: fmt.Sprintf("%s-r%03d-%d", name, len(op.Records()), i),
			client: fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(op.tb)), peer: fmt.Sprintf("https://127.0.0.1:%d", testenv.FreePort(op.tb)),
			dataDir: filepath.Join(dir, fmt.Sprintf("m%d.etcd", i))}
		members = append(members, m)
		ic = append(ic, m.name+"="+m.peer)
	}
	token := fmt.Sprintf("%s-restored-%s", name, er.GetUID())
	for _, m := range members {
		out, err := exec.CommandContext(ctx, testenv.EtcdutlBin(op.tb, testenv.V35), "snapshot", "restore", snap, "--name", m.name,
			"--initial-cluster", strings.Join(ic, ","), "--initial-cluster-token", token, "--initial-advertise-peer-urls", m.peer,
			"--data-dir", m.dataDir).CombinedOutput()
		if err != nil {
			return fmt.Errorf("etcdutl snapshot restore of %s: %v: %s", rec.S3Path, err, strings.TrimSpace(string(out)))
		}
	}
	for _, m := range members {
		rec.Members = append(rec.Members, testenv.StartEtcdMember(op.tb, testenv.MemberSpec{Version: testenv.V35, Name: m.name, DataDir: m.dataDir,
			ClientURL: m.client, PeerURL: m.peer, InitialCluster: strings.Join(ic, ","), InitialClusterToken: token, PKI: pki}))
	}
	for _, m := range rec.Members {
		m.WaitReady(op.tb)
	}

	// The restored EtcdCluster, its pods, its status. etcd-operator's
	// prepareSeed creates it paused and then unpauses it: it runs
	// unpaused whatever the reference was (a rebuilt one is paused).
	spec, _, _ := unstructured.NestedMap(ref.Object, "spec")
	delete(spec, "paused")
	ec := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kube.APIVersion, "kind": kube.KindEtcdCluster,
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": toAny(ref.GetLabels())},
		"spec":     spec,
	}}
	created, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Create(ctx, ec, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating the restored EtcdCluster: %w", err)
	}
	rec.NewUID = created.GetUID()
	var ready []any
	for _, m := range members {
		var port int32
		if _, err := fmt.Sscan(strings.TrimPrefix(m.client, "https://127.0.0.1:"), &port); err != nil {
			return err
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: m.name, Labels: map[string]string{kube.LabelApp: "etcd", kube.LabelCluster: name}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "etcd", Image: "quay.io/coreos/etcd:v3.5.35",
				Ports: []corev1.ContainerPort{{Name: "client", ContainerPort: port}, {Name: "peer", ContainerPort: 2380}}}}},
		}
		p, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating member pod %s: %w", m.name, err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}}, Conditions: ReadyConditions(true)}
		if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("member pod %s status: %w", m.name, err)
		}
		ready = append(ready, m.name)
	}
	setStatus := func(phase string) error {
		cur, err := dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Object["status"] = map[string]any{"phase": phase, "size": size, "members": map[string]any{"ready": ready}}
		_, err = dyn.Resource(kube.EtcdClusterGVR).Namespace(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	}
	if err := setStatus("Creating"); err != nil {
		return fmt.Errorf("restored EtcdCluster status: %w", err)
	}
	rec.CreatingAt = time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(op.opts.RunningDelay):
	}
	if err := setStatus("Running"); err != nil {
		return fmt.Errorf("restored EtcdCluster status: %w", err)
	}
	rec.RunningAt = time.Now()
	op.Register(Cluster{Name: name, Etcd: &testenv.EtcdCluster{Members: rec.Members, PKI: pki}, UID: rec.NewUID})
	op.tb.Logf("restore operator stand-in: EtcdCluster %s/%s restored from s3://%s (%d bytes, sha256 %s), %d members, Running after %v",
		ns, name, rec.S3Path, rec.Size, rec.SHA256, len(rec.Members), rec.RunningAt.Sub(rec.CreatingAt).Round(time.Millisecond))
	return nil
}

// secretPKI writes the reference EtcdCluster's TLS secrets (server, peer,
// operator: spec.TLS.static) to files in dir and loads them as the
// members' PKI.
func (op *RestoreOperator) secretPKI(ctx context.Context, ref *unstructured.Unstructured, dir string) (*testenv.PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	static, _, _ := unstructured.NestedMap(ref.Object, "spec", "TLS", "static")
	member, _ := static["member"].(map[string]any)
	server, _ := member["serverSecret"].(string)
	peer, _ := member["peerSecret"].(string)
	operator, _ := static["operatorSecret"].(string)
	if server == "" || peer == "" || operator == "" {
		return nil, fmt.Errorf("EtcdCluster %s: spec.TLS.static names no server, peer or operator secret", ref.GetName())
	}
	files := map[string]string{}
	for _, s := range []struct{ secret, key string }{
		{server, escrow.ServerCertKey}, {server, escrow.ServerKeyKey}, {server, escrow.ServerCAKey},
		{peer, escrow.PeerCertKey}, {peer, escrow.PeerKeyKey}, {peer, escrow.PeerCAKey},
		{operator, kube.ClientCertKey}, {operator, kube.ClientKeyKey},
	} {
		se, err := op.opts.Client.CoreV1().Secrets(op.opts.Namespace).Get(ctx, s.secret, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("member TLS secret: %w", err)
		}
		b := se.Data[s.key]
		if len(b) == 0 {
			return nil, fmt.Errorf("member TLS secret %s has no key %s (keys %v)", s.secret, s.key, keys(se.Data))
		}
		f := filepath.Join(dir, s.key)
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return nil, err
		}
		files[s.key] = f
	}
	return testenv.LoadPKI(testenv.PKIFiles{CA: files[escrow.ServerCAKey], ServerCert: files[escrow.ServerCertKey], ServerKey: files[escrow.ServerKeyKey],
		PeerCA: files[escrow.PeerCAKey], PeerCert: files[escrow.PeerCertKey], PeerKey: files[escrow.PeerKeyKey],
		ClientCert: files[kube.ClientCertKey], ClientKey: files[kube.ClientKeyKey]})
}

// fetch downloads bucket/key with the awsSecret's credentials, as
// etcd-operator's S3 backend does, into file; it returns the sha256 and size.
func (op *RestoreOperator) fetch(ctx context.Context, secret, endpoint string, pathStyle bool, bucket, key, dir, file string) (string, int64, error) {
	if secret == "" {
		return "", 0, errors.New("spec.s3.awsSecret is empty (the stand-in does not model IAM roles)")
	}
	se, err := op.opts.Client.CoreV1().Secrets(op.opts.Namespace).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		return "", 0, fmt.Errorf("setup AWS config failed: get k8s secret failed: %w", err)
	}
	var files []string
	for _, k := range []string{AWSSecretCredentialsKey, AWSSecretConfigKey} {
		if b := se.Data[k]; len(b) != 0 {
			f := filepath.Join(dir, k)
			if err := os.WriteFile(f, b, 0o600); err != nil {
				return "", 0, err
			}
			files = append(files, f)
		}
	}
	sess, err := session.NewSessionWithOptions(session.Options{
		Profile: "default", SharedConfigState: session.SharedConfigEnable, SharedConfigFiles: files,
		Config: aws.Config{Endpoint: aws.String(endpoint), S3ForcePathStyle: aws.Bool(pathStyle), HTTPClient: op.opts.HTTPClient},
	})
	if err != nil {
		return "", 0, fmt.Errorf("new AWS session failed (secret %s, keys %v): %w", secret, keys(se.Data), err)
	}
	if aws.StringValue(sess.Config.Region) == "" {
		return "", 0, fmt.Errorf("secret %s: no region (want a %q key with [default] region = ...; keys are %v)", secret, AWSSecretConfigKey, keys(se.Data))
	}
	if v, err := sess.Config.Credentials.Get(); err != nil || v.AccessKeyID == "" {
		return "", 0, fmt.Errorf("secret %s: no credentials (want a %q key with [default] aws_access_key_id / aws_secret_access_key; keys are %v): %v",
			secret, AWSSecretCredentialsKey, keys(se.Data), err)
	}
	out, err := s3.New(sess).GetObjectWithContext(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return "", 0, fmt.Errorf("failed to get s3 object %s/%s from %s: %w", bucket, key, endpoint, err)
	}
	defer out.Body.Close()
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", 0, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), out.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, fmt.Errorf("reading s3 object %s/%s: %w", bucket, key, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func toAny(m map[string]string) map[string]any {
	if m == nil {
		return nil
	}
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}
