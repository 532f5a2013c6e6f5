package backup

// NewEncoder is the backup's compressor, for the benchmark's comparison
// with the reference zstd implementation.
var NewEncoder = encoder

// SetChunkHook makes a backup run call f with each snapshot chunk as it
// arrives, before it is hashed (f may change it: a damaged stream).
func SetChunkHook(o *Options, f func([]byte)) { o.chunkHook = f }
