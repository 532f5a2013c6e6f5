// Package cos is the object store on IBM Cloud Object Storage (S3 API),
// through the IBM COS SDK: a backend of internal/store, with every optional
// capability (Conditional, Multipart, KeyUploadLister, Ranger, Checker,
// Locker, Versioner). Every PutObject and UploadPart carries Content-MD5
// (a locked bucket requires it; see lock.go). Its errors
// follow the store contract: a *store.Error "cos: <op> <key>: <cause>"
// wrapping store.ErrNotFound, ErrExists or ErrStalled as they apply, marked
// transient or permanent; no error or log carries a secret. Its conformance
// test runs internal/testing/storetest against a real MinIO.
package cos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/aws/awserr"
	"github.com/IBM/ibm-cos-sdk-go/aws/client"
	"github.com/IBM/ibm-cos-sdk-go/aws/request"
	"github.com/IBM/ibm-cos-sdk-go/aws/session"
	"github.com/IBM/ibm-cos-sdk-go/aws/signer"
	v4 "github.com/IBM/ibm-cos-sdk-go/aws/signer/v4"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"
	"github.com/IBM/ibm-cos-sdk-go/service/s3/s3manager"

	"github.com/armada/etcd-recovery/internal/fanout"
	"github.com/armada/etcd-recovery/internal/store"
)

// Config configures a Store.
type Config struct {
	Endpoint string // e.g. https://s3.us-south.cloud-object-storage.appdomain.cloud; http:// only for local test servers
	Region   string // e.g. us-south; default us-standard
	Bucket   string
	Creds    Credentials
	CAFile   string // extra CA bundle for the endpoint; system roots are always trusted too

	MaxRetries  int           // per request, for transient errors (5xx, resets, timeouts); default 5
	MinBackoff  time.Duration // default 200ms
	MaxBackoff  time.Duration // default 10s
	PartSize    int64         // multipart part size; default 5 MiB
	Concurrency int           // parts in flight per upload; default 3
	// AbortWindow bounds how long a failed multipart upload keeps being
	// aborted (the store may itself be the thing that failed). Default 30s.
	AbortWindow time.Duration
	// StallTimeout aborts a store call that waits on the store with no
	// byte moving for this long (a frozen or black-holed endpoint): the
	// call fails at once, without retries, with an error wrapping
	// store.ErrStalled ("object store stalled"). It covers every request
	// of a call (all parts of a Put) and the reads of a Get's body, so a
	// restore's download has it too. Default 60s; negative disables.
	StallTimeout time.Duration
	// MinThroughput calls a store call stalled too when, while it waits on
	// the store, fewer than MinThroughput.Bytes move (sent or received) in
	// any MinThroughput.Window of that waiting: a store that trickles a
	// few bytes per interval never trips StallTimeout. The error wraps
	// store.ErrStalled: "object store stalled (throughput … below …)".
	// Zero: DefaultMinThroughput; NoMinThroughput disables.
	MinThroughput Throughput
	// OnStall, when set, is called as a call is aborted for a stall
	// (instrumentation and tests).
	OnStall func(op, key string)
	// WrapTransport, when set, wraps the HTTP transport (instrumentation
	// and tests).
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// DefaultStallTimeout is Config.StallTimeout's default (the store
// package's neutral one).
const DefaultStallTimeout = store.DefaultStallTimeout

// Store implements store.Store on the COS SDK.
type Store struct {
	cfg      Config
	s3       *s3.S3
	uploader *s3manager.Uploader
	// redact removes the credential values from error text. A func, so
	// that formatting a Store never prints them.
	redact func(string) string
	// md5Rehashed counts the upload requests whose Content-MD5 was not
	// hashed while the part was read (partHasher) and was hashed again.
	md5Rehashed atomic.Int64
}

var (
	_ store.Store           = (*Store)(nil)
	_ store.Conditional     = (*Store)(nil)
	_ store.Multipart       = (*Store)(nil)
	_ store.KeyUploadLister = (*Store)(nil)
	_ store.Checker         = (*Store)(nil)
	_ store.Clock           = (*Store)(nil)
	_ store.Ranger          = (*Store)(nil)
	_ store.AfterLister     = (*Store)(nil)
	_ store.Locker          = (*Store)(nil)
	_ store.Versioner       = (*Store)(nil)
)

const (
	defaultPartSize = 5 << 20 // the S3 minimum; 10,000 parts cover 50 GB, past etcd's 8 GB limit even uncompressed
	deleteBatch     = 1000    // the S3 DeleteObjects limit
)

// New builds a Store. It does not contact the endpoint; Check does.
func New(cfg Config) (*Store, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("cos: no endpoint (--cos-endpoint or COS_ENDPOINT; in a store URL, endpoint=)")
	}
	if cfg.Bucket == "" {
		return nil, errors.New("cos: no bucket (--bucket or COS_BUCKET; in a store URL, its host)")
	}
	if !strings.HasPrefix(cfg.Endpoint, "https://") && !strings.HasPrefix(cfg.Endpoint, "http://") {
		cfg.Endpoint = "https://" + cfg.Endpoint
	}
	if cfg.Region == "" {
		cfg.Region = "us-standard"
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 5
	}
	if cfg.MaxRetries < 0 {
		cfg.MaxRetries = 0
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 200 * time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = defaultPartSize
	}
	if cfg.PartSize < s3manager.MinUploadPartSize {
		return nil, fmt.Errorf("cos: part size %d is below the S3 minimum of %d", cfg.PartSize, s3manager.MinUploadPartSize)
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 3
	}
	if cfg.AbortWindow == 0 {
		cfg.AbortWindow = 30 * time.Second
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.MinThroughput == (Throughput{}) {
		cfg.MinThroughput = DefaultMinThroughput
	}
	httpClient, err := newHTTPClient(cfg.CAFile, cfg.StallTimeout)
	if err != nil {
		return nil, err
	}
	// IAM token requests go through the same transport (same CA), with an
	// overall timeout of their own: they are small, and they run outside
	// any store call's watchdog.
	iamClient := &http.Client{Transport: httpClient.Transport, Timeout: iamTimeout(cfg.StallTimeout)}
	creds, err := cfg.Creds.provider(iamClient)
	if err != nil {
		return nil, err
	}
	redact := secretRedactor(cfg.Creds)
	// The SDK holds the secrets from here on. Keep none in the Store itself:
	// its fields are unexported, so fmt's %v of a *Store would print them
	// raw, bypassing Credentials.String.
	cfg.Creds = Credentials{Source: cfg.Creds.Source, ServiceInstanceID: cfg.Creds.ServiceInstanceID, AuthEndpoint: cfg.Creds.AuthEndpoint}
	awsCfg := aws.NewConfig().
		WithEndpoint(cfg.Endpoint).
		WithRegion(cfg.Region).
		WithCredentials(creds).
		WithS3ForcePathStyle(true).
		WithHTTPClient(httpClient)
	awsCfg.Retryer = retryer{client.DefaultRetryer{
		NumMaxRetries:    cfg.MaxRetries,
		MinRetryDelay:    cfg.MinBackoff,
		MaxRetryDelay:    cfg.MaxBackoff,
		MinThrottleDelay: cfg.MinBackoff,
		MaxThrottleDelay: cfg.MaxBackoff,
	}}
	sess, err := newSession(awsCfg)
	if err != nil {
		return nil, fmt.Errorf("cos: session: %w", err)
	}
	if cfg.WrapTransport != nil {
		httpClient.Transport = cfg.WrapTransport(httpClient.Transport)
	}
	// Outermost: the watchdog sees every request of a store call, retries
	// included.
	httpClient.Transport = watchTransport{next: httpClient.Transport}
	svc := s3.New(sess)
	up := s3manager.NewUploaderWithClient(svc, func(u *s3manager.Uploader) {
		u.PartSize = cfg.PartSize
		u.Concurrency = cfg.Concurrency
		// We abort ourselves, with a context that outlives a cancelled run.
		u.LeavePartsOnError = true
		// The SDK's own body hashing (Content-MD5 and a sha256 of every
		// part) is off; setContentMD5 adds the Content-MD5 alone to every
		// PutObject and UploadPart: a bucket with object lock refuses a
		// write without it (rancher/rancher#39986), and a credential
		// that may only write (the CronJob's) cannot ask the bucket
		// whether it is locked, so every write carries it. Its cost is
		// one MD5 pass over each part, made while the uploader reads it
		// into its buffer (partHasher). Over HTTPS, parts are sent as UNSIGNED-PAYLOAD, as
		// AWS's own newer SDKs do: TLS already protects them in transit,
		// so SigV4's sha256 of each part (computed here and again by the
		// server) is a third and fourth pass over the data. The backup's
		// manifest records the stored object's sha256, which restore
		// checks end to end. Over plain HTTP (local test servers) SigV4's
		// payload hash stays: nothing else would catch a damaged part.
		unsigned := strings.HasPrefix(cfg.Endpoint, "https://")
		u.RequestOptions = append(u.RequestOptions, func(r *request.Request) {
			r.Config.S3DisableContentMD5Validation = aws.Bool(true)
			if r.Operation.Name == "PutObject" || r.Operation.Name == "UploadPart" {
				r.Handlers.Build.PushBackNamed(setContentMD5Handler)
			}
			if unsigned && r.Operation.Name == "UploadPart" {
				r.Handlers.Sign.Swap(signer.SignRequestHandler.Name, unsignedPayloadSigner)
			}
		})
	})
	return &Store{cfg: cfg, s3: svc, uploader: up, redact: redact}, nil
}

// iamTimeout bounds one IAM token request.
func iamTimeout(stall time.Duration) time.Duration {
	if stall > 0 && stall < 30*time.Second {
		return stall
	}
	return 30 * time.Second
}

// newSession is session.NewSession, minus one side effect: when
// AWS_CA_BUNDLE is set, the SDK replaces the HTTP transport's root CAs
// with that bundle's, which would drop the system roots and --cos-ca-file
// (and some images set AWS_CA_BUNDLE for other tools). Which CAs the
// endpoint is checked against is this package's choice: it is put back.
func newSession(cfg *aws.Config) (*session.Session, error) {
	tr, ok := cfg.HTTPClient.Transport.(*http.Transport)
	if !ok || tr.TLSClientConfig == nil {
		return session.NewSession(cfg)
	}
	roots := tr.TLSClientConfig.RootCAs
	sess, err := session.NewSession(cfg)
	tr.TLSClientConfig.RootCAs = roots
	return sess, err
}

// unsignedPayloadSigner is the S3 client's own signer (SigV4 without URI
// escaping, or IAM tokens) with UNSIGNED-PAYLOAD for SigV4.
var unsignedPayloadSigner = signer.CustomRequestSignerRouter(func(s *v4.Signer) {
	s.DisableURIPathEscaping = true
	s.UnsignedPayload = true
})

func newHTTPClient(caFile string, stall time.Duration) (*http.Client, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("cos: CA file: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cos: CA file %s: no PEM certificates", caFile)
		}
		tlsCfg.RootCAs = pool
	}
	// The watchdog (StallTimeout) ends a call that waits on a silent
	// store; the response-header timeout is only a backstop for requests
	// outside any call (none today), and never fires first.
	headerTimeout := 60 * time.Second
	if stall > 0 && 2*stall > headerTimeout {
		headerTimeout = 2 * stall
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: headerTimeout,
		ExpectContinueTimeout: time.Second,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		// Parts go out in 256 KiB writes, not net/http's default 4 KiB.
		WriteBufferSize: 256 << 10,
		ReadBufferSize:  64 << 10,
	}
	return &http.Client{Transport: tr}, nil
}

// Backend names this backend in errors ("cos").
func (s *Store) Backend() string { return backend }

// Bucket is the bucket the store writes to.
func (s *Store) Bucket() string { return s.cfg.Bucket }

// Endpoint is the endpoint URL.
func (s *Store) Endpoint() string { return s.cfg.Endpoint }

// Check verifies that the bucket exists and the credentials may use it, so a
// backup fails before it opens a snapshot stream.
func (s *Store) Check(ctx context.Context) error {
	ctx, wd, stop := s.watch(ctx, "head bucket", s.cfg.Bucket)
	defer stop()
	_, err := s.s3.HeadBucketWithContext(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.cfg.Bucket)})
	if err != nil && wd.stalled() == nil && statusCode(err) == http.StatusForbidden {
		// A HEAD answer has no body, so 403 can't tell wrong credentials
		// from a policy denial; a one-key listing says which.
		_, lerr := s.s3.ListObjectsV2WithContext(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(s.cfg.Bucket), MaxKeys: aws.Int64(1)})
		if lerr != nil {
			return s.fail(wd, "list bucket", s.cfg.Bucket, lerr)
		}
	}
	if err != nil {
		return s.fail(wd, "head bucket", s.cfg.Bucket, err)
	}
	return nil
}

// Time implements store.Clock: the Date header of a HeadBucket answer
// (HTTP dates are to the second), op "head bucket". An answer without a
// readable Date header is a permanent error.
func (s *Store) Time(ctx context.Context) (time.Time, error) {
	const op = "head bucket"
	ctx, wd, stop := s.watch(ctx, op, s.cfg.Bucket)
	defer stop()
	req, _ := s.s3.HeadBucketRequest(&s3.HeadBucketInput{Bucket: aws.String(s.cfg.Bucket)})
	req.SetContext(ctx)
	if err := judgedStalled(wd, req.Send()); err != nil {
		return time.Time{}, s.fail(wd, op, s.cfg.Bucket, err)
	}
	date := ""
	if req.HTTPResponse != nil {
		date = req.HTTPResponse.Header.Get("Date")
	}
	t, err := http.ParseTime(date)
	if err != nil {
		return time.Time{}, &Error{Backend: backend, Op: op, Key: s.cfg.Bucket, Err: store.Permanent(fmt.Errorf("the answer's Date header %q is not an HTTP date", date))}
	}
	return t.UTC(), nil
}

// countingReader counts what the uploader consumed.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Put streams r into key (see store.Store).
func (s *Store) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	res, err := s.put(ctx, key, r, store.PutOptions{})
	return res.Size, err
}

// PutIfAbsent is Put that never replaces an object: PutObject and
// CompleteMultipartUpload carry If-None-Match: *, and a key that exists
// fails the call with an error wrapping store.ErrExists (the multipart
// upload is then aborted, as after any failure).
func (s *Store) PutIfAbsent(ctx context.Context, key string, r io.Reader) (int64, error) {
	res, err := s.put(ctx, key, r, store.PutOptions{IfAbsent: true})
	return res.Size, err
}

// PutWith implements store.Locker: Put or PutIfAbsent with a retention
// (x-amz-object-lock-mode and -retain-until-date on PutObject or
// CreateMultipartUpload), returning the version id the bucket gave.
func (s *Store) PutWith(ctx context.Context, key string, r io.Reader, opts store.PutOptions) (store.PutResult, error) {
	if opts.Retention != nil {
		if err := opts.Retention.Check(); err != nil {
			return store.PutResult{}, &Error{Backend: backend, Op: "put", Key: key, Err: err}
		}
	}
	return s.put(ctx, key, r, opts)
}

func setIfNoneMatch(r *request.Request) { r.HTTPRequest.Header.Set("If-None-Match", "*") }

func (s *Store) put(ctx context.Context, key string, r io.Reader, opts store.PutOptions) (store.PutResult, error) {
	ifAbsent := opts.IfAbsent
	wctx, wd, stop := s.watch(ctx, "put", key)
	defer stop()
	cr := &countingReader{r: r}
	ph := newPartHasher(cr, s.cfg.PartSize)
	md5Handler := ph.handler(&s.md5Rehashed)
	// A CreateMultipartUpload that failed or was retried may have created
	// an upload whose id we never learnt (a request that timed out here
	// but that the store still ran once it resumed).
	var createUncertain atomic.Bool
	in := &s3manager.UploadInput{
		Bucket: aws.String(s.cfg.Bucket),
		Key:    aws.String(key),
		Body:   ph,
	}
	if rt := opts.Retention; rt != nil {
		in.ObjectLockMode = aws.String(string(rt.Mode))
		in.ObjectLockRetainUntilDate = aws.Time(rt.Until.UTC())
	}
	out, err := s.uploader.UploadWithContext(wctx, in, func(u *s3manager.Uploader) {
		u.RequestOptions = append(slices.Clone(u.RequestOptions), func(r *request.Request) {
			if r.Operation.Name == "PutObject" || r.Operation.Name == "UploadPart" {
				// The sums hashed while the parts were read.
				if !r.Handlers.Build.Swap(setContentMD5Handler.Name, md5Handler) {
					r.Handlers.Build.PushBackNamed(md5Handler)
				}
			}
			switch r.Operation.Name {
			case "PutObject", "CompleteMultipartUpload":
				if ifAbsent {
					r.Handlers.Build.PushBack(setIfNoneMatch)
				}
			case "CreateMultipartUpload":
				r.Handlers.Complete.PushBack(func(r *request.Request) {
					if r.Error != nil || r.RetryCount > 0 {
						createUncertain.Store(true)
					}
				})
			}
		})
	})
	err = judgedStalled(wd, err)
	if err != nil {
		ferr := s.fail(wd, "put", key, err)
		// One abort window for all the cleanup, on a context that
		// outlives a cancelled run: a failed Put ends within
		// StallTimeout + AbortWindow even if the store stays frozen.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.AbortWindow)
		defer cancel()
		var notes []string
		var mu s3manager.MultiUploadFailure
		if errors.As(err, &mu) && mu.UploadID() != "" {
			if aerr := s.abortRetrying(actx, store.Upload{Key: key, UploadID: mu.UploadID()}); aerr != nil {
				notes = append(notes, fmt.Sprintf("the multipart upload %s could not be aborted: %v; prune removes it after 24h", mu.UploadID(), aerr))
			}
		}
		// Uploads of this exact key that we did not learn the id of (a
		// CreateMultipartUpload that failed or was retried). The key is
		// unique to one backup run (catalog.NewBackupName), so any upload
		// on it is this call's.
		if createUncertain.Load() {
			if cerr := s.abortKeyUploads(actx, key); cerr != nil {
				notes = append(notes, fmt.Sprintf("uploads left on the key could not be listed or aborted: %v; prune removes them after 24h", cerr))
			}
		}
		if len(notes) > 0 {
			return store.PutResult{}, fmt.Errorf("%w (and %s)", ferr, strings.Join(notes, "; "))
		}
		return store.PutResult{}, ferr
	}
	if createUncertain.Load() {
		// The object is complete; any upload still open on its key is a
		// duplicate created by a retried CreateMultipartUpload.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.AbortWindow)
		defer cancel()
		_ = s.abortKeyUploads(actx, key)
	}
	res := store.PutResult{Size: cr.n}
	if out != nil {
		res.VersionID = aws.StringValue(out.VersionID)
	}
	return res, nil
}

// keySettle is how long abortKeyUploads keeps watching a key once the
// store answers: a store that was frozen runs the requests it had received
// (a CreateMultipartUpload this side gave up on) within moments of
// resuming, and the upload it then creates must be aborted too.
var keySettle = 2 * time.Second

// abortKeyUploads aborts every multipart upload open on exactly key,
// listing with the key as the server-side prefix (the only listing MinIO
// answers reliably after a restart). Once the store answers, it keeps
// listing and aborting for keySettle, so an upload that a resumed store
// creates late is caught too. It retries until actx ends (the caller's
// abort window, detached from the maybe cancelled call).
func (s *Store) abortKeyUploads(actx context.Context, key string) error {
	delay := s.cfg.MinBackoff
	var settled time.Time
	for {
		ups, err := s.ListUploadsForKey(actx, key)
		if err == nil {
			if settled.IsZero() {
				settled = time.Now().Add(keySettle)
			}
			for _, u := range ups {
				if aerr := s.abortRetrying(actx, u); aerr != nil {
					err = aerr
				}
			}
			if err == nil && len(ups) == 0 && !time.Now().Before(settled) {
				return nil
			}
		}
		if err != nil && (!store.IsTransient(err) || actx.Err() != nil) {
			return err
		}
		wait := 200 * time.Millisecond
		if err != nil {
			wait = delay
			delay = min(delay*2, s.cfg.MaxBackoff)
		}
		select {
		case <-actx.Done():
			if err != nil {
				return err
			}
			return nil
		case <-time.After(wait):
		}
	}
}

// abortRetrying aborts an upload, retrying transient errors until actx ends.
func (s *Store) abortRetrying(actx context.Context, u store.Upload) error {
	delay := s.cfg.MinBackoff
	for {
		err := s.AbortUpload(actx, u)
		if err == nil {
			return nil
		}
		if !store.IsTransient(err) {
			return err
		}
		select {
		case <-actx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(delay*2, s.cfg.MaxBackoff)
	}
}

// Get opens key for streaming. The body's reads are watched too: a read
// that waits StallTimeout on a silent store fails with store.ErrStalled.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	wctx, wd, stop := s.watch(ctx, "get", key)
	out, err := s.s3.GetObjectWithContext(wctx, &s3.GetObjectInput{
		Bucket: aws.String(s.cfg.Bucket),
		Key:    aws.String(key),
	})
	if err = judgedStalled(wd, err); err != nil {
		stop()
		return nil, s.fail(wd, "get", key, err)
	}
	return &getBody{ReadCloser: out.Body, key: key, s: s, wd: wd, stop: stop}, nil
}

// GetRange implements store.Ranger with a Range header on GetObject
// ("bytes=offset-(offset+length-1)"). A range past the object's end (S3's
// 416 InvalidRange, an empty object included) is an empty body.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	const op = "get range"
	if offset < 0 || length <= 0 {
		return nil, &Error{Backend: backend, Op: op, Key: key, Err: store.Permanent(fmt.Errorf("invalid range: offset %d, length %d", offset, length))}
	}
	wctx, wd, stop := s.watch(ctx, op, key)
	out, err := s.s3.GetObjectWithContext(wctx, &s3.GetObjectInput{
		Bucket: aws.String(s.cfg.Bucket),
		Key:    aws.String(key),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", offset, offset+length-1)),
	})
	if err = judgedStalled(wd, err); err != nil {
		stop()
		if statusCode(err) == http.StatusRequestedRangeNotSatisfiable {
			return io.NopCloser(strings.NewReader("")), nil
		}
		return nil, s.fail(wd, op, key, err)
	}
	return &getBody{ReadCloser: out.Body, key: key, op: op, s: s, wd: wd, stop: stop}, nil
}

// getBody wraps read errors mid-stream the same way as request errors.
type getBody struct {
	io.ReadCloser
	key  string
	op   string // "get" when empty
	s    *Store
	wd   *watchdog
	stop func()
	once sync.Once
}

func (b *getBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		op := b.op
		if op == "" {
			op = "get"
		}
		err = b.s.fail(b.wd, op, b.key, err)
	}
	return n, err
}

func (b *getBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.stop)
	return err
}

// List returns every object under prefix, in key order, or an error: never
// a partial listing.
func (s *Store) List(ctx context.Context, prefix string) ([]store.ObjectInfo, error) {
	return s.ListAfter(ctx, prefix, "")
}

// ListAfter implements store.AfterLister: ListObjectsV2 with StartAfter.
func (s *Store) ListAfter(ctx context.Context, prefix, startAfter string) ([]store.ObjectInfo, error) {
	ctx, wd, stop := s.watch(ctx, "list", prefix)
	defer stop()
	var out []store.ObjectInfo
	in := &s3.ListObjectsV2Input{
		Bucket:  aws.String(s.cfg.Bucket),
		Prefix:  aws.String(prefix),
		MaxKeys: aws.Int64(1000),
	}
	if startAfter != "" {
		in.StartAfter = aws.String(startAfter)
	}
	err := s.s3.ListObjectsV2PagesWithContext(ctx, in, func(page *s3.ListObjectsV2Output, _ bool) bool {
		for _, o := range page.Contents {
			out = append(out, store.ObjectInfo{
				Key:          aws.StringValue(o.Key),
				Size:         aws.Int64Value(o.Size),
				LastModified: aws.TimeValue(o.LastModified),
			})
		}
		return true
	})
	if err = judgedStalled(wd, err); err != nil {
		return nil, s.fail(wd, "list", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete removes keys in batches of up to 1,000 per request, a few batches
// at a time. Failures are collected per key in a *store.DeleteError; the
// other keys are still deleted.
func (s *Store) Delete(ctx context.Context, keys []string) error {
	var (
		mu     sync.Mutex
		failed = map[string]error{}
	)
	batchOf := func(b int) []string { return keys[b*deleteBatch : min((b+1)*deleteBatch, len(keys))] }
	nBatches := (len(keys) + deleteBatch - 1) / deleteBatch
	notStarted := fanout.ForEach(ctx, nBatches, 4, func(ctx context.Context, b int) {
		batch := batchOf(b)
		ids := make([]*s3.ObjectIdentifier, len(batch))
		for i, k := range batch {
			ids[i] = &s3.ObjectIdentifier{Key: aws.String(k)}
		}
		bctx, wd, stop := s.watch(ctx, "delete", batch[0])
		defer stop()
		out, err := s.s3.DeleteObjectsWithContext(bctx, &s3.DeleteObjectsInput{
			Bucket: aws.String(s.cfg.Bucket),
			Delete: &s3.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			for _, k := range batch {
				failed[k] = s.fail(wd, "delete", k, err)
			}
			return
		}
		for _, e := range out.Errors {
			k := aws.StringValue(e.Key)
			failed[k] = s.fail(nil, "delete", k, awserr.New(aws.StringValue(e.Code), aws.StringValue(e.Message), nil))
		}
	})
	// Batches never started (the run was cancelled): not deleted.
	for _, b := range notStarted {
		for _, k := range batchOf(b) {
			failed[k] = s.fail(nil, "delete", k, ctx.Err())
		}
	}
	if len(failed) > 0 {
		return &store.DeleteError{Failed: failed}
	}
	return nil
}

// ListUploads returns the multipart uploads in progress under prefix.
//
// It lists the bucket's uploads without a server-side prefix and filters
// them here: MinIO (the test server, and a possible on-premises target)
// treats the Prefix of ListMultipartUploads as an exact object name and
// returns nothing for a real prefix, which would hide leaked uploads. A
// backup bucket holds few uploads in progress, so the cost is small.
// MinIO may also leave an upload out of the bucket-wide listing after a
// restart: ListUploadsForKey finds those.
func (s *Store) ListUploads(ctx context.Context, prefix string) ([]store.Upload, error) {
	return s.listUploads(ctx, "", prefix)
}

// ListUploadsForKey returns the multipart uploads in progress on exactly
// key, asking the server with the key as the prefix (see
// store.KeyUploadLister).
func (s *Store) ListUploadsForKey(ctx context.Context, key string) ([]store.Upload, error) {
	ups, err := s.listUploads(ctx, key, key)
	if err != nil {
		return nil, err
	}
	out := ups[:0]
	for _, u := range ups {
		if u.Key == key {
			out = append(out, u)
		}
	}
	return out, nil
}

func (s *Store) listUploads(ctx context.Context, serverPrefix, prefix string) ([]store.Upload, error) {
	ctx, wd, stop := s.watch(ctx, "list uploads", prefix)
	defer stop()
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(s.cfg.Bucket)}
	if serverPrefix != "" {
		in.Prefix = aws.String(serverPrefix)
	}
	var out []store.Upload
	err := s.s3.ListMultipartUploadsPagesWithContext(ctx, in, func(page *s3.ListMultipartUploadsOutput, _ bool) bool {
		for _, u := range page.Uploads {
			if !strings.HasPrefix(aws.StringValue(u.Key), prefix) {
				continue
			}
			out = append(out, store.Upload{
				Key:       aws.StringValue(u.Key),
				UploadID:  aws.StringValue(u.UploadId),
				Initiated: aws.TimeValue(u.Initiated),
			})
		}
		return true
	})
	if err = judgedStalled(wd, err); err != nil {
		return nil, s.fail(wd, "list uploads", prefix, err)
	}
	return out, nil
}

// AbortUpload aborts one multipart upload. An upload that no longer exists
// counts as aborted.
func (s *Store) AbortUpload(ctx context.Context, u store.Upload) error {
	ctx, wd, stop := s.watch(ctx, "abort upload", u.Key)
	defer stop()
	_, err := s.s3.AbortMultipartUploadWithContext(ctx, &s3.AbortMultipartUploadInput{
		Bucket:   aws.String(s.cfg.Bucket),
		Key:      aws.String(u.Key),
		UploadId: aws.String(u.UploadID),
	})
	if err != nil && wd.stalled() == nil && errCode(err) == s3.ErrCodeNoSuchUpload {
		return nil
	}
	if err != nil {
		return s.fail(wd, "abort upload", u.Key, err)
	}
	return nil
}

// fail wraps a call's error: a stall (the watchdog fired) as
// store.ErrStalled, a refused conditional create as store.ErrExists,
// anything else as it came; the text is redacted of credentials.
// judgedStalled is err, or the stall error when the call succeeded but its
// watchdog had already fired: a call judged stalled fails even if a late
// answer slipped in (the store thawed as the call was being cancelled), so
// a stall is reported the same way every time.
func judgedStalled(wd *watchdog, err error) error {
	if err != nil {
		return err
	}
	if st := wd.stalled(); st != nil {
		return st
	}
	return nil
}

// fail wraps a call's error as a *store.Error: a stall (the watchdog
// fired) as store.ErrStalled, a refused conditional create as
// store.ErrExists, a missing object as store.ErrNotFound, anything else as
// it came (marked transient or not); the text is redacted of credentials.
func (s *Store) fail(wd *watchdog, op, key string, err error) error {
	if err == nil {
		return nil
	}
	var ce *Error
	if errors.As(err, &ce) {
		return err
	}
	if st := wd.stalled(); st != nil {
		return &Error{Backend: backend, Op: op, Key: key, Err: st}
	}
	if isPreconditionFailed(err) {
		return &Error{Backend: backend, Op: op, Key: key, Err: &existsError{cause: s.cause(err, false)}}
	}
	// Only an object read can miss its object; a 404 from HEAD bucket is
	// a missing bucket.
	notFound := (op == "get" || op == "get range" || op == "get version" || op == "get retention" || op == "put retention") && isMissingKey(err)
	if op == "get version" && statusCode(err) == http.StatusMethodNotAllowed {
		notFound = true // a delete marker
	}
	return &Error{Backend: backend, Op: op, Key: key, Err: s.cause(err, notFound), Hint: hint(err)}
}

// backend names this backend in errors.
const backend = "cos"

// existsError is a conditional create refused by the store.
type existsError struct{ cause *sdkError }

func (e *existsError) Error() string {
	return store.ErrExists.Error() + ": " + e.cause.Error()
}
func (e *existsError) Unwrap() []error { return []error{store.ErrExists, e.cause} }

// Error is a store error: the operation, the key and the cause, as every
// backend reports them (store.Error): "cos: <op> <key>: <cause>".
//
// Its text is redacted: the store's own credential values and anything that
// looks like a credential (an IAM endpoint may echo the request, API key
// included, in its error body) never appear in it.
type Error = store.Error

// sdkError is an SDK (or transport) error as the store reports it: on one
// line, redacted of credentials, classified for the store contract (a
// missing key wraps store.ErrNotFound; Transient says whether to retry),
// and unwrapping to the causes the SDK's awserr.Error hides from the
// errors package (a reset, a cancelled context).
type sdkError struct {
	err       error
	msg       string
	notFound  bool
	transient bool
	origs     []error // the awserr OrigErr chain
}

func (s *Store) cause(err error, notFound bool) *sdkError {
	msg := Redact(describe(err))
	if s.redact != nil {
		msg = s.redact(msg)
	}
	return &sdkError{err: err, msg: msg, notFound: notFound, transient: sdkTransient(err), origs: origErrs(err)}
}

func (e *sdkError) Error() string   { return e.msg }
func (e *sdkError) Transient() bool { return e.transient }
func (e *sdkError) Unwrap() []error {
	out := append([]error{e.err}, e.origs...)
	if e.notFound {
		out = append(out, store.ErrNotFound)
	}
	return out
}

// GoString keeps %#v from printing the unredacted cause.
func (e *sdkError) GoString() string { return strconv.Quote(e.msg) }

// origErrs is the chain of causes inside SDK errors, which have no Unwrap.
func origErrs(err error) []error {
	var out []error
	for depth := 0; err != nil && depth < 16; depth++ {
		var aerr awserr.Error
		if errors.As(err, &aerr) {
			if o := aerr.OrigErr(); o != nil && o != err {
				out = append(out, o)
				err = o
				continue
			}
		}
		err = errors.Unwrap(err)
	}
	return out
}

// isMissingKey reports, for an object read, S3's NoSuchKey or a 404 that
// is not about the bucket: the object does not exist (store.ErrNotFound). A missing bucket
// is the store's problem, not a missing object.
func isMissingKey(err error) bool {
	code := errCode(err)
	switch code {
	case s3.ErrCodeNoSuchKey:
		return true
	case s3.ErrCodeNoSuchBucket:
		return false
	}
	return statusCode(err) == http.StatusNotFound
}

// describe renders an SDK error on one line, without the SDK's multi-line
// "caused by" dumps.
func describe(err error) string {
	var aerr awserr.Error
	if errors.As(err, &aerr) {
		msg := aerr.Code()
		if m := aerr.Message(); m != "" {
			msg += ": " + m
		}
		if orig := aerr.OrigErr(); orig != nil {
			msg += ": " + strings.ReplaceAll(orig.Error(), "\n", " ")
		}
		var rf awserr.RequestFailure
		if errors.As(err, &rf) {
			msg += fmt.Sprintf(" (HTTP %d)", rf.StatusCode())
		}
		return msg
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}

func errCode(err error) string {
	var aerr awserr.Error
	if errors.As(err, &aerr) {
		return aerr.Code()
	}
	return ""
}

func statusCode(err error) int {
	var rf awserr.RequestFailure
	if errors.As(err, &rf) {
		return rf.StatusCode()
	}
	return 0
}

func hint(err error) string {
	switch code, status := errCode(err), statusCode(err); {
	case code == s3.ErrCodeNoSuchBucket || (status == http.StatusNotFound && code == "NotFound"):
		return "the bucket does not exist"
	case code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch":
		return "the COS credentials are wrong"
	case code == "AccessDenied" || status == http.StatusForbidden:
		return "access denied: check the COS credentials and the bucket's policy"
	}
	return misconfiguration(err)
}

// sdkTransient classifies an SDK (or transport) error for the store
// contract: what only this backend can see (a reset or a cut connection
// inside an awserr.Error's OrigErr chain or only in its text, the SDK's
// RequestError for a request that never got an answer), then
// store.IsTransient's rules, which every backend shares. The result is
// sdkError.Transient, which store.IsTransient consults.
func sdkTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, store.ErrExists) {
		return false
	}
	if isMisconfigured(err) {
		return false
	}
	if errors.Is(err, store.ErrStalled) || isReset(err) {
		return true
	}
	if s := statusCode(err); s < 400 {
		var aerr awserr.Error
		if errors.As(err, &aerr) && aerr.Code() == request.ErrCodeRequestError {
			return true
		}
	}
	return store.IsTransient(err)
}

// isPreconditionFailed reports a refused conditional create (HTTP 412),
// looking through the uploader's MultiUploadFailure, whose cause the
// errors package cannot see (awserr.Error has no Unwrap).
func isPreconditionFailed(err error) bool {
	for depth := 0; err != nil && depth < 16; depth++ {
		var rf awserr.RequestFailure
		if errors.As(err, &rf) && rf.StatusCode() == http.StatusPreconditionFailed {
			return true
		}
		var aerr awserr.Error
		if errors.As(err, &aerr) {
			if aerr.Code() == "PreconditionFailed" {
				return true
			}
			if o := aerr.OrigErr(); o != nil && o != err {
				err = o
				continue
			}
		}
		err = errors.Unwrap(err)
	}
	return false
}
