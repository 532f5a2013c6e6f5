package cos

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/aws/credentials"
	"github.com/IBM/ibm-cos-sdk-go/aws/request"
	"github.com/IBM/ibm-cos-sdk-go/aws/session"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"
	"github.com/armada/etcd-recovery/internal/store"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

func md5b64(b []byte) string {
	s := md5.Sum(b)
	return base64.StdEncoding.EncodeToString(s[:])
}

// chunkyReader returns at most a random number of bytes a Read, as a
// pipe from the compressor does.
type chunkyReader struct {
	r   io.Reader
	rnd *rand.Rand
}

func (c *chunkyReader) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1+c.rnd.IntN(len(p))]
	}
	return c.r.Read(p)
}

// TestPartHasherSums: read as s3manager reads a body (each part filled to
// its size in reads of any length), every part's sum is the MD5 of
// exactly its bytes, the short last part's included; a sum is taken once
// and only for its part's length.
func TestPartHasherSums(t *testing.T) {
	const partSize = 1 << 16
	for _, size := range []int{0, 1, partSize - 1, partSize, partSize + 1, 3*partSize + 1234} {
		data := make([]byte, size)
		rnd := rand.New(rand.NewPCG(uint64(size), 7))
		for i := range data {
			data[i] = byte(rnd.Uint32())
		}
		ph := newPartHasher(&chunkyReader{bytes.NewReader(data), rnd}, partSize)
		var parts [][]byte
		for {
			buf := make([]byte, partSize)
			n, err := readFillBuf(ph, buf)
			if n > 0 {
				parts = append(parts, buf[:n])
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if size == 0 {
			// An empty body is one empty part (a PutObject of 0 bytes).
			parts = [][]byte{{}}
		}
		if got := bytes.Join(parts, nil); !bytes.Equal(got, data) {
			t.Fatalf("size %d: the body read through the hasher differs", size)
		}
		for i, p := range parts {
			num := int64(i + 1)
			if _, ok := ph.take(num, int64(len(p))+1); ok {
				t.Errorf("size %d part %d: a sum taken for another length", size, num)
			}
			sum, ok := ph.take(num, int64(len(p)))
			if !ok || sum != md5b64(p) {
				t.Errorf("size %d part %d: sum %q (%v), want %q", size, num, sum, ok, md5b64(p))
			}
			if _, ok := ph.take(num, int64(len(p))); ok {
				t.Errorf("size %d part %d: the sum was taken twice", size, num)
			}
		}
		if len(ph.sums) != 0 {
			t.Errorf("size %d: sums left for parts never sent: %v", size, ph.sums)
		}
	}
}

// readFillBuf is s3manager's: a part's buffer filled until full, EOF or
// an error.
func readFillBuf(r io.Reader, b []byte) (offset int, err error) {
	for offset < len(b) && err == nil {
		var n int
		n, err = r.Read(b[offset:])
		offset += n
	}
	return offset, err
}

// TestPartHasherHandler: the Build handler sets an UploadPart's (and a
// PutObject's, part 1) Content-MD5 from the sum hashed while the part was
// read, and falls back to hashing the body itself (setContentMD5) when it
// has no sum for that part and length: the header is right either way.
func TestPartHasherHandler(t *testing.T) {
	sess, err := session.NewSession(&aws.Config{Region: aws.String("us-east-1"), Endpoint: aws.String("https://127.0.0.1:1"),
		Credentials: credentials.NewStaticCredentials("id", "secret", ""), S3ForcePathStyle: aws.Bool(true),
		// As the store configures every request: the SDK's own body hashes off.
		S3DisableContentMD5Validation: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	svc := s3.New(sess)
	const partSize = 1 << 16
	data := bytes.Repeat([]byte("etcd-recovery "), 3*partSize/14+1)[:2*partSize+99]
	ph := newPartHasher(bytes.NewReader(data), partSize)
	var rehashed atomic.Int64
	if _, err := io.Copy(io.Discard, struct{ io.Reader }{ph}); err != nil {
		t.Fatal(err)
	}
	build := func(req *request.Request) string {
		t.Helper()
		req.Handlers.Build.PushBackNamed(setContentMD5Handler)
		if !req.Handlers.Build.Swap(setContentMD5Handler.Name, ph.handler(&rehashed)) {
			t.Fatal("setContentMD5's handler not found to swap")
		}
		if err := req.Build(); err != nil {
			t.Fatal(err)
		}
		return req.HTTPRequest.Header.Get("Content-Md5")
	}
	part := func(num int64, body []byte) string {
		req, _ := svc.UploadPartRequest(&s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("k"), UploadId: aws.String("u"),
			PartNumber: aws.Int64(num), Body: bytes.NewReader(body)})
		return build(req)
	}
	p2 := data[partSize : 2*partSize]
	if got := part(2, p2); got != md5b64(p2) {
		t.Errorf("part 2: Content-MD5 %q, want %q", got, md5b64(p2))
	}
	if _, ok := ph.sums[2]; ok {
		t.Error("part 2: its sum was not the one used")
	}
	// A body the hasher did not see as that part: hashed as before.
	other := []byte("not the part the hasher saw")
	if got := part(3, other); got != md5b64(other) {
		t.Errorf("a body of another length: Content-MD5 %q, want its own %q", got, md5b64(other))
	}
	if _, ok := ph.sums[3]; !ok {
		t.Error("part 3's sum was used for a body of another length")
	}
	if rehashed.Load() != 1 {
		t.Errorf("%d bodies hashed again, want the 1 of another length", rehashed.Load())
	}
	p3 := data[2*partSize:]
	if got := part(3, p3); got != md5b64(p3) {
		t.Errorf("part 3 (the short last one): Content-MD5 %q, want %q", got, md5b64(p3))
	}
	// PutObject: the whole body is part 1.
	req, _ := svc.PutObjectRequest(&s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), Body: bytes.NewReader(data[:partSize])})
	if got := build(req); got != md5b64(data[:partSize]) {
		t.Errorf("PutObject: Content-MD5 %q, want part 1's %q", got, md5b64(data[:partSize]))
	}
	if len(ph.sums) != 0 {
		t.Errorf("sums left: %v", ph.sums)
	}
}

// TestUploadHashesPartsWhileRead: uploads to a real MinIO, multipart and
// single-part, into a plain bucket and into one with object lock (which
// refuses a write without Content-MD5), carry the sums hashed while each
// part was read: no part is hashed again, and every object reads back
// as written (MinIO checks each Content-MD5: a wrong one is BadDigest).
func TestUploadHashesPartsWhileRead(t *testing.T) {
	t.Parallel()
	m := testenv.SharedMinIO(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, locked := range []bool{false, true} {
		bucket := m.NewBucket(t)
		var opts store.PutOptions
		if locked {
			bucket = m.NewLockedBucket(t)
			opts.Retention = &store.Retention{Mode: store.LockGovernance, Until: time.Now().Add(10 * time.Minute)}
		}
		s, err := New(Config{Endpoint: m.Endpoint, Region: m.Region, Bucket: bucket, CAFile: m.CAFile,
			Creds: Credentials{AccessKeyID: m.AccessKey, SecretAccessKey: m.SecretKey, Source: "test"}})
		if err != nil {
			t.Fatal(err)
		}
		rnd := rand.New(rand.NewPCG(1, 2))
		for _, size := range []int{0, 1000, defaultPartSize, 2*defaultPartSize + 12345} {
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(rnd.Uint32())
			}
			key := fmt.Sprintf("%s/obj-%d", testenv.Prefix(t), size)
			rnd2 := rand.New(rand.NewPCG(uint64(size), 3))
			if _, err := s.PutWith(ctx, key, &chunkyReader{bytes.NewReader(data), rnd2}, opts); err != nil {
				t.Fatalf("locked %v, %d bytes: %v", locked, size, err)
			}
			rc, err := s.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("locked %v, %d bytes: read back %d bytes (%v), not what was written", locked, size, len(got), err)
			}
		}
		if n := s.md5Rehashed.Load(); n != 0 {
			t.Errorf("locked %v: %d upload requests hashed their body again", locked, n)
		}
	}
}
