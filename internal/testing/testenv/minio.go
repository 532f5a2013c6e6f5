package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/aws/awserr"
	"github.com/IBM/ibm-cos-sdk-go/aws/credentials"
	"github.com/IBM/ibm-cos-sdk-go/aws/session"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"
)

// MinIORegion is the region of every MinIO server started here.
const MinIORegion = "us-east-1"

// MinIO is a MinIO server on loopback with its own data dir and random root
// credentials (passed by environment, never on the command line).
type MinIO struct {
	Endpoint  string // http://127.0.0.1:port
	AccessKey string
	SecretKey string
	Region    string
	DataDir   string
	LogFile   string

	bin         string
	port        int
	consolePort int
	certsDir    string
	shared      bool

	// CAFile is the CA of the server's certificate when it serves TLS
	// (StartMinIOTLS); empty for plain HTTP.
	CAFile string
	caPool *x509.CertPool

	procSlot
}

// StartMinIO starts a dedicated MinIO server for tb's test and waits until it
// is ready. It is killed, and on failure its log tail printed, when the test
// ends.
func StartMinIO(tb testing.TB) *MinIO {
	tb.Helper()
	bin := MinIOBin(tb)
	m := newMinIO(bin, tb.TempDir(), freePort(tb, "127.0.0.1"), freePort(tb, "127.0.0.1"))
	startMinIO(tb, m)
	return m
}

// StartMinIOTLS is StartMinIO serving HTTPS, as COS does, with a
// certificate for 127.0.0.1 from a throwaway CA (CAFile).
func StartMinIOTLS(tb testing.TB) *MinIO {
	tb.Helper()
	bin := MinIOBin(tb)
	m := newMinIO(bin, tb.TempDir(), freePort(tb, "127.0.0.1"), freePort(tb, "127.0.0.1"))
	pki := NewPKI(tb)
	if err := os.MkdirAll(m.certsDir, 0o700); err != nil {
		tb.Fatal(err)
	}
	for from, to := range map[string]string{pki.ServerCertFile: "public.crt", pki.ServerKeyFile: "private.key"} {
		b, err := os.ReadFile(from)
		if err == nil {
			err = os.WriteFile(filepath.Join(m.certsDir, to), b, 0o600)
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	m.Endpoint = "https://127.0.0.1:" + strconv.Itoa(m.port)
	m.CAFile, m.caPool = pki.CAFile, pki.CAPool()
	startMinIO(tb, m)
	return m
}

func startMinIO(tb testing.TB, m *MinIO) {
	tb.Helper()
	tb.Cleanup(func() {
		m.close()
		if tb.Failed() {
			logTail(tb, "minio "+m.Endpoint, m.LogFile)
		}
	})
	if err := m.start(); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
}

// session makes an SDK session that trusts the server's CA: the SDK would
// replace it with AWS_CA_BUNDLE's when that is set in the environment.
func (m *MinIO) session(cfg *aws.Config) (*session.Session, error) {
	sess, err := session.NewSession(cfg)
	if tr, ok := cfg.HTTPClient.Transport.(*http.Transport); ok && m.caPool != nil {
		tr.TLSClientConfig.RootCAs = m.caPool
	}
	return sess, err
}

// httpClient is a client that trusts the server's CA when it has one.
func (m *MinIO) httpClient(timeout time.Duration) *http.Client {
	if m.caPool == nil {
		return &http.Client{Timeout: timeout}
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: m.caPool, MinVersion: tls.VersionTLS12}}}
}

func newMinIO(bin, dir string, port, consolePort int) *MinIO {
	return &MinIO{
		Endpoint:    "http://127.0.0.1:" + strconv.Itoa(port),
		AccessKey:   "testenv" + randAlnum(13),
		SecretKey:   randAlnum(40),
		Region:      MinIORegion,
		DataDir:     filepath.Join(dir, "data"),
		LogFile:     filepath.Join(dir, "minio.log"),
		bin:         bin,
		port:        port,
		consolePort: consolePort,
		certsDir:    filepath.Join(dir, "certs"),
	}
}

func (m *MinIO) start() error {
	args := []string{
		"server", m.DataDir,
		"--address", "127.0.0.1:" + strconv.Itoa(m.port),
		"--console-address", "127.0.0.1:" + strconv.Itoa(m.consolePort),
		"--certs-dir", m.certsDir, // not ~/.minio/certs
		"--quiet",
	}
	env := childEnv(
		"MINIO_ROOT_USER="+m.AccessKey,
		"MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_REGION="+MinIORegion,
		"MINIO_UPDATE=off",
		"MINIO_CI_CD=on", // data under /tmp may be on the root drive
	)
	if err := m.launch("minio "+m.Endpoint, func() (*proc, error) { return startProc("minio", m.bin, args, env, m.LogFile) }); err != nil {
		return err
	}
	return m.waitReady(startTimeout)
}

func (m *MinIO) waitReady(timeout time.Duration) error {
	hc := m.httpClient(2 * time.Second)
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		p := m.current()
		if p == nil {
			return fmt.Errorf("minio %s is not running", m.Endpoint)
		}
		if p.exited() {
			return fmt.Errorf("minio %s exited: %s", m.Endpoint, p.exitError())
		}
		resp, err := hc.Get(m.Endpoint + "/minio/health/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				// Ready on /minio/health/ready comes a moment before the
				// object layer is initialized; until then S3 requests get
				// 503 with a Retry-After the SDK obeys (a minute's stall).
				if err := m.servesS3(); err == nil {
					return nil
				} else {
					last = err.Error()
				}
			} else {
				last = resp.Status
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("minio %s not ready after %v: %s", m.Endpoint, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// servesS3 makes one signed S3 request without retries.
func (m *MinIO) servesS3() error {
	cfg := m.AWSConfig()
	cfg.MaxRetries = aws.Int(0)
	cfg.HTTPClient = m.httpClient(5 * time.Second)
	sess, err := m.session(cfg)
	if err != nil {
		return err
	}
	_, err = s3.New(sess).ListBuckets(&s3.ListBucketsInput{})
	return err
}

func (m *MinIO) mustNotBeShared(op string) {
	if m.shared {
		panic("testenv: " + op + " on the SharedMinIO server, which tests must not disturb; use StartMinIO")
	}
}

// Start restarts a stopped or killed server with the same data dir, port and
// credentials, and waits until it is ready.
func (m *MinIO) Start(tb testing.TB) {
	tb.Helper()
	m.mustNotBeShared("Start")
	if err := m.start(); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
}

// Kill sends SIGKILL (after SIGCONT if frozen) and waits for the process.
func (m *MinIO) Kill() {
	m.mustNotBeShared("Kill")
	m.current().kill()
}

// Stop sends SIGTERM and waits for the process to exit (SIGKILL after 20s).
func (m *MinIO) Stop() {
	m.mustNotBeShared("Stop")
	m.current().stop()
}

// Freeze suspends the server with SIGSTOP.
func (m *MinIO) Freeze() {
	m.mustNotBeShared("Freeze")
	m.current().freeze()
}

// Thaw resumes a frozen server with SIGCONT.
func (m *MinIO) Thaw() {
	m.mustNotBeShared("Thaw")
	m.current().thaw()
}

// Running reports whether the server process is alive (frozen counts).
func (m *MinIO) Running() bool { return m.current().running() }

// PID returns the process id of the current (or last) process, 0 if none.
func (m *MinIO) PID() int { return m.current().pid() }

// Port returns the S3 API port.
func (m *MinIO) Port() int { return m.port }

// AWSConfig returns an IBM COS SDK config for this server: static
// credentials, region us-east-1, path-style addressing.
func (m *MinIO) AWSConfig() *aws.Config {
	return &aws.Config{
		Endpoint:         aws.String(m.Endpoint),
		Region:           aws.String(m.Region),
		Credentials:      credentials.NewStaticCredentials(m.AccessKey, m.SecretKey, ""),
		S3ForcePathStyle: aws.Bool(true),
		DisableSSL:       aws.Bool(m.caPool == nil),
		MaxRetries:       aws.Int(2),
		HTTPClient:       m.httpClient(60 * time.Second),
	}
}

// S3 returns an IBM COS SDK S3 client for this server.
func (m *MinIO) S3(tb testing.TB) *s3.S3 {
	tb.Helper()
	sess, err := m.session(m.AWSConfig())
	if err != nil {
		tb.Fatalf("testenv: S3 session for %s: %v", m.Endpoint, err)
	}
	return s3.New(sess)
}

// NewBucket creates a bucket with a fresh valid name and returns the name.
func (m *MinIO) NewBucket(tb testing.TB) string {
	tb.Helper()
	name := "testenv-" + strings.ToLower(randAlnum(16))
	m.createBucket(tb, m.S3(tb), "bucket", &s3.CreateBucketInput{Bucket: aws.String(name)})
	return name
}

// createBucket creates the bucket of in with cli (what names it in a
// failure). A freshly started MinIO occasionally leaves the first
// CreateBucket unanswered; each attempt is bounded instead of waiting out
// the client's 60 s timeout.
func (m *MinIO) createBucket(tb testing.TB, cli *s3.S3, what string, in *s3.CreateBucketInput) {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cli.CreateBucketWithContext(ctx, in)
		cancel()
		var aerr awserr.Error
		if err == nil || (errors.As(err, &aerr) && aerr.Code() == s3.ErrCodeBucketAlreadyOwnedByYou) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testenv: creating %s %s on %s (%d attempts): %v", what, aws.StringValue(in.Bucket), m.Endpoint, attempt, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var (
	sharedMinIOMu  sync.Mutex
	sharedMinIO    *MinIO
	sharedMinIOErr error
)

// SharedMinIO returns the MinIO server shared by every test of this test
// binary, starting it on first use. Tests may only create buckets and
// objects on it (NewBucket, Prefix); Kill, Stop, Freeze, Thaw and Start
// panic. It is stopped by Main, which the package's TestMain must call.
func SharedMinIO(tb testing.TB) *MinIO {
	tb.Helper()
	sharedMinIOMu.Lock()
	defer sharedMinIOMu.Unlock()
	if sharedMinIO == nil && sharedMinIOErr == nil {
		sharedMinIO, sharedMinIOErr = startSharedMinIO()
	}
	if sharedMinIOErr != nil {
		tb.Fatalf("testenv: shared MinIO: %v", sharedMinIOErr)
	}
	return sharedMinIO
}

func startSharedMinIO() (*MinIO, error) {
	bin, err := serverBinNoTB()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "testenv-shared-minio-")
	if err != nil {
		return nil, err
	}
	port, err := freePortOn("127.0.0.1")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	consolePort, err := freePortOn("127.0.0.1")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	m := newMinIO(bin, dir, port, consolePort)
	m.shared = true
	cleanup := func(failed bool) {
		m.close() // its data is deleted just below
		if failed {
			fmt.Fprintf(os.Stderr, "---- last %d lines of shared minio log (%s) ----\n%s\n---- end of shared minio log ----\n",
				logTailLines, m.LogFile, tailFile(m.LogFile, logTailLines))
		}
		os.RemoveAll(dir)
	}
	if !addMainCleanup(cleanup) {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("SharedMinIO needs the package's TestMain to call testenv.Main(m), which stops it")
	}
	if err := m.start(); err != nil {
		return nil, fmt.Errorf("%w\n---- last %d lines of %s ----\n%s", err, logTailLines, m.LogFile, tailFile(m.LogFile, logTailLines))
	}
	return m, nil
}

// serverBinNoTB locates the MinIO binary without a testing.TB.
func serverBinNoTB() (string, error) {
	dir, err := serversDir()
	if err != nil {
		return "", err
	}
	vals, err := serverVersions()
	if err != nil {
		return "", fmt.Errorf("reading scripts/test-servers.env: %w", err)
	}
	if vals["MINIO_VERSION"] == "" {
		return "", fmt.Errorf("scripts/test-servers.env has no MINIO_VERSION")
	}
	bin := filepath.Join(dir, "minio-"+vals["MINIO_VERSION"], "minio")
	if err := checkExecutable(bin); err != nil {
		return "", fmt.Errorf("missing test server minio (%v): run `make test-servers`", err)
	}
	return bin, nil
}

var prefixUnsafe = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Prefix returns an object-key prefix unique to this test (and call): the
// sanitized test name plus a random suffix, without a trailing slash, e.g.
// "TestBackup-v3.5-1a2b3c4d".
func Prefix(tb testing.TB) string {
	tb.Helper()
	name := strings.Trim(prefixUnsafe.ReplaceAllString(tb.Name(), "-"), "-.")
	if len(name) > 80 {
		name = name[:80]
	}
	if name == "" {
		name = "test"
	}
	return name + "-" + randHex(4)
}

func randAlnum(n int) string {
	const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	g := newValueGen()
	b := make([]byte, n)
	for i := range b {
		b[i] = alnum[g.rng.Uint64()%uint64(len(alnum))]
	}
	return string(b)
}
