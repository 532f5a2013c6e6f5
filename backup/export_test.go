package backup

// NewEncoder is the backup's compressor, for the benchmark's comparison
// with the reference zstd implementation.
var NewEncoder = encoder
