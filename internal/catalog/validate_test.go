package catalog

import (
	"strings"
	"testing"
)

func TestValidatePrefix(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		"":                    "",
		"/":                   "",
		"etcd-backups":        "etcd-backups",
		"/etcd-backups/":      "etcd-backups",
		"a/b":                 "a/b",
		"a/b/":                "a/b",
		"prod/us-south/v1.2_": "prod/us-south/v1.2_",
		"a/.hidden":           "a/.hidden",
		"a/..b":               "a/..b",
	}
	for in, want := range good {
		got, err := ValidatePrefix(in)
		if err != nil || got != want {
			t.Errorf("ValidatePrefix(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := map[string]string{
		"a//b":                   "empty segment",
		"//":                     "only slashes",
		".":                      `"." segment`,
		"..":                     `".." segment`,
		"a/./b":                  `"." segment`,
		"a/../b":                 `".." segment`,
		"./a":                    `"." segment`,
		"a b":                    `segment "a b"`,
		"a\\b":                   "segment",
		"a?b":                    "segment",
		"a%2Fb":                  "segment",
		"é":                      "segment",
		strings.Repeat("a", 513): "at most 512",
	}
	for in, want := range bad {
		_, err := ValidatePrefix(in)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "invalid prefix") {
			t.Errorf("ValidatePrefix(%q) = %v; want an error with %q", in, err, want)
		}
	}
}

// Cluster ids are one key segment: the same traps are refused.
func TestValidateClusterIDAsKeySegment(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"", ".", "..", "a/b", "/a", "a/", "a b", "-a", ".a", "a?b", "a%2Fb"} {
		if err := ValidateClusterID(id); err == nil {
			t.Errorf("ValidateClusterID(%q) = nil, want an error", id)
		}
	}
	for _, id := range []string{"c1", "kubx-etcd-07", "a.b_c-d"} {
		if err := ValidateClusterID(id); err != nil {
			t.Errorf("ValidateClusterID(%q) = %v", id, err)
		}
	}
}
