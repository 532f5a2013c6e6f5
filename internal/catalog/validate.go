package catalog

import (
	"fmt"
	"regexp"
	"strings"
)

// keySegmentRe is the character set of one segment of a key prefix: what
// every S3 implementation stores and lists under the same name (no
// spaces, no characters a server or proxy rewrites).
var keySegmentRe = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// maxPrefixLen leaves room under S3's 1024-byte key limit for the cluster
// id (253), the backup name and the object name.
const maxPrefixLen = 512

// ValidatePrefix checks a key prefix (--prefix) and returns its normal
// form: segments separated by single slashes, no leading or trailing
// slash ("/a/b/" and "a/b" are the same prefix, as Layout maps them to the
// same keys). A prefix that would write keys some store cannot list back,
// or that a store normalises onto another prefix's keys, is refused:
// empty segments ("a//b"), "." and ".." segments, and characters outside
// letters, digits, '.', '_' and '-'. The empty prefix is valid (keys start
// with the cluster id).
func ValidatePrefix(prefix string) (string, error) {
	p := strings.Trim(prefix, "/")
	if p == "" {
		if len(prefix) > 1 { // "//", "///": an empty segment, not "no prefix"
			return "", fmt.Errorf("invalid prefix %q: only slashes (leave it empty for no prefix)", prefix)
		}
		return "", nil
	}
	if len(p) > maxPrefixLen {
		return "", fmt.Errorf("invalid prefix %q: %d bytes, at most %d", prefix, len(p), maxPrefixLen)
	}
	for _, seg := range strings.Split(p, "/") {
		switch {
		case seg == "":
			return "", fmt.Errorf("invalid prefix %q: an empty segment (\"//\")", prefix)
		case seg == "." || seg == "..":
			return "", fmt.Errorf("invalid prefix %q: a %q segment", prefix, seg)
		case !keySegmentRe.MatchString(seg):
			return "", fmt.Errorf("invalid prefix %q: segment %q: want letters, digits, '.', '_' or '-', segments separated by '/'", prefix, seg)
		}
	}
	return p, nil
}
