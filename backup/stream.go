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
)

// etcd appends the sha256 of the database to the snapshot stream.
const etcdHashSize = sha256.Size

// trailerHasher hashes everything written to it except the last 32 bytes,
// which it keeps: etcd's own sha256 of what came before. One hash pass
// serves both the raw-DB checksum and the check against etcd's trailer.
type trailerHasher struct {
	body hash.Hash
	tail [etcdHashSize]byte
	tlen int
	n    int64 // body bytes hashed
}

func newTrailerHasher() *trailerHasher { return &trailerHasher{body: sha256.New()} }

func (h *trailerHasher) Write(p []byte) (int, error) {
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

// verify checks etcd's trailing hash and returns the body's size and sha256.
func (h *trailerHasher) verify() (int64, string, error) {
	if h.tlen < etcdHashSize {
		return 0, "", fmt.Errorf("snapshot stream is %d bytes: too short to hold etcd's sha256", h.n+int64(h.tlen))
	}
	sum := h.body.Sum(nil)
	if !bytes.Equal(sum, h.tail[:]) {
		return 0, "", fmt.Errorf("snapshot sha256 mismatch: etcd sent %x, the stream hashes to %x", h.tail[:], sum)
	}
	return h.n, hex.EncodeToString(sum), nil
}

// hashCounter hashes and counts what passes through it.
type hashCounter struct {
	h hash.Hash
	n int64
}

func newHashCounter() *hashCounter { return &hashCounter{h: sha256.New()} }

func (c *hashCounter) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}

func (c *hashCounter) Sum() string { return hex.EncodeToString(c.h.Sum(nil)) }

// progressWriter reports the running byte count.
type progressWriter struct {
	n  int64
	fn func(int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	p.n += int64(len(b))
	if p.fn != nil {
		p.fn(p.n)
	}
	return len(b), nil
}

// encoder returns a compressing writer around w (or w itself for none).
func encoder(w io.Writer, c Compression) (io.WriteCloser, error) {
	switch c {
	case CompressNone:
		return nopWriteCloser{w}, nil
	case CompressZstd:
		// Fastest level and a bounded window keep CPU and memory low: the
		// snapshot stream, not compression, should set the pace.
		return zstd.NewWriter(w,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(4<<20),
			zstd.WithLowerEncoderMem(true))
	}
	return nil, fmt.Errorf("unknown compression %q", c)
}

// Decoder returns a decompressing reader around r.
func Decoder(r io.Reader, c Compression) (io.ReadCloser, error) {
	switch c {
	case CompressNone:
		return io.NopCloser(r), nil
	case CompressZstd:
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
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

// compressStream copies an etcd snapshot stream from src into dst through
// the compressor, hashing the raw and the stored bytes on the way, and
// checking etcd's trailing hash at the end. dst sees EOF only after every
// check passed; on any failure dst is closed with the error, so the upload
// reading it fails and is aborted.
func compressStream(src io.Reader, dst *io.PipeWriter, c Compression, progress func(int64)) (streamResult, error) {
	var res streamResult
	stored := newHashCounter()
	enc, err := encoder(io.MultiWriter(dst, stored), c)
	if err != nil {
		dst.CloseWithError(err)
		return res, err
	}
	raw := newTrailerHasher()
	pw := &progressWriter{fn: progress}
	buf := make([]byte, 256<<10)
	_, err = io.CopyBuffer(io.MultiWriter(enc, raw, pw), src, buf)
	if err == nil {
		err = enc.Close()
	}
	if err == nil {
		res.RawSize, res.RawSHA256, err = raw.verify()
	}
	if err != nil {
		if errors.Is(err, io.ErrClosedPipe) {
			err = fmt.Errorf("upload stopped reading: %w", err)
		}
		dst.CloseWithError(err)
		return res, err
	}
	res.StoredSize, res.StoredSHA256 = stored.n, stored.Sum()
	dst.Close()
	return res, nil
}
