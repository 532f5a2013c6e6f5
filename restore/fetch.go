package restore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/klauspost/compress/zstd"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/cos"
)

// Check is one verification of a backup or of a rebuilt cluster.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // passed, failed, skipped, planned
	Detail string `json:"detail,omitempty"`
}

// Check statuses.
const (
	CheckPassed  = "passed"
	CheckFailed  = "failed"
	CheckSkipped = "skipped"
	CheckPlanned = "planned"
)

// Names of the checks a backup passes before it is used.
const (
	CheckStoredSHA = "stored sha256"      // of the object as stored (compressed)
	CheckRawSHA    = "raw sha256"         // of the bbolt database
	CheckEtcdHash  = "etcd trailing hash" // etcd's own sha256 after the database
	CheckSizes     = "sizes"              // stored and raw sizes match the manifest
)

// trailerHash hashes everything written to it except the last 32 bytes,
// which it keeps: etcd's sha256 of what came before.
type trailerHash struct {
	body hash.Hash
	tail [sha256.Size]byte
	tlen int
	n    int64
}

func newTrailerHash() *trailerHash { return &trailerHash{body: sha256.New()} }

func (h *trailerHash) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= sha256.Size {
		h.body.Write(h.tail[:h.tlen])
		h.body.Write(p[:len(p)-sha256.Size])
		h.n += int64(h.tlen + len(p) - sha256.Size)
		copy(h.tail[:], p[len(p)-sha256.Size:])
		h.tlen = sha256.Size
		return n, nil
	}
	if over := h.tlen + len(p) - sha256.Size; over > 0 {
		h.body.Write(h.tail[:over])
		h.n += int64(over)
		copy(h.tail[:], h.tail[over:h.tlen])
		h.tlen -= over
	}
	copy(h.tail[h.tlen:], p)
	h.tlen += len(p)
	return n, nil
}

// countHash hashes and counts what passes through it.
type countHash struct {
	h hash.Hash
	n int64
}

func (c *countHash) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}

// fetchResult is what one streamed verification measured.
type fetchResult struct {
	Checks     []Check
	StoredSize int64
	RawSize    int64
}

// errVerify marks a backup whose bytes do not match its manifest (corrupt
// or truncated), as opposed to a store that could not be read.
type verifyError struct{ err error }

func (e *verifyError) Error() string { return e.err.Error() }
func (e *verifyError) Unwrap() error { return e.err }

// Streaming: three stages overlap on separate goroutines, so download,
// decompression and hashing run in parallel instead of taking turns:
//
//	store → [stored sha256] → chunks → zstd → chunks → [raw sha256, file]
//
// Each queue holds a few 1 MiB buffers, recycled: memory stays flat
// whatever the snapshot's size.
const (
	chunkSize  = 1 << 20
	queueDepth = 4
)

// chunkQueue hands filled buffers from a producer to a consumer and the
// empty ones back.
type chunkQueue struct {
	full chan []byte
	free chan []byte
	err  error // why the producer stopped; set before full is closed
}

func newChunkQueue() *chunkQueue {
	q := &chunkQueue{full: make(chan []byte, queueDepth), free: make(chan []byte, queueDepth+2)}
	for range queueDepth + 2 {
		q.free <- make([]byte, chunkSize)
	}
	return q
}

// queueReader reads a chunkQueue as a stream.
type queueReader struct {
	ctx context.Context
	q   *chunkQueue
	buf []byte // the chunk being read, returned to free when done
	cur []byte
}

func (r *queueReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.buf != nil {
			r.q.free <- r.buf[:cap(r.buf)]
			r.buf = nil
		}
		select {
		case b, ok := <-r.q.full:
			if !ok {
				if r.q.err != nil {
					return 0, r.q.err
				}
				return 0, io.EOF
			}
			r.buf, r.cur = b, b
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// fill reads from r into free buffers and queues them until r ends. The
// queue is closed with r's error (nil at EOF).
func (q *chunkQueue) fill(ctx context.Context, r io.Reader, tap func([]byte)) {
	var err error
	defer func() {
		q.err = err
		close(q.full)
	}()
	for {
		var buf []byte
		select {
		case buf = <-q.free:
		case <-ctx.Done():
			err = ctx.Err()
			return
		}
		n := 0
		for n < len(buf) && err == nil {
			var k int
			k, err = r.Read(buf[n:])
			n += k
		}
		if n > 0 {
			if tap != nil {
				tap(buf[:n])
			}
			select {
			case q.full <- buf[:n]:
			case <-ctx.Done():
				err = ctx.Err()
				return
			}
		}
		if err == io.EOF {
			err = nil
			return
		}
		if err != nil {
			return
		}
	}
}

// decoder decompresses a stored snapshot; zstd decodes blocks ahead on a
// goroutine of its own.
func decoder(r io.Reader, c backup.Compression) (io.ReadCloser, error) {
	if c == backup.CompressZstd {
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(2), zstd.WithDecoderLowmem(true))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return backup.Decoder(r, c)
}

// fetchSnapshot streams a backup's snapshot object from the store and checks,
// in one pass, the sha256 of the stored object, the sha256 of the database
// and etcd's trailing hash, against the manifest. When dst is non-nil the
// decompressed stream (database plus etcd's trailer, the file etcdutl
// expects) is written to it; otherwise it is discarded. Progress reports
// stored bytes read.
func fetchSnapshot(ctx context.Context, store backup.Store, layout backup.Layout, m *backup.Manifest, dst io.Writer, progress func(int64)) (*fetchResult, error) {
	key := layout.Key(m.ClusterID, m.Name, m.Snapshot.Object)
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rc, err := store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()

	// Stage 1: download, and hash what is stored.
	stored := &countHash{h: sha256.New()}
	in := newChunkQueue()
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		in.fill(ctx, rc, func(b []byte) {
			stored.Write(b)
			if progress != nil {
				progress(stored.n)
			}
		})
	}()
	inR := &queueReader{ctx: ctx, q: in}
	// Whatever happens, stage 1 has ended when we return.
	defer func() { cancel(); <-inDone }()

	// Stage 3: hash the database and write the file.
	raw := newTrailerHash()
	out := newChunkQueue()
	var werr error
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		r := &queueReader{ctx: ctx, q: out}
		for {
			if _, err := r.Read(nil); err != nil { // next chunk
				return
			}
			b := r.cur
			r.cur = nil
			raw.Write(b)
			if dst != nil && werr == nil {
				if _, err := dst.Write(b); err != nil {
					werr = err
					cancel()
				}
			}
		}
	}()

	// Stage 2, here: decompress.
	dec, err := decoder(inR, m.Snapshot.Compression)
	if err != nil {
		return nil, &verifyError{fmt.Errorf("%s: %w", key, err)}
	}
	out.fill(ctx, dec, nil)
	dec.Close() // stops its read-ahead: inR is ours again
	<-outDone
	if werr != nil {
		return nil, werr // our disk, not the backup
	}
	if perr := parent.Err(); perr != nil {
		return nil, perr
	}
	// Read whatever the decoder did not need (nothing, unless it failed),
	// so the stored hash covers the whole object.
	_, rerr := io.Copy(io.Discard, inR)
	derr := out.err
	if derr == nil {
		derr = rerr
	}
	<-inDone
	if derr != nil {
		if perr := parent.Err(); perr != nil {
			return nil, perr
		}
		if in.err != nil {
			return nil, in.err // the store failed mid-stream
		}
		if isStoreError(derr) {
			return nil, derr
		}
		// The object was read to its end: a flipped or missing byte is
		// the stored checksum mismatch it is.
		if hex.EncodeToString(stored.h.Sum(nil)) != m.Snapshot.StoredSHA256 {
			return &fetchResult{StoredSize: stored.n, Checks: []Check{{Name: CheckStoredSHA, Status: CheckFailed,
					Detail: fmt.Sprintf("object hashes to %x (%d bytes), manifest says %s (%d bytes)", stored.h.Sum(nil), stored.n, m.Snapshot.StoredSHA256, m.Snapshot.StoredSize)}}},
				&verifyError{fmt.Errorf("%s: %s mismatch: the object (%d bytes) hashes to %.12x…, the manifest says %.12s… (%d bytes); decompressing it failed: %w",
					key, CheckStoredSHA, stored.n, stored.h.Sum(nil), m.Snapshot.StoredSHA256, m.Snapshot.StoredSize, derr)}
		}
		return nil, &verifyError{fmt.Errorf("%s: decompress after %d stored bytes: %w", key, stored.n, derr)}
	}
	res := &fetchResult{StoredSize: stored.n, RawSize: raw.n}
	fail := func(name, detail string) (*fetchResult, error) {
		res.Checks = append(res.Checks, Check{Name: name, Status: CheckFailed, Detail: detail})
		return res, &verifyError{fmt.Errorf("%s: %s: %s", key, name, detail)}
	}
	storedSum := hex.EncodeToString(stored.h.Sum(nil))
	if storedSum != m.Snapshot.StoredSHA256 {
		return fail(CheckStoredSHA, fmt.Sprintf("object hashes to %s (%d bytes), manifest says %s (%d bytes)",
			storedSum, stored.n, m.Snapshot.StoredSHA256, m.Snapshot.StoredSize))
	}
	res.Checks = append(res.Checks, Check{Name: CheckStoredSHA, Status: CheckPassed, Detail: storedSum})
	if raw.tlen < sha256.Size {
		return fail(CheckEtcdHash, fmt.Sprintf("snapshot is %d bytes: too short to hold etcd's sha256", raw.n+int64(raw.tlen)))
	}
	rawSum := raw.body.Sum(nil)
	if !bytes.Equal(rawSum, raw.tail[:]) {
		return fail(CheckEtcdHash, fmt.Sprintf("etcd's trailing sha256 is %x, the database hashes to %x", raw.tail[:], rawSum))
	}
	res.Checks = append(res.Checks, Check{Name: CheckEtcdHash, Status: CheckPassed, Detail: hex.EncodeToString(raw.tail[:])})
	if got := hex.EncodeToString(rawSum); got != m.Snapshot.RawSHA256 {
		return fail(CheckRawSHA, fmt.Sprintf("database hashes to %s, manifest says %s", got, m.Snapshot.RawSHA256))
	}
	res.Checks = append(res.Checks, Check{Name: CheckRawSHA, Status: CheckPassed, Detail: m.Snapshot.RawSHA256})
	if stored.n != m.Snapshot.StoredSize || raw.n != m.Snapshot.RawSize {
		return fail(CheckSizes, fmt.Sprintf("stored %d / raw %d bytes, manifest says %d / %d",
			stored.n, raw.n, m.Snapshot.StoredSize, m.Snapshot.RawSize))
	}
	res.Checks = append(res.Checks, Check{Name: CheckSizes, Status: CheckPassed,
		Detail: fmt.Sprintf("stored %d bytes, database %d bytes", stored.n, raw.n)})
	return res, nil
}

// isStoreError reports whether err came from the object store (a read that
// failed mid-stream) rather than from the bytes themselves.
func isStoreError(err error) bool {
	var ce *cos.Error
	return errors.As(err, &ce)
}
