package objectio

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
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

// Result is what h measured, as a raw Result (RawSize, RawSHA256 of the
// database, Trailer); the stored fields are zero.
func (h *SnapshotHasher) Result() Result {
	t, _ := h.Trailer()
	return Result{RawSize: h.n, RawSHA256: hex.EncodeToString(h.Sum()), Trailer: bytes.Clone(t)}
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
