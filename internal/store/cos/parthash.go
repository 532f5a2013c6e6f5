package cos

import (
	"crypto/md5"
	"encoding/base64"
	"hash"
	"io"
	"sync"
	"sync/atomic"

	"github.com/IBM/ibm-cos-sdk-go/aws"
	"github.com/IBM/ibm-cos-sdk-go/aws/request"
	"github.com/IBM/ibm-cos-sdk-go/service/s3"
)

// partHasher computes each part's Content-MD5 while the uploader fills the
// part's buffer, so the part goes on the wire as soon as it is full.
//
// s3manager reads an upload's body on one goroutine, part after part,
// each exactly partSize bytes (the last one fewer), into a pooled buffer;
// a worker then sends it. setContentMD5, on that worker, hashed the
// buffer again before the request could start: one more pass over every
// byte, on the request's critical path, after the bytes had left the CPU
// cache. Here the bytes are hashed as they are read, part i being bytes
// [(i-1)·partSize, i·partSize) of the body, and the request's Build
// handler (partHasher.handler) takes the sum of its part number (PutObject:
// part 1) when the body's length matches; otherwise setContentMD5 hashes
// the body as before. The server checks every Content-MD5, so a wrong sum
// fails the upload (BadDigest), it never stores a wrong part.
type partHasher struct {
	r        io.Reader
	partSize int64

	h    hash.Hash
	n    int64 // bytes of the current part hashed so far
	part int64 // the current part's number, from 1

	mu   sync.Mutex
	sums map[int64]partSum
}

// partSum is a finished part's Content-MD5 and length.
type partSum struct {
	md5 string
	len int64
}

func newPartHasher(r io.Reader, partSize int64) *partHasher {
	return &partHasher{r: r, partSize: partSize, h: md5.New(), part: 1, sums: map[int64]partSum{}}
}

func (p *partHasher) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	for data := b[:n]; len(data) > 0; {
		k := min(p.partSize-p.n, int64(len(data)))
		p.h.Write(data[:k])
		p.n += k
		data = data[k:]
		if p.n == p.partSize {
			p.finish()
		}
	}
	if err == io.EOF && (p.n > 0 || p.part == 1) {
		// The short last part, or an empty body's one (empty) part.
		p.finish()
	}
	return n, err
}

// finish records the current part's sum and starts the next part.
func (p *partHasher) finish() {
	sum := base64.StdEncoding.EncodeToString(p.h.Sum(nil))
	p.mu.Lock()
	p.sums[p.part] = partSum{md5: sum, len: p.n}
	p.mu.Unlock()
	p.h.Reset()
	p.n = 0
	p.part++
}

// take returns (and forgets) part's sum if it was hashed with length n.
func (p *partHasher) take(part, n int64) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.sums[part]
	if !ok || s.len != n {
		return "", false
	}
	delete(p.sums, part)
	return s.md5, true
}

// handler replaces setContentMD5 on this upload's requests: the sum
// computed while the part was read, or setContentMD5's own pass when
// there is none for the body (a part number or length it did not see),
// counted in rehashed.
func (p *partHasher) handler(rehashed *atomic.Int64) request.NamedHandler {
	return request.NamedHandler{Name: setContentMD5Handler.Name, Fn: func(r *request.Request) {
		if r.Error != nil || r.HTTPRequest.Header.Get("Content-Md5") != "" || !aws.IsReaderSeekable(r.Body) {
			return
		}
		part := int64(1)
		if in, ok := r.Params.(*s3.UploadPartInput); ok {
			part = aws.Int64Value(in.PartNumber)
		}
		if n, err := aws.SeekerLen(r.Body); err == nil {
			if sum, ok := p.take(part, n); ok {
				r.HTTPRequest.Header.Set("Content-Md5", sum)
				return
			}
		}
		rehashed.Add(1)
		setContentMD5(r)
	}}
}
