package objectio

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"github.com/armada/etcd-recovery/internal/seal"
)

// zstdMagic opens every zstd frame.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// DecodeError is a sniffed object that could not be decoded: Step is
// "reading", "decrypting" or "decompressing".
type DecodeError struct {
	Step string
	Err  error
}

func (e *DecodeError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// DecodeSniffed is the decoding half of Open for an object whose encoding
// no manifest records (a journal segment: its own header, inside, says
// what it is): age when the bytes start with age's header (ids decrypt
// it), then zstd when they start with zstd's magic, else the bytes as
// they are. The same layers in the same order as Write, recognised from
// the bytes instead of expected; the caller verifies what it decodes.
// Close releases the decompressor's goroutines and buffers (not r).
func DecodeSniffed(r io.Reader, ids *seal.Identities) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var src io.Reader = br
	sealed, err := seal.Sniff(br)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, &DecodeError{Step: "reading", Err: err}
	}
	if sealed {
		if src, err = seal.Decrypt(br, ids, nil); err != nil {
			return nil, &DecodeError{Step: "decrypting", Err: err}
		}
	}
	pb := bufio.NewReaderSize(src, 64<<10)
	if magic, err := pb.Peek(len(zstdMagic)); err == nil && bytes.Equal(magic, zstdMagic) {
		zr, err := NewDecoder(pb, CompressZstd)
		if err != nil {
			return nil, &DecodeError{Step: "decompressing", Err: err}
		}
		return zr, nil
	}
	return io.NopCloser(pb), nil
}
