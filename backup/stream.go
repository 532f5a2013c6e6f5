package backup

import (
	"errors"
	"fmt"
	"io"

	"github.com/armada/etcd-recovery/internal/etcdinternals"
	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
)

// The object format (compression, encryption, the hashers) is
// internal/objectio's; this file is the snapshot's streaming pipeline,
// etcd's chunks overlapped with compression.

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
func receive(recv func() (etcdinternals.SnapshotChunk, error), raw *objectio.SnapshotHasher, progress func(int64)) <-chan chunk {
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
func compressStream(chunks <-chan chunk, raw *objectio.SnapshotHasher, dst *io.PipeWriter, c objectio.Compression, rs seal.Recipients, plain *plainCopy) (streamResult, error) {
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
	stored := objectio.NewHashCounter()
	enc, err := objectio.NewWriter(io.MultiWriter(dst, stored), c, rs)
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
	res.StoredSize, res.StoredSHA256 = stored.N(), stored.Sum()
	dst.Close()
	return res, nil
}
