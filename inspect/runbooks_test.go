package inspect_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/inspect"
)

// Every runbook reference inspect prints resolves to a file and, where it
// names one, a heading (GitHub-style anchor) in that file.
func TestRunbookReferencesResolve(t *testing.T) {
	for _, ref := range inspect.Runbooks {
		file, anchor, _ := strings.Cut(ref, "#")
		b, err := os.ReadFile(filepath.Join("..", file))
		if err != nil {
			t.Errorf("%s: %v", ref, err)
			continue
		}
		if anchor == "" {
			continue
		}
		found := false
		for _, m := range regexp.MustCompile(`(?m)^#+\s+(.+)$`).FindAllStringSubmatch(string(b), -1) {
			slug := strings.ToLower(strings.TrimSpace(m[1]))
			slug = regexp.MustCompile(`[^a-z0-9 -]`).ReplaceAllString(slug, "")
			if strings.ReplaceAll(slug, " ", "-") == anchor {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no heading for #%s", ref, anchor)
		}
	}
}
