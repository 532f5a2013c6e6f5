package objectio

import (
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"

	"github.com/armada/etcd-recovery/internal/seal"
)

// Encoding is how an object is stored: compressed, then, with recipients,
// age-encrypted.
type Encoding struct {
	Compression Compression
	Recipients  seal.Recipients
}

// encoder returns a compressing writer around w (or w itself for none).
func encoder(w io.Writer, c Compression) (io.WriteCloser, error) {
	switch c {
	case CompressNone:
		return nopWriteCloser{w}, nil
	case CompressZstd:
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

// NewWriter returns the writer a data object is written through:
// compression, then, with recipients, age encryption, into w. Its Close
// flushes both (it does not close w).
func NewWriter(w io.Writer, c Compression, rs seal.Recipients) (io.WriteCloser, error) {
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

// NewDecoder returns a decompressing reader around r (no decryption, no
// checks: Open is the verifying read path). zstd decodes blocks ahead on a
// goroutine of its own; Close stops it.
func NewDecoder(r io.Reader, c Compression) (io.ReadCloser, error) {
	switch c {
	case CompressNone:
		return io.NopCloser(r), nil
	case CompressZstd:
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
