package backup

import (
	"io"

	"github.com/armada/etcd-recovery/internal/objectio"
	"github.com/armada/etcd-recovery/internal/seal"
)

// NewEncoder is the backup's compressor (objectio's, without recipients),
// for the benchmark's comparison with the reference zstd implementation.
func NewEncoder(w io.Writer, c objectio.Compression) (io.WriteCloser, error) {
	return objectio.NewWriter(w, c, seal.Recipients{})
}

// SetChunkHook makes a backup run call f with each snapshot chunk as it
// arrives, before it is hashed (f may change it: a damaged stream).
func SetChunkHook(o *Options, f func([]byte)) { o.chunkHook = f }
