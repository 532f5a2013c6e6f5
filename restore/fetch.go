package restore

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/armada/etcd-recovery/backup"
	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/seal"
	"github.com/armada/etcd-recovery/internal/store"
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
//
// err is the producer's: it is written once, just before full is closed,
// and may be read only by a goroutine that has seen that close (a receive
// from full that reports it closed, or a wait on the producer's end).
// Anything else is a data race: the producer may still be running.
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

// fetchSnapshot streams a backup's snapshot object from the store and checks,
// in one pass, the sha256 of the stored object, the sha256 of the database
// and etcd's trailing hash, against the manifest. When dst is non-nil the
// decompressed stream (database plus etcd's trailer, the file etcdutl
// expects) is written to it; otherwise it is discarded. Progress reports
// stored bytes read.
//
// An encrypted backup (m.Encryption) is decrypted with ids between the
// download and the decompression: without a matching identity nothing is
// downloaded (an *IdentityError, from the manifest), and an object whose
// age header or payload does not authenticate is refused as damaged
// (a verifyError wrapping seal.ErrTampered): no plaintext reaches dst
// before the header opened.
func fetchSnapshot(ctx context.Context, store store.Store, layout catalog.Layout, m *catalog.Manifest, ids *seal.Identities, dst io.Writer, progress func(int64)) (*fetchResult, error) {
	key := layout.Key(m.ClusterID, m.Name, m.Snapshot.Object)
	if err := checkIdentity(layout, m, ids); err != nil {
		return nil, err
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rc, err := store.Get(ctx, key)
	if err != nil {
		if isMissingObject(err) {
			// The manifest names an object that is not there: the
			// backup is damaged, not the store down.
			return &fetchResult{Checks: []Check{{Name: CheckStoredSHA, Status: CheckFailed, Detail: "the snapshot object is missing"}}},
				&verifyError{fmt.Errorf("%s: the snapshot object the manifest names is missing: %w", key, err)}
		}
		return nil, err
	}
	defer rc.Close()

	// Stage 1: download, and hash what is stored.
	stored := backup.NewHashCounter()
	in := newChunkQueue()
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		in.fill(ctx, rc, func(b []byte) {
			stored.Write(b)
			if progress != nil {
				progress(stored.N())
			}
		})
	}()
	inR := &queueReader{ctx: ctx, q: in}
	// Whatever happens, stage 1 has ended when we return.
	defer func() { cancel(); <-inDone }()

	// Stage 3: hash the database and write the file.
	raw := backup.NewSnapshotHasher()
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

	// Stage 2, here: decrypt (an encrypted backup) and decompress.
	var src io.Reader = inR
	var plain *errTracker
	if m.Encryption.Encrypted() {
		pr, err := seal.Decrypt(inR, ids, m.Encryption.Recipients)
		if err != nil {
			if perr := parent.Err(); perr != nil {
				return nil, perr
			}
			// Decided from what age read, never from in.err: stage 1
			// may still be running. seal.Decrypt reports a failed read
			// of the source as such, never as ErrTampered, so
			// ErrTampered means the bytes the store gave do not open.
			if errors.Is(err, seal.ErrTampered) {
				return &fetchResult{Checks: []Check{{Name: CheckDecrypt, Status: CheckFailed, Detail: err.Error()}}},
					&verifyError{tamperedError(key, err)}
			}
			if isNoIdentity(err) {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
			return nil, err // the store failed while the header was read
		}
		plain = &errTracker{r: pr}
		src = plain
	}
	dec, err := backup.Decoder(src, m.Snapshot.Compression)
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
	// An encrypted object is drained through age, so that damage past
	// the end of the compressed stream is still reported as such.
	_, rerr := io.Copy(io.Discard, src)
	if rerr == nil && plain != nil {
		_, rerr = io.Copy(io.Discard, inR)
	}
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
		if plain != nil && errors.Is(plain.err, seal.ErrTampered) {
			return &fetchResult{StoredSize: stored.N(), Checks: []Check{{Name: CheckDecrypt, Status: CheckFailed, Detail: plain.err.Error()}}},
				&verifyError{tamperedError(key, plain.err)}
		}
		// The object was read to its end: a flipped or missing byte is
		// the stored checksum mismatch it is.
		if stored.Sum() != m.Snapshot.StoredSHA256 {
			return &fetchResult{StoredSize: stored.N(), Checks: []Check{{Name: CheckStoredSHA, Status: CheckFailed,
					Detail: fmt.Sprintf("object hashes to %x (%d bytes), manifest says %s (%d bytes)", stored.Sum(), stored.N(), m.Snapshot.StoredSHA256, m.Snapshot.StoredSize)}}},
				&verifyError{fmt.Errorf("%s: %s mismatch: the object (%d bytes) hashes to %.12x…, the manifest says %.12s… (%d bytes); decompressing it failed: %w",
					key, CheckStoredSHA, stored.N(), stored.Sum(), m.Snapshot.StoredSHA256, m.Snapshot.StoredSize, derr)}
		}
		return nil, &verifyError{fmt.Errorf("%s: decompress after %d stored bytes: %w", key, stored.N(), derr)}
	}
	res := &fetchResult{StoredSize: stored.N(), RawSize: raw.Size()}
	fail := func(name, detail string) (*fetchResult, error) {
		res.Checks = append(res.Checks, Check{Name: name, Status: CheckFailed, Detail: detail})
		return res, &verifyError{fmt.Errorf("%s: %s: %s", key, name, detail)}
	}
	storedSum := stored.Sum()
	if storedSum != m.Snapshot.StoredSHA256 {
		return fail(CheckStoredSHA, fmt.Sprintf("object hashes to %s (%d bytes), manifest says %s (%d bytes)",
			storedSum, stored.N(), m.Snapshot.StoredSHA256, m.Snapshot.StoredSize))
	}
	res.Checks = append(res.Checks, Check{Name: CheckStoredSHA, Status: CheckPassed, Detail: storedSum})
	if plain != nil {
		res.Checks = append(res.Checks, Check{Name: CheckDecrypt, Status: CheckPassed,
			Detail: "age, encrypted to " + strings.Join(m.Encryption.Recipients, ", ")})
	}
	if name, detail := checkDatabase(res, raw, m); name != "" {
		return fail(name, detail)
	}
	if stored.N() != m.Snapshot.StoredSize || raw.Size() != m.Snapshot.RawSize {
		return fail(CheckSizes, fmt.Sprintf("stored %d / raw %d bytes, manifest says %d / %d",
			stored.N(), raw.Size(), m.Snapshot.StoredSize, m.Snapshot.RawSize))
	}
	res.Checks = append(res.Checks, Check{Name: CheckSizes, Status: CheckPassed,
		Detail: fmt.Sprintf("stored %d bytes, database %d bytes", stored.N(), raw.Size())})
	return res, nil
}

// isStoreError reports whether err came from the object store (a read that
// failed mid-stream) rather than from the bytes themselves: any backend's
// error, by the store contract (a *store.Error).
func isStoreError(err error) bool { return store.IsStoreError(err) }

// isMissingObject reports whether a read failed because the object does
// not exist (store.ErrNotFound, which any backend's Get of a missing key
// wraps), as opposed to a store that could not be read (outage, stall,
// denied access, a missing bucket): a missing object is a damaged backup.
func isMissingObject(err error) bool { return store.IsNotFound(err) }

// checkDatabase checks etcd's trailing sha256 against the database bytes
// before it, then the database's sha256 against the manifest, appending
// each passed check to res; on a failure it returns the check's name and
// why (the caller records and returns it).
func checkDatabase(res *fetchResult, raw *backup.SnapshotHasher, m *catalog.Manifest) (string, string) {
	trailer, complete := raw.Trailer()
	if !complete {
		return CheckEtcdHash, fmt.Sprintf("snapshot is %d bytes: too short to hold etcd's sha256", raw.Size()+int64(len(trailer)))
	}
	rawSum := raw.Sum()
	if !bytes.Equal(rawSum, trailer) {
		return CheckEtcdHash, fmt.Sprintf("etcd's trailing sha256 is %x, the database hashes to %x", trailer, rawSum)
	}
	res.Checks = append(res.Checks, Check{Name: CheckEtcdHash, Status: CheckPassed, Detail: hex.EncodeToString(trailer)})
	if got := hex.EncodeToString(rawSum); got != m.Snapshot.RawSHA256 {
		return CheckRawSHA, fmt.Sprintf("database hashes to %s, the manifest says %s", got, m.Snapshot.RawSHA256)
	}
	res.Checks = append(res.Checks, Check{Name: CheckRawSHA, Status: CheckPassed, Detail: m.Snapshot.RawSHA256})
	return "", ""
}
