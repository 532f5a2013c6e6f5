package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/klauspost/compress/zstd"

	"github.com/armada/etcd-recovery/internal/catalog"
	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/seal"
)

// etcd appends the sha256 of the database to the snapshot stream.
const etcdHashSize = sha256.Size

// SnapshotHasher hashes everything written to it except the last 32 bytes,
// which it keeps: etcd's own sha256 of what came before. One hash pass
// serves both the raw-DB checksum and the check against etcd's trailer.
// Backup and restore both check snapshot streams with it.
type SnapshotHasher struct {
	body hash.Hash
	tail [etcdHashSize]byte
	tlen int
	n    int64 // body bytes hashed
}

// NewSnapshotHasher returns an empty SnapshotHasher.
func NewSnapshotHasher() *SnapshotHasher { return &SnapshotHasher{body: sha256.New()} }

// Size is the number of database bytes hashed so far (the trailer excluded).
func (h *SnapshotHasher) Size() int64 { return h.n }

// Trailer returns the last 32 bytes seen (etcd's sha256 once the stream is
// complete), and false if fewer than 32 bytes were written.
func (h *SnapshotHasher) Trailer() ([]byte, bool) { return h.tail[:h.tlen], h.tlen == etcdHashSize }

// Sum is the sha256 of the database bytes (everything but the trailer).
func (h *SnapshotHasher) Sum() []byte { return h.body.Sum(nil) }

func (h *SnapshotHasher) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= etcdHashSize {
		h.body.Write(h.tail[:h.tlen])
		h.body.Write(p[:len(p)-etcdHashSize])
		h.n += int64(h.tlen + len(p) - etcdHashSize)
		copy(h.tail[:], p[len(p)-etcdHashSize:])
		h.tlen = etcdHashSize
		return n, nil
	}
	if over := h.tlen + len(p) - etcdHashSize; over > 0 {
		h.body.Write(h.tail[:over])
		h.n += int64(over)
		copy(h.tail[:], h.tail[over:h.tlen])
		h.tlen -= over
	}
	copy(h.tail[h.tlen:], p)
	h.tlen += len(p)
	return n, nil
}

// Verify checks etcd's trailing hash and returns the database's size and sha256.
func (h *SnapshotHasher) Verify() (int64, string, error) {
	if h.tlen < etcdHashSize {
		return 0, "", fmt.Errorf("snapshot stream is %d bytes: too short to hold etcd's sha256", h.n+int64(h.tlen))
	}
	sum := h.body.Sum(nil)
	if !bytes.Equal(sum, h.tail[:]) {
		return 0, "", fmt.Errorf("snapshot sha256 mismatch: etcd sent %x, the stream hashes to %x", h.tail[:], sum)
	}
	return h.n, hex.EncodeToString(sum), nil
}

// HashCounter hashes (sha256) and counts what passes through it.
type HashCounter struct {
	h hash.Hash
	n int64
}

// NewHashCounter returns an empty HashCounter.
func NewHashCounter() *HashCounter { return &HashCounter{h: sha256.New()} }

func (c *HashCounter) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}

// N is the number of bytes written.
func (c *HashCounter) N() int64 { return c.n }

// Sum is the hex sha256 of what was written.
func (c *HashCounter) Sum() string { return hex.EncodeToString(c.h.Sum(nil)) }

// encoder returns a compressing writer around w (or w itself for none).
func encoder(w io.Writer, c catalog.Compression) (io.WriteCloser, error) {
	switch c {
	case catalog.CompressNone:
		return nopWriteCloser{w}, nil
	case catalog.CompressZstd:
		// Fastest level and a 1 MiB window keep CPU and memory low: the
		// snapshot stream, not compression, should set the pace. (Lower
		// encoder memory makes zstd shift its history buffer on every
		// block: 1.6x slower in BenchmarkBackupVsBaseline's profile.)
		//
		// No zstd frame checksum: it would be a third hash of the same
		// bytes. The manifest's sha256 of the stored object and of the
		// database cover them, and etcd's own trailing sha256 travels
		// inside the compressed stream, so `zstd -d` followed by
		// `etcdutl snapshot restore` still checks the data end to end.
		return zstd.NewWriter(w,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(1<<20),
			zstd.WithEncoderCRC(false))
	}
	return nil, fmt.Errorf("unknown compression %q", c)
}

// objectWriter returns the writer a data object is written through:
// compression, then, with recipients, age encryption, into w. Its Close
// flushes both (it does not close w).
func objectWriter(w io.Writer, c catalog.Compression, rs seal.Recipients) (io.WriteCloser, error) {
	if rs.Len() == 0 {
		return encoder(w, c)
	}
	sealer, err := seal.Encrypt(w, rs)
	if err != nil {
		return nil, err
	}
	enc, err := encoder(sealer, c)
	if err != nil {
		return nil, err
	}
	return &chainWriter{Writer: enc, closers: []io.Closer{enc, sealer}}, nil
}

// chainWriter closes its writers in order: the compressor, then the
// encryption around what it wrote.
type chainWriter struct {
	io.Writer
	closers []io.Closer
}

func (c *chainWriter) Close() error {
	for _, cl := range c.closers {
		if err := cl.Close(); err != nil {
			return err
		}
	}
	return nil
}

// Decoder returns a decompressing reader around r.
func Decoder(r io.Reader, c catalog.Compression) (io.ReadCloser, error) {
	switch c {
	case catalog.CompressNone:
		return io.NopCloser(r), nil
	case catalog.CompressZstd:
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(2), zstd.WithDecoderLowmem(true))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return nil, fmt.Errorf("unknown compression %q", c)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// streamResult is what a compress-and-hash pass measured.
type streamResult struct {
	RawSize      int64
	RawSHA256    string
	StoredSize   int64
	StoredSHA256 string
}

// chunk is one piece of the snapshot stream, or the error that ended it.
type chunk struct {
	etcdinternals.SnapshotChunk
	err error
}

// recvDepth bounds the queue between the receiver and the compressor:
// 32 chunks of etcd's 32 KiB is 1 MiB in flight.
const recvDepth = 32

// receive reads a snapshot stream on its own goroutine, hashing as chunks
// arrive, and hands them over through a bounded queue, so that network
// receive and hashing overlap with compression instead of running in
// lock-step (clientv3's Snapshot reader is an unbuffered pipe). The channel
// is closed after the last chunk; a stream error arrives as a chunk with err.
//
// Each chunk's buffer is released by whoever consumes it (compressStream).
func receive(recv func() (etcdinternals.SnapshotChunk, error), raw *SnapshotHasher, progress func(int64)) <-chan chunk {
	ch := make(chan chunk, recvDepth)
	go func() {
		defer close(ch)
		var n int64
		for {
			c, err := recv()
			if err == io.EOF {
				return
			}
			if err != nil {
				ch <- chunk{err: err}
				return
			}
			raw.Write(c.Blob)
			n += int64(len(c.Blob))
			if progress != nil {
				progress(n)
			}
			ch <- chunk{SnapshotChunk: c}
		}
	}()
	return ch
}

// sourceError marks a failure of the snapshot source (the etcd member), as
// opposed to the store.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// compressStream compresses an etcd snapshot stream into dst, hashing the
// raw and the stored bytes, and checking etcd's trailing hash at the end.
// dst sees EOF only after every check passed; on any failure dst is closed
// with the error, so the upload reading it fails and is aborted. A failure
// of the source is returned as a *sourceError. On return, the receiver has
// stopped or will stop at its next send (cancel its context).
//
// With recipients the compressed stream is encrypted (age) before it
// reaches dst, and the stored hash and size are the ciphertext's. plain,
// when non-nil, gets a copy of the raw stream (the drill's plaintext copy
// of an encrypted backup); its failure does not fail the backup.
func compressStream(chunks <-chan chunk, raw *SnapshotHasher, dst *io.PipeWriter, c catalog.Compression, rs seal.Recipients, plain *plainCopy) (streamResult, error) {
	var res streamResult
	fail := func(err error) (streamResult, error) {
		if errors.Is(err, io.ErrClosedPipe) {
			err = fmt.Errorf("upload stopped reading: %w", err)
		}
		dst.CloseWithError(err)
		go func() {
			for ck := range chunks { // let the receiver finish
				ck.Release()
			}
		}()
		return res, err
	}
	stored := NewHashCounter()
	enc, err := objectWriter(io.MultiWriter(dst, stored), c, rs)
	if err != nil {
		return fail(err)
	}
	for ck := range chunks {
		if ck.err != nil {
			return fail(&sourceError{ck.err})
		}
		plain.write(ck.Blob)
		// The encoder copies what it is given: the buffer can go back.
		_, err := enc.Write(ck.Blob)
		ck.Release()
		if err != nil {
			return fail(err)
		}
	}
	if err := enc.Close(); err != nil {
		return fail(err)
	}
	if res.RawSize, res.RawSHA256, err = raw.Verify(); err != nil {
		return fail(err)
	}
	res.StoredSize, res.StoredSHA256 = stored.n, stored.Sum()
	dst.Close()
	return res, nil
}
