package cos_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/aws/session"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const mib = 1 << 20

// ---------------------------------------------------------------------------
// Helpers.

// rig is a Store on a fresh bucket of a real MinIO, plus a key prefix unique
// to the test.
type rig struct {
	m      *testenv.MinIO
	bucket string
	store  *cos.Store
	prefix string // ends with "/"
}

// newRig makes a Store on a new bucket of the shared MinIO.
func newRig(tb testing.TB, opts ...func(*cos.Config)) *rig {
	tb.Helper()
	return newRigOn(tb, sharedMinIO(tb), opts...)
}

var (
	sharedReadyMu sync.Mutex
	sharedReady   bool
)

// sharedMinIO is testenv.SharedMinIO, once it serves S3 requests.
func sharedMinIO(tb testing.TB) *testenv.MinIO {
	tb.Helper()
	m := testenv.SharedMinIO(tb)
	sharedReadyMu.Lock()
	defer sharedReadyMu.Unlock()
	if !sharedReady {
		waitInitialized(tb, m)
		sharedReady = true
	}
	return m
}

// startMinIO is testenv.StartMinIO, once the server serves S3 requests.
func startMinIO(tb testing.TB) *testenv.MinIO {
	tb.Helper()
	m := testenv.StartMinIO(tb)
	waitInitialized(tb, m)
	return m
}

// waitInitialized waits until m answers S3 requests. MinIO reports ready on
// /minio/health/ready a moment before its object layer is initialized, and
// meanwhile answers 503 XMinioServerNotInitialized with a Retry-After header
// that the SDK's retryer obeys: the first NewBucket would then sleep a minute.
func waitInitialized(tb testing.TB, m *testenv.MinIO) {
	tb.Helper()
	cfg := m.AWSConfig()
	cfg.MaxRetries = aws.Int(0)
	cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	sess, err := session.NewSession(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	sdk := s3.New(sess)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := sdk.ListBuckets(&s3.ListBucketsInput{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("MinIO %s does not serve S3 requests: %v", m.Endpoint, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newRigOn makes a Store on a new bucket of m.
func newRigOn(tb testing.TB, m *testenv.MinIO, opts ...func(*cos.Config)) *rig {
	tb.Helper()
	bucket := m.NewBucket(tb)
	return &rig{m: m, bucket: bucket, store: newStore(tb, m, bucket, opts...), prefix: testenv.Prefix(tb) + "/"}
}

// storeConfig is the Config of a Store for bucket on m, with its root
// credentials.
func storeConfig(m *testenv.MinIO, bucket string) cos.Config {
	return cos.Config{
		Endpoint: m.Endpoint,
		Region:   m.Region,
		Bucket:   bucket,
		Creds:    cos.Credentials{AccessKeyID: m.AccessKey, SecretAccessKey: m.SecretKey, Source: "test"},
		CAFile:   m.CAFile,
	}
}

func newStore(tb testing.TB, m *testenv.MinIO, bucket string, opts ...func(*cos.Config)) *cos.Store {
	tb.Helper()
	cfg := storeConfig(m, bucket)
	for _, o := range opts {
		o(&cfg)
	}
	s, err := cos.New(cfg)
	if err != nil {
		tb.Fatalf("cos.New: %v", err)
	}
	return s
}

// testCtx is a context for one test, bounded so that a hang fails the test
// instead of the whole binary.
func testCtx(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	tb.Cleanup(cancel)
	return ctx
}

// randBody returns n pseudo-random bytes from seed as a reader that is not
// an io.Seeker (so the uploader has to buffer and cannot learn the size).
func randBody(seed uint64, n int64) io.Reader {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	return io.LimitReader(rand.NewChaCha8(s), n)
}

// randSum is the sha256 of randBody(seed, n).
func randSum(tb testing.TB, seed uint64, n int64) [32]byte {
	tb.Helper()
	h := sha256.New()
	if _, err := io.Copy(h, randBody(seed, n)); err != nil {
		tb.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// getSum reads key through the Store and returns its sha256 and size.
func getSum(tb testing.TB, s *cos.Store, key string) ([32]byte, int64) {
	tb.Helper()
	rc, err := s.Get(testCtx(tb), key)
	if err != nil {
		tb.Fatalf("Get %s: %v", key, err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	if err != nil {
		tb.Fatalf("reading %s: %v", key, err)
	}
	return [32]byte(h.Sum(nil)), n
}

// headETag returns the object's ETag straight from the server.
func headETag(tb testing.TB, r *rig, key string) string {
	tb.Helper()
	out, err := r.m.S3(tb).HeadObject(&s3.HeadObjectInput{Bucket: aws.String(r.bucket), Key: aws.String(key)})
	if err != nil {
		tb.Fatalf("HeadObject %s: %v", key, err)
	}
	return strings.Trim(aws.StringValue(out.ETag), `"`)
}

// assertNoObject checks that key does not exist: Get fails with NoSuchKey
// and List does not return it.
func assertNoObject(tb testing.TB, r *rig, key string) {
	tb.Helper()
	rc, err := r.store.Get(testCtx(tb), key)
	if err == nil {
		rc.Close()
		tb.Fatalf("object %s exists after a failed Put", key)
	}
	if !strings.Contains(err.Error(), "NoSuchKey") {
		tb.Fatalf("Get %s: want NoSuchKey, got %v", key, err)
	}
	objs, err := r.store.List(testCtx(tb), key)
	if err != nil {
		tb.Fatal(err)
	}
	if len(objs) != 0 {
		tb.Fatalf("List(%s) after a failed Put: %+v", key, objs)
	}
}

// assertNoUploads checks that no multipart upload is left under the rig's
// prefix, both through Store.ListUploads and, independently of it, with the
// SDK (MinIO only lists the uploads of an exact key, or of the whole bucket).
// assertAbortedPut checks a Put of key that returned n and err: it failed
// with "cos: put <key>: ..." carrying cause, not transient, its multipart
// upload aborted, and neither the object nor an upload is left.
func assertAbortedPut(tb testing.TB, r *rig, key string, n int64, err error, cause string) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("Put succeeded (%d bytes), want it to fail with %q", n, cause)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "cos: put "+key+": ") || !strings.Contains(msg, cause) {
		tb.Fatalf("error %q: want it to start with %q and carry %q", msg, "cos: put "+key+": ", cause)
	}
	if strings.Contains(msg, "could not be aborted") {
		tb.Fatalf("the upload was not aborted: %v", err)
	}
	if store.IsTransient(err) {
		tb.Errorf("IsTransient(%v) = true for a failed Put", err)
	}
	assertNoObject(tb, r, key)
	assertNoUploads(tb, r, key)
}

func assertNoUploads(tb testing.TB, r *rig, key string) {
	tb.Helper()
	ups, err := r.store.ListUploads(testCtx(tb), r.prefix)
	if err != nil {
		tb.Fatalf("ListUploads: %v", err)
	}
	if len(ups) != 0 {
		tb.Fatalf("multipart uploads left under %s: %+v", r.prefix, ups)
	}
	for _, p := range []string{key, ""} {
		out, err := r.m.S3(tb).ListMultipartUploads(&s3.ListMultipartUploadsInput{Bucket: aws.String(r.bucket), Prefix: aws.String(p)})
		if err != nil {
			tb.Fatalf("SDK ListMultipartUploads: %v", err)
		}
		for _, u := range out.Uploads {
			if strings.HasPrefix(aws.StringValue(u.Key), r.prefix) {
				tb.Fatalf("multipart upload %s of %s left behind (SDK listing with prefix %q)", aws.StringValue(u.UploadId), aws.StringValue(u.Key), p)
			}
		}
	}
}

// failingReader yields the bytes of r up to after, then fails with err.
type failingReader struct {
	r     io.Reader
	after int64
	err   error
	n     int64
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n >= f.after {
		return 0, f.err
	}
	p = p[:min(int64(len(p)), f.after-f.n)]
	n, err := f.r.Read(p)
	f.n += int64(n)
	return n, err
}

// cancelReader cancels a context once it has yielded at least at bytes,
// and keeps yielding data.
type cancelReader struct {
	r      io.Reader
	at     int64
	cancel context.CancelFunc
	n      int64
}

func (c *cancelReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n >= c.at {
		c.cancel()
	}
	return n, err
}

// putMany stores each key with the key itself as content, 32 at a time.
func putMany(tb testing.TB, s *cos.Store, keys []string) {
	tb.Helper()
	ctx := testCtx(tb)
	var (
		wg       sync.WaitGroup
		sem      = make(chan struct{}, 32)
		mu       sync.Mutex
		firstErr error
	)
	for _, k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			n, err := s.Put(ctx, k, strings.NewReader(k))
			if err == nil && n != int64(len(k)) {
				err = fmt.Errorf("Put %s returned %d bytes, want %d", k, n, len(k))
			}
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		tb.Fatalf("putMany: %v", firstErr)
	}
}

// shuffledKeys returns n distinct keys under prefix whose creation order is
// not their key order.
func shuffledKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		h := sha256.Sum256(fmt.Appendf(nil, "%s%d", prefix, i))
		// A mix of '-' and '/' separators checks that List sorts bytewise.
		sep := "-"
		if i%3 == 0 {
			sep = "/"
		}
		keys[i] = fmt.Sprintf("%s%x%s%05d", prefix, h[:3], sep, i)
	}
	return keys
}

// ---------------------------------------------------------------------------
// Put / Get.

func TestPutGetMultipart(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := testCtx(t)
	const size = 12*mib + 12345 // three parts of the default 5 MiB, the last one short
	key := r.prefix + "big.bin"

	n, err := r.store.Put(ctx, key, randBody(1, size))
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if n != size {
		t.Fatalf("Put returned %d bytes, want %d", n, size)
	}
	// A multipart object's ETag is "<md5 of part md5s>-<parts>".
	if etag := headETag(t, r, key); !strings.HasSuffix(etag, "-3") {
		t.Fatalf("ETag %q: want a 3-part multipart upload (default part size 5 MiB)", etag)
	}
	sum, got := getSum(t, r.store, key)
	if got != size || sum != randSum(t, 1, size) {
		t.Fatalf("Get returned %d bytes with sha256 %x; want %d bytes with sha256 %x", got, sum, int64(size), randSum(t, 1, size))
	}
	objs, err := r.store.List(ctx, r.prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Key != key || objs[0].Size != size || objs[0].LastModified.IsZero() {
		t.Fatalf("List: %+v", objs)
	}
	assertNoUploads(t, r, key)
}

// payloadRecorder records the x-amz-content-sha256 of every part upload.
type payloadRecorder struct {
	mu    sync.Mutex
	parts []string
	next  http.RoundTripper
}

func (p *payloadRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && r.URL.Query().Get("partNumber") != "" {
		p.mu.Lock()
		p.parts = append(p.parts, r.Header.Get("X-Amz-Content-Sha256"))
		p.mu.Unlock()
	}
	return p.next.RoundTrip(r)
}

// Over HTTPS parts go as UNSIGNED-PAYLOAD (TLS protects them); over plain
// HTTP each part's sha256 is signed, and the server checks it.
func TestPartPayloadSigning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		minio    func(testing.TB) *testenv.MinIO
		unsigned bool
	}{{"https", testenv.StartMinIOTLS, true}, {"http", sharedMinIO, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &payloadRecorder{}
			r := newRigOn(t, tc.minio(t), func(c *cos.Config) {
				c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec }
			})
			const size = 11 * mib
			key := r.prefix + "parts.bin"
			if _, err := r.store.Put(testCtx(t), key, randBody(3, size)); err != nil {
				t.Fatalf("Put: %v", err)
			}
			if sum, got := getSum(t, r.store, key); got != size || sum != randSum(t, 3, size) {
				t.Fatalf("Get returned %d bytes, sha256 %x", got, sum)
			}
			if len(rec.parts) != 3 {
				t.Fatalf("%d part uploads recorded, want 3", len(rec.parts))
			}
			for _, h := range rec.parts {
				if (h == "UNSIGNED-PAYLOAD") != tc.unsigned || h == "" {
					t.Fatalf("part sent with x-amz-content-sha256 %q over %s", h, tc.name)
				}
			}
		})
	}
}

// AWS_CA_BUNDLE, set on some images for other tools, must not replace the
// CAs the store trusts (system roots plus CAFile).
func TestAWSCABundleDoesNotReplaceCAFile(t *testing.T) {
	other := testenv.NewPKI(t) // a CA that did not sign MinIO's certificate
	t.Setenv("AWS_CA_BUNDLE", other.CAFile)
	r := newRigOn(t, testenv.StartMinIOTLS(t))
	if _, err := r.store.Put(testCtx(t), r.prefix+"x", strings.NewReader("x")); err != nil {
		t.Fatalf("Put over TLS with AWS_CA_BUNDLE set elsewhere: %v", err)
	}
}

func TestPutGetSmall(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := testCtx(t)
	for _, size := range []int64{0, 1, 64 << 10, 5*mib - 1} { // below the part size: one PutObject
		key := fmt.Sprintf("%ssmall-%d", r.prefix, size)
		n, err := r.store.Put(ctx, key, randBody(uint64(size), size))
		if err != nil {
			t.Fatalf("Put %d bytes: %v", size, err)
		}
		if n != size {
			t.Fatalf("Put returned %d bytes, want %d", n, size)
		}
		if etag := headETag(t, r, key); strings.Contains(etag, "-") {
			t.Fatalf("%d bytes: ETag %q is a multipart one; want a single PUT", size, etag)
		}
		sum, got := getSum(t, r.store, key)
		if got != size || sum != randSum(t, uint64(size), size) {
			t.Fatalf("%d bytes: Get returned %d bytes, sha256 %x", size, got, sum)
		}
	}
	// Put overwrites.
	key := r.prefix + "small-1"
	if _, err := r.store.Put(ctx, key, strings.NewReader("second")); err != nil {
		t.Fatal(err)
	}
	rc, err := r.store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "second" {
		t.Fatalf("after overwrite: %q, %v", b, err)
	}
}

func TestPutReaderErrorAborts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		after int64
	}{
		{"at-start", 0},
		{"first-part", 1 * mib},      // before the multipart upload exists
		{"third-part", 12*mib + 345}, // after it was created and part 1 sent
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			key := r.prefix + "failing.bin"
			boom := errors.New("snapshot stream broke")
			body := &failingReader{r: randBody(2, 20*mib), after: tc.after, err: boom}
			n, err := r.store.Put(testCtx(t), key, body)
			assertAbortedPut(t, r, key, n, err, boom.Error())
			if n != 0 {
				t.Errorf("failed Put returned %d bytes", n)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q", err)
			}
		})
	}
}

func TestPutCancelledAborts(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	key := r.prefix + "cancelled.bin"
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	// The multipart upload is created once the first 5 MiB part is read;
	// cancel in the middle of the second part.
	body := &cancelReader{r: randBody(3, 40*mib), at: 12 * mib, cancel: cancel}
	n, err := r.store.Put(ctx, key, body)
	if ctx.Err() == nil {
		t.Fatal("the context was not cancelled: the test is broken")
	}
	assertAbortedPut(t, r, key, n, err, "cancel")
}

// ---------------------------------------------------------------------------
// List / Delete.

func TestList(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := testCtx(t)
	in := r.prefix + "in/"
	keys := shuffledKeys(in, 2500) // 3 pages of 1,000
	outside := []string{
		// (Not r.prefix+"in": MinIO cannot list "in/..." once an object
		// named "in" exists.)
		r.prefix + "in-",    // a sibling sharing the first bytes
		r.prefix + "inx/a",  // another one
		r.prefix + "a",      // before it
		r.prefix + "z/in/b", // after it
		strings.TrimSuffix(r.prefix, "/") + "x/in/c", // another test's prefix
	}
	putMany(t, r.store, append(slices.Clone(keys), outside...))

	objs, err := r.store.List(ctx, in)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	want := slices.Sorted(slices.Values(keys))
	got := make([]string, len(objs))
	for i, o := range objs {
		got[i] = o.Key
		if o.Size != int64(len(o.Key)) || o.LastModified.IsZero() {
			t.Fatalf("List entry %+v: want size %d and a modification time", o, len(o.Key))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("List(%s) returned %d keys, want %d sorted keys; first differences: %v", in, len(got), len(want), firstDiff(got, want))
	}

	all, err := r.store.List(ctx, r.prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(keys)+len(outside)-1 { // all but the other prefix
		t.Fatalf("List(%s): %d objects, want %d", r.prefix, len(all), len(keys)+len(outside)-1)
	}
	if !slices.IsSortedFunc(all, func(a, b store.ObjectInfo) int { return strings.Compare(a.Key, b.Key) }) {
		t.Fatal("List is not sorted by key")
	}

	none, err := r.store.List(ctx, r.prefix+"nothing/")
	if err != nil || len(none) != 0 {
		t.Fatalf("List of an empty prefix: %v, %v", none, err)
	}
}

func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("at %d: got %q, want %q", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(got), len(want))
}

func TestDelete(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := testCtx(t)
	keys := shuffledKeys(r.prefix+"del/", 2500) // 3 batches of at most 1,000
	keep := []string{r.prefix + "keep", r.prefix + "del"}
	putMany(t, r.store, append(slices.Clone(keys), keep...))

	// Deleting keys that do not exist, mixed with ones that do, is not an error.
	doomed := slices.Clone(keys)
	for i := range 50 {
		doomed = append(doomed, fmt.Sprintf("%sdel/missing-%d", r.prefix, i))
	}
	rand.Shuffle(len(doomed), func(i, j int) { doomed[i], doomed[j] = doomed[j], doomed[i] })
	if err := r.store.Delete(ctx, doomed); err != nil {
		t.Fatalf("Delete of %d keys: %v", len(doomed), err)
	}
	left, err := r.store.List(ctx, r.prefix)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range left {
		got = append(got, o.Key)
	}
	if !slices.Equal(got, slices.Sorted(slices.Values(keep))) {
		t.Fatalf("after Delete: %d objects left (%.5v...), want only %v", len(got), got, keep)
	}

	// Only missing keys; the same keys again; nothing at all.
	if err := r.store.Delete(ctx, []string{r.prefix + "never-was"}); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	if err := r.store.Delete(ctx, keys); err != nil {
		t.Fatalf("second Delete of the same keys: %v", err)
	}
	if err := r.store.Delete(ctx, nil); err != nil {
		t.Fatalf("Delete(nil): %v", err)
	}
}

// ---------------------------------------------------------------------------
// Multipart uploads.

func TestUploads(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := testCtx(t)
	sdk := r.m.S3(t)
	create := func(key string) string {
		t.Helper()
		out, err := sdk.CreateMultipartUpload(&s3.CreateMultipartUploadInput{Bucket: aws.String(r.bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("CreateMultipartUpload %s: %v", key, err)
		}
		if _, err := sdk.UploadPart(&s3.UploadPartInput{
			Bucket: aws.String(r.bucket), Key: aws.String(key), UploadId: out.UploadId,
			PartNumber: aws.Int64(1), Body: bytes.NewReader(bytes.Repeat([]byte("p"), 64<<10)),
		}); err != nil {
			t.Fatalf("UploadPart %s: %v", key, err)
		}
		return aws.StringValue(out.UploadId)
	}
	before := time.Now().Add(-time.Minute)
	key := r.prefix + "a/snapshot.db"
	id := create(key)
	otherKey := r.prefix + "b/snapshot.db"
	otherID := create(otherKey)
	after := time.Now().Add(time.Minute)

	// By the directory prefix, not only the exact key.
	ups, err := r.store.ListUploads(ctx, r.prefix+"a/")
	if err != nil {
		t.Fatalf("ListUploads: %v", err)
	}
	if len(ups) != 1 || ups[0].Key != key || ups[0].UploadID != id {
		t.Fatalf("ListUploads(%sa/) = %+v, want the one upload %s of %s", r.prefix, ups, id, key)
	}
	if in := ups[0].Initiated; in.Before(before) || in.After(after) {
		t.Fatalf("Initiated = %v, want about now", in)
	}
	ups, err = r.store.ListUploads(ctx, r.prefix)
	if err != nil || len(ups) != 2 {
		t.Fatalf("ListUploads(%s) = %+v, %v: want both uploads", r.prefix, ups, err)
	}

	if err := r.store.AbortUpload(ctx, store.Upload{Key: key, UploadID: id}); err != nil {
		t.Fatalf("AbortUpload: %v", err)
	}
	ups, err = r.store.ListUploads(ctx, r.prefix)
	if err != nil || len(ups) != 1 || ups[0].UploadID != otherID {
		t.Fatalf("after AbortUpload, ListUploads = %+v, %v: want only %s", ups, err, otherID)
	}
	if _, err := sdk.ListParts(&s3.ListPartsInput{Bucket: aws.String(r.bucket), Key: aws.String(key), UploadId: aws.String(id)}); err == nil {
		t.Fatal("ListParts of an aborted upload succeeded")
	}

	// An upload that no longer exists, or never did, counts as aborted.
	for _, u := range []store.Upload{
		{Key: key, UploadID: id},
		{Key: r.prefix + "c/none", UploadID: "Z2FyYmFnZS5nYXJiYWdl"},
	} {
		if err := r.store.AbortUpload(ctx, u); err != nil {
			t.Fatalf("AbortUpload of unknown upload %+v: %v", u, err)
		}
	}
	if err := r.store.AbortUpload(ctx, store.Upload{Key: otherKey, UploadID: otherID}); err != nil {
		t.Fatal(err)
	}
	assertNoUploads(t, r, key)
}

// ---------------------------------------------------------------------------
// Errors.

func TestWrongCredentials(t *testing.T) {
	t.Parallel()
	m := sharedMinIO(t)
	bucket := m.NewBucket(t)
	secret := "wrongSecret" + strings.Repeat("Q", 20)
	for _, tc := range []struct {
		name  string
		creds cos.Credentials
		leak  []string
	}{
		{"wrong-secret", cos.Credentials{AccessKeyID: m.AccessKey, SecretAccessKey: secret}, []string{secret, m.SecretKey}},
		{"unknown-key", cos.Credentials{AccessKeyID: "unknownKey1234", SecretAccessKey: secret}, []string{secret, m.SecretKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, m, bucket, func(c *cos.Config) { c.Creds = tc.creds })
			ctx := testCtx(t)
			key := testenv.Prefix(t) + "/obj"
			_, putErr := s.Put(ctx, key, strings.NewReader("x"))
			_, getErr := s.Get(ctx, key)
			_, listErr := s.List(ctx, key)
			for op, err := range map[string]error{
				"head bucket " + bucket: s.Check(ctx),
				"put " + key:            putErr,
				"get " + key:            getErr,
				"list " + key:           listErr,
			} {
				if err == nil {
					t.Fatalf("%s with wrong credentials succeeded", op)
				}
				msg := fmt.Sprintf("%v %+v %#v %s", err, err, err, err)
				wantPrefix := "cos: " + op + ": "
				if strings.HasPrefix(op, "head bucket") {
					// Check tells wrong credentials from a policy denial with a listing.
					wantPrefix = "cos: "
				}
				if !strings.HasPrefix(err.Error(), wantPrefix) || !strings.Contains(err.Error(), "credentials are wrong") {
					t.Errorf("%s: error %q: want \"cos: %s: ...\" with the hint that the credentials are wrong", op, err, op)
				}
				for _, l := range tc.leak {
					if strings.Contains(msg, l) {
						t.Errorf("%s: error leaks a secret key: %s", op, msg)
					}
				}
				if store.IsTransient(err) {
					t.Errorf("%s: IsTransient(%v) = true", op, err)
				}
			}
			if s := fmt.Sprintf("%v %+v %#v", s, s, s); strings.Contains(s, secret) {
				t.Errorf("formatting the Store leaks the secret: %s", s)
			}
		})
	}
}

func TestMissingBucket(t *testing.T) {
	t.Parallel()
	m := sharedMinIO(t)
	s := newStore(t, m, fmt.Sprintf("testenv-missing-%016x", rand.Uint64()))
	ctx := testCtx(t)
	err := s.Check(ctx)
	if err == nil {
		t.Fatal("Check of a missing bucket succeeded")
	}
	if !strings.HasPrefix(err.Error(), "cos: head bucket ") || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Check: %v: want \"cos: head bucket ...\" saying the bucket does not exist", err)
	}
	if store.IsTransient(err) {
		t.Fatalf("IsTransient(%v) = true", err)
	}
	_, err = s.Put(ctx, "k", strings.NewReader("x"))
	if err == nil || !strings.Contains(err.Error(), "does not exist") || store.IsTransient(err) {
		t.Fatalf("Put into a missing bucket: %v", err)
	}
	_, err = s.List(ctx, "")
	if err == nil || !strings.Contains(err.Error(), "NoSuchBucket") || store.IsTransient(err) {
		t.Fatalf("List of a missing bucket: %v", err)
	}
}

func TestGetMissingKey(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	key := r.prefix + "missing"
	rc, err := r.store.Get(testCtx(t), key)
	if err == nil {
		rc.Close()
		t.Fatal("Get of a missing key succeeded")
	}
	if !strings.HasPrefix(err.Error(), "cos: get "+key+": ") || !strings.Contains(err.Error(), "NoSuchKey") {
		t.Fatalf("Get: %v: want \"cos: get %s: ...NoSuchKey...\"", err, key)
	}
	var ce *cos.Error
	if !errors.As(err, &ce) || ce.Op != "get" || ce.Key != key {
		t.Fatalf("Get error %#v is not a *cos.Error for get %s", err, key)
	}
	if store.IsTransient(err) {
		t.Fatalf("IsTransient(%v) = true", err)
	}
	if err := r.store.Check(testCtx(t)); err != nil {
		t.Fatalf("Check of an existing bucket: %v", err)
	}
}

func TestConnectionRefusedIsTransient(t *testing.T) {
	t.Parallel()
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)) // nothing listens there
	for _, retries := range []int{-1, 2} {
		t.Run(fmt.Sprint("retries", retries), func(t *testing.T) {
			t.Parallel()
			s, err := cos.New(cos.Config{
				Endpoint:   endpoint,
				Region:     testenv.MinIORegion,
				Bucket:     "bucket",
				Creds:      cos.Credentials{AccessKeyID: "id", SecretAccessKey: "secret-value-123"},
				MaxRetries: retries,
				MinBackoff: 10 * time.Millisecond,
				MaxBackoff: 20 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = s.Check(testCtx(t))
			if err == nil {
				t.Fatal("Check against a closed port succeeded")
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Check took %v", d)
			}
			if !strings.HasPrefix(err.Error(), "cos: head bucket bucket: ") || !strings.Contains(err.Error(), "connection refused") {
				t.Errorf("Check: %v", err)
			}
			if !store.IsTransient(err) {
				t.Errorf("IsTransient(%v) = false for a refused connection", err)
			}
			_, err = s.List(testCtx(t), "p/")
			if err == nil || !store.IsTransient(err) {
				t.Errorf("List against a closed port: %v, transient %v", err, store.IsTransient(err))
			}
		})
	}
	if store.IsTransient(nil) || store.IsTransient(context.Canceled) {
		t.Error("IsTransient(nil or context.Canceled) = true")
	}
}

// ---------------------------------------------------------------------------
// Stalls and retries.

// A server that stalls (SIGSTOP) for a second while a Put is in flight: the
// request waits on the socket (no timeout fires that early) and succeeds once
// the server resumes.
func TestPutSurvivesFrozenServer(t *testing.T) {
	t.Parallel()
	m := startMinIO(t)
	r := newRigOn(t, m)
	key := r.prefix + "frozen.bin"
	const size = 256 << 10

	m.Freeze()
	t.Cleanup(m.Thaw)
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := r.store.Put(testCtx(t), key, randBody(4, size))
		done <- result{n, err}
	}()
	select {
	case res := <-done:
		t.Fatalf("Put returned while the server was frozen: %d, %v", res.n, res.err)
	case <-time.After(time.Second):
	}
	m.Thaw()
	select {
	case res := <-done:
		if res.err != nil || res.n != size {
			t.Fatalf("Put after the server resumed: %d, %v", res.n, res.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Put did not finish within 60s of the server resuming")
	}
	if sum, n := getSum(t, r.store, key); n != size || sum != randSum(t, 4, size) {
		t.Fatalf("Get: %d bytes, sha256 %x", n, sum)
	}
}

// flakyProxy forwards TCP connections to a real server, except the first
// fail ones (all when fail < 0): it reads their whole HTTP request, then
// closes them without answering, as a load balancer dropping a backend does.
type flakyProxy struct {
	ln      net.Listener
	target  string
	fail    int
	reset   bool // fail with an RST (a reset) instead of a FIN (a drop)
	accepts atomic.Int64
	resets  atomic.Int64
	wg      sync.WaitGroup
}

// startFlakyProxy drops the first fail connections (all when fail < 0)
// after reading their request: the server seems to close the connection.
func startFlakyProxy(tb testing.TB, target string, fail int) *flakyProxy {
	tb.Helper()
	return startProxy(tb, target, fail, false)
}

// startResetProxy resets the first fail connections after reading their
// whole request: "connection reset by peer", which the COS SDK alone does
// not retry.
func startResetProxy(tb testing.TB, target string, fail int) *flakyProxy {
	tb.Helper()
	return startProxy(tb, target, fail, true)
}

func startProxy(tb testing.TB, target string, fail int, reset bool) *flakyProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &flakyProxy{ln: ln, target: target, fail: fail, reset: reset}
	p.wg.Go(p.serve)
	tb.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *flakyProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *flakyProxy) serve() {
	var conns sync.WaitGroup
	defer conns.Wait()
	var mu sync.Mutex
	var open []net.Conn
	defer func() {
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		mu.Lock()
		open = append(open, c)
		mu.Unlock()
		n := p.accepts.Add(1)
		conns.Go(func() {
			defer c.Close()
			if p.fail < 0 || n <= int64(p.fail) {
				// Consume the request so that closing sends FIN, not RST,
				// unless a reset is wanted (SO_LINGER 0 sends RST).
				if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					_, _ = io.Copy(io.Discard, req.Body)
				}
				if p.reset {
					_ = c.(*net.TCPConn).SetLinger(0)
					p.resets.Add(1)
				}
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, up)
			mu.Unlock()
			defer up.Close()
			go func() { _, _ = io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
			_, _ = io.Copy(c, up)
		})
	}
}

// Connections dropped by the network are retried, with the configured number
// of retries, and a Put behind them still stores the right bytes.
func TestRetriesDroppedConnections(t *testing.T) {
	t.Parallel()
	m := sharedMinIO(t)
	bucket := m.NewBucket(t)
	target := strings.TrimPrefix(m.Endpoint, "http://")
	fast := func(retries int) func(*cos.Config) {
		return func(c *cos.Config) {
			c.MaxRetries = retries
			c.MinBackoff = 5 * time.Millisecond
			c.MaxBackoff = 20 * time.Millisecond
		}
	}

	t.Run("recovers", func(t *testing.T) {
		t.Parallel()
		p := startFlakyProxy(t, target, 2)
		s := newStore(t, m, bucket, fast(3), func(c *cos.Config) { c.Endpoint = p.URL() })
		key := testenv.Prefix(t) + "/retried.bin"
		const size = 100 << 10
		n, err := s.Put(testCtx(t), key, randBody(5, size))
		if err != nil || n != size {
			t.Fatalf("Put through 2 dropped connections: %d, %v", n, err)
		}
		if a := p.accepts.Load(); a < 3 {
			t.Fatalf("the proxy saw %d connections: want 2 dropped and 1 forwarded", a)
		}
		direct := newStore(t, m, bucket)
		if sum, got := getSum(t, direct, key); got != size || sum != randSum(t, 5, size) {
			t.Fatalf("Get: %d bytes, sha256 %x", got, sum)
		}
	})

	t.Run("gives-up", func(t *testing.T) {
		t.Parallel()
		p := startFlakyProxy(t, target, -1)
		const retries = 2
		s := newStore(t, m, bucket, fast(retries), func(c *cos.Config) { c.Endpoint = p.URL() })
		key := testenv.Prefix(t) + "/never.bin"
		_, err := s.Put(testCtx(t), key, strings.NewReader("x"))
		if err == nil {
			t.Fatal("Put through a proxy dropping every connection succeeded")
		}
		if !strings.HasPrefix(err.Error(), "cos: put "+key+": ") || !store.IsTransient(err) {
			t.Fatalf("Put: %v (transient %v): want a transient \"cos: put %s: ...\" error", err, store.IsTransient(err), key)
		}
		if a := p.accepts.Load(); a < retries+1 || a > 2*(retries+1) {
			t.Fatalf("the proxy saw %d connections: want %d attempts", a, retries+1)
		}
	})
}

// ---------------------------------------------------------------------------
// Secrets in formatted values.

func TestStoreFormatHasNoSecret(t *testing.T) {
	t.Parallel()
	const secret, apiKey = "hmacSecretValue-7b1f", "iamApiKeyValue-3c9d"
	for _, creds := range []cos.Credentials{
		{AccessKeyID: "AKID", SecretAccessKey: secret, Source: "test"},
		{APIKey: apiKey, ServiceInstanceID: "crn:v1:instance", AuthEndpoint: "http://127.0.0.1:1/token", Source: "test"},
	} {
		cfg := cos.Config{Endpoint: "https://s3.example.invalid", Bucket: "b", Creds: creds}
		s, err := cos.New(cfg)
		if err != nil {
			t.Fatalf("New with %s: %v", creds, err)
		}
		for what, v := range map[string]any{"Store": s, "Config": cfg, "*Config": &cfg} {
			out := fmt.Sprintf("%v %+v %#v %s", v, v, v, v)
			if strings.Contains(out, secret) || strings.Contains(out, apiKey) {
				t.Errorf("formatting a %s shows a secret: %s", what, out)
			}
		}
		if s.Bucket() != "b" || s.Endpoint() != "https://s3.example.invalid" {
			t.Errorf("Bucket, Endpoint = %q, %q", s.Bucket(), s.Endpoint())
		}
	}
}
