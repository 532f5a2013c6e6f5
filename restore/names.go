package restore

import (
	"fmt"
	"path/filepath"
	"strings"
)

// maxMemberName bounds a member name: etcd puts it in file names
// (<name>.etcd) and in every peer's member list.
const maxMemberName = 128

// ValidateMemberName checks a member name of --initial-cluster or --name
// as an etcd member name that is also safe as a path segment: it becomes
// the data dir <root>/<name>.etcd. Letters, digits, '.', '_' and '-',
// starting with a letter or digit, at most 128 bytes; no path separator
// and no "..".
func ValidateMemberName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("member name is empty")
	case len(name) > maxMemberName:
		return fmt.Errorf("member name %q is longer than %d bytes", name, maxMemberName)
	case strings.Contains(name, ".."):
		return fmt.Errorf("member name %q contains \"..\": names are used as data dir paths", name)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '.' || r == '_' || r == '-')
		if !ok {
			if r == '/' || r == '\\' {
				return fmt.Errorf("member name %q contains a path separator: names are used as data dir paths", name)
			}
			return fmt.Errorf("member name %q: character %q is not allowed (letters, digits, '.', '_' and '-', starting with a letter or digit)", name, r)
		}
	}
	return nil
}

// within reports whether path is root or inside it (both absolute and
// clean).
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
