package faultmatrix

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
	"github.com/armada/etcd-recovery/internal/testing/testfix"
)

// matrixParallel is how many rows run at once unless -test.parallel is
// given: most rows wait on a frozen or held server, not on the CPU.
const matrixParallel = 8

// setParallel raises -test.parallel for this package unless it was given.
func setParallel() {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			set = true
		}
	})
	if !set {
		_ = flag.Set("test.parallel", fmt.Sprint(matrixParallel))
	}
}

// row is one fault of the matrix.
type row struct {
	name string
	run  func(t *testing.T, w *world)
}

var (
	reStreaming = regexp.MustCompile(`msg="streaming snapshot".*? member=(\S+)`)
	reCommitted = regexp.MustCompile(`msg="backup committed".*? backup=(\S+)`)
)

func TestFaultMatrix(t *testing.T) {
	w := newWorld(t, nil)
	runRows(t, w, storeRows(), leakRows(), memberRows(), concurrencyRows(), damageRows(), certRows(), silentListenerRows(),
		fullDiskRows(), signalRows(), trickleRows())
}

// runRows runs every row of the sets on w, each a parallel subtest.
func runRows(t *testing.T, w *world, sets ...[]row) {
	for _, rows := range sets {
		for _, r := range rows {
			t.Run(r.name, func(t *testing.T) {
				t.Parallel()
				r.run(t, w)
			})
		}
	}
}

// newWorld starts the shared servers and takes the fixture backups; env
// is added to every run's environment (the fixtures' too).
func newWorld(t *testing.T, env []string) *world {
	t.Helper()
	// FAULTMATRIX_TOOL runs the matrix against another build (e.g. an older
	// commit's, to see which rows fail there).
	tool := os.Getenv("FAULTMATRIX_TOOL")
	if tool == "" {
		tool = testfix.Tool(t)
	}
	t.Logf("binary under test: %s", tool)
	w := &world{tool: tool, flags: map[string]string{}, env: env}
	var wg sync.WaitGroup
	wg.Go(func() {
		w.minio = testenv.SharedMinIO(t)
	})
	w.pki = testenv.NewMatrixPKI(t, testenv.MatrixPKIOptions{})
	w.etcd = startLoaded(t, w.pki.PKI, 3)
	wg.Wait()
	w.bucket = w.minio.NewBucket(t)
	w.creds = credsDir(t, w.minio)
	for _, cmd := range []string{"backup", "list", "prune", "inspect", "restore"} {
		out, _ := helpText(w.tool, cmd, "--help")
		w.flags[cmd] = out
	}
	w.fixPrefix = testenv.Prefix(t) + "-fixture"
	for i := range 2 {
		if i == 1 {
			testenv.PutKeys(t, w.etcd.Client(t), "/fixture/second/", 10, 64)
		}
		r := w.run(t, 2*time.Minute, append(append([]string{"backup", "--cluster-id", clusterID, "--kind", "scheduled"}, w.etcdArgs()...), w.cos(w.fixPrefix)...)...)
		if !expect(t, "fixture backup", r, 2*time.Minute, 0) {
			t.FailNow()
		}
		m := reCommitted.FindStringSubmatch(r.stderr)
		if m == nil {
			t.Fatalf("fixture backup: no 'backup committed' line: %s", r)
		}
		w.fixNames[i] = m[1]
	}
	return w
}

// startLoaded starts an etcd 3.5 cluster with mutual TLS and the v2 API,
// holding about 12 MiB of v3 data (a stored snapshot of more than two 5 MiB
// parts, so a stream can be caught mid-way) and a few v2 keys.
func startLoaded(t testing.TB, pki *testenv.PKI, members int) *testenv.EtcdCluster {
	t.Helper()
	c := testenv.StartEtcd(t, testenv.EtcdOptions{Version: testenv.V35, Members: members, TLS: true, PKI: pki, EnableV2: true})
	testenv.PutKeys(t, c.Client(t), "/registry/matrix/", 12000, 1024)
	testenv.PutV2Keys(t, c, 20)
	return c
}

// ownStore is a dedicated MinIO (a row may freeze or kill it), a bucket,
// credentials and a recording proxy in front of it.
func ownStore(t testing.TB) (storeView, *testenv.MinIO) {
	t.Helper()
	m := testenv.StartMinIO(t)
	b := m.NewBucket(t)
	p := testenv.StartFaultProxy(t, strings.TrimPrefix(m.Endpoint, "http://"))
	return storeView{m: m, bucket: b, prefix: testenv.Prefix(t), creds: credsDir(t, m), proxy: p}, m
}

func (v storeView) viaProxy() []string {
	return cosArgs(v.proxy.URL("http"), v.bucket, v.prefix, v.creds)
}

func (w *world) backupArgs(extra ...string) []string {
	return append(append([]string{"backup", "--cluster-id", clusterID, "--kind", "scheduled"}, w.etcdArgs()...), extra...)
}

// reqRe matches the request line of method on an object of this view
// whose key ends with suffix (a regular expression).
func (v storeView) reqRe(method, suffix string) *regexp.Regexp {
	return regexp.MustCompile(method + ` /` + regexp.QuoteMeta(v.bucket+"/"+v.prefix+"/") + `[^ ]*` + suffix + `[^ ]* HTTP/1`)
}

func waitHit(t testing.TB, h *testenv.ProxyHold, c *child, what string) {
	t.Helper()
	select {
	case <-h.Hit():
	case <-c.done:
		t.Fatalf("the run ended before %s: %s", what, c.wait(0))
	case <-time.After(stepWait):
		t.Fatalf("the run did not reach %s within %v", what, stepWait)
	}
}

// reached is waitHit, except that a run that ended first because the store
// stalled before the hold was reached (a loaded machine), on a first
// attempt, is logged and reported false: that attempt did not test the
// fault.
func reached(t testing.TB, h *testenv.ProxyHold, c *child, what string, attempt int) bool {
	t.Helper()
	select {
	case <-h.Hit():
		return true
	case <-c.done:
		r := c.wait(0)
		if attempt == 1 && strings.Contains(r.stderr, store.ErrStalled.Error()) {
			t.Logf("attempt 1: the store stalled before %s on a loaded machine (the fault was not injected yet): tried once more: %s", what, r)
			return false
		}
		t.Fatalf("the run ended before %s: %s", what, r)
	case <-time.After(stepWait):
		t.Fatalf("the run did not reach %s within %v", what, stepWait)
	}
	return false
}

// ---------------------------------------------------------------------------
// The object store frozen, killed.

func storeRows() []row {
	// The abort (DELETE ?uploadId=) or the delete of written objects
	// (DELETE, POST ?delete) reaching the proxy: the run has given up on
	// the frozen store and is cleaning up.
	cleaning := regexp.MustCompile(`^(DELETE /|POST /[^ ]*\?delete)`)
	frozen := func(t *testing.T, w *world, at string) {
		for attempt := 1; ; attempt++ {
			if frozenOnce(t, w, at, cleaning, attempt) {
				return
			}
		}
	}
	return []row{
		{"store/frozen-before-snapshot", func(t *testing.T, w *world) { frozen(t, w, "before") }},
		{"store/frozen-during-snapshot", func(t *testing.T, w *world) { frozen(t, w, "during") }},
		{"store/frozen-after-snapshot", func(t *testing.T, w *world) { frozen(t, w, "after") }},
		{"store/killed-and-restarted-mid-upload", func(t *testing.T, w *world) {
			v, m := ownStore(t)
			h := v.proxy.Hold(regexp.MustCompile(`partNumber=`))
			c := w.start(t, append(w.backupArgs(w.stallArgs(t, "backup")...), v.viaProxy()...)...)
			waitHit(t, h, c, "an UploadPart")
			m.Kill()
			h.Release() // reaches a dead store: the connection breaks
			m.Start(t)
			bound := 2*abortWindow + slack // retries across the restart, then the abort window
			r := c.wait(bound)
			expect(t, "backup across a store restart", r, bound, 0, 1)
			waitStoreBack(t, m, v.proxy)
			got, _ := w.checkStore(t, v)
			if r.code == 0 && len(got) != 1 {
				t.Errorf("the run reported success; want 1 committed backup, the store has %v", got)
			}
			if r.code != 0 && len(got) != 0 {
				t.Errorf("the run failed; want no committed backup, the store has %v", got)
			}
		}},
	}
}

// ---------------------------------------------------------------------------
// etcd members killed and frozen mid-stream.

func memberRows() []row {
	mid := func(t *testing.T, w *world, freeze bool) {
		pki := testenv.NewMatrixPKI(t, testenv.MatrixPKIOptions{})
		c := startLoaded(t, pki.PKI, 3)
		v := w.proxiedView(t)
		// The uploader reads a whole 5 MiB part before CreateMultipartUpload;
		// holding that request stops the stream with most of it still in etcd.
		h := v.proxy.Hold(regexp.MustCompile(`\?uploads`))
		args := append(append([]string{"backup", "--cluster-id", clusterID, "--probe-timeout", "3s", "--dial-timeout", "2s"},
			etcdArgs(c.Endpoints(), pki.CAFile, pki.ClientCertFile, pki.ClientKeyFile)...), v.viaProxy()...)
		ch := w.start(t, args...)
		waitHit(t, h, ch, "CreateMultipartUpload")
		sm, ok := ch.waitStderr(reStreaming, stepWait)
		if !ok {
			t.Fatalf("no 'streaming snapshot' line")
		}
		victim := c.Member(t, sm[1])
		if freeze {
			victim.Freeze()
		} else {
			victim.Kill()
		}
		h.Release()
		// A frozen member is found by gRPC keepalive (10 s + 5 s) or the
		// stall timeout; then the next member streams.
		bound := 15*time.Second + abortWindow + slack
		r := ch.wait(bound)
		victim.Thaw()
		if !expect(t, "backup with a member lost mid-stream", r, bound, 0) {
			return
		}
		if !strings.Contains(r.stderr, "trying the next member") {
			t.Errorf("no failover logged: %s", r)
		}
		got, _ := w.checkStore(t, v)
		if len(got) != 1 {
			t.Fatalf("want 1 committed backup, the store has %v", got)
		}
		var man catalog.Manifest
		key := catalog.Layout{Prefix: v.prefix}.Key(clusterID, got[0].name, catalog.ManifestObject)
		if err := json.Unmarshal(getObject(t, w.minio.S3(t), w.bucket, key), &man); err != nil {
			t.Fatal(err)
		}
		if man.Source.Name == victim.Name {
			t.Errorf("the manifest names the lost member %s as the source", victim.Name)
		}
	}
	return []row{
		{"etcd/member-killed-mid-stream", func(t *testing.T, w *world) { mid(t, w, false) }},
		{"etcd/member-frozen-mid-stream", func(t *testing.T, w *world) { mid(t, w, true) }},
	}
}

// ---------------------------------------------------------------------------
// Concurrent backups, prune during a backup, objects vanishing.

// startTogether starts n backups that reach backup.Run's start time
// together: their credentials are FIFOs, written only once every run is
// blocked reading one, so the runs leave the credential read within
// microseconds of each other and take the same millisecond as their time.
func (w *world) startTogether(t *testing.T, n int, prefix string) []*child {
	t.Helper()
	opened := make(chan int, 2*n)
	release := make(chan struct{})
	var wg sync.WaitGroup
	var kids []*child
	for i := range n {
		dir := t.TempDir()
		vals := map[string]string{"access_key_id": w.minio.AccessKey, "secret_access_key": w.minio.SecretKey}
		for name := range vals {
			if err := syscall.Mkfifo(filepath.Join(dir, name), 0o600); err != nil {
				t.Fatalf("mkfifo: %v", err)
			}
		}
		for name, val := range vals {
			wg.Go(func() {
				f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY, 0) // blocks until the run opens it
				if err != nil {
					return
				}
				opened <- i
				<-release
				_, _ = f.WriteString(val + "\n")
				f.Close()
			})
		}
		kids = append(kids, w.start(t, append(w.backupArgs(), cosArgs(w.minio.Endpoint, w.bucket, prefix, dir)...)...))
	}
	seen := map[int]bool{}
	timeout := time.After(stepWait)
	for len(seen) < n {
		select {
		case i := <-opened:
			seen[i] = true
		case <-timeout:
			close(release)
			t.Fatalf("only %d of %d runs reached the credentials", len(seen), n)
		}
	}
	close(release)
	t.Cleanup(func() {
		for _, k := range kids { // a run that died leaves its writer blocked
			_ = k.cmd.Process.Kill()
		}
		wg.Wait()
	})
	return kids
}

func concurrencyRows() []row {
	concurrent := func(t *testing.T, w *world, n int) {
		prefix := testenv.Prefix(t)
		kids := w.startTogether(t, n, prefix)
		bound := 2 * time.Minute
		names := map[string]bool{}
		for i, k := range kids {
			r := k.wait(bound)
			if expect(t, fmt.Sprintf("concurrent backup %d of %d", i+1, n), r, bound, 0) {
				m := reCommitted.FindStringSubmatch(r.stderr)
				if m == nil {
					t.Errorf("run %d: exit 0 without 'backup committed'", i+1)
					continue
				}
				if names[m[1]] {
					t.Errorf("two runs committed the same backup name %s", m[1])
				}
				names[m[1]] = true
			}
		}
		got, _ := w.checkStore(t, w.sharedView(t, prefix, nil))
		if len(got) != n {
			t.Errorf("%d runs reported success, the store has %d committed backups: %v (names %v)", n, len(got), got, names)
		}
	}
	return []row{
		{"concurrent/two-backups", func(t *testing.T, w *world) { concurrent(t, w, 2) }},
		{"concurrent/three-backups", func(t *testing.T, w *world) { concurrent(t, w, 3) }},
		{"concurrent/prune-during-backup", func(t *testing.T, w *world) {
			v := w.proxiedView(t)
			h := v.proxy.Hold(v.reqRe("PUT", `/v2\.json\.zst`)) // the snapshot is stored, the manifest is not
			c := w.start(t, append(w.backupArgs(), v.viaProxy()...)...)
			waitHit(t, h, c, "the v2 PUT")
			pr := w.run(t, time.Minute+slack, append([]string{"prune", "--cluster-id", clusterID}, w.cos(v.prefix)...)...)
			expect(t, "prune during a backup", pr, time.Minute+slack, 0)
			h.Release()
			r := c.wait(time.Minute + slack)
			expect(t, "backup with a prune during it", r, time.Minute+slack, 0)
			if got, _ := w.checkStore(t, v); len(got) != 1 {
				t.Errorf("want the backup committed and restorable, the store has %v", got)
			}
		}},
		{"concurrent/snapshot-deleted-under-running-backup", func(t *testing.T, w *world) {
			v := w.proxiedView(t)
			h := v.proxy.Hold(v.reqRe("PUT", `/v2\.json\.zst`))
			c := w.start(t, append(w.backupArgs(), v.viaProxy()...)...)
			waitHit(t, h, c, "the v2 PUT")
			cli := w.minio.S3(t)
			for k := range listKeys(t, cli, w.bucket, v.prefix+"/") {
				if strings.HasSuffix(k, "/"+catalog.SnapshotObjectZstd) {
					deleteObject(t, cli, w.bucket, k)
				}
			}
			h.Release()
			r := c.wait(time.Minute + slack)
			expect(t, "backup whose snapshot object vanished", r, time.Minute+slack, 1)
			if got, _ := w.checkStore(t, v); len(got) != 0 {
				t.Errorf("a manifest was written for objects that are not there: %v", got)
			}
		}},
	}
}

// frozenOnce is one attempt of a store/frozen-* row. On a loaded machine
// the store can stall (no progress for the stall timeout) before the
// request to freeze at was reached: that attempt did not test the fault,
// so it is tried once more (a second time fails). It reports whether the
// attempt ran the row.
func frozenOnce(t *testing.T, w *world, at string, cleaning *regexp.Regexp, attempt int) bool {
	t.Helper()
	v, m := ownStore(t)
	var h *testenv.ProxyHold
	switch at {
	case "during":
		h = v.proxy.Hold(regexp.MustCompile(`partNumber=`))
	case "after":
		h = v.proxy.Hold(v.reqRe("PUT", `/v2\.json\.zst`))
	default:
		m.Freeze()
	}
	frozenBound := w.stall("backup") + abortWindow + slack
	c := w.start(t, append(w.backupArgs(w.stallArgs(t, "backup")...), v.viaProxy()...)...)
	if h != nil {
		if !reached(t, h, c, "the store request to freeze at", attempt) {
			return false
		}
		m.Freeze() // then the held request reaches a frozen store
		h.Release()
		// The store comes back once the run has given up on it and is
		// aborting its upload / deleting what it wrote: within the
		// abort window, that cleanup must then succeed.
		v.proxy.WaitFor(frozenBound, func() bool {
			if c.exited() {
				return true
			}
			for _, l := range v.proxy.Requests() {
				if cleaning.MatchString(l) {
					return true
				}
			}
			return false
		})
		m.Thaw()
	}
	r := c.wait(frozenBound)
	m.Thaw()
	expect(t, "backup with a frozen store", r, frozenBound, 1)
	if !strings.Contains(r.stderr, store.ErrStalled.Error()) {
		t.Errorf("the error does not name the stalled store (%q): %s", store.ErrStalled, r)
	}
	if strings.Contains(r.stderr, "trying the next member") {
		t.Errorf("a store stall was retried on another etcd member: %s", r)
	}
	waitStoreBack(t, m, v.proxy)
	got, keys := w.checkStore(t, v)
	if len(got) != 0 {
		t.Errorf("a failed backup left committed backups: %v", got)
	}
	if h != nil && len(keys) != 0 {
		t.Errorf("the store came back within the abort window, but the failed backup left %v", keys)
	}
	return true
}
