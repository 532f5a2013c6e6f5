package cos_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// stallSlack is the time a stalled call may take past its stall timeout on
// two busy cores: the watchdog's timer, the cancel, and the SDK unwinding.
const stallSlack = 5 * time.Second

// silentListener accepts TCP connections and never answers: a
// black-holed endpoint (testenv's, shared with the fault matrix).
func silentListener(tb testing.TB) string {
	tb.Helper()
	return testenv.StartBlackhole(tb).URL("http")
}

// Every call against an endpoint that accepts TCP and never answers ends
// after the stall timeout (not the SDK's timeouts times its retries: 370 s
// for `list` before), with an error that says the store stalled.
func TestStallSilentEndpoint(t *testing.T) {
	t.Parallel()
	const stall = 1500 * time.Millisecond
	// The abort window is shortened from its 30 s default: what is bounded
	// here is the stall, and the cleanup's own bound is the window (a
	// failed CreateMultipartUpload is cleaned up until it ends).
	const abortWindow = 3 * time.Second
	s, err := cos.New(cos.Config{
		Endpoint: silentListener(t), Region: testenv.MinIORegion, Bucket: "b",
		Creds:      cos.Credentials{AccessKeyID: "id", SecretAccessKey: "secret-value-123"},
		MaxRetries: 5, StallTimeout: stall, AbortWindow: abortWindow,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The body is generated before the clock starts: under -race on loaded
	// cores, generating and hashing it took seconds of the bound.
	big, err := io.ReadAll(randBody(9, 6*mib))
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(ctx context.Context) error{
		"check": s.Check,
		"list":  func(ctx context.Context) error { _, err := s.List(ctx, "p/"); return err },
		"get":   func(ctx context.Context) error { _, err := s.Get(ctx, "p/manifest.json"); return err },
		"put":   func(ctx context.Context) error { _, err := s.Put(ctx, "p/x", strings.NewReader("x")); return err },
		"put multipart": func(ctx context.Context) error {
			_, err := s.Put(ctx, "p/big", bytes.NewReader(big))
			return err
		},
		"list uploads": func(ctx context.Context) error { _, err := s.ListUploads(ctx, "p/"); return err },
		"delete":       func(ctx context.Context) error { return s.Delete(ctx, []string{"p/x"}) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			err := call(testCtx(t))
			d := time.Since(start)
			if !errors.Is(err, store.ErrStalled) || !strings.Contains(err.Error(), "object store stalled") {
				t.Fatalf("%s against a silent endpoint: %v (after %v): want an object store stalled error", name, err, d)
			}
			if !strings.HasPrefix(err.Error(), "cos: ") {
				t.Errorf("error %q does not name the operation", err)
			}
			// A multipart put's failure adds the abort window's cleanup (a
			// CreateMultipartUpload that got no answer may have created an
			// upload, so the key is watched until the window ends).
			bound := stall + stallSlack
			if name == "put multipart" {
				bound += abortWindow
			}
			if d > bound {
				t.Errorf("%s took %v; the stall timeout is %v (bound %v)", name, d, stall, bound)
			}
		})
	}
}

// A Get whose body stops mid-download (the server froze after sending part
// of it) fails with a stall, so a restore's download is bounded too.
func TestStallGetBody(t *testing.T) {
	t.Parallel()
	m := startMinIO(t)
	const stall = 1500 * time.Millisecond
	r := newRigOn(t, m, func(c *cos.Config) { c.StallTimeout = stall })
	key := r.prefix + "body.bin"
	const size = 64 * mib
	if _, err := r.store.Put(testCtx(t), key, randBody(3, size)); err != nil {
		t.Fatal(err)
	}
	rc, err := r.store.Get(testCtx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.CopyN(io.Discard, rc, mib); err != nil {
		t.Fatal(err)
	}
	m.Freeze()
	t.Cleanup(m.Thaw)
	start := time.Now()
	_, err = io.Copy(io.Discard, rc)
	d := time.Since(start)
	if !errors.Is(err, store.ErrStalled) {
		t.Fatalf("reading the body of a frozen server: %v after %v: want object store stalled", err, d)
	}
	// Socket buffers may still hold a few MiB when the freeze lands; they
	// drain at once, so the bound is the stall timeout plus slack.
	if d > stall+stallSlack {
		t.Errorf("the stalled read ended after %v (stall timeout %v)", d, stall)
	}
	if !strings.Contains(err.Error(), "cos: get "+key+": object store stalled") {
		t.Errorf("error %q", err)
	}
}

// MinIO frozen (SIGSTOP) in the middle of a multipart Put: the Put fails as
// "object store stalled" after the stall timeout, not minutes later; once
// the server resumes, the upload the Put started and any upload a timed-out
// CreateMultipartUpload left on the key are aborted.
func TestStallFrozenMinIOPut(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"mid-upload", "before-create"} {
		t.Run(when, func(t *testing.T) {
			t.Parallel()
			m := startMinIO(t)
			const stall = 2 * time.Second
			var stalls atomic.Int32
			r := newRigOn(t, m, func(c *cos.Config) {
				c.StallTimeout = stall
				c.AbortWindow = 60 * time.Second
				c.MaxRetries = 3
				// The server resumes as soon as the stall is seen, so the
				// aborts that follow can go through.
				c.OnStall = func(op, key string) {
					stalls.Add(1)
					m.Thaw()
				}
			})
			t.Cleanup(m.Thaw)
			key := r.prefix + "frozen/snapshot.db"
			body := io.Reader(randBody(7, 64*mib))
			if when == "mid-upload" {
				body = &freezeAfter{r: body, after: 12 * mib, freeze: m.Freeze}
			} else {
				m.Freeze()
			}
			start := time.Now()
			_, err := r.store.PutIfAbsent(testCtx(t), key, body)
			d := time.Since(start)
			if !errors.Is(err, store.ErrStalled) || !strings.Contains(err.Error(), "object store stalled") {
				t.Fatalf("Put into a frozen server: %v", err)
			}
			if strings.Contains(err.Error(), "could not be") {
				t.Errorf("cleanup failed after the server resumed: %v", err)
			}
			if stalls.Load() != 1 {
				t.Errorf("OnStall called %d times", stalls.Load())
			}
			// The stall, then the aborts on a resumed server.
			if d > stall+stallSlack+10*time.Second {
				t.Errorf("Put took %v with a stall timeout of %v", d, stall)
			}
			ups, err := r.store.ListUploadsForKey(testCtx(t), key)
			if err != nil {
				t.Fatal(err)
			}
			if len(ups) != 0 {
				t.Fatalf("%d multipart uploads left on %s: %+v", len(ups), key, ups)
			}
			if objs, err := r.store.List(testCtx(t), r.prefix); err != nil || len(objs) != 0 {
				t.Fatalf("objects after a failed Put: %v %v", objs, err)
			}
		})
	}
}

// freezeAfter calls freeze once after reads have passed after bytes.
type freezeAfter struct {
	r      io.Reader
	after  int64
	n      int64
	freeze func()
	once   sync.Once
}

func (f *freezeAfter) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	f.n += int64(n)
	if f.n >= f.after {
		f.once.Do(f.freeze)
	}
	return n, err
}

// Connection resets are retried, as docs/fault-matrix.md says: the SDK alone gives
// up on "read: connection reset by peer" (it failed a v2 PUT and a
// multipart upload at once).
func TestConnectionResetRetried(t *testing.T) {
	t.Parallel()
	m := sharedMinIO(t)
	bucket := m.NewBucket(t)
	target := strings.TrimPrefix(m.Endpoint, "http://")
	for _, tc := range []struct {
		name string
		size int64
	}{{"single-put", 100 << 10}, {"multipart", 12 * mib}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startResetProxy(t, target, 2)
			s := newStore(t, m, bucket, func(c *cos.Config) {
				c.Endpoint = p.URL()
				c.MaxRetries = 3
				c.MinBackoff = 5 * time.Millisecond
				c.MaxBackoff = 20 * time.Millisecond
			})
			key := testenv.Prefix(t) + "/reset.bin"
			n, err := s.PutIfAbsent(testCtx(t), key, randBody(11, tc.size))
			if err != nil || n != tc.size {
				t.Fatalf("Put through %d connection resets: %d, %v", p.resets.Load(), n, err)
			}
			if p.resets.Load() != 2 {
				t.Fatalf("the proxy reset %d connections, want 2", p.resets.Load())
			}
			direct := newStore(t, m, bucket)
			if sum, got := getSum(t, direct, key); got != tc.size || sum != randSum(t, 11, tc.size) {
				t.Fatalf("Get: %d bytes, sha256 %x", got, sum)
			}
			if ups, err := direct.ListUploadsForKey(testCtx(t), key); err != nil || len(ups) != 0 {
				t.Fatalf("uploads left after a retried Put: %+v %v", ups, err)
			}
		})
	}
}

// PutIfAbsent never replaces an object, small or multipart: the second
// write fails with store.ErrExists, leaves the first object as it was, and
// leaves no upload.
func TestPutIfAbsent(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, size := range []int64{1 << 10, 11 * mib} {
		key := fmt.Sprintf("%sobj-%d", r.prefix, size)
		if _, err := r.store.PutIfAbsent(testCtx(t), key, randBody(1, size)); err != nil {
			t.Fatalf("first PutIfAbsent of %d bytes: %v", size, err)
		}
		_, err := r.store.PutIfAbsent(testCtx(t), key, randBody(2, size))
		if !errors.Is(err, store.ErrExists) {
			t.Fatalf("second PutIfAbsent of %d bytes: %v, want ErrExists", size, err)
		}
		if store.IsTransient(err) {
			t.Errorf("IsTransient(%v) = true", err)
		}
		if sum, n := getSum(t, r.store, key); n != size || sum != randSum(t, 1, size) {
			t.Fatalf("the first object was replaced: %d bytes sha256 %x", n, sum)
		}
		if ups, err := r.store.ListUploadsForKey(testCtx(t), key); err != nil || len(ups) != 0 {
			t.Fatalf("uploads left after a refused PutIfAbsent: %+v %v", ups, err)
		}
		// Plain Put still replaces (retention's and tests' own writes).
		if _, err := r.store.Put(testCtx(t), key, randBody(3, 10)); err != nil {
			t.Fatal(err)
		}
	}
}

// An IAM token endpoint whose error echoes the request (API key included)
// must not put the key, or anything shaped like a credential, in an error.
func TestIAMErrorEchoRedacted(t *testing.T) {
	t.Parallel()
	const apiKey = "echoedApiKey-9f8e7d6c5b4a"
	var hits atomic.Int32
	iam := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		// Echo the form body and the Authorization header, JSON-escaped,
		// as a misbehaving proxy or IAM endpoint might.
		fmt.Fprintf(w, `{"context":{"requestBody":%q,"authorization":%q,"note":"apikey=%s"},"errorCode":"BXNIM0415E","errorMessage":"bad request: %s; \"apikey\":\"%s\""}`,
			string(body), r.Header.Get("Authorization"), apiKey, strings.ReplaceAll(string(body), `"`, `'`), apiKey)
	}))
	t.Cleanup(iam.Close)
	s, err := cos.New(cos.Config{
		Endpoint: fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)), Bucket: "b",
		Creds:      cos.Credentials{APIKey: apiKey, ServiceInstanceID: "crn:v1:inst", AuthEndpoint: iam.URL, Source: "test"},
		MaxRetries: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Check(testCtx(t))
	if err == nil {
		t.Fatal("Check with a rejected API key succeeded")
	}
	if hits.Load() == 0 {
		t.Fatal("the IAM endpoint was never asked: the test proves nothing")
	}
	out := fmt.Sprintf("%v|%+v|%#v|%s", err, err, err, err)
	for _, leak := range []string{apiKey, "apikey=" + apiKey[:6], "Basic Yng6Yng"} {
		if strings.Contains(out, leak) {
			t.Fatalf("the error shows %q: %s", leak, out)
		}
	}
	if !strings.Contains(out, "BXNIM0415E") || !strings.Contains(out, cos.Redacted) {
		t.Errorf("the error lost IAM's code or shows no redaction: %s", out)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`grant_type=urn%3Aibm&apikey=abc123XYZ&x=1`:                 `grant_type=urn%3Aibm&apikey=[REDACTED]&x=1`,
		`{"apikey":"abc123XYZ","other":"ok"}`:                       `{"apikey":"[REDACTED]","other":"ok"}`,
		`Authorization: Bearer eyJhbGciOi.abc.def`:                  `Authorization: Bearer [REDACTED]`,
		`"authorization":"Basic Yng6Yng="`:                          `"authorization":"Basic [REDACTED]"`,
		`aws_secret_access_key = wJalrXUtnFEMI/K7MDENG`:             `aws_secret_access_key = [REDACTED]`,
		`key AKIAIOSFODNN7EXAMPLE used`:                             `key [REDACTED] used`,
		`cos: head bucket b: NotFound (the bucket does not exist)`:  `cos: head bucket b: NotFound (the bucket does not exist)`,
		`error fetching token: {"errorCode":"BXNIM0415E"}`:          `error fetching token: {"errorCode":"BXNIM0415E"}`,
		`the COS credentials are wrong`:                             `the COS credentials are wrong`,
		`refresh_token=r1.r2&access_token=a1 password: hunter2 end`: `refresh_token=[REDACTED]&access_token=[REDACTED] password: [REDACTED] end`,
	} {
		if got := cos.Redact(in); got != want {
			t.Errorf("Redact(%q)\n got %q\nwant %q", in, got, want)
		}
	}
}

// A 503 with "Retry-After: 60" (MinIO initializing after a restart; COS
// slowing a client down) is retried after at most MaxBackoff, not after
// the minute it asks for: the SDK adds Retry-After uncapped, and one such
// answer inside an abort window of a minute left a failed backup's
// multipart upload behind with the store already back
// (TestBackupMinIOStoppedMidUpload, on a loaded machine).
func TestRetryAfterCappedAtMaxBackoff(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "60")
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>XMinioServerNotInitialized</Code><Message>Server not initialized yet, please try again.</Message></Error>`)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	s, err := cos.New(cos.Config{
		Endpoint: srv.URL, Region: testenv.MinIORegion, Bucket: "b",
		Creds:      cos.Credentials{AccessKeyID: "id", SecretAccessKey: "secret-value-123"},
		MaxRetries: 3, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(testCtx(t), 20*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.AbortUpload(ctx, store.Upload{Key: "p/x", UploadID: "u1"}); err != nil {
		t.Fatalf("abort after one 503 with Retry-After: %v (after %v)", err, time.Since(start))
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the server saw %d requests, want 2 (one 503, one retry)", n)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the retry came after %v; MaxBackoff is 1s", d)
	}
}
