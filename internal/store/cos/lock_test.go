package cos_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/aws/awserr"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"

	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/store/cos"
	"github.com/armada/etcd-recovery/internal/testing/storetest"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// The whole suite on a MinIO bucket created with object lock (so
// versioned): every write, multipart parts included, is accepted (each
// carries Content-MD5), and the lock and version cases run. Expiry: a 2 s
// governance retention, waited out; what a case locks for an hour is then
// removed with the root credential's governance bypass.
func TestConformanceLocked(t *testing.T) {
	t.Parallel()
	m := sharedMinIO(t)
	bucket := m.NewLockedBucket(t)
	storetest.Run(t, func(tb testing.TB) store.Store { return newStore(tb, m, bucket) }, storetest.BigSize(12*mib))
}

// The suite on a versioned bucket without object lock.
func TestConformanceVersioned(t *testing.T) {
	t.Parallel()
	m := sharedMinIO(t)
	bucket := m.NewVersionedBucket(t)
	storetest.Run(t, func(tb testing.TB) store.Store { return newStore(tb, m, bucket) })
}

// LockConfig on a bucket without lock, and on a locked one after a default
// retention is set.
func TestLockConfig(t *testing.T) {
	t.Parallel()
	m := sharedMinIO(t)
	plain := newStore(t, m, m.NewBucket(t))
	if info, err := plain.LockConfig(testCtx(t)); err != nil || info != (store.LockInfo{}) {
		t.Errorf("LockConfig of a bucket without lock: %+v, %v", info, err)
	}
	if on, err := plain.Versioning(testCtx(t)); err != nil || on {
		t.Errorf("Versioning of a plain bucket: %v, %v", on, err)
	}
	bucket := m.NewLockedBucket(t)
	_, err := m.S3(t).PutObjectLockConfiguration(&s3.PutObjectLockConfigurationInput{
		Bucket: aws.String(bucket),
		ObjectLockConfiguration: &s3.ObjectLockConfiguration{
			ObjectLockEnabled: aws.String(s3.ObjectLockEnabledEnabled),
			Rule:              &s3.ObjectLockRule{DefaultRetention: &s3.DefaultRetention{Mode: aws.String("GOVERNANCE"), Days: aws.Int64(3)}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	info, err := newStore(t, m, bucket).LockConfig(testCtx(t))
	if err != nil || info != (store.LockInfo{Enabled: true, DefaultMode: store.LockGovernance, DefaultPeriod: 72 * time.Hour}) {
		t.Errorf("LockConfig of a locked bucket with a default: %+v, %v", info, err)
	}
}

// Every request that sends object bytes (PutObject, UploadPart) carries
// Content-MD5, on any bucket.
func TestContentMD5OnEveryWrite(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		puts    int
		missing []string
	)
	wrap := func(c *cos.Config) {
		c.WrapTransport = func(next http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodPut && !r.URL.Query().Has("retention") {
					mu.Lock()
					puts++
					if r.Header.Get("Content-Md5") == "" {
						missing = append(missing, r.URL.String())
					}
					mu.Unlock()
				}
				return next.RoundTrip(r)
			})
		}
	}
	r := newRig(t, wrap)
	for _, n := range []int64{0, 100, 12 * mib} {
		if _, err := r.store.Put(testCtx(t), r.prefix+"obj", bytes.NewReader(make([]byte, n))); err != nil {
			t.Fatalf("Put %d bytes: %v", n, err)
		}
	}
	if _, err := r.store.PutIfAbsent(testCtx(t), r.prefix+"big", randBody(1, 11*mib)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if puts < 8 || len(missing) > 0 {
		t.Errorf("%d PUT requests, without Content-MD5: %q", puts, missing)
	}
}

// Content-MD5 is checked by the server: over HTTPS, where parts go as
// UNSIGNED-PAYLOAD, a part damaged on its way (one byte flipped under
// TLS, here in the transport) is refused with BadDigest and the Put
// fails. (This MinIO accepts a write to a locked bucket without any
// Content-MD5: it does not enforce the requirement COS and S3 have, so
// TestContentMD5OnEveryWrite is the proof that every write carries one.)
func TestContentMD5Checked(t *testing.T) {
	t.Parallel()
	var once sync.Once
	damage := func(c *cos.Config) {
		c.WrapTransport = func(next http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.URL.Query().Has("partNumber") && r.Body != nil {
					once.Do(func() { r.Body = &flipFirst{ReadCloser: r.Body} })
				}
				return next.RoundTrip(r)
			})
		}
	}
	r := newRigOn(t, testenv.StartMinIOTLS(t), damage)
	_, err := r.store.Put(testCtx(t), r.prefix+"k", randBody(5, 11*mib))
	if err == nil || !strings.Contains(err.Error(), "BadDigest") || store.IsTransient(err) {
		t.Errorf("Put with a damaged part: %v; want a permanent BadDigest", err)
	}
}

// flipFirst flips the first byte read.
type flipFirst struct {
	io.ReadCloser
	done bool
}

func (f *flipFirst) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if n > 0 && !f.done {
		p[0] ^= 0xff
		f.done = true
	}
	return n, err
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The backup CronJob's write-only credential (s3:PutObject, s3:GetObject,
// s3:ListBucket) cannot remove a locked version, even asking for a
// governance bypass, nor shorten its lock, nor delete the key. It can add
// a newer version over it (a lock does not stop new versions), and the
// locked version stays readable by its id.
func TestWriteOnlyCredentialCannotRemoveLocked(t *testing.T) {
	t.Parallel()
	m := sharedMinIO(t)
	bucket := m.NewLockedBucket(t)
	st := newStore(t, m, bucket)
	key := testenv.Prefix(t) + "/manifest.json"
	until := time.Now().Add(time.Hour).Truncate(time.Second)
	res, err := st.PutWith(testCtx(t), key, strings.NewReader("the manifest"), store.PutOptions{IfAbsent: true,
		Retention: &store.Retention{Mode: store.LockGovernance, Until: until}})
	if err != nil {
		t.Fatal(err)
	}
	cli := m.S3With(t, m.RestrictedCredential(t, bucket, testenv.WriteOnlyActions...))
	denied := func(what string, err error) {
		t.Helper()
		var aerr awserr.Error
		if !errors.As(err, &aerr) || aerr.Code() != "AccessDenied" {
			t.Errorf("%s with the write-only credential: %v; want AccessDenied", what, err)
		}
	}
	_, err = cli.DeleteObject(&s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), VersionId: aws.String(res.VersionID), BypassGovernanceRetention: aws.Bool(true)})
	denied("DeleteObject of the version, bypassing governance", err)
	_, err = cli.DeleteObject(&s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), VersionId: aws.String(res.VersionID)})
	denied("DeleteObject of the version", err)
	out, err := cli.DeleteObjects(&s3.DeleteObjectsInput{Bucket: aws.String(bucket), BypassGovernanceRetention: aws.Bool(true),
		Delete: &s3.Delete{Objects: []*s3.ObjectIdentifier{{Key: aws.String(key), VersionId: aws.String(res.VersionID)}}}})
	if err == nil && (len(out.Errors) != 1 || aws.StringValue(out.Errors[0].Code) != "AccessDenied") {
		t.Errorf("DeleteObjects of the version, bypassing governance, with the write-only credential: %v; want AccessDenied", out)
	}
	_, err = cli.DeleteObject(&s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	denied("DeleteObject of the key", err)
	_, err = cli.PutObjectRetention(&s3.PutObjectRetentionInput{Bucket: aws.String(bucket), Key: aws.String(key), VersionId: aws.String(res.VersionID),
		BypassGovernanceRetention: aws.Bool(true), Retention: &s3.ObjectLockRetention{Mode: aws.String("GOVERNANCE"), RetainUntilDate: aws.Time(time.Now().Add(time.Minute))}})
	denied("PutObjectRetention shortening the lock", err)
	// It can write a newer version of the key: the old one stays.
	if _, err := cli.PutObject(&s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("garbage")}); err != nil {
		t.Fatalf("PutObject over the locked key with the write-only credential: %v", err)
	}
	if got := readVersion(t, st, key, res.VersionID); got != "the manifest" {
		t.Errorf("the locked version after an overwrite: %q", got)
	}
	// The store's own delete of the version (root, no bypass) is a
	// classified lock, with its retain-until time.
	err = st.DeleteVersions(testCtx(t), []store.VersionRef{{Key: key, VersionID: res.VersionID}}, store.DeleteOptions{})
	if u, ok := store.LockedUntil(err); !store.IsLocked(err) || !ok || !u.Equal(until) || store.IsTransient(err) {
		t.Errorf("DeleteVersions of the locked version: %v (until %v); want a permanent store.ErrLocked until %v", err, u, until)
	}
	if err := st.DeleteVersions(testCtx(t), []store.VersionRef{{Key: key, VersionID: res.VersionID}}, store.DeleteOptions{BypassGovernance: true}); err != nil {
		t.Errorf("DeleteVersions bypassing governance with the root credential: %v", err)
	}
}

func readVersion(t *testing.T, st *cos.Store, key, id string) string {
	t.Helper()
	rc, err := st.GetVersion(testCtx(t), key, id)
	if err != nil {
		t.Fatalf("GetVersion %s %s: %v", key, id, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
