package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/armada/etcd-recovery/internal/testing/mdblocks"
	"github.com/armada/etcd-recovery/internal/testing/testenv"
)

// codeDocRefRE is a reference to a document from outside the Markdown
// files: "docs/restore.md#verify-the-new-cluster" in a Go string or
// comment (a command's help, an error's hint, inspect's NEXT STEP), a
// manifest's comment or a script's message.
var codeDocRefRE = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])((?:docs|runbooks)/[A-Za-z0-9_-]+\.md(?:#[A-Za-z0-9_-]+)?)`)

// codeRefFile reports whether the file at rel (slash-separated, from the
// repository's root) is one whose references are checked.
func codeRefFile(rel string) bool {
	switch filepath.Ext(rel) {
	case ".go", ".yaml", ".yml", ".sh", ".json", ".tpl", ".env":
		return true
	}
	base := filepath.Base(rel)
	return base == "Makefile" || base == "Dockerfile" || strings.HasPrefix(base, "Dockerfile.")
}

// codeRefSkip are directories not walked: the Markdown harness's own tests
// parse made-up documents ("docs/x.md"), and build output.
var codeRefSkip = map[string]bool{".git": true, "bin": true, "demo-data": true, "internal/testing/mdblocks": true}

// codeRefPlaceholder is a reference that stands for any document, in a
// comment that describes a format ("runbooks/file.md -> its anchors").
var codeRefPlaceholder = regexp.MustCompile(`^(?:docs|runbooks)/(?:file|x)\.md(?:#|$)`)

// findCodeDocRefs returns the references to documents in text, with
// their lines.
func findCodeDocRefs(text string) []mdblocks.Link {
	var out []mdblocks.Link
	for i, line := range strings.Split(text, "\n") {
		for _, m := range codeDocRefRE.FindAllStringSubmatch(line, -1) {
			if codeRefPlaceholder.MatchString(m[1]) {
				continue
			}
			out = append(out, mdblocks.Link{Line: i + 1, Target: m[1]})
		}
	}
	return out
}

// TestCodeDocLinks: every reference to docs/*.md or runbooks/*.md in the
// code, the manifests and the scripts names a document that exists, and
// its #anchor a heading of it, as TestLinks checks the documents' own
// links: a command that prints "see docs/restore.md#…" must not send an
// SRE to a section that moved.
func TestCodeDocLinks(t *testing.T) {
	t.Parallel()
	root := testenv.RepoRoot(t)
	cache := map[string]*mdblocks.Doc{}
	n, anchored := 0, 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if codeRefSkip[rel] {
				return filepath.SkipDir
			}
			return nil
		}
		if !codeRefFile(rel) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		refs := findCodeDocRefs(string(b))
		if len(refs) == 0 {
			return nil
		}
		// Paths in code are from the repository's root: resolve them as
		// links of a document there.
		doc := &mdblocks.Doc{Path: rel, File: filepath.Join(root, "code-refs"), Links: refs}
		for _, e := range mdblocks.CheckLinks(doc, root, cache) {
			t.Error(e)
		}
		for _, l := range refs {
			n++
			if strings.Contains(l.Target, "#") {
				anchored++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 || anchored < 10 {
		t.Fatalf("only %d references (%d with an anchor) found: is the pattern broken?", n, anchored)
	}
	t.Logf("%d references to documents in code, manifests and scripts checked, %d with an anchor", n, anchored)
}

// TestCodeDocRefPattern: the pattern finds references in Go strings,
// comments and YAML, and not a longer path that merely ends like one.
func TestCodeDocRefPattern(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]string{
		`"see docs/restore.md#verify-the-new-cluster"`:      "docs/restore.md#verify-the-new-cluster",
		`// (docs/journal.md, Bounds)`:                      "docs/journal.md",
		`RunbookDrill = "runbooks/backup.md#missed-backup"`: "runbooks/backup.md#missed-backup",
		`  # headroom (docs/backup.md#scratch-space). The`:  "docs/backup.md#scratch-space",
		`"../docs/x.md"`:       "",
		`"internal/docs/x.md"`: "",
	} {
		refs := findCodeDocRefs(text)
		got := ""
		if len(refs) > 0 {
			got = refs[0].Target
		}
		if got != want {
			t.Errorf("%s: found %q, want %q", text, got, want)
		}
	}
	// A broken anchor is reported. (The targets are split so that this
	// file passes the walk above.)
	root := testenv.RepoRoot(t)
	doc := &mdblocks.Doc{Path: "x.go", File: filepath.Join(root, "code-refs"),
		Links: []mdblocks.Link{{Line: 1, Target: "docs/" + "restore.md#no-such-section"}, {Line: 2, Target: "docs/" + "no-such-file.md"}}}
	if errs := mdblocks.CheckLinks(doc, root, map[string]*mdblocks.Doc{}); len(errs) != 2 {
		t.Errorf("a missing anchor and a missing file: %d errors %v, want 2", len(errs), errs)
	}
}
