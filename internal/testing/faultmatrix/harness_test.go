package faultmatrix

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

func TestMain(m *testing.M) {
	setParallel()
	testfix.Main(m)
}

func helpText(bin string, args ...string) (string, error) {
	b, err := exec.Command(bin, args...).CombinedOutput()
	return string(b), err
}

// clusterID is the cluster id of every backup in the matrix; rows differ by
// prefix.
const clusterID = "c1"

// Bounds. Every bound is a configured timeout of the tool plus slack, never
// a tight wall-clock limit: the machines running `make test` have two busy
// cores.
const (
	stallTimeout = 8 * time.Second  // --cos-stall-timeout passed to the tool (when it has the flag); 4 s was once reached by a healthy MinIO on a machine at load 26
	abortWindow  = 30 * time.Second // docs/fault-matrix.md: aborts are retried for up to 30 s
	slack        = 30 * time.Second // scheduling on a loaded 2-core machine
	// signalBound: from a SIGINT/SIGTERM to the exit. The abort window
	// (the upload abort and the deletes run on a context that outlives the
	// cancelled run) plus slack.
	signalBound = abortWindow + slack
	// stepWait bounds waiting for a run to reach the step a row injects at.
	stepWait = 90 * time.Second
)

// world is what rows share: servers no row damages.
type world struct {
	tool   string
	minio  *testenv.MinIO // shared: never frozen or killed
	bucket string
	creds  string
	etcd   *testenv.EtcdCluster // 3 members, mutual TLS, v2 on, ~12 MiB
	pki    *testenv.MatrixPKI
	flags  map[string]string // command -> its --help text
	// env is added to every run's environment: the age recipients and
	// identity of TestFaultMatrixEncrypted (empty: plaintext backups).
	env []string

	fixPrefix string
	fixNames  [2]string // two committed backups, older (lower revision) first
}

// ---------------------------------------------------------------------------
// Running the binary.

// child is one run of the binary.
type child struct {
	t     testing.TB
	cmd   *exec.Cmd
	args  []string
	start time.Time

	mu      sync.Mutex
	stdout  bytes.Buffer
	stderr  bytes.Buffer
	changed chan struct{}
	done    chan struct{}
	end     time.Time
	killed  bool
}

type lockedWriter struct {
	c   *child
	buf *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.buf.Write(p)
	close(w.c.changed)
	w.c.changed = make(chan struct{})
	return len(p), nil
}

// childEnv is a clean environment: nothing of ours that the tool reads.
func childEnv(t testing.TB) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "TMPDIR=" + os.TempDir()}
}

// start runs the binary with args (a debug log on stderr).
func (w *world) start(t testing.TB, args ...string) *child {
	t.Helper()
	return w.startEnv(t, nil, args...)
}

// startEnv is start with extra environment variables (a failpoint).
func (w *world) startEnv(t testing.TB, env []string, args ...string) *child {
	t.Helper()
	full := append([]string{"--log-level", "debug"}, args...)
	c := &child{t: t, args: full, changed: make(chan struct{}), done: make(chan struct{})}
	c.cmd = exec.Command(w.tool, full...)
	c.cmd.Env = append(append(childEnv(t), w.env...), env...)
	c.cmd.Stdout = lockedWriter{c, &c.stdout}
	c.cmd.Stderr = lockedWriter{c, &c.stderr}
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.start = time.Now()
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", w.tool, err)
	}
	go func() {
		_ = c.cmd.Wait()
		c.mu.Lock()
		c.end = time.Now()
		c.mu.Unlock()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

// waitStderr waits until stderr matches re and returns the first match's
// submatches; false when the run ended or timeout passed first.
func (c *child) waitStderr(re *regexp.Regexp, timeout time.Duration) ([]string, bool) {
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		m := re.FindStringSubmatch(c.stderr.String())
		ch := c.changed
		c.mu.Unlock()
		if m != nil {
			return m, true
		}
		select {
		case <-ch:
		case <-c.done:
			c.mu.Lock()
			m := re.FindStringSubmatch(c.stderr.String())
			c.mu.Unlock()
			return m, m != nil
		case <-deadline:
			return nil, false
		}
	}
}

func (c *child) signal(sig syscall.Signal) {
	_ = c.cmd.Process.Signal(sig)
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// result is how a run ended.
type result struct {
	code    int // -1 when killed at its bound
	killed  bool
	elapsed time.Duration
	stdout  string
	stderr  string
}

func (r result) String() string {
	how := fmt.Sprintf("exit %d", r.code)
	if r.killed {
		how = "killed at its bound"
	}
	return fmt.Sprintf("%s after %v\n--- stdout ---\n%s\n--- stderr (tail) ---\n%s", how, r.elapsed.Round(time.Millisecond), r.stdout, tail(r.stderr, 25))
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// wait waits for the run to end; bound after its start it is killed and
// the result says so.
func (c *child) wait(bound time.Duration) result {
	return c.waitUntil(c.start.Add(bound))
}

// waitNow is wait with the bound counted from now (from a signal).
func (c *child) waitNow(bound time.Duration) result {
	return c.waitUntil(time.Now().Add(bound))
}

func (c *child) waitUntil(deadline time.Time) result {
	select {
	case <-c.done:
	case <-time.After(time.Until(deadline)):
		c.mu.Lock()
		c.killed = true
		c.mu.Unlock()
		_ = c.cmd.Process.Signal(syscall.SIGCONT) // in case a row stopped it
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := result{code: c.cmd.ProcessState.ExitCode(), killed: c.killed, elapsed: c.end.Sub(c.start),
		stdout: c.stdout.String(), stderr: c.stderr.String()}
	if r.killed {
		r.code = -1
	}
	return r
}

// run runs the binary to its end within bound.
func (w *world) run(t testing.TB, bound time.Duration, args ...string) result {
	t.Helper()
	return w.start(t, args...).wait(bound)
}

// expect checks the promises every row shares: the run ended within its
// bound and its exit code is one of want.
func expect(t testing.TB, what string, r result, bound time.Duration, want ...int) bool {
	t.Helper()
	if r.killed {
		t.Errorf("%s: did not end within its bound %v (configured timeout + slack): %s", what, bound, r)
		return false
	}
	for _, w := range want {
		if r.code == w {
			return true
		}
	}
	t.Errorf("%s: want exit code %v: %s", what, want, r)
	return false
}

// ---------------------------------------------------------------------------
// Flags.

func cosArgs(endpoint, bucket, prefix, creds string) []string {
	return []string{"--cos-endpoint", endpoint, "--cos-region", testenv.MinIORegion, "--bucket", bucket,
		"--prefix", prefix, "--cos-credentials-dir", creds}
}

func (w *world) cos(prefix string) []string {
	return cosArgs(w.minio.Endpoint, w.bucket, prefix, w.creds)
}

func etcdArgs(endpoints []string, ca, cert, key string) []string {
	var a []string
	for _, ep := range endpoints {
		a = append(a, "--endpoints", ep)
	}
	return append(a, "--cacert", ca, "--cert", cert, "--key", key)
}

func (w *world) etcdArgs() []string {
	p := w.pki
	return etcdArgs(w.etcd.Endpoints(), p.CAFile, p.ClientCertFile, p.ClientKeyFile)
}

func credsDir(t testing.TB, m *testenv.MinIO) string {
	t.Helper()
	dir := t.TempDir()
	for name, v := range map[string]string{"access_key_id": m.AccessKey, "secret_access_key": m.SecretKey} {
		if err := os.WriteFile(path.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// has reports whether `cmd --help` lists flag.
func (w *world) has(cmd, flag string) bool { return strings.Contains(w.flags[cmd], "--"+flag+" ") }

// stall is the store's stall timeout a run of cmd has: the flag's value
// when the binary has --cos-stall-timeout, else the COS store's default.
func (w *world) stall(cmd string) time.Duration {
	if w.has(cmd, "cos-stall-timeout") {
		return stallTimeout
	}
	return cos.DefaultStallTimeout
}

// stallArgs passes the stall timeout when the binary has the flag. When it
// does not (an older binary), the rows still run, against the
// tool's defaults, and fail at their bound.
func (w *world) stallArgs(t testing.TB, cmd string) []string {
	if w.has(cmd, "cos-stall-timeout") {
		return []string{"--cos-stall-timeout", stallTimeout.String()}
	}
	t.Logf("note: `%s` has no --cos-stall-timeout flag; running with the tool's defaults", cmd)
	return nil
}

// ---------------------------------------------------------------------------
// The store after a row.

// storeView is a bucket and prefix of one MinIO a row used, and the proxy
// the tool reached it through (nil when direct).
type storeView struct {
	m      *testenv.MinIO
	bucket string
	prefix string
	creds  string
	proxy  *testenv.FaultProxy
	// damaged is a backup the row damaged on purpose: exempt from the
	// "every committed backup restores" check.
	damaged string
}

func (w *world) sharedView(t testing.TB, prefix string, proxy *testenv.FaultProxy) storeView {
	return storeView{m: w.minio, bucket: w.bucket, prefix: prefix, creds: w.creds, proxy: proxy}
}

// storeProxy is a new fault proxy in front of the shared MinIO.
func (w *world) storeProxy(t testing.TB) *testenv.FaultProxy {
	t.Helper()
	return testenv.StartFaultProxy(t, strings.TrimPrefix(w.minio.Endpoint, "http://"))
}

// proxiedView is a new prefix of the shared bucket, reached through a new
// fault proxy.
func (w *world) proxiedView(t testing.TB) storeView {
	t.Helper()
	return w.sharedView(t, testenv.Prefix(t), w.storeProxy(t))
}

func listKeys(t testing.TB, cli *s3.S3, bucket, prefix string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := cli.ListObjectsV2PagesWithContext(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)},
		func(p *s3.ListObjectsV2Output, _ bool) bool {
			for _, o := range p.Contents {
				out[aws.StringValue(o.Key)] = aws.Int64Value(o.Size)
			}
			return true
		})
	if err != nil {
		t.Fatalf("listing %s/%s: %v", bucket, prefix, err)
	}
	return out
}

// touchedKeys are the object keys the tool named in its requests through
// the proxy.
func touchedKeys(p *testenv.FaultProxy, bucket string) []string {
	if p == nil {
		return nil
	}
	seen := map[string]bool{}
	var keys []string
	for _, line := range p.Requests() {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		u, err := url.Parse(f[1])
		if err != nil {
			continue
		}
		k, ok := strings.CutPrefix(u.Path, "/"+bucket+"/")
		if ok && k != "" && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// uploadsUnder lists multipart uploads whose key starts with prefix (the
// exact key as prefix finds uploads a bucket-wide listing misses).
func uploadsUnder(t testing.TB, cli *s3.S3, bucket, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := cli.ListMultipartUploadsWithContext(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatalf("listing uploads under %s: %v", prefix, err)
	}
	var ups []string
	for _, u := range out.Uploads {
		ups = append(ups, aws.StringValue(u.Key)+" "+aws.StringValue(u.UploadId))
	}
	return ups
}

// committed is one backup with a manifest.
type committed struct {
	name string
	keys map[string]int64 // object name -> size
}

// checkStore checks the promise every row shares, once the store is back:
// every backup with a manifest restores (restore --dry-run --backup NAME
// verifies it by streaming), and no multipart upload is left under the
// prefix or under any exact key the tool touched. It returns the committed
// backups (name order) and every object key.
func (w *world) checkStore(t testing.TB, v storeView) ([]committed, map[string]int64) {
	t.Helper()
	cli := v.m.S3(t)
	keys := listKeys(t, cli, v.bucket, v.prefix+"/")
	folders := map[string]map[string]int64{}
	for k, size := range keys {
		dir, obj := path.Split(k)
		dir = strings.TrimSuffix(dir, "/")
		if folders[dir] == nil {
			folders[dir] = map[string]int64{}
		}
		folders[dir][obj] = size
	}
	var out []committed
	for dir, objs := range folders {
		if _, ok := objs[catalog.ManifestObject]; !ok {
			continue
		}
		name := path.Base(dir)
		cid := path.Base(path.Dir(dir))
		out = append(out, committed{name: name, keys: objs})
		if name == v.damaged {
			continue
		}
		r := w.dryRun(t, v, cid, name)
		if !expect(t, "restore --dry-run of committed backup "+name, r, 2*time.Minute, 0) {
			t.Errorf("the store holds committed backup %s/%s that does not restore", cid, name)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	check := append(touchedKeys(v.proxy, v.bucket), v.prefix+"/")
	for k := range keys {
		check = append(check, k)
	}
	for dir := range folders {
		for _, o := range []string{catalog.SnapshotObjectZstd, catalog.SnapshotObjectRaw, "v2.json.zst", "v2.json", catalog.ManifestObject} {
			check = append(check, dir+"/"+o, dir+"/"+seal.ObjectKey(o))
		}
	}
	left := map[string]bool{}
	for _, k := range check {
		for _, u := range uploadsUnder(t, cli, v.bucket, k) {
			left[u] = true
		}
	}
	if len(left) > 0 {
		var l []string
		for u := range left {
			l = append(l, u)
		}
		sort.Strings(l)
		t.Errorf("multipart uploads left in the store: %v", l)
	}
	return out, keys
}

// dryRun verifies one backup with the binary: restore --dry-run --backup.
func (w *world) dryRun(t testing.TB, v storeView, cid, name string) result {
	t.Helper()
	args := []string{"restore", "--cluster-id", cid, "--no-live", "--backup", name, "--dry-run",
		"--initial-cluster", "r0=https://127.0.0.1:2380", "--data-dir-root", t.TempDir()}
	args = append(args, cosArgs(v.m.Endpoint, v.bucket, v.prefix, v.creds)...)
	return w.run(t, 2*time.Minute, args...)
}

// waitStoreBack waits until the proxy has no connection left to the store
// (the store answered or dropped every request it had queued while frozen)
// and the store serves.
func waitStoreBack(t testing.TB, m *testenv.MinIO, p *testenv.FaultProxy) {
	t.Helper()
	if p != nil && !p.WaitFor(2*time.Minute, func() bool { return p.Upstreams() == 0 }) {
		t.Fatalf("the store still has %d connections from the proxy 2 min after the run", p.Upstreams())
	}
	cli := m.S3(t)
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cli.ListBucketsWithContext(ctx, &s3.ListBucketsInput{})
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store does not answer: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling a condition, not synchronizing on time
	}
}

// ---------------------------------------------------------------------------
// Backups made by copying the fixture's objects.

func getObject(t testing.TB, cli *s3.S3, bucket, key string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := cli.GetObjectWithContext(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

func putObject(t testing.TB, cli *s3.S3, bucket, key string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := cli.PutObjectWithContext(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func deleteObject(t testing.TB, cli *s3.S3, bucket, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := cli.DeleteObjectWithContext(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
}

func (w *world) fixKey(i int, obj string) string {
	return catalog.Layout{Prefix: w.fixPrefix}.Key(clusterID, w.fixNames[i], obj)
}

// copyBackup copies fixture backup src as backup name under prefix (the
// manifest's name, kind and times rewritten) and returns its manifest.
func (w *world) copyBackup(t testing.TB, prefix string, src int, at time.Time, kind catalog.Kind) string {
	t.Helper()
	cli := w.minio.S3(t)
	name := catalog.BackupName(at, kind)
	lay := catalog.Layout{Prefix: prefix}
	var m map[string]any
	if err := json.Unmarshal(getObject(t, cli, w.bucket, w.fixKey(src, catalog.ManifestObject)), &m); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []string{catalog.SnapshotObjectZstd, "v2.json.zst"} {
		putObject(t, cli, w.bucket, lay.Key(clusterID, name, obj), getObject(t, cli, w.bucket, w.fixKey(src, obj)))
	}
	m["name"], m["kind"] = name, string(kind)
	m["startedAt"], m["finishedAt"] = at.UTC().Format(time.RFC3339Nano), at.Add(time.Second).UTC().Format(time.RFC3339Nano)
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	putObject(t, cli, w.bucket, lay.Key(clusterID, name, catalog.ManifestObject), body)
	return name
}
