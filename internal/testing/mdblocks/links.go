package mdblocks

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

var lineAnchorRE = regexp.MustCompile(`^L\d+(-L\d+)?$`)

// External reports whether a link target leaves the repository (a URL
// with a scheme: https, mailto...). External links are not fetched.
func External(target string) bool {
	u, err := url.Parse(target)
	return err == nil && u.Scheme != ""
}

// CheckLinks checks every relative link of d: the file or directory it
// names exists inside root (the repository), and its #anchor is a heading
// (GitHub's anchor) or an explicit anchor of the Markdown file it names, or
// a line anchor (#L12) of another file. parse caches parsed targets.
func CheckLinks(d *Doc, root string, cache map[string]*Doc) []error {
	var errs []error
	fail := func(l Link, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: link %q: %s", d.Path, l.Line, l.Target, fmt.Sprintf(format, a...)))
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return []error{err}
	}
	for _, l := range d.Links {
		if External(l.Target) {
			continue
		}
		if l.Target == "" {
			fail(l, "empty target")
			continue
		}
		p, anchor, _ := strings.Cut(l.Target, "#")
		if strings.HasPrefix(p, "/") {
			fail(l, "absolute path: use a path relative to %s", d.Path)
			continue
		}
		if up, err := url.PathUnescape(p); err == nil {
			p = up
		}
		target := d
		if p != "" {
			abs, err := filepath.Abs(filepath.Join(filepath.Dir(d.File), p))
			if err != nil {
				fail(l, "%v", err)
				continue
			}
			if abs != absRoot && !strings.HasPrefix(abs, absRoot+string(filepath.Separator)) {
				fail(l, "leaves the repository")
				continue
			}
			st, err := os.Stat(abs)
			if err != nil {
				fail(l, "no such file or directory")
				continue
			}
			if anchor == "" {
				continue
			}
			if st.IsDir() || !strings.HasSuffix(abs, ".md") {
				if st.IsDir() || !lineAnchorRE.MatchString(anchor) {
					fail(l, "#%s: only Markdown files have heading anchors (other files: #L<line>)", anchor)
				}
				continue
			}
			target = cache[abs]
			if target == nil {
				rel, _ := filepath.Rel(absRoot, abs)
				label := filepath.ToSlash(filepath.Dir(rel)) + "/"
				if label == "./" {
					label = ""
				}
				t, err := ParseFile(abs, label)
				if err != nil {
					fail(l, "%v", err)
					continue
				}
				cache[abs] = t
				target = t
			}
		}
		if anchor == "" {
			fail(l, "empty anchor")
			continue
		}
		if !target.Anchors[anchor] {
			fail(l, "no heading with anchor #%s in %s%s", anchor, target.Path, suggest(target, anchor))
		}
	}
	return errs
}

// suggest names the anchors of d that share a word with anchor.
func suggest(d *Doc, anchor string) string {
	var near []string
	for _, h := range d.Headings {
		for _, w := range strings.Split(anchor, "-") {
			if len(w) > 3 && strings.Contains(h.Anchor, w) {
				near = append(near, "#"+h.Anchor)
				break
			}
		}
	}
	if len(near) == 0 {
		return ""
	}
	if len(near) > 6 {
		near = near[:6]
	}
	return " (similar: " + strings.Join(near, ", ") + ")"
}
