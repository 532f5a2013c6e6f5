package objectio

import "fmt"

// Compression of a stored object.
type Compression string

const (
	CompressZstd Compression = "zstd"
	CompressNone Compression = "none"
)

// ParseCompression validates --compress.
func ParseCompression(s string) (Compression, error) {
	switch Compression(s) {
	case CompressZstd, CompressNone:
		return Compression(s), nil
	}
	return "", fmt.Errorf("unknown compression %q (want zstd or none)", s)
}
